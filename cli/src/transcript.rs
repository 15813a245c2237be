//! `faultline transcript`: look at, repair and print a crashed session's log.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use faultline_runtime::event::Record;
use faultline_runtime::outbox::{Outbox, QueueEvidence};
use faultline_runtime::production::{self, PgStore, SqliteStore};
use faultline_runtime::production::{PgOutbox, SqliteOutbox};
use faultline_runtime::report::RecoveryReport;
use faultline_runtime::store::LEASE_MS_DEFAULT;
use faultline_runtime::store::{
    inspect_file_keeping, repair_file, FileStore, Format, Inspection, Keep, NoEvidence, OutcomeEvidence, ScanStatus,
    SessionId, Store, Takeover,
};
use faultline_runtime::{seams::Liveness, seams::Seams, Error};
use serde_json::json;
use std::sync::Arc;

use super::database::DatabaseArgs;
use super::exit::{CORRUPT as EXIT_CORRUPT, NEEDS_ATTENTION as EXIT_NEEDS_REPAIR, OK as EXIT_OK};
use super::exit::{UNSUPPORTED as EXIT_UNSUPPORTED, USAGE as EXIT_ERROR};

/// `faultline transcript ...`
#[derive(Debug, Args)]
pub struct TranscriptArgs {
    #[command(subcommand)]
    command: TranscriptCommand,
}

#[derive(Debug, Subcommand)]
enum TranscriptCommand {
    /// Report a session's state without changing it. Exit 0 clean, 3 repair needed, 4 corrupt,
    /// 5 unsupported version, 1 other error.
    Inspect {
        #[command(flatten)]
        target: Target,
        /// Print one JSON object instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Commit the crash repair. Exit 0 repaired or nothing to do, 4 corrupt (left untouched),
    /// 1 other error.
    Repair {
        #[command(flatten)]
        target: Target,
        /// Reconcile started calls with this delivery queue before calling them unknown: a
        /// SQLite file, or `database` (the queue in the session's own PostgreSQL database).
        #[arg(long)]
        outbox: Option<PathBuf>,
    },
    /// Print the committed events as plain JSONL (decompressed).
    Cat {
        #[command(flatten)]
        target: Target,
    },
    /// Tell a person what a crashed or failed session kept, what is unknown (and which
    /// receiver to check), what never started, and what is still queued.
    Report {
        #[command(flatten)]
        target: Target,
        /// The delivery queue the session's tools used: a SQLite file, or `database` (the queue
        /// in the session's own PostgreSQL database).
        #[arg(long)]
        outbox: Option<PathBuf>,
        /// Print one JSON object instead of prose.
        #[arg(long)]
        json: bool,
    },
    /// Append records read as JSON lines from stdin, each as its own durable batch, holding
    /// the session's ownership until stdin closes (for building fixtures by hand).
    Append {
        /// Directory of the store (sessions are `DIR/<id>/...`, or `DIR/sessions.sqlite`).
        #[arg(long)]
        dir: PathBuf,
        /// Session id.
        #[arg(long)]
        session: String,
        /// Store backend.
        #[arg(long, value_enum, default_value_t = StoreKind::Jsonl)]
        store: StoreKind,
        #[command(flatten)]
        database: DatabaseArgs,
        /// Create the session.
        #[arg(long)]
        create: bool,
        /// Take the session over from an owner whose process is gone.
        #[arg(long)]
        takeover: bool,
    },
}

/// A store backend on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// `DIR/<id>/session.jsonl`
    Jsonl,
    /// `DIR/<id>/session.jsonl.zst`
    Zstd,
    /// `DIR/sessions.sqlite`
    Sqlite,
    /// A PostgreSQL database (`--database-url` or `FAULTLINE_DATABASE_URL`), shared by workers.
    Postgres,
}

/// Opens the store of `kind` under `dir` with the production seams; crash repair consults
/// `evidence` (a delivery queue) when given.
pub(crate) fn open_store(
    kind: StoreKind,
    dir: &Path,
    database: &DatabaseArgs,
    seams: &Seams,
    evidence: Option<Arc<dyn OutcomeEvidence>>,
) -> Result<Box<dyn Store>, String> {
    open_store_or_why(kind, dir, database, seams, evidence).map_err(|(message, _)| message)
}

