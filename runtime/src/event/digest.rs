//! The digest an approval is bound to: SHA-256 of a call's exact `arguments` text, so a
//! decision can never be applied to other arguments (FAILURE-APPROVAL).

use sha2::{Digest, Sha256};

/// SHA-256 of `arguments` as the `tool/call` stores them, in lowercase hex (64 characters).
pub fn arguments_digest(arguments: &str) -> String {
    let hash = Sha256::digest(arguments.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in hash.iter() {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_digest_is_sha256_in_lowercase_hex() {
        // The well-known SHA-256 of the empty string and of "abc".
        assert_eq!(super::arguments_digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(super::arguments_digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
