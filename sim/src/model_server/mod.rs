//! The fake OpenAI-compatible model server used by tests, the simulator and the demo.

mod recorded;
mod script;
mod server;

pub use recorded::Recorded;
pub use script::{Dialect, Frame, Response, Script, FILLER_BYTES_MAX};
pub use server::{
    echo_credential, echoes_credential, header_text, sse_body, Exchange, ModelServer, RecordedRequest, RequestObserver,
    REQUEST_BODY_BYTES_MAX,
};
