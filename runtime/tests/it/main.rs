//! The single integration-test binary of `faultline-runtime`.

mod event_model;
mod support;
mod validator;