/// [`open_store`], and with its error whether the database could not be reached (the
/// environment's failure, not the caller's).
pub(crate) fn open_store_or_why(
    kind: StoreKind,
    dir: &Path,
    database: &DatabaseArgs,
    seams: &Seams,
    evidence: Option<Arc<dyn OutcomeEvidence>>,
) -> Result<Box<dyn Store>, (String, bool)> {
    let evidence = evidence.unwrap_or_else(|| Arc::new(NoEvidence));
    if kind == StoreKind::Postgres {
        let url = database.url(seams).map_err(|message| (message, false))?;
        let store = PgStore::connect(&url, seams.process.clone(), database.lease_ms())
            .map_err(|e| (e.to_string(), database_unreachable(&e)))?;
        return Ok(Box::new(store.with_evidence(evidence)));
    }
    Ok(match kind {
        StoreKind::Jsonl => Box::new(FileStore::new(seams.clone(), dir, Format::Jsonl).with_evidence(evidence)),
        StoreKind::Zstd => Box::new(FileStore::new(seams.clone(), dir, Format::Zstd).with_evidence(evidence)),
        StoreKind::Sqlite => Box::new(
            SqliteStore::open(dir.join("sessions.sqlite"), seams.process.clone())
                .map_err(|e| (e.to_string(), false))?
                .with_evidence(evidence),
        ),
        StoreKind::Postgres => unreachable!("opened above"),
    })
}

/// Whether `e` says the database could not be reached.
pub(crate) fn database_unreachable(e: &faultline_runtime::Error) -> bool {
    e.storage_cause().as_deref() == Some("DATABASE_UNREACHABLE")
}

/// A delivery queue and the same queue as crash-repair evidence.
type QueueAndEvidence = (Arc<dyn Outbox>, Arc<dyn OutcomeEvidence>);

/// Whether a command may write to what it opens. Inspecting commands never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    Repair,
}

