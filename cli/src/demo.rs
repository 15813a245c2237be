//! `faultline demo`: the whole story in one command, no set-up.

use crate::exit;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use faultline_runtime::event::{Event, Record};
use faultline_runtime::production;
use faultline_runtime::seams::EntropyExt;
use faultline_runtime::store::inspect_file;

use faultline_sim::model_server::{ModelServer, Response, Script};

/// How long the demo waits for the child to reach its side effect.
const SIDE_EFFECT_WAIT_S: u64 = 30;

fn say(text: &str) {
    println!("{text}");
}

fn summarise(record: &Record) -> String {
    let what = match &record.event {
        Event::TurnStart(t) => format!("turn {} starts", t.turn),
        Event::TurnEnd(t) => format!("turn {} ends: {}", t.turn, serde_json::to_string(&t.reason).unwrap_or_default()),
        Event::UserMessage(_) => "the user's message".into(),
        Event::RequestHeader(_) => "the request prefix (durable before the request leaves)".into(),
        Event::AssistantMessage(m) => format!("the model's message ({} tool call(s))", m.message.tool_calls().count()),
        Event::ToolCall(c) => format!("tool/call {} {} (the durable intent)", c.name, c.call_id),
        Event::ToolResult(r) => {
            let code = r.error.as_ref().map_or("ok".to_owned(), |e| e.code.to_string());
            format!("tool/result {} -> {code}", r.call_id)
        }
        other => other.type_name().to_owned(),
    };
    format!("  seq {:>2}  {what}", record.seq)
}

fn config(dir: &Path, base_url: &str, hangs: bool) -> std::io::Result<std::path::PathBuf> {
    let sent = dir.join("sent.log");
    let hang = if hangs { "; sleep 30" } else { "" };
    let text = format!(
        "[provider]\npreset = \"openai-compatible\"\nbase_url = \"{base_url}\"\nmodel = \"demo-model\"\nidle_timeout_ms = 60000\n\n\
         [[tools]]\nname = \"send_message\"\ndescription = \"Send a message to the team channel\"\n\
         parameters = {{ type = \"object\", properties = {{ text = {{ type = \"string\" }} }}, required = [\"text\"] }}\n\
         command = [\"sh\", \"-c\", \"echo $FAULTLINE_EXECUTION_ID >> {}{hang}\"]\nside_effects = true\n",
        sent.display()
    );
    let path = dir.join(if hangs { "agent.toml" } else { "agent-resume.toml" });
    std::fs::write(&path, text)?;
    Ok(path)
}

fn sent_lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("sent.log")).map_or(0, |t| t.lines().count())
}

/// `faultline demo [--dir DIR]`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the demo keeps its sessions and sent.log (created if missing; default: a fresh
    /// directory under the system's temp directory). It must not hold an earlier demo.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> ExitCode {
    match demo(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultline demo: {e}");
            exit::code(exit::FAILED)
        }
    }
}

