//! TLS to a real PostgreSQL (FAILURE-DB-TLS): a throw-away server with `ssl = on` and a
//! certificate from a CA the test makes, reached with each `sslmode`; what a wrong CA, a wrong
//! host or an expired certificate do (a classified refusal at connect, never a hang); and that
//! the connection really is encrypted (the server's own `pg_stat_ssl`, read over a second,
//! plain connection).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real files, a real server

use std::time::{Duration, Instant};

use faultline_runtime::production::{self, PgStore};
use faultline_runtime::store::{SessionId, Store, LEASE_MS_DEFAULT};
use faultline_runtime::testing::{PgServer, TestPki, REQUIRE_POSTGRES_ENV};

/// A server presenting a certificate of `pki`, or `None` where PostgreSQL is not installed.
fn tls_server(pki: &TestPki) -> Option<PgServer> {
    match PgServer::start_with_tls(&pki.server_cert_pem, &pki.server_key_pem) {
        Ok(server) => Some(server),
        Err(e) => {
            assert!(std::env::var_os(REQUIRE_POSTGRES_ENV).is_none(), "{REQUIRE_POSTGRES_ENV} is set, but {e}");
            None
        }
    }
}

fn ca_file(dir: &std::path::Path, pki: &TestPki, name: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, &pki.ca_pem).unwrap();
    path.display().to_string()
}

/// Connects a store to `url`, timing it.
fn connect(url: &str) -> (Result<PgStore, faultline_runtime::Error>, Duration) {
    let started = Instant::now();
    let store = PgStore::connect(url, production::seams().process, LEASE_MS_DEFAULT);
    (store, started.elapsed())
}

/// How many backends of the server are on TLS, asked over a plain connection.
fn encrypted_backends(server: &PgServer) -> i64 {
    let url = format!("{}?sslmode=disable", server.url("postgres"));
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            client.query_one("SELECT count(*) FROM pg_stat_ssl WHERE ssl", &[]).unwrap().get::<_, i64>(0)
        })
        .join()
        .unwrap()
    })
}

#[test]
fn verify_full_with_a_private_ca_connects_encrypted_and_keeps_sessions() {
    let pki = TestPki::new(&["localhost"]);
    let Some(server) = tls_server(&pki) else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(dir.path(), &pki, "ca.pem");
    let url = format!(
        "postgresql://faultline:pw-never-shown@localhost:{}/postgres?sslmode=verify-full&sslrootcert={ca}",
        server.port()
    );
    let (store, _) = connect(&url);
    let store = store.unwrap();
    let id = SessionId::new("tls").unwrap();
    store.create(&id, 1).unwrap().close().unwrap();
    assert_eq!(store.list().unwrap(), vec![id]);
    assert!(encrypted_backends(&server) >= 1, "the store's connection is on TLS");
    // verify-ca checks the chain, not the name: 127.0.0.1 is not on the certificate.
    let by_address =
        format!("postgresql://faultline@127.0.0.1:{}/postgres?sslmode=verify-ca&sslrootcert={ca}", server.port());
    connect(&by_address).0.unwrap();
    // require without a root file encrypts and verifies nothing, as libpq's does.
    let require = format!("postgresql://faultline@127.0.0.1:{}/postgres?sslmode=require", server.port());
    connect(&require).0.unwrap();
    // key=value form and the environment's variable name the same settings.
    let pairs = format!(
        "host=localhost port={} user=faultline dbname=postgres sslmode=verify-full sslrootcert={ca}",
        server.port()
    );
    connect(&pairs).0.unwrap();
    server.stop();
}

#[test]
fn a_wrong_ca_a_wrong_host_or_an_expired_certificate_is_refused_fast_and_said_plainly() {
    let (pki, other) = (TestPki::new(&["localhost"]), TestPki::new(&["localhost"]));
    let Some(server) = tls_server(&pki) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (ca, wrong_ca) = (ca_file(dir.path(), &pki, "ca.pem"), ca_file(dir.path(), &other, "other.pem"));
    let port = server.port();
    for (url, said) in [
        (
            format!("postgresql://faultline:pw-never-shown@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={wrong_ca}"),
            "not signed by a trusted CA",
        ),
        (format!("postgresql://faultline@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert={ca}"), "does not name the host 127.0.0.1"),
        (format!("postgresql://faultline@localhost:{port}/postgres?sslmode=verify-full"), "not signed by a trusted CA"),
    ] {
        let (refused, took) = connect(&url);
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("TLS_CERTIFICATE") && message.contains(said), "{url}: {message}");
        assert!(!message.contains("pw-never-shown"), "no password in the error: {message}");
        assert!(took < Duration::from_secs(5), "refused fast, not retried: {took:?}");
    }
    server.stop();

    let expired = TestPki::expired(&["localhost"]);
    let Some(expired_server) = tls_server(&expired) else { return };
    let ca = ca_file(dir.path(), &expired, "expired-ca.pem");
    let url = format!(
        "postgresql://faultline@localhost:{}/postgres?sslmode=verify-full&sslrootcert={ca}",
        expired_server.port()
    );
    let message = connect(&url).0.unwrap_err().to_string();
    assert!(message.contains("TLS_CERTIFICATE") && message.contains("expired"), "{message}");
    expired_server.stop();
}

#[test]
fn a_bad_sslmode_or_root_file_is_a_config_error_before_any_connection() {
    for (url, said) in [
        ("postgresql://u@127.0.0.1:1/db?sslmode=verify_full", "sslmode \"verify_full\" is not one of"),
        (
            "postgresql://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "sslrootcert /nonexistent/ca.pem",
        ),
    ] {
        let message = connect(url).0.unwrap_err().to_string();
        assert!(message.contains(said), "{url}: {message}");
    }
}