/// The PostgreSQL URL `--outbox` names, if it names one rather than a SQLite file.
fn queue_url(db: &Path) -> Option<&str> {
    db.to_str().filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// What `--outbox` names: `database` is the queue in the target's own PostgreSQL database
/// (no URL on the command line); anything else is a SQLite file or a URL, as given.
fn queue_at(outbox: Option<&Path>, target: &Target, seams: &Seams) -> Result<Option<PathBuf>, String> {
    match outbox {
        Some(word) if word == Path::new("database") => {
            if target.sqlite.is_some() || target.session.is_none() {
                return Err("--outbox database names the queue of a PostgreSQL session (--session with                             --database-url or $FAULTLINE_DATABASE_URL)"
                    .into());
            }
            let database = DatabaseArgs { database_url: target.database_url.clone(), lease_ms: None, url_env: None };
            database.url(seams).map(|url| Some(PathBuf::from(url)))
        }
        other => Ok(other.map(Path::to_path_buf)),
    }
}

/// Opens the delivery queue `--outbox` names — a SQLite file, or a PostgreSQL database (a
/// fleet's queue) — as repair evidence. A URL's password is a secret from here on.
fn queue_evidence(db: &Path, seams: &Seams, access: Access) -> Result<QueueAndEvidence, Error> {
    let (process, clock, entropy) = (seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref());
    let outbox: Arc<dyn Outbox> = match (queue_url(db), access) {
        (Some(url), access) => {
            if let Some(password) = production::database_password(url) {
                seams.secrets.register(&password);
            }
            Arc::new(match access {
                Access::ReadOnly => PgOutbox::connect_read_only(url, process, clock, entropy)?,
                Access::Repair => PgOutbox::connect(url, process, clock, entropy)?,
            })
        }
        (None, Access::ReadOnly) => Arc::new(SqliteOutbox::open_read_only(db, process, clock, entropy)?),
        (None, Access::Repair) => Arc::new(SqliteOutbox::open(db, process, clock, entropy)?),
    };
    let evidence: Arc<dyn OutcomeEvidence> = Arc::new(match access {
        Access::ReadOnly => QueueEvidence::read_only(outbox.clone()),
        Access::Repair => QueueEvidence::new(outbox.clone()),
    });
    Ok((outbox, evidence))
}

#[derive(Debug, Args)]
pub(crate) struct Target {
    /// A `session.jsonl` / `session.jsonl.zst` file, or a session directory.
    #[arg(required_unless_present = "session", conflicts_with_all = ["sqlite", "database_url"])]
    path: Option<PathBuf>,
    /// A SQLite store (with --session).
    #[arg(long, requires = "session", conflicts_with = "database_url")]
    sqlite: Option<PathBuf>,
    /// A PostgreSQL store (with --session); without --sqlite or this, `--session` reads
    /// the database at $FAULTLINE_DATABASE_URL.
    #[arg(long, value_name = "URL", requires = "session")]
    database_url: Option<String>,
    /// The session id in the SQLite or PostgreSQL store.
    #[arg(long)]
    session: Option<String>,
}

impl Target {
    /// The session's name: its `--session`, or its file's directory.
    pub(crate) fn session_name(&self) -> String {
        if let Some(session) = &self.session {
            return session.clone();
        }
        let path = self.path.as_deref().unwrap_or(Path::new("session"));
        let dir = if path.is_dir() { Some(path) } else { path.parent() };
        dir.and_then(|d| d.file_name()).map_or_else(|| "session".to_owned(), |n| n.to_string_lossy().into_owned())
    }
}

/// A database store given the evidence its crash repair consults.
pub(crate) type WithEvidence = Box<dyn Fn(Arc<dyn OutcomeEvidence>) -> Box<dyn Store>>;

pub(crate) enum Resolved {
    File(PathBuf),
    /// A session in a SQLite or PostgreSQL store.
    Database(WithEvidence, SessionId),
}

pub(crate) fn resolve(target: &Target, seams: &Seams, access: Access) -> Result<Resolved, String> {
    if let (None, Some(session)) = (&target.sqlite, &target.session) {
        let id = SessionId::new(session.as_str()).map_err(|e| e.to_string())?;
        let database = DatabaseArgs { database_url: target.database_url.clone(), lease_ms: None, url_env: None };
        let url = database.url(seams)?;
        // Inspecting commands connect read-only: nothing is created or migrated.
        let store = match access {
            Access::ReadOnly => PgStore::connect_read_only(&url, seams.process.clone()),
            Access::Repair => PgStore::connect(&url, seams.process.clone(), LEASE_MS_DEFAULT),
        }
        .map_err(|e| e.to_string())?;
        return Ok(Resolved::Database(Box::new(move |evidence| Box::new(store.clone().with_evidence(evidence))), id));
    }
    if let (Some(db), Some(session)) = (&target.sqlite, &target.session) {
        if !db.exists() {
            return Err(format!("{}: no such SQLite store", db.display()));
        }
        let id = SessionId::new(session.as_str()).map_err(|e| e.to_string())?;
        // Even repair opens read-only first: a foreign SQLite file is refused, never given
        // faultline's tables.
        let store = SqliteStore::open_read_only(db, seams.process.clone()).map_err(|e| e.to_string())?;
        let store = match access {
            Access::ReadOnly => store,
            Access::Repair => {
                drop(store);
                SqliteStore::open(db, seams.process.clone()).map_err(|e| e.to_string())?
            }
        };
        return Ok(Resolved::Database(Box::new(move |evidence| Box::new(store.clone().with_evidence(evidence))), id));
    }
    let path = target.path.as_ref().expect("clap requires a path without --session");
    // `session.jsonl` names a file in the current directory.
    let path =
        &if path.parent().is_some_and(|p| p.as_os_str().is_empty()) { Path::new(".").join(path) } else { path.clone() };
    if path.is_dir() {
        let candidates: Vec<PathBuf> =
            [Format::Jsonl, Format::Zstd].iter().map(|f| path.join(f.file_name())).filter(|p| p.exists()).collect();
        return match candidates.as_slice() {
            [one] => Ok(Resolved::File(one.clone())),
            [] => Err(format!("{}: no session.jsonl or session.jsonl.zst in this directory", path.display())),
            _ => Err(format!("{}: holds both session.jsonl and session.jsonl.zst; name the file", path.display())),
        };
    }
    if Format::of_path(path).is_none() {
        return Err(format!("{}: not a session.jsonl or session.jsonl.zst file", path.display()));
    }
    Ok(Resolved::File(path.clone()))
}

/// Inspects without keeping a record: each committed record is shown to `visit` in order (a
/// file is streamed through a bounded buffer; a SQLite session is read, then shown).
pub(crate) fn inspect_visiting(
    resolved: &Resolved,
    seams: &Seams,
    evidence: Arc<dyn OutcomeEvidence>,
    visit: &mut (dyn FnMut(&Record) + Send),
) -> Result<Inspection, Error> {
    match resolved {
        Resolved::File(path) => inspect_file_keeping(seams, path, evidence.as_ref(), Keep::Visit(visit)),
        Resolved::Database(store, id) => {
            let mut inspection = store(evidence).inspect(id)?;
            for record in std::mem::take(&mut inspection.records) {
                visit(&record);
            }
            Ok(inspection)
        }
    }
}

fn report(target: &Target, outbox: Option<&Path>, as_json: bool, seams: &Seams) -> ExitCode {
    let resolved = match resolve(target, seams, Access::ReadOnly) {
        Ok(resolved) => resolved,
        Err(message) => return fail(message),
    };
    let outbox = match queue_at(outbox, target, seams) {
        Ok(outbox) => outbox,
        Err(message) => return fail(message),
    };
    let (deliveries, evidence) = match outbox.as_deref() {
        None => (Vec::new(), Arc::new(NoEvidence) as Arc<dyn OutcomeEvidence>),
        Some(db) if queue_url(db).is_none() && !db.exists() => {
            return fail(format!("--outbox {}: no such file", db.display()))
        }
        Some(db) => match queue_evidence(db, seams, Access::ReadOnly) {
            Ok((queue, evidence)) => match queue.list(None) {
                Ok(rows) => (rows, evidence),
                Err(e) => return fail(e),
            },
            Err(e) => return fail(e),
        },
    };
    let mut builder = RecoveryReport::builder();
    let inspection = match inspect_visiting(&resolved, seams, evidence, &mut |record| builder.absorb(record)) {
        Ok(inspection) => inspection,
        Err(e) => return fail(e),
    };
    if let Some(error) = &inspection.error {
        eprintln!(
            "faultline transcript: the log is {:?} at byte {}: {}",
            inspection.status, error.offset, error.reason
        );
        return ExitCode::from(status_exit(&inspection));
    }
    let session = inspection.header.as_ref().map(|h| h.id.clone()).unwrap_or_default();
    // Report the session as a repair would leave it: salvaged records and closers included.
    for record in inspection.recovered.iter().chain(&inspection.closers) {
        builder.absorb(record);
    }
    let report = builder.finish(&session, &deliveries);
    if as_json {
        println!("{}", serde_json::to_string(&report).expect("reports serialise"));
    } else {
        print!("{}", report.narrate());
        if inspection.needs_repair() {
            println!("(The log still needs its crash repair: faultline transcript repair.)");
        }
        if let Some(drop) = inspection.would_drop() {
            println!("Torn tail: the repair will have {drop}.");
        }
    }
    ExitCode::from(EXIT_OK)
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("faultline transcript: {message}");
    ExitCode::from(EXIT_ERROR)
}

/// Runs `faultline transcript ...`.
pub fn run(args: &TranscriptArgs) -> ExitCode {
    let seams = production::seams();
    match &args.command {
        TranscriptCommand::Inspect { target, json } => inspect(target, *json, &seams),
        TranscriptCommand::Repair { target, outbox } => repair(target, outbox.as_deref(), &seams),
        TranscriptCommand::Cat { target } => cat(target, &seams),
        TranscriptCommand::Report { target, outbox, json } => report(target, outbox.as_deref(), *json, &seams),
        TranscriptCommand::Append { dir, session, store, database, create, takeover } => {
            append(dir, session, (*store, database), *create, *takeover, &seams)
        }
    }
}

fn status_exit(inspection: &Inspection) -> u8 {
    match inspection.status {
        ScanStatus::Corrupt => EXIT_CORRUPT,
        ScanStatus::Unsupported => EXIT_UNSUPPORTED,
        _ if inspection.needs_repair() => EXIT_NEEDS_REPAIR,
        _ => EXIT_OK,
    }
}

fn inspect(target: &Target, as_json: bool, seams: &Seams) -> ExitCode {
    let resolved = match resolve(target, seams, Access::ReadOnly) {
        Ok(resolved) => resolved,
        Err(message) => return fail(message),
    };
    let inspection = match inspect_visiting(&resolved, seams, Arc::new(NoEvidence), &mut |_| {}) {
        Ok(inspection) => inspection,
        Err(e) => return fail(e),
    };
    let mut out = io::stdout().lock();
    let printed = if as_json {
        let value = json!({
            "status": inspection.status,
            "records": inspection.record_count,
            "last_seq": inspection.last_seq,
            "torn_bytes": inspection.torn_bytes,
            "dropped_records": inspection.dropped_records,
            "torn_from_seq": inspection.torn_from_seq,
            "open_turn": inspection.open_turn,
            "recovered": inspection.recovered,
            "closers": inspection.closers,
            "error": inspection.error,
            "owner": inspection.owner,
        });
        writeln!(out, "{value}")
    } else {
        print_summary(&mut out, &inspection).and_then(|()| writeln!(out, "verdict:    {}", verdict(&inspection)))
    };
    if let Err(e) = printed {
        return fail(e);
    }
    ExitCode::from(status_exit(&inspection))
}

/// The exit status in words, with what to do next: a status line alone ("clean") does not
/// say why an open turn still exits 3.
fn verdict(inspection: &Inspection) -> String {
    match status_exit(inspection) {
        EXIT_CORRUPT => "corrupt (exit 4): a record before the end is damaged, and repair never guesses past it. \
                         Keep the file for diagnosis; restore the session from a backup or start a new one"
            .to_owned(),
        EXIT_UNSUPPORTED => "unsupported (exit 5): this build cannot read the format (a newer version, or a store \
                             built without its cargo feature); use a faultline that can"
            .to_owned(),
        EXIT_NEEDS_REPAIR => {
            let mut why = Vec::new();
            if inspection.torn_bytes > 0 {
                why.push(format!("a torn tail of {} bytes", inspection.torn_bytes));
            }
            if inspection.open_turn {
                why.push("a turn that never ended (the process stopped mid-turn)".to_owned());
            }
            if why.is_empty() {
                why.push("records to close".to_owned());
            }
            format!(
                "needs repair (exit 3): {}. `faultline transcript repair` with the same arguments closes it \
                 (`agent run --resume` repairs first too)",
                why.join(" and ")
            )
        }
        _ => "nothing to repair (exit 0)".to_owned(),
    }
}

fn print_summary(out: &mut impl Write, inspection: &Inspection) -> io::Result<()> {
    let status = serde_json::to_value(inspection.status).expect("status serialises");
    writeln!(out, "status:     {}", status.as_str().unwrap_or("?"))?;
    if let Some(error) = &inspection.error {
        writeln!(out, "error:      at byte {}: {}", error.offset, error.reason)?;
        return Ok(());
    }
    let last = inspection.last_seq.map_or("none".to_owned(), |seq| seq.to_string());
    writeln!(out, "records:    {} (last seq {last})", inspection.record_count)?;
    writeln!(out, "torn bytes: {}", inspection.torn_bytes)?;
    if let Some(drop) = inspection.would_drop() {
        writeln!(out, "repair would have {drop}")?;
    }
    if !inspection.recovered.is_empty() {
        writeln!(out, "salvaged:   {} records from the torn frame", inspection.recovered.len())?;
    }
    writeln!(out, "open turn:  {}", if inspection.open_turn { "yes" } else { "no" })?;
    if let Some(owner) = &inspection.owner {
        writeln!(out, "owner:      {owner}")?;
    }
    if !inspection.closers.is_empty() {
        writeln!(out, "repair would append:")?;
        for closer in &inspection.closers {
            writeln!(out, "  {}", closer.encode())?;
        }
    }
    Ok(())
}

fn repair(target: &Target, outbox: Option<&Path>, seams: &Seams) -> ExitCode {
    let resolved = match resolve(target, seams, Access::Repair) {
        Ok(resolved) => resolved,
        Err(message) => return fail(message),
    };
    let outbox = match queue_at(outbox, target, seams) {
        Ok(outbox) => outbox,
        Err(message) => return fail(message),
    };
    let evidence: Arc<dyn OutcomeEvidence> = match outbox.as_deref() {
        None => Arc::new(NoEvidence),
        Some(db) if queue_url(db).is_none() && !db.exists() => {
            return fail(format!("--outbox {}: no such file", db.display()))
        }
        Some(db) => match queue_evidence(db, seams, Access::Repair) {
            Ok((_, evidence)) => evidence,
            Err(e) => return fail(e),
        },
    };
    let result = match &resolved {
        Resolved::Database(store, id) => store(evidence).load(id).map(|loaded| loaded.repair),
        Resolved::File(path) => inspect_file_keeping(seams, path, evidence.as_ref(), Keep::Visit(&mut |_| {}))
            .and_then(|inspection| {
                if let Some(owner) = &inspection.owner {
                    if inspection.needs_repair() && seams.process.liveness(owner) == Liveness::Alive {
                        return Err(Error::SessionLive { id: path.display().to_string(), holder: owner.to_string() });
                    }
                }
                let repaired = repair_file(seams, path, &inspection)?;
                if let (Some(repair), Some(header)) = (&repaired, &inspection.header) {
                    for execution in faultline_runtime::store::never_claimed(&header.id, &repair.closers) {
                        evidence.cancel_never_claimed(&execution);
                    }
                }
                Ok(repaired)
            }),
    };
    match result {
        Ok(None) => {
            println!("nothing to repair");
            ExitCode::from(EXIT_OK)
        }
        Ok(Some(repair)) => {
            println!(
                "repaired: truncated {} torn bytes, salvaged {} records, appended {} closers",
                repair.truncated_bytes,
                repair.recovered.len(),
                repair.closers.len()
            );
            if let Some(drop) = repair.dropped() {
                println!("repair {drop}");
            }
            ExitCode::from(EXIT_OK)
        }
        Err(e @ Error::Corrupt { .. }) => {
            eprintln!("faultline transcript: {e} (left untouched)");
            ExitCode::from(EXIT_CORRUPT)
        }
        Err(e @ Error::Unsupported { .. }) => {
            eprintln!("faultline transcript: {e} (left untouched)");
            ExitCode::from(EXIT_UNSUPPORTED)
        }
        Err(e) => fail(e),
    }
}

fn cat(target: &Target, seams: &Seams) -> ExitCode {
    let resolved = match resolve(target, seams, Access::ReadOnly) {
        Ok(resolved) => resolved,
        Err(message) => return fail(message),
    };
    // Each record goes out as the scan commits it: a session of any size in bounded memory.
    let mut out = io::BufWriter::new(io::stdout());
    let mut written: io::Result<()> = Ok(());
    let inspection = inspect_visiting(&resolved, seams, Arc::new(NoEvidence), &mut |record| {
        if written.is_ok() {
            written = writeln!(out, "{}", record.encode());
        }
    });
    let inspection = match inspection {
        Ok(inspection) => inspection,
        Err(e) => return fail(e),
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        return fail(e);
    }
    match inspection.status {
        ScanStatus::Corrupt | ScanStatus::Unsupported => {
            let error = inspection.error.map(|e| format!("at byte {}: {}", e.offset, e.reason)).unwrap_or_default();
            eprintln!("faultline transcript: printed the prefix before the problem {error}");
            ExitCode::from(status_exit_code(inspection.status))
        }
        _ => ExitCode::from(EXIT_OK),
    }
}

fn status_exit_code(status: ScanStatus) -> u8 {
    match status {
        ScanStatus::Unsupported => EXIT_UNSUPPORTED,
        _ => EXIT_CORRUPT,
    }
}

fn append(
    dir: &Path,
    session: &str,
    (kind, database): (StoreKind, &DatabaseArgs),
    create: bool,
    takeover: bool,
    seams: &Seams,
) -> ExitCode {
    let id = match SessionId::new(session) {
        Ok(id) => id,
        Err(e) => return fail(e),
    };
    let store = match open_store(kind, dir, database, seams, None) {
        Ok(store) => store,
        Err(e) => return fail(e),
    };
    let opened = if create {
        store.create(&id, seams.clock.now_ms())
    } else {
        let takeover = if takeover { Takeover::IfDead } else { Takeover::Never };
        store.open(&id, takeover).map(|opened| opened.log)
    };
    let mut log = match opened {
        Ok(log) => log,
        Err(e) => return fail(e),
    };
    println!("holding session {id} with fencing token {} (next seq {})", log.token(), log.next_seq());
    let _ = io::stdout().flush();
    for line in io::stdin().lock().lines() {
        let line = match line {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => line,
            Err(e) => return fail(e),
        };
        let record = match Record::decode(&line) {
            Ok(record) => record,
            Err(e) => return fail(format!("stdin: {e}")),
        };
        if let Err(e) = log.append(std::slice::from_ref(&record)) {
            return fail(e);
        }
        println!("appended seq {}", record.seq);
        let _ = io::stdout().flush();
    }
    match log.close() {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => fail(e),
    }
}
