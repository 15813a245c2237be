//! The gateway host: the external receiver of side effects. It records every receipt with its
//! execution id (the oracle's ground truth for "did the effect happen, and how often").

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use faultline_runtime::outbox::{Deliverer, DeliveryError};
use faultline_runtime::seams::{CrashPoint, Probe};
use faultline_runtime::{seams::BoxFuture, seams::Clock, seams::Net};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// Header carrying the execution id of a delivery.
pub const EXECUTION_ID_HEADER: &str = "x-execution-id";
/// Largest effect body the gateway accepts, in bytes.
const EFFECT_BODY_BYTES_MAX: usize = 1024 * 1024;

/// One effect the gateway received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The delivery's execution id.
    pub execution_id: String,
    /// The payload.
    pub body: String,
    /// Simulation time (ms) it arrived.
    pub at_ms: u64,
    /// When it arrived in the run's order of events ([`super::stamp::Stamp`]): the effect's instant,
    /// which intent before effect compares with the instant its intent became durable.
    pub stamp: u64,
}

/// Receipts, shared with the driver.
pub type Receipts = Arc<Mutex<Vec<Receipt>>>;

/// Serves the gateway on `addr`, recording into `receipts`.
pub async fn serve(
    net: Arc<dyn Net>,
    clock: Arc<dyn Clock>,
    stamp: super::stamp::Stamp,
    addr: &str,
    receipts: Receipts,
    echo: bool,
) -> std::io::Result<()> {
    serve_on(net.bind(addr).await?, clock, stamp, receipts, echo).await
}

/// Serves the gateway on a listener already bound (the real harness binds port 0 first to
/// learn the port).
pub async fn serve_on(
    listener: Box<dyn faultline_runtime::seams::Listener>,
    clock: Arc<dyn Clock>,
    stamp: super::stamp::Stamp,
    receipts: Receipts,
    echo: bool,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let (clock, receipts, stamp) = (clock.clone(), receipts.clone(), stamp.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let (clock, receipts, stamp) = (clock.clone(), receipts.clone(), stamp.clone());
                async move {
                    // Held only to echo it back in echo mode (a careless receiver); never recorded.
                    let authorization =
                        crate::model_server::header_text(request.headers(), hyper::header::AUTHORIZATION.as_str());
                    let execution_id = request
                        .headers()
                        .get(EXECUTION_ID_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let body = match http_body_util::Limited::new(request.into_body(), EFFECT_BODY_BYTES_MAX)
                        .collect()
                        .await
                    {
                        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
                        Err(_) => return Ok::<_, Infallible>(reply(StatusCode::BAD_REQUEST, "bad body")),
                    };
                    if echo && body.contains(REFUSE_WORD) {
                        // Refused before the effect: no receipt, and the credential quoted back.
                        let token = authorization.strip_prefix("Bearer ").unwrap_or(&authorization);
                        let text = format!("refused: token {token} may not send this");
                        return Ok(reply(StatusCode::FORBIDDEN, &text));
                    }
                    let at_ms = clock.now().as_millis() as u64;
                    receipts.lock().unwrap_or_else(|p| p.into_inner()).push(Receipt {
                        execution_id: execution_id.clone(),
                        body,
                        at_ms,
                        stamp: stamp(),
                    });
                    let receipt = if echo {
                        format!("received {execution_id} (authorized by {authorization})")
                    } else {
                        format!("received {execution_id}")
                    };
                    Ok(reply(StatusCode::OK, &receipt))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn reply(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response
}

impl std::fmt::Debug for GatewayDeliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayDeliverer").field("authority", &self.authority).finish_non_exhaustive()
    }
}

/// Delivers effects to the gateway over HTTP. A connection or send failure before any
/// response is "unknown" (the request may have arrived); a 4xx is a refusal.
pub struct GatewayDeliverer {
    /// The receiver's credential, sent as `Authorization: Bearer`: a secret of the agent's.
    pub token: String,
    /// Network seam of the agent host.
    pub net: Arc<dyn Net>,
    /// Clock seam of the agent host (the delivery deadline).
    pub clock: Arc<dyn Clock>,
    /// `gateway:80`.
    pub authority: String,
    /// Crash point `after-side-effect` fires once the gateway answered.
    pub probe: Arc<dyn Probe>,
}

impl Deliverer for GatewayDeliverer {
    fn deliver(&self, execution_id: &str, payload: &str) -> BoxFuture<'static, Result<String, DeliveryError>> {
        let (net, authority, probe, clock) =
            (self.net.clone(), self.authority.clone(), self.probe.clone(), self.clock.clone());
        let (execution_id, payload) = (execution_id.to_owned(), payload.to_owned());
        let token = self.token.clone();
        Box::pin(async move {
            let exchange = exchange(net, authority, token, execution_id, payload);
            let outcome = tokio::select! {
                outcome = exchange => outcome,
                () = clock.sleep(std::time::Duration::from_millis(DELIVERY_DEADLINE_MS)) => {
                    Err(DeliveryError::Unknown(format!("no receipt within {DELIVERY_DEADLINE_MS} ms")))
                }
            };
            if outcome.is_ok() {
                // The effect reached the receiver; the receipt is not recorded yet.
                faultline_runtime::seams::crash_point(probe.as_ref(), CrashPoint::AfterSideEffect).await;
            }
            outcome
        })
    }
}

/// How long a delivery may take before its outcome is unknown.
pub const DELIVERY_DEADLINE_MS: u64 = 2_000;

/// In echo mode the gateway refuses a payload containing this word.
pub const REFUSE_WORD: &str = "refuse";

/// Characters of a refusal body kept in the delivery error.
const REFUSAL_CHARS_KEPT_MAX: usize = 256;

async fn exchange(
    net: Arc<dyn Net>,
    authority: String,
    token: String,
    execution_id: String,
    payload: String,
) -> Result<String, DeliveryError> {
    {
        {
            let stream = net
                .connect(&authority)
                .await
                .map_err(|e| DeliveryError::Unknown(format!("connect {authority}: {e}")))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| DeliveryError::Unknown(e.to_string()))?;
            let task = tokio::spawn(async move {
                let _ = connection.await;
            });
            let request = Request::post("/effects")
                .header(hyper::header::HOST, authority.as_str())
                .header(EXECUTION_ID_HEADER, execution_id.as_str())
                .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
                .body(Full::new(Bytes::from(payload)))
                .map_err(|e| DeliveryError::Rejected(e.to_string()))?;
            let response =
                sender.send_request(request).await.map_err(|e| DeliveryError::Unknown(format!("sending: {e}")));
            let outcome = match response {
                Err(e) => Err(e),
                Ok(response) => {
                    let status = response.status();
                    let body = response
                        .into_body()
                        .collect()
                        .await
                        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned());
                    match (status.is_success(), body) {
                        (true, Ok(text)) => Ok(text),
                        (true, Err(e)) => Err(DeliveryError::Unknown(format!("reading the receipt: {e}"))),
                        (false, body) if status.is_client_error() => {
                            // The receiver's own words: what an operator needs to act on.
                            let said: String = body.unwrap_or_default().chars().take(REFUSAL_CHARS_KEPT_MAX).collect();
                            Err(DeliveryError::Rejected(format!("gateway refused: {status}: {said}")))
                        }
                        (false, _) => Err(DeliveryError::Unknown(format!("gateway answered {status}"))),
                    }
                }
            };
            task.abort();
            outcome
        }
    }
}
