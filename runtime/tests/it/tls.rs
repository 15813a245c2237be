//! `https://` endpoints for real: a TLS server on 127.0.0.1 with certificates generated at
//! test time (rcgen), the production seams, and the adapter's classification of every way the
//! handshake can go wrong.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // a real socket and real files

use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::event::{Chunk, ErrorCode, FinishReason, RequestPrefix};
use faultline_runtime::llm::{chat_body, Adapter, ResolvedProvider, RetryPolicy, StaticCredentials};
use faultline_runtime::production;
use faultline_runtime::testing::TestPki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// A test CA and a server certificate it signed for `names`, valid now or expired.
pub(crate) fn pki(names: &[&str], expired: bool) -> TestPki {
    if expired {
        TestPki::expired(names)
    } else {
        TestPki::new(names)
    }
}

/// How the server treats a connection.
#[derive(Clone, Copy)]
pub(crate) enum Serve {
    /// Handshake, then answer one SSE stream.
    Stream,
    /// Accept the TCP connection and close it mid-handshake.
    CutHandshake,
}

/// A TLS server on 127.0.0.1 answering one connection; returns its port.
pub(crate) async fn server(pki: &TestPki, serve: Serve) -> u16 {
    let acceptor = pki.acceptor();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        if let Serve::CutHandshake = serve {
            let mut hello = [0u8; 64];
            let _ = tcp.read(&mut hello).await;
            return; // dropped: the client sees the connection end inside the handshake
        }
        let Ok(mut tls) = acceptor.accept(tcp).await else { return };
        if faultline_runtime::testing::read_http_request(&mut tls).await.is_none() {
            return;
        }
        let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "over TLS"}, "finish_reason": null}]});
        let stop = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let body = format!("data: {chunk}\n\ndata: {stop}\n\ndata: [DONE]\n\n");
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = tls.write_all(head.as_bytes()).await;
        let _ = tls.write_all(body.as_bytes()).await;
        let _ = tls.shutdown().await;
    });
    port
}

/// Streams one call to `https://{host}:{port}/v1` trusting `ca_file`; returns the text and
/// how it finished.
async fn call(host: &str, port: u16, ca_file: Option<String>) -> (String, FinishReason) {
    call_via(host, port, ca_file, None, Default::default()).await
}

/// [`call`] through a route `proxy` and the environment's proxies `env`.
pub(crate) async fn call_via(
    host: &str,
    port: u16,
    ca_file: Option<String>,
    proxy: Option<String>,
    env: faultline_runtime::llm::ProxyEnv,
) -> (String, FinishReason) {
    let seams = production::seams();
    let mut route = ResolvedProvider::openai_compatible(&format!("https://{host}:{port}/v1"), "m")
        .unwrap()
        .with_name("tls")
        .with_idle_timeout(Duration::from_secs(10))
        .unwrap();
    if let Some(ca_file) = ca_file {
        route = route.with_ca_file(ca_file);
    }
    if let Some(proxy) = proxy {
        route = route.with_proxy(&proxy).unwrap();
    }
    let route = Arc::new(route);
    let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), Arc::new(StaticCredentials::default()))
        .with_fs(seams.fs)
        .with_proxy_env(env);
    let body = chat_body(&RequestPrefix { model: "m".into(), system: None, tools: vec![] }, &[]);
    let mut stream = adapter.stream(route, body, CancellationToken::new());
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Chunk::TextDelta { text: t, .. } => text.push_str(&t),
            Chunk::Finish { reason, .. } => return (text, reason),
            _ => {}
        }
    }
    panic!("a model stream always ends in finish");
}

pub(crate) fn code(reason: &FinishReason) -> Option<ErrorCode> {
    match reason {
        FinishReason::Error { failure } => Some(failure.code),
        _ => None,
    }
}

pub(crate) fn ca_file(dir: &tempfile::TempDir, pki: &TestPki) -> String {
    let path = dir.path().join("test-ca.pem");
    std::fs::write(&path, &pki.ca_pem).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_private_ca_in_ca_file_is_trusted_over_loopback_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(&["localhost", "127.0.0.1"], false);
    let port = server(&pki, Serve::Stream).await;
    let (text, reason) = call("127.0.0.1", port, Some(ca_file(&dir, &pki))).await;
    assert_eq!(reason, FinishReason::Stop, "{reason:?}");
    assert_eq!(text, "over TLS");
}

#[tokio::test]
async fn an_unknown_ca_is_a_certificate_failure_that_is_never_retried() {
    let pki = pki(&["127.0.0.1"], false);
    let port = server(&pki, Serve::Stream).await;
    let (_, reason) = call("127.0.0.1", port, None).await;
    assert_eq!(code(&reason), Some(ErrorCode::TlsCertificate), "{reason:?}");
    let failure = match &reason {
        FinishReason::Error { failure } => failure.clone(),
        _ => unreachable!(),
    };
    let always = RetryPolicy::Always { backoff: Default::default() };
    assert_eq!(
        faultline_runtime::testing::decide(&always, &failure, 1, || 0.5),
        faultline_runtime::testing::RetryDecision::GiveUp,
        "not even `always` retries an untrusted certificate"
    );
}

