//! What the simulator and the test suites reach inside for, kept off the embedder's front
//! door (public only with the `testing` feature): the planted-bug switches and the pipeline
//! stages the property tests and benchmarks drive one by one. Nothing here is needed to embed
//! the runtime; it is public so that `faultline-sim` can prove the runtime, and may change
//! without notice. The test CA (`TestPki`) needs the `test-pki` feature: test suites only.

pub mod bugs;
#[cfg(feature = "testing")]
mod http;
#[cfg(all(feature = "testing", feature = "postgres"))]
mod pg_server;
#[cfg(feature = "testing")]
mod stream;
#[cfg(feature = "test-pki")]
mod tls;

pub use crate::agent::history::History;
pub use crate::agent::retry::{decide, RetryDecision};
pub use crate::llm::assembler::Assembler;
pub use crate::llm::normalise::Normaliser;
pub use crate::llm::sse::{SseDecoder, SseItem};
pub use crate::store::scan::{scan_jsonl, scan_zstd, Scan};
pub use crate::store::zstd_frames::{walk_frames, FrameSpan, FrameWalk};
pub use crate::tool::call::{run_with_deadline, CallOutcome};
#[cfg(feature = "testing")]
pub use http::read_http_request;
#[cfg(all(feature = "testing", feature = "postgres"))]
pub use pg_server::{PgServer, REQUIRE_POSTGRES_ENV, ROLE as PG_TEST_ROLE};
#[cfg(feature = "testing")]
pub use stream::StreamReader;
#[cfg(feature = "test-pki")]
pub use tls::TestPki;
