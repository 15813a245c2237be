//! Secrets scrubbed by value (FAILURE-SECRETS).
//!
//! The runtime knows every secret it holds: each request's credential snapshot is registered
//! here when it is resolved, and an embedder registers any other (proxy credentials, a
//! receiver's token). Every text that reaches disk or leaves the process — failures, error
//! bodies, request ids, stored records, delivery rows, stderr, `--json` — has each registered
//! value, raw and as JSON escapes it, replaced by `***` (which covers its `Bearer …` form).
//! What a provider or a tool said (model text, reasoning, refusals, tool arguments and output)
//! changes nowhere else ([`Scrubber::scrub_held`], [`StreamScrubber`]); only text the runtime
//! composes itself — its failures, error bodies it quotes, logs — also passes the pattern
//! redaction of [`crate::outbox::redact`] ([`Scrubber::scrub`]), a second net for keys the
//! runtime never held. A pattern over model text rewrote ordinary prose and code ("basic
//! idea", `f(key=value)`), and only where the provider happened to split its deltas.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::event::{Event, Record};

/// Shortest value registered, in bytes: scrubbing a two-letter "secret" would shred every
/// text that contains those letters, so such a value is refused (and is no credential).
pub const SECRET_BYTES_MIN: usize = 8;
/// Most values held (a secret and its JSON-escaped form count apart); registering more is
/// refused, so a process that rotates keys forever cannot grow the set without bound.
pub const SECRETS_COUNT_MAX: usize = 1024;
/// Longest secret registered, in bytes.
pub const SECRET_BYTES_MAX: usize = 8 * 1024;

/// The set of secret values this process holds. Cheap to clone; clones share the set.
#[derive(Clone, Default)]
pub struct Scrubber {
    values: Arc<RwLock<Vec<HeldSecret>>>,
}

/// One registered value and its searcher, built once: every stored record and every streamed
/// delta is searched for every value (`str::contains` set up a two-way search per call, ~4 %
/// of a run storing large tool outputs).
struct HeldSecret {
    text: String,
    finder: memchr::memmem::Finder<'static>,
}

impl HeldSecret {
    fn new(text: &str) -> HeldSecret {
        HeldSecret { text: text.to_owned(), finder: memchr::memmem::Finder::new(text.as_bytes()).into_owned() }
    }

    fn is_in(&self, text: &str) -> bool {
        self.finder.find(text.as_bytes()).is_some()
    }
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scrubber({} values)", self.read().len())
    }
}

impl Scrubber {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<HeldSecret>> {
        self.values.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `value` (and its JSON-escaped form) to the scrubbed set. Returns whether it is
    /// scrubbed from now on: values shorter than [`SECRET_BYTES_MIN`] or longer than
    /// [`SECRET_BYTES_MAX`], and values beyond [`SECRETS_COUNT_MAX`], are not.
    pub fn register(&self, value: &str) -> bool {
        if !(SECRET_BYTES_MIN..=SECRET_BYTES_MAX).contains(&value.len()) {
            return false;
        }
        let mut values = self.values.write().unwrap_or_else(|p| p.into_inner());
        if values.iter().any(|v| v.text == value) {
            return true;
        }
        let escaped = serde_json::to_string(value).expect("strings serialise");
        let escaped = &escaped[1..escaped.len() - 1];
        let needed = if escaped == value { 1 } else { 2 };
        if values.len() + needed > SECRETS_COUNT_MAX {
            return false;
        }
        values.push(HeldSecret::new(value));
        if escaped != value {
            values.push(HeldSecret::new(escaped));
        }
        // Longest first, so a secret that contains another is replaced whole.
        values.sort_by_key(|v| std::cmp::Reverse(v.text.len()));
        true
    }

    /// Whether `text` contains a registered value.
    pub fn leaks(&self, text: &str) -> bool {
        self.read().iter().any(|v| v.is_in(text))
    }

    /// `text` with every registered value replaced by `***`, then the pattern redaction.
    pub fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        self.scrub_values(&mut text);
        crate::outbox::redact(&text)
    }

    /// `text` with every registered value replaced by `***` and nothing else changed: for
    /// what a provider or a tool said (model text, tool arguments and output, ids), which is
    /// kept byte for byte but for the secrets the process holds. [`Scrubber::scrub`] adds the
    /// pattern net, for text the runtime composes itself.
    pub fn scrub_held(&self, text: &str) -> String {
        let mut text = text.to_owned();
        self.scrub_values(&mut text);
        text
    }

    /// Replaces every registered value in `text`, without the pattern net: for stored records,
    /// whose other words matter to the model and must not be mangled by a pattern.
    fn scrub_values(&self, text: &mut String) {
        if crate::testing::bugs::planted("scrub-by-pattern-only") {
            return;
        }
        for value in self.read().iter() {
            if value.is_in(text) {
                *text = text.replace(value.text.as_str(), "***");
            }
        }
    }

