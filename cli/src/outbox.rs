//! `faultline outbox`: look at and resolve a delivery queue.

use crate::exit;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use faultline_runtime::config::ToolEnv;
use faultline_runtime::outbox::{drain, DeliveryStatus, Outbox, Resolution};
use faultline_runtime::production::{self, CommandDeliverer, PgOutbox, SqliteOutbox};
use faultline_runtime::seams::Seams;

use super::database::DatabaseArgs;

/// `faultline outbox ...`
#[derive(Debug, Args)]
pub struct OutboxArgs {
    #[command(subcommand)]
    command: OutboxCommand,
}

#[derive(Debug, Subcommand)]
enum OutboxCommand {
    /// List deliveries.
    List {
        #[command(flatten)]
        db: QueueAt,
        /// Only this status (pending, delivering, delivered, failed, unknown).
        #[arg(long)]
        status: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Resolve an `unknown` delivery after checking the receiver by hand.
    Resolve {
        #[command(flatten)]
        db: QueueAt,
        /// The execution id.
        execution_id: String,
        /// It did happen.
        #[arg(long, group = "resolution")]
        delivered: bool,
        /// It did not happen and must not: record why.
        #[arg(long, group = "resolution", value_name = "REASON")]
        failed: Option<String>,
        /// It did not happen: enqueue it again under a new id linked to this one.
        #[arg(long, group = "resolution")]
        resend: bool,
    },
    /// Deliver pending rows through a receiver command (payload on stdin; exit 0 delivered,
    /// 2 refused, other unknown). Abandoned claims become `unknown` first, never resent.
    Drain {
        #[command(flatten)]
        db: QueueAt,
        /// The receiver command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Enqueue a payload (read from stdin) under an execution id.
    Enqueue {
        #[command(flatten)]
        db: QueueAt,
        /// The execution id.
        execution_id: String,
    },
    /// Claim the next pending row and hold it until stdin closes (to rehearse a crash
    /// mid-delivery: kill the process while it holds the claim).
    Claim {
        #[command(flatten)]
        db: QueueAt,
    },
}

/// Where the queue is: a SQLite file, or a PostgreSQL database shared by workers.
#[derive(Debug, Args)]
struct QueueAt {
    /// The queue's SQLite file.
    #[arg(long, conflicts_with = "database_url")]
    db: Option<PathBuf>,
    /// The queue in a PostgreSQL database; with neither this nor --db, the database at
    /// $FAULTLINE_DATABASE_URL (preferred for a URL with a password).
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
}

impl QueueAt {
    /// The URL of a PostgreSQL queue; `None` for a SQLite file.
    fn url(&self, seams: &Seams) -> Result<Option<String>, String> {
        if self.db.is_some() {
            return Ok(None);
        }
        let database = DatabaseArgs { database_url: self.database_url.clone(), lease_ms: None, url_env: None };
        database
            .url(seams)
            .map(Some)
            .map_err(|_| format!("give --db FILE, --database-url URL, or set {}", super::database::DATABASE_URL_ENV))
    }

    fn describe(&self) -> String {
        self.db.as_ref().map_or_else(|| "the PostgreSQL queue".to_owned(), |db| db.display().to_string())
    }
}

fn open(at: &QueueAt) -> Result<Arc<dyn Outbox>, ExitCode> {
    let seams = production::seams();
    // The presets' provider keys this process could hold are secrets: a receiver that quotes
    // one back has it scrubbed by value from the stored error, not only by pattern.
    for var in faultline_runtime::config::PROVIDER_KEY_VARS {
        if let Ok(value) = std::env::var(var) {
            seams.secrets.register(&value);
        }
    }
    let (process, clock, entropy) = (seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref());
    let opened: Result<Arc<dyn Outbox>, String> = match at.url(&seams) {
        Err(e) => Err(e),
        Ok(Some(url)) => PgOutbox::connect(&url, process, clock, entropy)
            .map(|outbox| Arc::new(outbox.with_scrubber(seams.secrets.clone())) as Arc<dyn Outbox>)
            .map_err(|e| e.to_string()),
        Ok(None) => SqliteOutbox::open(at.db.as_deref().expect("clap requires one"), process, clock, entropy)
            .map(|outbox| Arc::new(outbox.with_scrubber(seams.secrets.clone())) as Arc<dyn Outbox>)
            .map_err(|e| e.to_string()),
    };
    opened.map_err(|e| {
        eprintln!("faultline outbox: {}: {}", at.describe(), seams.secrets.scrub_held(&e));
        exit::code(exit::USAGE)
    })
}

/// Opens an existing queue read-only: `list` inspects, so it never creates a database or a
/// table, and a path that is not a faultline queue is an error.
fn open_read_only(at: &QueueAt) -> Result<Arc<dyn Outbox>, ExitCode> {
    let seams = production::seams();
    let (process, clock, entropy) = (seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref());
    let opened: Result<Arc<dyn Outbox>, String> = match at.url(&seams) {
        Err(e) => Err(e),
        Ok(Some(url)) => PgOutbox::connect_read_only(&url, process, clock, entropy)
            .map(|outbox| Arc::new(outbox) as Arc<dyn Outbox>)
            .map_err(|e| e.to_string()),
        Ok(None) => SqliteOutbox::open_read_only(at.db.as_deref().expect("clap requires one"), process, clock, entropy)
            .map(|outbox| Arc::new(outbox) as Arc<dyn Outbox>)
            .map_err(|e| e.to_string()),
    };
    opened.map_err(|e| {
        eprintln!("faultline outbox: {}", seams.secrets.scrub_held(&e));
        exit::code(exit::USAGE)
    })
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("faultline outbox: {e}");
    exit::code(exit::USAGE)
}

/// Runs `faultline outbox ...`.
pub fn run(args: &OutboxArgs) -> ExitCode {
    match &args.command {
        OutboxCommand::List { db, status, json } => list(db, status.as_deref(), *json),
        OutboxCommand::Resolve { db, execution_id, delivered, failed, resend } => {
            resolve(db, execution_id, (*delivered, failed.as_deref(), *resend))
        }
        OutboxCommand::Drain { db, command } => drain_with(db, command),
        OutboxCommand::Enqueue { db, execution_id } => enqueue(db, execution_id),
        OutboxCommand::Claim { db } => claim(db),
    }
}

/// `outbox list`: the rows, oldest first, of one status or all.
fn list(db: &QueueAt, status: Option<&str>, json: bool) -> ExitCode {
    let status = match status.map(|s| DeliveryStatus::parse(s).ok_or(s)) {
        None => None,
        Some(Ok(status)) => Some(status),
        Some(Err(bad)) => {
            return fail(format!("--status {bad:?}: expected pending, delivering, delivered, failed or unknown"))
        }
    };
    let outbox = match open_read_only(db) {
        Ok(outbox) => outbox,
        Err(code) => return code,
    };
    match outbox.list(status) {
        Ok(rows) => {
            for row in rows {
                if json {
                    println!("{}", serde_json::to_string(&row).expect("rows serialise"));
                } else {
                    let note = row.error.or(row.result).unwrap_or_default();
                    println!("{:<11} {}  {}", row.status.to_string(), row.execution_id, note);
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `outbox resolve`: an operator's decision on an `unknown` row.
fn resolve(db: &QueueAt, execution_id: &str, (delivered, failed, resend): (bool, Option<&str>, bool)) -> ExitCode {
    let resolution = match (delivered, failed, resend) {
        (true, None, false) => Resolution::Delivered,
        (false, Some(reason), false) => Resolution::Failed(reason.to_owned()),
        (false, None, true) => Resolution::Resend,
        _ => return fail("give exactly one of --delivered, --failed REASON, --resend"),
    };
    let outbox = match open(db) {
        Ok(outbox) => outbox,
        Err(code) => return code,
    };
    match outbox.resolve(execution_id, resolution) {
        Ok(Some(new_id)) => {
            println!("{execution_id}: resent as {new_id}");
            ExitCode::SUCCESS
        }
        Ok(None) => {
            println!("{execution_id}: resolved");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `outbox drain -- COMMAND`: every pending row delivered by the receiver command.
fn drain_with(db: &QueueAt, command: &[String]) -> ExitCode {
    let outbox = match open(db) {
        Ok(outbox) => outbox,
        Err(code) => return code,
    };
    let hidden = faultline_runtime::config::PROVIDER_KEY_VARS.iter().map(|v| (*v).to_owned()).collect();
    let deliverer = CommandDeliverer::new(command.to_vec()).with_env(ToolEnv::hiding(hidden));
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(e),
    };
    match runtime.block_on(drain(outbox.as_ref(), &deliverer)) {
        Ok(report) => {
            for id in &report.recovered_unknown {
                println!("unknown    {id}  (abandoned mid-delivery; not resent: verify the receiver)");
            }
            for (label, ids) in
                [("delivered", &report.delivered), ("failed", &report.failed), ("unknown", &report.unknown)]
            {
                for id in ids {
                    println!("{label:<10} {id}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `outbox enqueue ID`: a row with the payload read from stdin.
fn enqueue(db: &QueueAt, execution_id: &str) -> ExitCode {
    let mut payload = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut payload) {
        return fail(e);
    }
    let outbox = match open(db) {
        Ok(outbox) => outbox,
        Err(code) => return code,
    };
    match outbox.enqueue(execution_id, &payload) {
        Ok(result) => {
            println!("{execution_id}: {result:?}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `outbox claim`: claims the oldest pending row and holds it until stdin closes.
fn claim(db: &QueueAt) -> ExitCode {
    let outbox = match open(db) {
        Ok(outbox) => outbox,
        Err(code) => return code,
    };
    match outbox.claim_next() {
        Ok(Some(claim)) => {
            println!("claimed {}", claim.execution_id);
            let _ = std::io::Write::flush(&mut std::io::stdout());
            for _ in std::io::stdin().lock().lines() {}
            ExitCode::SUCCESS
        }
        Ok(None) => {
            println!("nothing pending");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
