//! The same tool on the production seams, against a real HTTP server on 127.0.0.1: it sends
//! the call's execution id as its idempotency key, and the runtime stamps the execution id
//! header on the request.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)] // a real loopback server

use faultline_example_invoicing::{tools, SEND_INVOICE};
use faultline_runtime::testing::{read_http_request, run_with_deadline};
use faultline_runtime::tool::{ToolInvocation, EXECUTION_ID_HEADER};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_posts_the_invoice_with_its_execution_id() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let request = read_http_request(&mut stream).await.expect("a whole request");
        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\nINV-001";
        stream.write_all(reply.as_bytes()).await.unwrap();
        String::from_utf8(request).unwrap()
    });
    let seams = faultline_runtime::production::seams();
    let set = tools(&seams, &format!("http://127.0.0.1:{port}"));
    let tool = set.get(SEND_INVOICE).unwrap().clone();
    let execution_id = "exec-0123".to_owned();
    let invocation = ToolInvocation {
        session: "s".into(),
        turn: 1,
        step: 1,
        call_id: "call_1".into(),
        arguments: serde_json::json!({"customer": "acme", "cents": 1200, "currency": "EUR"}),
        execution_id: execution_id.clone(),
        session_epoch: 1,
    };
    let outcome = run_with_deadline(tool, invocation, &CancellationToken::new(), &seams.clock).await;
    assert!(outcome.error.is_none(), "{outcome:?}");
    let request = server.await.unwrap().to_ascii_lowercase();
    assert!(request.starts_with("post /invoices http/1.1"), "{request}");
    assert!(request.contains(&format!("{EXECUTION_ID_HEADER}: {execution_id}")), "{request}");
    #[cfg(not(feature = "retry-without-key"))]
    assert!(request.contains(&format!("idempotency-key: {execution_id}")), "{request}");
    assert!(request.contains(r#"{"cents":1200,"currency":"eur","customer":"acme"}"#), "{request}");
}
