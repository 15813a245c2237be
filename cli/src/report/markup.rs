//! Escaping text for markup: the HTML pages (html.rs) and the JUnit XML (sweep.rs) both put
//! scenario names, failure messages and replay commands into markup, and share this one rule.

/// Escapes text for HTML or XML element content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
