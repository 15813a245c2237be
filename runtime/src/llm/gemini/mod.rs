//! Google's Gemini API (FAILURE-WIRE-FORMATS): the request a conversation becomes
//! (`request.rs`), how its `alt=sse` stream of whole `GenerateContentResponse` objects reads
//! into chunks (`stream.rs`), and what its error bodies mean (`errors.rs`).

mod errors;
mod request;
mod stream;

pub(crate) use errors::code_of_error;
pub(crate) use request::request_body;
pub(crate) use stream::Reader;
