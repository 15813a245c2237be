//! `faultline approval list|approve|deny`: what a paused session waits for, and a person's
//! decision on it (FAILURE-APPROVAL, docs/approvals.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use faultline_runtime::approval::{awaiting_approval, decide, DecisionRequest, PendingApproval};
use faultline_runtime::event::Decision;
use faultline_runtime::production::{self, PgStore, SqliteStore};
use faultline_runtime::seams::Seams;
use faultline_runtime::store::{FileStore, Format, SessionId, Store};
use serde_json::json;

use super::database::DatabaseArgs;
use super::exit;
use super::transcript::{open_store, StoreKind};

/// `faultline approval ...`
#[derive(Debug, Args)]
pub struct ApprovalArgs {
    #[command(subcommand)]
    command: ApprovalCommand,
}

#[derive(Debug, Subcommand)]
enum ApprovalCommand {
    /// List the calls paused sessions wait on, without writing anything. Exit 0, 1 error.
    List(ListArgs),
    /// Approve a waiting call: it runs once when the session is continued (`agent run
    /// --resume`). Exit 0 decided, 2 refused (not waiting, decided already, not a decider,
    /// expired), 1 error.
    Approve(DecideArgs),
    /// Deny a waiting call: continuing the session answers it `APPROVAL_DENIED` with the
    /// reason, and the model goes on. Exit codes as `approve`.
    Deny(DecideArgs),
}

/// Where the sessions are: what `agent run` names them by.
#[derive(Debug, Args)]
struct Place {
    /// Where sessions live (as given to `agent run`).
    #[arg(long)]
    session_dir: PathBuf,
    /// Transcript store (as given to `agent run`; default jsonl).
    #[arg(long, value_enum, default_value_t = StoreKind::Jsonl)]
    store: StoreKind,
    #[command(flatten)]
    database: DatabaseArgs,
}

#[derive(Debug, Args)]
struct ListArgs {
    #[command(flatten)]
    place: Place,
    /// Only this session (default: every session of the store).
    #[arg(long)]
    session: Option<String>,
    /// Print one JSON object per waiting call, one per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct DecideArgs {
    #[command(flatten)]
    place: Place,
    /// The session.
    #[arg(long)]
    session: String,
    /// The waiting call's id (as `list` shows it).
    #[arg(long)]
    call: String,
    /// Who decides: one of the tool's `approvers` when it names any.
    #[arg(long)]
    by: String,
    /// Why; a denial's reason is what the model reads.
    #[arg(long)]
    reason: Option<String>,
    /// The digest (or its start) `list` showed you: refused if the call's arguments differ.
    #[arg(long)]
    digest: Option<String>,
}

/// Runs `faultline approval ...`.
pub fn run(args: &ApprovalArgs) -> ExitCode {
    let seams = production::seams();
    match &args.command {
        ApprovalCommand::List(list) => list_waiting(list, &seams),
        ApprovalCommand::Approve(decide) => decide_call(decide, Decision::Approved, &seams),
        ApprovalCommand::Deny(decide) => decide_call(decide, Decision::Denied, &seams),
    }
}

fn bad(message: impl std::fmt::Display) -> ExitCode {
    exit::usage("faultline approval", message)
}

/// The store `place` names, opened so that nothing is written: inspection only.
fn read_only_store(place: &Place, seams: &Seams) -> Result<Box<dyn Store>, String> {
    Ok(match place.store {
        StoreKind::Jsonl => Box::new(FileStore::new(seams.clone(), &place.session_dir, Format::Jsonl)),
        StoreKind::Zstd => Box::new(FileStore::new(seams.clone(), &place.session_dir, Format::Zstd)),
        StoreKind::Sqlite => {
            let db = place.session_dir.join("sessions.sqlite");
            if !db.exists() {
                return Err(format!("{}: no SQLite store", db.display()));
            }
            Box::new(SqliteStore::open_read_only(&db, seams.process.clone()).map_err(|e| e.to_string())?)
        }
        StoreKind::Postgres => {
            let url = place.database.url(seams)?;
            Box::new(PgStore::connect_read_only(&url, seams.process.clone()).map_err(|e| e.to_string())?)
        }
    })
}

fn list_waiting(args: &ListArgs, seams: &Seams) -> ExitCode {
    let store = match read_only_store(&args.place, seams) {
        Ok(store) => store,
        Err(e) => return bad(e),
    };
    let ids = match &args.session {
        Some(id) => match SessionId::new(id.as_str()) {
            Ok(id) => vec![id],
            Err(e) => return bad(format!("--session: {e}")),
        },
        None => match store.list() {
            Ok(ids) => ids,
            Err(e) => return bad(seams.secrets.scrub(&e.to_string())),
        },
    };
    let mut shown = 0usize;
    for id in ids {
        let inspection = match store.inspect(&id) {
            Ok(inspection) => inspection,
            Err(e) => return bad(seams.secrets.scrub(&format!("session {id}: {e}"))),
        };
        for call in awaiting_approval(&inspection.records) {
            shown += 1;
            if args.json {
                println!("{}", json!({"session": id.as_str(), "call": call}));
            } else {
                print_call(&id, &call);
            }
        }
    }
    if !args.json && shown == 0 {
        println!("nothing waits for approval");
    }
    exit::code(exit::OK)
}

fn print_call(id: &SessionId, call: &PendingApproval) {
    let state = match (&call.decision, call.dispatched) {
        (_, true) => "dispatched; its outcome is crash repair's to settle".to_owned(),
        (Some((decision, by, _)), false) => format!("{} by {by}; continue the session to apply it", decision.as_str()),
        (None, false) => "waiting".to_owned(),
    };
    println!("session {id} turn {} step {}: call {} ({})", call.turn, call.step, call.call_id, call.name);
    println!("  arguments: {}", call.arguments);
    println!("  digest:    {}", call.digest);
    if !call.deciders.is_empty() {
        println!("  deciders:  {}", call.deciders.join(", "));
    }
    if let Some(deadline) = call.deadline_ms {
        println!("  deadline:  {deadline} (epoch ms)");
    }
    println!("  state:     {state}");
}

fn decide_call(args: &DecideArgs, decision: Decision, seams: &Seams) -> ExitCode {
    let id = match SessionId::new(args.session.as_str()) {
        Ok(id) => id,
        Err(e) => return bad(format!("--session: {e}")),
    };
    let store = match open_store(args.place.store, &args.place.session_dir, &args.place.database, seams, None) {
        Ok(store) => store,
        Err(e) => return bad(seams.secrets.scrub(&e)),
    };
    let mut request = DecisionRequest::new(args.call.clone(), decision, args.by.clone());
    if let Some(reason) = &args.reason {
        request = request.reason(reason.clone());
    }
    if let Some(digest) = &args.digest {
        request = request.digest_prefix(digest.clone());
    }
    match decide(store.as_ref(), &id, &request, seams.clock.now_ms(), &seams.secrets) {
        Ok(decided) => {
            println!(
                "{} call {} ({}) of session {id} by {}: continue it with `faultline agent run --session {id} --resume`",
                decision.as_str(),
                decided.call.call_id,
                decided.call.name,
                decided.record.by
            );
            exit::code(exit::OK)
        }
        Err(faultline_runtime::Error::ApprovalRefused(why)) => {
            eprintln!("faultline approval: refused, nothing written: {}", seams.secrets.scrub(&why));
            exit::code(exit::FAILED)
        }
        Err(e) => bad(seams.secrets.scrub(&format!("session {id}: {e}"))),
    }
}
