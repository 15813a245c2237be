use std::fmt;

/// Longest accepted session id, in bytes. Ids become directory names and SQLite keys; 128
/// bytes is far above any generated id and far below every filesystem's name limit.
pub const SESSION_ID_BYTES_MAX: usize = 128;

/// A validated session id: 1–128 bytes of `A-Z a-z 0-9 . _ -`, not starting with `.`.
///
/// The rules make an id safe as a single path component on every filesystem: no separators,
/// no `..`, no hidden files, nothing a shell would expand.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

/// Why a string is not a session id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidSessionId {
    /// The empty string.
    #[error("session id is empty")]
    Empty,
    /// Longer than [`SESSION_ID_BYTES_MAX`].
    #[error("session id is {len} bytes long; the limit is {SESSION_ID_BYTES_MAX}")]
    TooLong {
        /// The length found.
        len: usize,
    },
    /// A character outside the allowed set, or a leading dot.
    #[error("session id has {found:?} at byte {at}; allowed: A-Z a-z 0-9 . _ - (not leading '.')")]
    BadCharacter {
        /// The offending character.
        found: char,
        /// Its byte offset.
        at: usize,
    },
}

impl SessionId {
    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidSessionId> {
        let id = id.into();
        if id.is_empty() {
            return Err(InvalidSessionId::Empty);
        }
        if id.len() > SESSION_ID_BYTES_MAX {
            return Err(InvalidSessionId::TooLong { len: id.len() });
        }
        for (at, found) in id.char_indices() {
            let allowed = found.is_ascii_alphanumeric() || matches!(found, '_' | '-') || (found == '.' && at > 0);
            if !allowed {
                return Err(InvalidSessionId::BadCharacter { found, at });
            }
        }
        Ok(Self(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
