//! Scanners that turn a session file's bytes into its committed prefix, applying the
//! torn-versus-corrupt rule (FAILURE-JSONL-RAW-SCAN, FAILURE-JSONL-ZSTD-SCAN,
//! FAILURE-JSONL-PREFIX).
//!
//! A scan streams the file through a bounded buffer ([`SCAN_CHUNK_BYTES`], grown only to hold
//! one oversize line or frame): the records it commits go to a [`Keep`] policy as they are
//! validated, so inspecting a 1 GiB transcript holds one chunk and one turn, not the file. The
//! lines of a chunk (the frames of a zstd batch) are decoded on the [`Compute`] seam's cores;
//! everything that depends on order — seqs, the validator, the torn rule — runs after, in
//! order, on the caller's thread. Only a damaged tail is read whole, and only when it is small
//! enough to be one write unit (the torn rule's bound).

mod jsonl;
mod shared;
#[cfg(feature = "zstd")]
mod zstd;

pub use jsonl::scan_jsonl;
pub(crate) use jsonl::scan_jsonl_from;
#[cfg(not(feature = "zstd"))]
pub use shared::scan_zstd;
#[cfg(not(feature = "zstd"))]
pub(crate) use shared::scan_zstd_from;
pub(crate) use shared::{FileSource, Source, ZSTD_NOT_BUILT};
pub use shared::{Keep, Scan, ScanError, ScanStatus, FRAME_CONTENT_BYTES_MAX, SCAN_CHUNK_BYTES};
#[cfg(feature = "zstd")]
pub use zstd::scan_zstd;
#[cfg(feature = "zstd")]
pub(crate) use zstd::scan_zstd_from;
