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
}

impl SseDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes received so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
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
        // `event`, `id` and `retry` carry nothing an OpenAI-compatible stream needs.
        if field == b"data" {
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
