//! Where a PostgreSQL store is (`--database-url`, else `FAULTLINE_DATABASE_URL`), and
//! `faultline db migrate`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use faultline_runtime::production::{self, PgStore, SCHEMA_VERSION};
use faultline_runtime::seams::Seams;
use faultline_runtime::store::LEASE_MS_DEFAULT;

use super::exit;

/// The environment variable holding the database URL (preferred to `--database-url`, which
/// other users of the machine can read in the process list).
pub(crate) const DATABASE_URL_ENV: &str = "FAULTLINE_DATABASE_URL";

/// A PostgreSQL database on the command line.
#[derive(Debug, Clone, Args)]
pub(crate) struct DatabaseArgs {
    /// PostgreSQL URL (postgresql://user@host:port/dbname) for `--store postgres`; default
    /// $FAULTLINE_DATABASE_URL. Prefer the variable for a URL with a password.
    #[arg(long, value_name = "URL")]
    pub(crate) database_url: Option<String>,
    /// A writer's lease on a PostgreSQL session, in ms (default 30 000): renewed every third
    /// of it; another worker may take the session over once it ran out.
    #[arg(long, value_name = "MS")]
    pub(crate) lease_ms: Option<u64>,
    /// The variable holding the URL when `--database-url` is not given (an agent file's
    /// `[store] database_url_env`; default `FAULTLINE_DATABASE_URL`).
    #[arg(skip)]
    pub(crate) url_env: Option<String>,
}

impl DatabaseArgs {
    /// The writer's lease, in ms.
    pub(crate) fn lease_ms(&self) -> u64 {
        self.lease_ms.unwrap_or(LEASE_MS_DEFAULT)
    }

    /// The URL, from the flag or the environment; its password becomes a secret of `seams`.
    pub(crate) fn url(&self, seams: &Seams) -> Result<String, String> {
        let var = self.url_env.as_deref().unwrap_or(DATABASE_URL_ENV);
        let url = match &self.database_url {
            Some(url) => url.clone(),
            None => std::env::var(var).map_err(|_| format!("a PostgreSQL store needs --database-url or {var}"))?,
        };
        if let Some(password) = production::database_password(&url) {
            seams.secrets.register(&password);
        }
        Ok(url)
    }
}

/// `faultline db ...`
#[derive(Debug, Args)]
pub struct DbArgs {
    #[command(subcommand)]
    command: DbCommand,
}

#[derive(Debug, Subcommand)]
enum DbCommand {
    /// Create or upgrade the faultline schema in a PostgreSQL database (each numbered
    /// migration once, in one transaction). Exit 0 done, 2 error.
    Migrate {
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Runs `faultline db ...`.
pub fn run(args: &DbArgs) -> ExitCode {
    let seams = production::seams();
    match &args.command {
        DbCommand::Migrate { database } => {
            let migrated = database.url(&seams).and_then(|url| PgStore::migrate(&url).map_err(|e| e.to_string()));
            match migrated {
                Ok(applied) if applied.is_empty() => {
                    println!("faultline db: the schema is up to date (version {SCHEMA_VERSION})");
                    exit::code(exit::OK)
                }
                Ok(applied) => {
                    let list: Vec<String> = applied.iter().map(i32::to_string).collect();
                    println!("faultline db: applied migration {} (schema version {SCHEMA_VERSION})", list.join(", "));
                    exit::code(exit::OK)
                }
                Err(e) => {
                    eprintln!("faultline db: {}", seams.secrets.scrub_held(&e));
                    exit::code(exit::FAILED)
                }
            }
        }
    }
}
