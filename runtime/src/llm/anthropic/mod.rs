//! Anthropic's Messages API (FAILURE-WIRE-FORMATS): the request a conversation becomes
//! (`request.rs`), how its event stream reads into chunks (`stream.rs`), and what its error
//! bodies mean (`errors.rs`).

mod errors;
mod request;
mod stream;

pub(crate) use errors::code_of_type;
pub(crate) use request::{request_body, API_VERSION};
pub(crate) use stream::Reader;
