//! The command's logs and traces: `-v` logs to stderr; traces go to the user's OpenTelemetry
//! collector (FAILURE-OTEL) over OTLP/HTTP (protobuf) when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, or when the agent file's `[telemetry]
//! otlp_endpoint` asks. Off otherwise: no exporter, no thread, no connection.
//!
//! The runtime names the spans (`faultline_runtime::telemetry`); this module only installs the
//! SDK under them: a batch processor on a thread of its own (`OTEL_BSP_*` tune it), the W3C
//! trace-context propagator (what tools receive as `traceparent`), `service.name` `faultline`
//! unless `OTEL_SERVICE_NAME` says otherwise. [`Telemetry::shutdown`] exports what is left
//! before the process exits.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// The variables that turn the exporter on, most specific first.
const ENDPOINT_VARS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// The installed exporter, to flush at exit.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Exports every span not yet exported and stops the exporter (bounded by the SDK's own
    /// export timeout). A collector that is down costs a warning, never the exit code.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("faultline: traces could not all be exported: {e}");
        }
    }
}

/// Where traces go: the agent file's `[telemetry] otlp_endpoint` (a base URL, as the
/// variable takes) when the command reads one, else the variables'. `None`: traces are off.
pub fn endpoint(config_endpoint: Option<String>) -> Option<Endpoint> {
    if let Some(base) = config_endpoint {
        return Some(Endpoint::Config(format!("{}/v1/traces", base.trim_end_matches('/'))));
    }
    ENDPOINT_VARS.iter().any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty())).then_some(Endpoint::Env)
}

/// Where the exporter sends its spans.
pub enum Endpoint {
    /// The agent file's, as a full `/v1/traces` URL.
    Config(String),
    /// The `OTEL_EXPORTER_OTLP_*` variables' (the exporter reads them itself).
    Env,
}

/// Installs the stderr logs `-v` (or `RUST_LOG`) asks for, and the exporter `endpoint` asks
/// for; returns the exporter to shut down at exit. A subscriber is installed only when one of
/// them is wanted: otherwise the runtime's `tracing` stays silent.
pub fn install(verbose: u8, endpoint: Option<Endpoint>) -> Option<Telemetry> {
    let from_env = std::env::var_os("RUST_LOG").is_some();
    let logs = (verbose > 0 || from_env).then(|| {
        let level = match verbose {
            0 | 1 => "info",
            2 => "debug",
            _ => "trace",
        };
        let filter = if from_env {
            tracing_subscriber::EnvFilter::from_default_env()
        } else {
            tracing_subscriber::EnvFilter::new(format!("faultline_runtime={level},faultline_sim={level}"))
        };
        tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false).with_filter(filter)
    });
    let telemetry = endpoint.and_then(|endpoint| match provider(endpoint) {
        Ok(provider) => Some(Telemetry { provider }),
        Err(e) => {
            eprintln!("faultline: traces are off: the OTLP exporter could not be built: {e}");
            None
        }
    });
    let traces = telemetry.as_ref().map(|t| {
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
        let tracer = t.provider.tracer("faultline");
        let spans = tracing_subscriber::filter::Targets::new()
            .with_target("faultline_runtime", tracing_subscriber::filter::LevelFilter::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_filter(spans)
    });
    if logs.is_some() || traces.is_some() {
        let _ = tracing_subscriber::registry().with(logs).with(traces).try_init();
    }
    telemetry
}

fn provider(endpoint: Endpoint) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let builder = opentelemetry_otlp::SpanExporter::builder().with_http();
    let exporter = match endpoint {
        Endpoint::Config(url) => builder.with_endpoint(url).build()?,
        Endpoint::Env => builder.build()?,
    };
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("faultline");
    }
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build())
}