/// Steps 1 to 3: the agent runs with the hanging tool (its config `hanging`), and is
/// SIGKILLed once the side effect is in `dir`'s sent.log.
fn kill_after_the_side_effect(exe: &Path, hanging: &Path, dir: &Path) -> Result<(), String> {
    let mut child = Command::new(exe)
        .args(["agent", "run", "--config"])
        .arg(hanging)
        .arg("--session-dir")
        .arg(dir.join("sessions"))
        .args(["--session", "demo", "--prompt", "Tell the team the release is out."])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the agent: {e}"))?;
    let started = Instant::now();
    while sent_lines(dir) == 0 {
        if started.elapsed() > Duration::from_secs(SIDE_EFFECT_WAIT_S) {
            let _ = child.kill();
            return Err("the agent never reached its side effect".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    say(&format!(
        "2. The message went out (sent.log has {} line). The agent has not recorded the result yet.",
        sent_lines(dir)
    ));
    child.kill().map_err(|e| e.to_string())?;
    child.wait().map_err(|e| e.to_string())?;
    say(&format!("3. SIGKILL. Process {} is gone mid-call.\n", child.id()));
    Ok(())
}

/// Step 4: what the transcript kept, and the closers repair would append.
fn show_what_repair_would_write(seams: &faultline_runtime::seams::Seams, path: &Path) -> Result<(), String> {
    let inspection = inspect_file(seams, path).map_err(|e| e.to_string())?;
    say(&format!(
        "4. The transcript survived: {} committed records, status {:?}, last turn open: {}.",
        inspection.records.len(),
        inspection.status,
        inspection.open_turn
    ));
    say("   Crash repair would append:");
    for closer in &inspection.closers {
        say(&summarise(closer));
    }
    say("   The tool/call was durable *before* the message went out, so repair knows the call started");
    say("   and writes TOOL_OUTCOME_UNKNOWN: it may or may not have happened. It is never re-run blindly.\n");
    Ok(())
}

/// The model's two answers: call `send_message`, then, after the crash, refuse to resend.
fn demo_script() -> Script {
    Script {
        refuse_until_ms: 0,
        responses: vec![
            Response::tool_call("call_1", "send_message", "{\"text\":\"The release is out.\"}"),
            Response::text(&[
                "I can't tell whether the message went out before the crash, so I won't send it again. ",
                "Please check the channel first.",
            ]),
        ],
        repeat_last: true,
        after_tool_result: None,
    }
}

fn demo(args: DemoArgs) -> Result<(), String> {
    let seams = production::seams();
    let dir =
        args.dir.unwrap_or_else(|| std::env::temp_dir().join(format!("faultline-demo-{}", seams.entropy.hex_id(8))));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // An earlier demo's sent.log would make "exactly one side effect" false before we begin.
    if dir.join("sent.log").exists() || dir.join("sessions").exists() {
        return Err(format!("{} already holds a demo (sent.log or sessions/); give an empty directory", dir.display()));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let server = runtime
        .block_on(ModelServer::start(seams.net.clone(), seams.clock.clone(), "127.0.0.1:0", demo_script(), None))
        .map_err(|e| format!("starting the fake model server: {e}"))?;
    let base_url = format!("http://{}/v1", server.addr());
    let sessions = dir.join("sessions");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;

    say("faultline demo: an agent with a side effect, killed at the worst moment.\n");
    say(&format!("1. A fake model server listens on {} and will ask the agent to call send_message.", server.addr()));
    say("   The tool appends to sent.log (the side effect), then hangs, as a slow network call would.");
    kill_after_the_side_effect(&exe, &config(&dir, &base_url, true).map_err(|e| e.to_string())?, &dir)?;
    let path = sessions.join("demo").join("session.jsonl");
    show_what_repair_would_write(&seams, &path)?;

    let resume = config(&dir, &base_url, false).map_err(|e| e.to_string())?;
    let resumed = Command::new(&exe)
        .args(["agent", "run", "--config"])
        .arg(&resume)
        .arg("--session-dir")
        .arg(&sessions)
        .args(["--session", "demo", "--resume", "--prompt", "Did the message go out?"])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("resuming: {e}"))?;
    if !resumed.status.success() {
        return Err(format!("the resumed run failed with {}", resumed.status));
    }
    say("5. Resumed (repair first, then the next turn). The model read the unknown outcome and answered:");
    say(&format!("   \"{}\"\n", String::from_utf8_lossy(&resumed.stdout).trim()));
    let repaired = inspect_file(&seams, &path).map_err(|e| e.to_string())?;
    say("6. The repaired transcript's tail (streamed chunks left out):");
    let shown: Vec<&Record> =
        repaired.records.iter().filter(|r| !matches!(r.event, Event::AssistantChunk(_))).collect();
    for record in &shown[shown.len().saturating_sub(12)..] {
        say(&summarise(record));
    }
    let count = sent_lines(&dir);
    say(&format!(
        "\nsent.log still holds exactly {count} line: the side effect happened once, and nothing was resent."
    ));
    say(&format!(
        "Everything is in {}; try `faultline transcript report {}`.",
        dir.display(),
        sessions.join("demo").display()
    ));
    if count != 1 {
        return Err(format!("expected exactly one side effect, found {count}"));
    }
    drop(server);
    Ok(())
}
