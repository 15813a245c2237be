//! An incremental Server-Sent Events decoder that a hostile or sloppy server cannot break.
//!
//! Bytes may arrive split anywhere — inside a line, between `\r` and `\n`, inside a UTF-8
//! character — so the decoder works on bytes and decodes UTF-8 only once an event is
//! complete. Line, event and body sizes are bounded by named limits: past them the stream is
//! malformed, never an unbounded buffer.

/// Longest line accepted, in bytes. Provider chunks are a few KB; 1 MiB is garbage.
pub const SSE_LINE_BYTES_MAX: usize = 1024 * 1024;
/// Largest event (all its `data:` lines joined), in bytes.
pub const SSE_EVENT_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Largest response body, in bytes. A long completion is well under 1 MiB of SSE.
pub const SSE_BODY_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// One decoded item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// An event's data (multi-line data joined with `\n`).
    Data(String),
    /// A `: comment` line (DeepSeek's `: keep-alive`): activity, no content.
    Comment,
}

/// Why the byte stream is not valid SSE.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line longer than [`SSE_LINE_BYTES_MAX`].
    #[error("SSE line exceeds {SSE_LINE_BYTES_MAX} bytes")]
    LineTooLong,
    /// An event larger than [`SSE_EVENT_BYTES_MAX`].
    #[error("SSE event exceeds {SSE_EVENT_BYTES_MAX} bytes")]
    EventTooLarge,
    /// A body larger than [`SSE_BODY_BYTES_MAX`].
    #[error("response body exceeds {SSE_BODY_BYTES_MAX} bytes")]
    BodyTooLarge,
    /// Event data that is not UTF-8.
    #[error("SSE event data is not UTF-8")]
    NotUtf8,
}

/// Incremental decoder state.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    /// The previous byte was a `\r` that ended a line; a following `\n` belongs to it.
    after_cr: bool,
    total: u64,
    /// The last `id` field (WHATWG's last event ID buffer; one holding NUL is ignored): where
    /// a resumed stream starts again (MCP's `Last-Event-ID`).
    last_event_id: Option<String>,
    /// The last `retry` field (digits only), in ms: how long to wait before resuming.
    retry_ms: Option<u64>,
    /// Lines that are no SSE field are gathered as JSON (Gemini's errors mid-stream come as
    /// bare JSON lines, which its SDK buffers until they parse): `None` ignores them, as SSE
    /// says.
    stray: Option<Vec<u8>>,
}

/// Longest event id kept, in bytes (a longer one is ignored, as one with NUL is).
pub const SSE_EVENT_ID_BYTES_MAX: usize = 1024;

impl SseDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh decoder that also reads bare JSON between events: lines that are no SSE
    /// field are gathered until they parse as one JSON value, which is then an event's data
    /// (google-genai's reader does the same: a Gemini error mid-stream comes as such lines).
    pub fn keeping_bare_json() -> Self {
        Self { stray: Some(Vec::new()), ..Self::default() }
    }

    /// Bytes received so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// The last event id the stream gave, if any.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The last reconnection time the stream asked for, in ms, if any.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Feeds the next bytes, appending complete items to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseItem>) -> Result<(), SseError> {
        self.total += bytes.len() as u64;
        if self.total > SSE_BODY_BYTES_MAX {
            return Err(SseError::BodyTooLarge);
        }
        // Whole runs up to the next line end at a time (SIMD search), not byte by byte.
        let mut rest = bytes;
        while let Some(&first) = rest.first() {
            if std::mem::take(&mut self.after_cr) && first == b'\n' {
                rest = &rest[1..];
                continue;
            }
            let Some(at) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.extend_line(rest)?;
                break;
            };
            self.extend_line(&rest[..at])?;
            self.after_cr = rest[at] == b'\r';
            self.end_line(out)?;
            rest = &rest[at + 1..];
        }
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > SSE_LINE_BYTES_MAX {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseItem>) -> Result<(), SseError> {
        if self.line.is_empty() {
            return self.dispatch(out);
        }
        // The line buffer is reused: cleared, not reallocated, for every line.
        let result = self.take_line(out);
        self.line.clear();
        result
    }

    fn take_line(&mut self, out: &mut Vec<SseItem>) -> Result<(), SseError> {
        let line = &self.line;
        if line[0] == b':' {
            out.push(SseItem::Comment);
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        // `event` carries nothing a reader here needs; `id` and `retry` say where and when a
        // closed stream resumes (an MCP server's, not a model's).
        if field == b"id" {
            if !value.contains(&0) && value.len() <= SSE_EVENT_ID_BYTES_MAX {
                self.last_event_id = std::str::from_utf8(value).ok().map(str::to_owned);
            }
        } else if field == b"retry" {
            if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
                self.retry_ms = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            }
        } else if field != b"data" && field != b"event" && self.stray.is_some() {
            return self.gather_stray(out);
        } else if field == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            if self.data.len() + value.len() > SSE_EVENT_BYTES_MAX {
                return Err(SseError::EventTooLarge);
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        Ok(())
    }

    /// A line that is no field, kept with the lines before it until they parse as JSON.
    fn gather_stray(&mut self, out: &mut Vec<SseItem>) -> Result<(), SseError> {
        let stray = self.stray.as_mut().expect("only called when gathering");
        if stray.len() + self.line.len() + 1 > SSE_EVENT_BYTES_MAX {
            return Err(SseError::EventTooLarge);
        }
        stray.extend_from_slice(&self.line);
        stray.push(b'\n');
        if serde_json::from_slice::<serde::de::IgnoredAny>(stray).is_ok() {
            let data = String::from_utf8(std::mem::take(stray)).map_err(|_| SseError::NotUtf8)?;
            out.push(SseItem::Data(data));
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseItem>) -> Result<(), SseError> {
        if !self.has_data {
            return Ok(());
        }
        self.has_data = false;
        let data = String::from_utf8(std::mem::take(&mut self.data)).map_err(|_| SseError::NotUtf8)?;
        out.push(SseItem::Data(data));
        Ok(())
    }
}
