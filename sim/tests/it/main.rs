//! The single integration-test binary of `faultline-sim` (one binary links once; shared
//! helpers live in `support`).

mod adapter;
mod agent;
mod crash_points;
mod findings;
mod harness_power;
mod mcp;
mod planted;
mod public_api;
mod scenarios;
mod seam_smoke;
mod support;
mod sweep;
mod telemetry;
mod twin;
