//! A throw-away PostgreSQL server for tests: Debian's `postgresql` binaries, `initdb` into a
//! temporary directory and `pg_ctl` on a free port of 127.0.0.1 (as the `postgres` user, via
//! `runuser`, when the tests run as root: the server refuses to run as root).
//!
//! Tests share one server per test binary ([`PgServer::shared`], stopped when the binary
//! exits) and take a fresh database each ([`PgServer::fresh_database`]); a test that restarts
//! or stops the server starts its own ([`PgServer::start`]).
#![allow(clippy::disallowed_methods, clippy::disallowed_types, clippy::print_stderr)]

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Set to `1` where PostgreSQL must be present (CI): a missing server fails instead of
/// skipping.
pub const REQUIRE_POSTGRES_ENV: &str = "FAULTLINE_REQUIRE_POSTGRES";

/// The database role the tests connect as (trust authentication on loopback).
pub const ROLE: &str = "faultline";

/// A running throw-away server; stopped (immediately) when dropped.
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    fsync: bool,
    /// `ssl = on` with `server.crt` and `server.key` in the data directory.
    ssl: bool,
    databases: AtomicU64,
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding `pg_ctl`, or `PATH`'s.
fn find_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("pg_ctl").exists())
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let which = Command::new("sh").args(["-c", "command -v pg_ctl"]).output().ok()?;
    let path = PathBuf::from(String::from_utf8(which.stdout).ok()?.trim());
    path.parent().filter(|_| which.status.success()).map(Path::to_path_buf)
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl PgServer {
    /// The server this test binary shares, started on first use and stopped when the binary
    /// exits; `None` (with a note on stderr) when PostgreSQL is not installed, unless
    /// [`REQUIRE_POSTGRES_ENV`] is `1`.
    pub fn shared() -> Option<&'static PgServer> {
        SHARED
            .get_or_init(|| {
                let required = std::env::var(REQUIRE_POSTGRES_ENV).is_ok_and(|v| v == "1");
                match PgServer::start() {
                    Ok(server) => match server.stop_when_this_process_exits() {
                        Ok(()) => Some(server),
                        Err(e) => panic!("watching the shared PostgreSQL server: {e}"),
                    },
                    Err(e) if required => panic!("PostgreSQL is required ({REQUIRE_POSTGRES_ENV}=1): {e}"),
                    Err(e) => {
                        eprintln!("skipping the PostgreSQL tests: {e} (install Debian's `postgresql`)");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Starts a new server in a temporary directory (fsync off: the tests crash processes,
    /// not the machine, and the kernel keeps what the server wrote).
    pub fn start() -> io::Result<PgServer> {
        Self::start_with(false)
    }

    /// Starts a new server with `fsync` on or off (benchmarks compare it with SQLite's
    /// `synchronous=FULL`, so they turn it on).
    pub fn start_with(fsync: bool) -> io::Result<PgServer> {
        Self::start_serving(fsync, None)
    }

    /// Starts a new server with `ssl = on`, presenting `cert_pem` (its key `key_pem`); it
    /// still accepts connections without TLS.
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> io::Result<PgServer> {
        Self::start_serving(false, Some((cert_pem, key_pem)))
    }

    fn start_serving(fsync: bool, tls: Option<(&str, &str)>) -> io::Result<PgServer> {
        let bin = find_bin().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no pg_ctl found"))?;
        let dir = tempfile::Builder::new().prefix("faultline-pg-").tempdir()?.keep();
        let uid = Command::new("id").arg("-u").output()?;
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        let ssl = tls.is_some();
        let server = PgServer { dir, bin, port: free_port()?, as_postgres, fsync, ssl, databases: AtomicU64::new(0) };
        if as_postgres {
            server.run(Command::new("chown").args(["-R", "postgres:postgres"]).arg(&server.dir))?;
        }
        let data = server.data();
        server.run(server.tool("initdb").arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            ROLE,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]))?;
        if let Some((cert, key)) = tls {
            use std::os::unix::fs::PermissionsExt;
            for (name, pem) in [("server.crt", cert), ("server.key", key)] {
                let path = data.join(name);
                std::fs::write(&path, pem)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                if server.as_postgres {
                    server.run(Command::new("chown").arg("postgres:postgres").arg(&path))?;
                }
            }
        }
        server.pg_ctl(&["start", "-w", "-t", "60"])?;
        Ok(server)
    }

    /// A shared server outlives every test but not the test binary: a watcher process stops
    /// it (and removes its directory) once this process is gone, however it ended.
    fn stop_when_this_process_exits(&self) -> io::Result<()> {
        let me = std::process::id();
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; {} >/dev/null 2>&1; rm -rf '{}'",
            shell_words(&self.pg_ctl_command(&["stop", "-m", "immediate", "-w"])),
            self.dir.display()
        );
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(())
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A command running binary `name` of the server, as the `postgres` user when root.
    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    fn run(&self, command: &mut Command) -> io::Result<()> {
        let output = command.stdin(Stdio::null()).output()?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(io::Error::other(format!("{command:?} failed ({}): {stderr}", output.status)));
        }
        Ok(())
    }

    fn pg_ctl(&self, args: &[&str]) -> io::Result<()> {
        self.run(&mut self.pg_ctl_command(args))
    }

    fn pg_ctl_command(&self, args: &[&str]) -> Command {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync={} -c max_connections=200 -c ssl={}",
            self.port,
            self.dir.display(),
            if self.fsync { "on" } else { "off" },
            if self.ssl { "on" } else { "off" }
        );
        let log = self.dir.join("server.log");
        let mut command = self.tool("pg_ctl");
        command.arg("-D").arg(self.data()).arg("-l").arg(log).arg("-o").arg(options).args(args);
        command
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://{ROLE}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database and returns its URL.
    pub fn fresh_database(&self) -> String {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        let admin = self.url("postgres");
        let statement = format!("CREATE DATABASE {name}");
        // On a thread of its own: the blocking client may not run inside a tokio runtime.
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut client =
                    postgres::Client::connect(&admin, postgres::NoTls).expect("connect to the test server");
                client.batch_execute(&statement).expect("create a test database");
            })
            .join()
            .expect("the database was created");
        });
        self.url(&name)
    }

    /// `pg_ctl restart -m immediate`: the server is killed without a checkpoint and starts
    /// again from its WAL, on the same port.
    pub fn restart_immediate(&self) -> io::Result<()> {
        self.pg_ctl(&["restart", "-m", "immediate", "-w", "-t", "60"])
    }

    /// Stops the server immediately and removes its directory.
    pub fn stop(&self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `command` as one line for `sh`, every word single-quoted (the paths are ours: no quotes).
fn shell_words(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|w| format!("'{}'", w.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The server shared by a test binary.
static SHARED: OnceLock<Option<PgServer>> = OnceLock::new();

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}