    /// The length of the longest tail of `text` that is a proper prefix of a registered value:
    /// what a stream must hold back, since the next delta may complete the secret.
    fn partial_tail_bytes(&self, text: &str) -> usize {
        let mut longest = 0;
        for value in self.read().iter().map(|v| v.text.as_str()) {
            let most = (value.len() - 1).min(text.len());
            if let Some(k) = (longest + 1..=most).rev().find(|&k| {
                value.is_char_boundary(k) && text.is_char_boundary(text.len() - k) && text.ends_with(&value[..k])
            }) {
                longest = k;
            }
        }
        longest
    }

    /// `event` with every string inside it scrubbed (a record about to be stored). Cheap when
    /// nothing leaks: a substring search per secret of each string in it, nothing encoded.
    pub fn scrub_event(&self, event: Event) -> Event {
        if self.read().is_empty() || !may_carry_outside_text(&event) {
            return event;
        }
        let record = Record::new(0, 0, event);
        if !crate::event::any_text(&record, |text| self.leaks(text)) {
            return record.event;
        }
        let mut value: serde_json::Value = serde_json::from_str(&record.encode()).expect("records are JSON");
        // Only the payload: the envelope's `type` is the runtime's own word, never a secret,
        // and scrubbing it would leave a record that no longer decodes.
        if let Some(data) = value.get_mut("data") {
            self.scrub_json(data);
        }
        match Record::decode(&value.to_string()) {
            Ok(record) => record.event,
            // A secret that happened to equal a closed-set word (a role, a block type): the
            // payload no longer decodes. Keep nothing of it rather than the secret.
            Err(_) => panic!(
                "a scrubbed payload no longer decodes: a registered secret equals one of the runtime's own words"
            ),
        }
    }

    /// Every string inside `value` scrubbed by value, object member names included (tool
    /// arguments once parsed: `\u004c…` escapes hide a key from a search of the raw text, not
    /// from this; and a model that echoes a key as a member name would otherwise hand it to
    /// the tool, and through the delivery queue to a receiver). Two names that scrub to the
    /// same text keep the later member.
    pub fn scrub_json(&self, value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => self.scrub_values(text),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            serde_json::Value::Object(map) => {
                let leaky_names = map.keys().any(|name| self.leaks(name));
                map.values_mut().for_each(|v| self.scrub_json(v));
                if leaky_names {
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(mut name, member)| {
                            self.scrub_values(&mut name);
                            (name, member)
                        })
                        .collect();
                }
            }
            _ => {}
        }
    }

    /// Scrubs a failure's message and request id in place.
    pub fn scrub_failure(&self, failure: &mut crate::event::Failure) {
        failure.message = self.scrub(&failure.message);
        if let Some(id) = failure.request_id.as_mut() {
            *id = self.scrub(id);
        }
    }
}

/// Whether `event` may hold text from outside the runtime. Structural records hold none, and
/// `assistant/chunk` records hold only what the adapter already scrubbed chunk by chunk (the
/// assembled `assistant/message` is scrubbed whole: a secret split across two chunks).
fn may_carry_outside_text(event: &Event) -> bool {
    !matches!(
        event,
        Event::TurnStart(_)
            | Event::StepStart(_)
            | Event::StepEnd(_)
            | Event::LlmRetryStarted(_)
            | Event::AssistantChunk(_)
    )
}

/// `text` (JSON) with each `\uXXXX` escape of a printable ASCII character other than `"` and
/// `\`, and each `\/`, written as that character: what a secret is searched for in (an
/// escaped letter must not hide a key). Returns that text, where each of its bytes came from
/// in `text` (one more entry: the end), and where in it an escape the text ends inside begins
/// (if it does). `\\` is an escaped backslash, so a `u` after it is a letter.
pub(crate) fn unescape_ascii(text: &str) -> (String, Vec<usize>, Option<usize>) {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut from = Vec::with_capacity(text.len() + 1);
    let copy = |out: &mut String, from: &mut Vec<usize>, range: std::ops::Range<usize>| {
        out.push_str(&text[range.clone()]);
        from.extend(range);
    };
    let (mut copied, mut at) = (0, 0);
    while let Some(found) = memchr::memchr(b'\\', &bytes[at..]) {
        let escape = at + found;
        let open = match bytes.get(escape + 1) {
            None => true,
            Some(b'u') => bytes.len() < escape + 6,
            // `\/` is `/` (JSON allows both): a key with a slash could hide behind it too.
            Some(b'/') => {
                copy(&mut out, &mut from, copied..escape);
                out.push('/');
                from.push(escape);
                (copied, at) = (escape + 2, escape + 2);
                continue;
            }
            Some(_) => {
                at = escape + 2;
                continue;
            }
        };
        if open {
            // The text ends inside this escape: kept as it is, for the next delta to finish.
            copy(&mut out, &mut from, copied..escape);
            let open_at = out.len();
            copy(&mut out, &mut from, escape..text.len());
            from.push(text.len());
            return (out, from, Some(open_at));
        }
        let hex = &bytes[escape + 2..escape + 6];
        if !hex.iter().all(u8::is_ascii_hexdigit) {
            at = escape + 2;
            continue;
        }
        let code = hex.iter().fold(0u32, |code, &digit| code * 16 + char::from(digit).to_digit(16).unwrap_or(0));
        if (0x20..0x7f).contains(&code) && code != u32::from(b'"') && code != u32::from(b'\\') {
            copy(&mut out, &mut from, copied..escape);
            out.push(char::from_u32(code).unwrap_or('?'));
            from.push(escape);
            copied = escape + 6;
        }
        at = escape + 6;
    }
    copy(&mut out, &mut from, copied..text.len());
    from.push(text.len());
    (out, from, None)
}

