//! Simulated services an embedder's tools call (FAILURE-USER-HARNESS): one turmoil host
//! each, recording every request it receives with the execution id the runtime stamped on it
//! (`faultline-execution-id`), optionally deduplicating by a key header the tool sends.
//!
//! What a service records is the oracle's independent evidence for the user's effects: the
//! runtime and the user's tool never touch it. Its faults (a 503 before the effect, a reply
//! lost after it) are drawn per request from the seed's stream for the service, and stop when
//! the run's fault window closes.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use faultline_runtime::seams::{Clock, EntropyExt, Listener};
use faultline_runtime::tool::EXECUTION_ID_HEADER;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// Largest request body a simulated service accepts, in bytes.
pub const SERVICE_BODY_BYTES_MAX: usize = 1024 * 1024;
/// Most request headers a service keeps per receipt.
pub const SERVICE_HEADERS_KEPT_MAX: usize = 32;
/// Longest header value a service keeps, in bytes (cut at a character boundary).
pub const SERVICE_HEADER_BYTES_MAX: usize = 256;
/// Longest simulated latency of a service, in ms.
pub const SERVICE_LATENCY_MS_MAX: u64 = 60_000;

/// A simulated service an embedder's tools call, declared by its test.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    /// Host name: tools reach it at `http://NAME/...` (port 80).
    pub name: String,
    /// The request header the service deduplicates by (`idempotency-key`): a second request
    /// with a key it has seen is answered with the first reply and is not a new effect.
    /// `None`: every request is an effect.
    pub dedup_header: Option<String>,
    /// Time the service takes to act on a request, in ms.
    pub latency_ms: u64,
    /// Faults; `None`: drawn from the seed.
    pub faults: Option<ServiceFaults>,
    /// The service only answers (a read): its requests are not effects.
    pub read_only: bool,
}

/// How often a service fails, per request, while the fault window is open.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceFaults {
    /// Share of requests answered 503 before any effect. Range 0..=1.
    pub error_rate: f64,
    /// Share of requests whose effect happens and whose reply is never sent (the caller sees
    /// a timeout). Range 0..=1.
    pub lost_reply_rate: f64,
}

impl ServiceFaults {
    /// No faults.
    pub const NONE: ServiceFaults = ServiceFaults { error_rate: 0.0, lost_reply_rate: 0.0 };

    /// Checks the rates.
    pub fn validate(&self) -> Result<(), String> {
        for (name, rate) in [("error_rate", self.error_rate), ("lost_reply_rate", self.lost_reply_rate)] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{name} {rate} is outside 0..=1"));
            }
        }
        Ok(())
    }

    /// The faults of `service` in the run of `seed`: its own, or drawn (each family on for
    /// about half the seeds, at 10–50 %).
    pub fn of(service: &Service, seed: u64) -> ServiceFaults {
        if let Some(faults) = service.faults {
            return faults;
        }
        let draw = crate::seed::Seed::new(seed).fault(&format!("service/{}", service.name));
        let rate = || if draw.unit_f64() < 0.5 { 0.0 } else { 0.1 + 0.4 * draw.unit_f64() };
        ServiceFaults { error_rate: rate(), lost_reply_rate: rate() }
    }
}

impl Service {
    /// A service at host `name`, every request an effect, faults drawn from the seed.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), dedup_header: None, latency_ms: 5, faults: None, read_only: false }
    }

    /// A service that only answers: what it receives is not an effect.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Deduplicates by `header` (case-insensitive).
    pub fn dedup_by_header(mut self, header: impl Into<String>) -> Self {
        self.dedup_header = Some(header.into().to_ascii_lowercase());
        self
    }

    /// Acts after `latency_ms`.
    pub fn latency_ms(mut self, latency_ms: u64) -> Self {
        self.latency_ms = latency_ms;
        self
    }

    /// Fixed fault rates instead of drawn ones.
    pub fn faults(mut self, faults: ServiceFaults) -> Self {
        self.faults = Some(faults);
        self
    }

    /// Checks the declaration.
    pub fn validate(&self) -> Result<(), String> {
        let valid_host = !self.name.is_empty()
            && self.name.len() <= 63
            && self.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !["agent", "model", "gateway"].contains(&self.name.as_str());
        if !valid_host {
            return Err(format!(
                "service name {:?}: 1-63 of a-z, 0-9 and '-', and not agent, model or gateway",
                self.name
            ));
        }
        if self.latency_ms > SERVICE_LATENCY_MS_MAX {
            return Err(format!("service {}: latency_ms above {SERVICE_LATENCY_MS_MAX}", self.name));
        }
        self.faults.map_or(Ok(()), |f| f.validate().map_err(|e| format!("service {}: {e}", self.name)))
    }
}

