//! The single integration-test binary of `faultline-runtime`.

mod create_race;
mod event_model;
mod file_store;
mod fixtures;
mod history;
mod limits;
mod llm_classify;
mod llm_config;
mod llm_sse;
mod outbox_contract;
mod owner_fence;
mod pg_store;
mod proxy;
mod public_api;
mod reconcile;
mod secrets;
mod sqlite_store;
mod store_contract;
mod store_scan;
mod store_stream;
mod support;
mod tls;
mod tools;
mod validator;
mod write_behind;
mod zstd_frame_walk;
