//! The signatures the fake server puts on what a provider signs (Anthropic's thinking blocks,
//! Gemini's `thoughtSignature` on a function call), and checks when they come back: opaque
//! base64, as the real ones are, derived from what they sign so that an altered block no
//! longer matches.

use base64::Engine as _;

/// The signature of `text` of kind `kind` (`thinking`, `call`): standard base64 of a 16-byte
/// digest (two FNV-1a 64 passes).
pub(crate) fn sign(kind: &str, text: &str) -> String {
    let digest = |seed: u64| {
        let mut hash = seed;
        for byte in kind.bytes().chain([0]).chain(text.bytes()) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&digest(0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&digest(0x6c62_272e_07bb_0142).to_be_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Whether two signatures are the same bytes: an SDK may send one back in the URL-safe
/// alphabet, with or without padding.
pub(crate) fn same(a: &str, b: &str) -> bool {
    match (decode(a), decode(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn decode(text: &str) -> Option<Vec<u8>> {
    let trimmed = text.trim_end_matches('=');
    let standard = base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed);
    standard.or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(trimmed)).ok()
}

/// Whether `text` is base64 in either alphabet (what an API can decode as bytes).
pub(crate) fn decodes(text: &str) -> bool {
    decode(text).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_matches_its_text_in_either_alphabet_and_nothing_else() {
        let signature = sign("thinking", "let me see");
        assert!(same(&signature, &signature));
        let url_safe = signature.replace('+', "-").replace('/', "_").trim_end_matches('=').to_owned();
        assert!(same(&signature, &url_safe));
        assert!(!same(&signature, &sign("thinking", "let me see!")));
        assert!(!same(&signature, "not base64 at all!"));
    }
}