/// One request a service received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceReceipt {
    /// The service.
    pub service: String,
    /// The execution id the runtime stamped (empty: the request came from outside any tool
    /// call).
    pub execution_id: String,
    /// The dedup key the tool sent, if the service deduplicates and one came.
    pub key: Option<String>,
    /// The request's headers (names in lower case), as evidence of what the tool sent: at
    /// most [`SERVICE_HEADERS_KEPT_MAX`], each value cut at [`SERVICE_HEADER_BYTES_MAX`].
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// Simulated ms it arrived.
    pub at_ms: u64,
    /// Its instant in the run's order of events.
    pub stamp: u64,
    /// What happened to it.
    pub fate: Fate,
    /// It reached a read-only service (never an effect).
    pub read: bool,
}

impl ServiceReceipt {
    /// The value of header `name` (lower case) the request carried, if it did.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// What a service did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The effect happened and the reply was sent.
    Effect,
    /// The effect happened and the reply was lost.
    EffectReplyLost,
    /// Answered 503 before any effect.
    Refused,
    /// A key seen before: answered with the first reply, no new effect.
    Deduplicated,
}

impl Fate {
    /// Whether the request was a new effect.
    pub fn is_effect(self) -> bool {
        matches!(self, Fate::Effect | Fate::EffectReplyLost)
    }
}

/// Receipts of every service of a run, shared with the driver.
pub type ServiceReceipts = Arc<Mutex<Vec<ServiceReceipt>>>;

/// What a running service needs besides its declaration.
pub(crate) struct RunningService {
    pub service: Service,
    pub faults: ServiceFaults,
    pub seed: u64,
    pub clock: Arc<dyn Clock>,
    pub stamp: super::stamp::Stamp,
    pub receipts: ServiceReceipts,
    /// Simulated ms at which faults stop.
    pub heal_at_ms: u64,
}

/// Serves `running` on `listener` until the host dies.
pub(crate) async fn serve(listener: Box<dyn Listener>, running: RunningService) -> std::io::Result<()> {
    let running = Arc::new(running);
    let draw =
        Arc::new(crate::seed::Seed::new(running.seed).fault(&format!("service/{}/requests", running.service.name)));
    let seen: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    loop {
        let (stream, _) = listener.accept().await?;
        let (running, draw, seen) = (running.clone(), draw.clone(), seen.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let (running, draw, seen) = (running.clone(), draw.clone(), seen.clone());
                async move { Ok::<_, Infallible>(handle(&running, &draw, &seen, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn handle(
    running: &RunningService,
    draw: &crate::seams::SimEntropy,
    seen: &Mutex<BTreeMap<String, String>>,
    request: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let execution_id = header(EXECUTION_ID_HEADER).unwrap_or_default();
    let key = running.service.dedup_header.as_deref().and_then(header);
    let headers = kept_headers(request.headers());
    let body = match http_body_util::Limited::new(request.into_body(), SERVICE_BODY_BYTES_MAX).collect().await {
        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, "body too large"),
    };
    running.clock.sleep(Duration::from_millis(running.service.latency_ms)).await;
    let faulty = running.clock.now().as_millis() < u128::from(running.heal_at_ms);
    // Both draws are made for every request, so one rate does not shift the other's stream.
    let (error, lost) = (draw.unit_f64(), draw.unit_f64());
    let previous = key.as_ref().and_then(|k| seen.lock().unwrap_or_else(|p| p.into_inner()).get(k).cloned());
    let (fate, text) = match previous {
        Some(first) => (Fate::Deduplicated, first),
        None if faulty && error < running.faults.error_rate => (Fate::Refused, "overloaded, nothing done".to_owned()),
        None => {
            let text = format!("{} accepted {execution_id}", running.service.name);
            if let Some(key) = &key {
                seen.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), text.clone());
            }
            let fate =
                if faulty && lost < running.faults.lost_reply_rate { Fate::EffectReplyLost } else { Fate::Effect };
            (fate, text)
        }
    };
    running.receipts.lock().unwrap_or_else(|p| p.into_inner()).push(ServiceReceipt {
        service: running.service.name.clone(),
        execution_id,
        key,
        headers,
        body,
        at_ms: running.clock.now().as_millis() as u64,
        stamp: (running.stamp)(),
        fate,
        read: running.service.read_only,
    });
    match fate {
        Fate::Refused => reply(StatusCode::SERVICE_UNAVAILABLE, &text),
        // The effect is done; the caller never hears of it (its connection is held open
        // until it gives up).
        Fate::EffectReplyLost => std::future::pending().await,
        Fate::Effect | Fate::Deduplicated => reply(StatusCode::OK, &text),
    }
}

/// The headers a receipt keeps: bounded in number and length, values read as text.
fn kept_headers(headers: &hyper::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .take(SERVICE_HEADERS_KEPT_MAX)
        .map(|(name, value)| {
            let text = String::from_utf8_lossy(value.as_bytes());
            let mut end = text.len().min(SERVICE_HEADER_BYTES_MAX);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            (name.as_str().to_owned(), text[..end].to_owned())
        })
        .collect()
}

fn reply(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response
}