/// Which stream of a message a delta belongs to: its kind and block index.
pub type StreamKey = (u8, u32);

/// Scrubs text that arrives in deltas, where a secret may be split across two of them (a
/// model streams an echoed key token by token). Per stream it holds back the longest tail that
/// could begin a secret and releases it with the next delta, or at the end of the block; so no
/// emitted delta ever holds a secret or a piece of one that a later delta completes.
#[derive(Debug, Default)]
pub struct StreamScrubber {
    held: BTreeMap<StreamKey, String>,
}

impl StreamScrubber {
    /// The part of `held + text` that can be released now, with every held secret's value
    /// replaced; nothing else of the text is changed (no pattern is applied to what a model
    /// wrote: it rewrote prose and code).
    pub fn push(&mut self, secrets: &Scrubber, key: StreamKey, text: &str) -> String {
        self.push_with(secrets, key, text, false)
    }

    /// [`StreamScrubber::push`] for a stream of JSON text (a tool call's arguments): secrets
    /// are searched for with each JSON `\uXXXX` escape of a printable ASCII character written
    /// as the character, so a key with a letter escaped is found like any other; an escape
    /// the delta ends inside is held back until the next one completes it. Text with a secret
    /// in it is released in that unescaped form (the same JSON to whoever parses it), with the
    /// value replaced; text without one, byte for byte as it came.
    pub fn push_json(&mut self, secrets: &Scrubber, key: StreamKey, text: &str) -> String {
        self.push_with(secrets, key, text, true)
    }

    fn push_with(&mut self, secrets: &Scrubber, key: StreamKey, text: &str, json: bool) -> String {
        let mut joined = self.held.remove(&key).unwrap_or_default();
        joined.push_str(text);
        // What a secret is searched for in, and where each of its bytes came from in `joined`.
        let (plain, from, open_escape) = if json {
            let (plain, from, open_escape) = unescape_ascii(&joined);
            (std::borrow::Cow::Owned(plain), Some(from), open_escape)
        } else {
            (std::borrow::Cow::Borrowed(joined.as_str()), None, None)
        };
        // An escape cut by the end of this delta: held back whole (it is at most 5 bytes).
        let escape_held = open_escape.map_or(0, |at| plain.len() - at);
        let tail = |text: &str| {
            if crate::testing::bugs::planted("scrub-by-pattern-only") {
                escape_held
            } else {
                secrets.partial_tail_bytes(text).max(escape_held)
            }
        };
        if secrets.leaks(&plain) {
            // A held secret is in it: the release is the searched text with each value
            // replaced (whole secrets first: a secret must not be cut by the hold-back).
            let mut scrubbed = plain.into_owned();
            secrets.scrub_values(&mut scrubbed);
            let rest = scrubbed.split_off(scrubbed.len() - tail(&scrubbed));
            if !rest.is_empty() {
                self.held.insert(key, rest);
            }
            return scrubbed;
        }
        // No secret: the provider's text goes on byte for byte, less the tail that could begin
        // one (held back in the provider's own bytes).
        let cut = plain.len() - tail(&plain);
        let cut = from.map_or(cut, |from| from[cut]);
        let rest = joined.split_off(cut);
        if !rest.is_empty() {
            self.held.insert(key, rest);
        }
        joined
    }

    /// What is still held for `key`: the stream ended, so it can complete no secret.
    pub fn flush(&mut self, key: StreamKey) -> Option<String> {
        self.held.remove(&key).filter(|t| !t.is_empty())
    }

    /// Every stream that still holds text, in key order.
    pub fn keys(&self) -> Vec<StreamKey> {
        self.held.keys().copied().collect()
    }
}
