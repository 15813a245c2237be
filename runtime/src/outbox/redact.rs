//! Redaction of stored error text: credentials never reach the queue's rows.

use std::sync::OnceLock;

use regex::Regex;

fn patterns() -> &'static [(Regex, &'static str)] {
    static PATTERNS: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        [
            (r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+", "$1 ***"),
            (r"\bsk-[A-Za-z0-9_-]{6,}", "sk-***"),
            (r"(?i)\b(api[_-]?key|access[_-]?token|token|secret|password|passwd|auth|key)=([^&\s]+)", "$1=***"),
            (
                r#"(?i)"(api[_-]?key|access[_-]?token|token|secret|password|authorization)"\s*:\s*"[^"]*""#,
                "\"$1\":\"***\"",
            ),
            (r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@", "$1***@"),
        ]
        .into_iter()
        .map(|(pattern, replacement)| (Regex::new(pattern).expect("redaction patterns compile"), replacement))
        .collect()
    })
}

/// [`redact`] of an owned text, handed back as it is when no pattern matches.
fn redact_owned(text: String) -> String {
    // A pattern that does not match costs one search and no allocation (`replace_all` with
    // `$1` builds captures even when nothing matches).
    let mut out = text;
    for (pattern, replacement) in patterns() {
        if pattern.is_match(&out) {
            out = pattern.replace_all(&out, *replacement).into_owned();
        }
    }
    out
}

/// `text` with tokens, keys and URL credentials replaced by `***`.
pub fn redact(text: &str) -> String {
    redact_owned(text.to_owned())
}