#[tokio::test]
async fn a_certificate_for_another_host_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(&["other.example"], false);
    let port = server(&pki, Serve::Stream).await;
    let (_, reason) = call("127.0.0.1", port, Some(ca_file(&dir, &pki))).await;
    assert_eq!(code(&reason), Some(ErrorCode::TlsCertificate), "{reason:?}");
}

#[tokio::test]
async fn an_expired_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(&["127.0.0.1"], true);
    let port = server(&pki, Serve::Stream).await;
    let (_, reason) = call("127.0.0.1", port, Some(ca_file(&dir, &pki))).await;
    assert_eq!(code(&reason), Some(ErrorCode::TlsCertificate), "{reason:?}");
}

#[tokio::test]
async fn a_handshake_cut_by_the_network_is_a_transport_failure() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(&["127.0.0.1"], false);
    let port = server(&pki, Serve::CutHandshake).await;
    let (_, reason) = call("127.0.0.1", port, Some(ca_file(&dir, &pki))).await;
    assert_eq!(code(&reason), Some(ErrorCode::Transport), "{reason:?}");
}

#[tokio::test]
async fn an_unreadable_ca_file_is_a_clear_configuration_error() {
    let (_, reason) = call("127.0.0.1", 9, Some("/nonexistent/ca.pem".into())).await;
    let FinishReason::Error { failure } = reason else { panic!("{reason:?}") };
    assert_eq!(failure.code, ErrorCode::InvalidRequest);
    assert!(failure.message.contains("ca_file /nonexistent/ca.pem"), "{}", failure.message);
}

/// A network that records where it was asked to connect and hands back an in-memory pipe
/// whose far end the test reads.
struct RecordingNet {
    asked: std::sync::Mutex<Vec<String>>,
    far_end: std::sync::Mutex<Option<tokio::io::DuplexStream>>,
}

impl faultline_runtime::seams::Net for RecordingNet {
    fn connect(
        &self,
        addr: &str,
    ) -> faultline_runtime::seams::BoxFuture<'_, std::io::Result<Box<dyn faultline_runtime::seams::ByteStream>>> {
        self.asked.lock().unwrap().push(addr.to_owned());
        let (near, far) = tokio::io::duplex(64 * 1024);
        *self.far_end.lock().unwrap() = Some(far);
        Box::pin(async move { Ok(Box::new(near) as Box<dyn faultline_runtime::seams::ByteStream>) })
    }

    fn bind(
        &self,
        _: &str,
    ) -> faultline_runtime::seams::BoxFuture<'_, std::io::Result<Box<dyn faultline_runtime::seams::Listener>>> {
        Box::pin(async { Err(std::io::Error::other("not in this test")) })
    }
}

/// The DeepSeek preset speaks TLS to api.deepseek.com:443 — asserted without any network: the
/// connector is asked for that host and port, and the ClientHello names it (SNI) and offers
/// only HTTP/1.1 (ALPN).
#[tokio::test]
async fn the_deepseek_preset_opens_tls_to_api_deepseek_com() {
    let config: faultline_runtime::llm::ProviderConfig = toml::from_str("preset = \"deepseek\"").unwrap();
    let route = Arc::new(config.resolve("provider").unwrap());
    assert!(route.endpoint.tls);
    let net = Arc::new(RecordingNet { asked: Default::default(), far_end: Default::default() });
    let seams = production::seams();
    let mut keys = std::collections::BTreeMap::new();
    keys.insert("DEEPSEEK_API_KEY".to_owned(), "sk-test-not-real".to_owned());
    let adapter = Adapter::new(net.clone(), seams.clock.clone(), Arc::new(StaticCredentials(keys)));
    let body = chat_body(&RequestPrefix { model: "deepseek-chat".into(), system: None, tools: vec![] }, &[]);
    let mut stream = adapter.stream(route, body, CancellationToken::new());
    let reader = {
        let net = net.clone();
        tokio::spawn(async move {
            let mut far = loop {
                if let Some(far) = net.far_end.lock().unwrap().take() {
                    break far;
                }
                tokio::task::yield_now().await;
            };
            let mut hello = vec![0u8; 4096];
            let n = far.read(&mut hello).await.unwrap();
            hello.truncate(n);
            hello // dropping `far` ends the handshake
        })
    };
    while let Some(chunk) = stream.next().await {
        if let Chunk::Finish { reason, .. } = chunk {
            assert_eq!(code(&reason), Some(ErrorCode::Transport), "the pipe closed mid-handshake: {reason:?}");
            break;
        }
    }
    let hello = reader.await.unwrap();
    assert_eq!(*net.asked.lock().unwrap(), vec!["api.deepseek.com:443".to_owned()]);
    assert_eq!(hello[0], 0x16, "a TLS handshake record");
    let contains = |needle: &[u8]| hello.windows(needle.len()).any(|w| w == needle);
    assert!(contains(b"api.deepseek.com"), "SNI names the host");
    assert!(contains(b"http/1.1") && !contains(b"h2"), "ALPN offers HTTP/1.1 only");
    assert!(!contains(b"sk-test-not-real"), "no credential before the handshake");
}
