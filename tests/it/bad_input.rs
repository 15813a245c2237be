//! Bad input stays a clear error (FAILURE-FINDINGS): a tool schema that is not JSON Schema,
//! a file that is not TOML, a stand-in that contradicts its tool, a database URL that is not
//! one. Each is refused with where it is wrong, before anything is created, and an error
//! message never has its own words masked.
#![allow(clippy::disallowed_methods)] // real files: the configs the CLI reads

use std::path::{Path, PathBuf};

use faultline_e2e::{agent_run_args, faultline, stderr};

const PROVIDER: &str = "[provider]\npreset = \"deepseek\"\n";

const TOOL: &str = "[[tools]]\nname = \"send\"\ndescription = \"Sends a message.\"\ncommand = [\"true\"]\n";

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `agent run` on `text`: its exit code and stderr, and whether it created the session dir.
fn agent_run(text: &str) -> (Option<i32>, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let (config, sessions) = (write(dir.path(), text), dir.path().join("sessions"));
    let output = faultline(&agent_run_args(&config, &sessions, &["--prompt", "hi"]));
    (output.status.code(), stderr(&output), sessions.exists())
}

#[test]
fn a_tool_schema_that_is_not_json_schema_is_refused_at_its_path() {
    let text = format!(
        "{PROVIDER}{TOOL}parameters = {{ type = \"object\", properties = {{ to = {{ type = \"banana\" }} }} }}\n"
    );
    let (code, err, created) = agent_run(&text);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("tools[0].parameters.properties.to.type: \"banana\""), "{err}");
    assert!(!created, "nothing is created for a bad config");
    let (code, err, _) = agent_run(&format!("{PROVIDER}{TOOL}parameters = {{ type = \"string\" }}\n"));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("tools[0].parameters.type: must be \"object\""), "{err}");
}

#[test]
fn a_file_that_is_not_toml_is_refused_at_its_line_and_column() {
    let (code, err, created) = agent_run(&format!("{PROVIDER}model = \n{TOOL}"));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("line 3, column 9: "), "{err}");
    assert!(!created);
}

#[test]
fn a_stand_in_that_contradicts_its_tool_is_refused_by_the_sweep_and_by_agent_run() {
    let text = format!("{PROVIDER}{TOOL}side_effects = true\n[tools.sim]\neffect = \"read\"\n");
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &text);
    let sweep = faultline(&["sweep", "--agent", path.to_str().unwrap(), "--seeds", "0..2"]);
    let err = stderr(&sweep);
    assert_eq!(sweep.status.code(), Some(1), "{err}");
    assert!(err.contains("tools[0].sim.effect: \"read\" contradicts side_effects = true"), "{err}");
    let (code, err, _) = agent_run(&text);
    assert_eq!(code, Some(1), "agent run checks the table it never reads: {err}");
    let outbox = format!("{PROVIDER}{TOOL}side_effects = true\nvia_outbox = true\n[tools.sim]\nretries = 2\n");
    let (code, err, _) = agent_run(&outbox);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("tools[0].sim.retries: a via_outbox = true tool is delivered by the queue"), "{err}");
}

/// The words of an error about a database URL are the CLI's own: a pattern net over them
/// turned "key=value pairs" into "key=*** pairs". The password a URL carries is still
/// scrubbed, by value.
#[test]
fn a_bad_database_url_is_explained_in_words_no_pattern_masks() {
    for args in [
        &["outbox", "list", "--database-url", "not a url"][..],
        &["outbox", "drain", "--database-url", "not a url", "--", "true"][..],
        &["db", "migrate", "--database-url", "not a url"][..],
    ] {
        let output = faultline(args);
        let err = stderr(&output);
        assert_ne!(output.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains("or key=value pairs"), "{args:?}: {err}");
        assert!(!err.contains("***"), "{args:?}: {err}");
    }
    let password = "hunter2-do-not-print";
    let url = format!("postgresql://someone:{password}@127.0.0.1:1/nothing?connect_timeout=2");
    for args in [&["outbox", "list", "--database-url", &url][..], &["db", "migrate", "--database-url", &url][..]] {
        let output = faultline(args);
        let err = stderr(&output);
        assert_ne!(output.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains(password), "{args:?}: {err}");
    }
}
