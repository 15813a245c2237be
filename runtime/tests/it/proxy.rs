//! HTTP CONNECT proxies for real: a proxy on 127.0.0.1 that counts the tunnels it opened,
//! TLS to the model inside the tunnel, refusals and cuts named after the proxy, and the proxy
//! credentials kept out of every message.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real sockets and files

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use faultline_runtime::event::{ErrorCode, FinishReason};
use faultline_runtime::llm::ProxyEnv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::tls::{ca_file, call_via, code, pki, server, Serve};

/// What the proxy does with a CONNECT.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Tunnel (requiring this `Proxy-Authorization` value, when set).
    Tunnel(Option<&'static str>),
    /// Answer 403.
    Forbid,
    /// Close the connection without answering.
    Drop,
}

/// A CONNECT proxy; returns its port, the tunnels opened and the targets asked for.
async fn proxy(behaviour: Behaviour) -> (u16, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tunnels, targets) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let (opened, asked) = (tunnels.clone(), targets.clone());
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let (opened, asked) = (opened.clone(), asked.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let target = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                asked.lock().unwrap().push(target.clone());
                match behaviour {
                    Behaviour::Drop => {}
                    Behaviour::Forbid => {
                        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n").await;
                    }
                    Behaviour::Tunnel(required) => {
                        let given = head
                            .lines()
                            .find_map(|l| l.strip_prefix("Proxy-Authorization: "))
                            .map(str::trim)
                            .map(str::to_owned);
                        if required.is_some_and(|r| given.as_deref() != Some(r)) {
                            let _ = client
                                .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
                                .await;
                            return;
                        }
                        let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else { return };
                        opened.fetch_add(1, Ordering::SeqCst);
                        let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                }
            });
        }
    });
    (port, tunnels, targets)
}

#[tokio::test]
async fn tls_to_the_model_runs_inside_a_connect_tunnel_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(&["127.0.0.1"], false);
    let model = server(&pki, Serve::Stream).await;
    let (port, tunnels, targets) = proxy(Behaviour::Tunnel(None)).await;
    let env = ProxyEnv { https: Some(format!("http://127.0.0.1:{port}")), ..ProxyEnv::default() };
    let (text, reason) = call_via("127.0.0.1", model, Some(ca_file(&dir, &pki)), None, env).await;
    assert_eq!(reason, FinishReason::Stop, "{reason:?}");
    assert_eq!(text, "over TLS");
    assert_eq!(tunnels.load(Ordering::SeqCst), 1, "one tunnel per call");
    assert_eq!(*targets.lock().unwrap(), vec![format!("127.0.0.1:{model}")]);
}

#[tokio::test]
async fn no_proxy_reaches_the_host_directly() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(&["127.0.0.1"], false);
    let model = server(&pki, Serve::Stream).await;
    let (port, tunnels, _) = proxy(Behaviour::Tunnel(None)).await;
    let env = ProxyEnv {
        https: Some(format!("http://127.0.0.1:{port}")),
        no_proxy: vec!["localhost".into(), "127.0.0.1".into()],
        ..ProxyEnv::default()
    };
    let (_, reason) = call_via("127.0.0.1", model, Some(ca_file(&dir, &pki)), None, env).await;
    assert_eq!(reason, FinishReason::Stop, "{reason:?}");
    assert_eq!(tunnels.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn proxy_credentials_are_sent_and_a_refusal_names_the_proxy_not_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(&["127.0.0.1"], false);
    let model = server(&pki, Serve::Stream).await;
    // base64("alice:s3cret-proxy-pass")
    let (port, tunnels, _) = proxy(Behaviour::Tunnel(Some("Basic YWxpY2U6czNjcmV0LXByb3h5LXBhc3M="))).await;
    let good = format!("http://alice:s3cret-proxy-pass@127.0.0.1:{port}");
    let (_, reason) = call_via("127.0.0.1", model, Some(ca_file(&dir, &pki)), Some(good), ProxyEnv::default()).await;
    assert_eq!(reason, FinishReason::Stop, "{reason:?}");
    assert_eq!(tunnels.load(Ordering::SeqCst), 1);

    let bad = format!("http://alice:wrong-proxy-pass@127.0.0.1:{port}");
    let (_, reason) = call_via("127.0.0.1", model, Some(ca_file(&dir, &pki)), Some(bad), ProxyEnv::default()).await;
    let FinishReason::Error { failure } = reason else { panic!("{reason:?}") };
    assert_eq!(failure.code, ErrorCode::Auth);
    assert!(
        failure.message.contains(&format!("proxy 127.0.0.1:{port}")) && failure.message.contains("407"),
        "{}",
        failure.message
    );
    assert!(!failure.message.contains("wrong-proxy-pass") && !failure.message.contains("alice"), "{}", failure.message);
}

#[tokio::test]
async fn a_proxy_that_forbids_or_drops_the_tunnel_is_named_in_the_failure() {
    let (port, _, _) = proxy(Behaviour::Forbid).await;
    let env = ProxyEnv { https: Some(format!("http://127.0.0.1:{port}")), ..ProxyEnv::default() };
    let (_, reason) = call_via("127.0.0.1", 9, None, None, env).await;
    assert_eq!(code(&reason), Some(ErrorCode::InvalidRequest), "{reason:?}");
    let (port, _, _) = proxy(Behaviour::Drop).await;
    let env = ProxyEnv { https: Some(format!("http://127.0.0.1:{port}")), ..ProxyEnv::default() };
    let (_, reason) = call_via("127.0.0.1", 9, None, None, env).await;
    let FinishReason::Error { failure } = reason else { panic!("{reason:?}") };
    assert_eq!(failure.code, ErrorCode::Transport);
    assert!(failure.message.contains(&format!("proxy 127.0.0.1:{port}")), "{}", failure.message);
}
