//! The fake model server (OpenAI-compatible, Anthropic and Gemini formats) used by tests,
//! the simulator and the demo.

mod recorded;
mod render;
mod render_anthropic;
mod render_format;
mod render_gemini;
mod request;
mod script;
mod server;
mod signature;
mod validate;

pub use recorded::Recorded;
pub(crate) use render::echoes_credential;
pub use render_format::sse_body;
pub(crate) use request::header_text;
pub use script::{Dialect, Frame, Response, Script, FILLER_BYTES_MAX};
pub(crate) use server::ChannelBody;
pub use server::{Exchange, ModelServer, RecordedRequest, RequestObserver, REQUEST_BODY_BYTES_MAX};
