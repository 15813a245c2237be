//! What the shipped `faultline` binary is built from, read from `cargo tree` of the CLI's own
//! dependencies (normal and build edges only: no test suite's dev-dependencies unify their
//! features in, as they do in a `cargo test --workspace` build). The test CA (`TestPki`, the
//! `test-pki` feature and its rcgen) is not in it; the throw-away PostgreSQL launcher is,
//! because `faultline bench` starts one (docs/internals/benchmarks.md).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // runs cargo

use std::process::Command;

use faultline_e2e::{repo_root, stderr, stdout};

/// `cargo tree` of the shipped binary: one `name version [features]` line per package.
fn shipped_tree() -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "-p", "faultline-cli", "--edges", "normal,build", "--locked", "--offline"])
        .args(["--format", "{p} [{f}]", "--prefix", "none"])
        .current_dir(repo_root())
        .output()
        .expect("run cargo tree");
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output).lines().map(str::to_owned).collect()
}

#[test]
fn the_shipped_binary_has_no_test_ca_and_only_the_test_code_a_command_needs() {
    let tree = shipped_tree();
    let runtime = tree.iter().find(|l| l.starts_with("faultline-runtime ")).expect("the runtime is in it");
    let features = runtime.rsplit_once('[').map(|(_, f)| f.trim_end_matches([']', ' ', '(', '*', ')'])).unwrap();
    let features: Vec<&str> = features.split(',').collect();
    assert!(!features.contains(&"test-pki"), "the test CA is compiled into the binary: {runtime}");
    assert!(!tree.iter().any(|l| l.starts_with("rcgen ")), "rcgen is linked into the binary");
    assert!(!features.contains(&"planted-bugs"), "planted bugs in a production build: {runtime}");
    // `testing` (the pipeline stages, the planted-bug catalog's names, the PostgreSQL
    // launcher `faultline bench` starts) is the one test module the binary carries.
    assert!(features.contains(&"testing"), "{runtime}");
}
