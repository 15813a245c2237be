//! The `faultline` binary itself. Besides checking it starts, this target makes
//! `cargo test --workspace` build `target/<profile>/faultline` (cargo builds a package's
//! binaries for its integration tests), which the end-to-end tests in `tests/` drive.
#![allow(clippy::disallowed_methods)] // runs the real binary

#[test]
fn the_binary_starts_and_names_itself() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_faultline")).arg("--version").output().unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("faultline "));
}
