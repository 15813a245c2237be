//! The simulator: scenario runs per second, and a run against its bare turmoil twin.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::figure::*;

/// Simulator: runs/s per core for the default mix and `mixed`, simulated/wall time, and the
/// bare turmoil twin of every run, interleaved run by run (`twin.rs`): a plain turmoil sim
/// with the same topology, tick and simulated time replaying the run's recorded I/O — the same
/// connections with the same writes on each side, the same disk operations on the same paths
/// with the same sizes — and nothing above the seams. The first, byte-less twin (one `GET /`
/// answered `ok` per exchange, a 512-byte append per two disk operations) is measured beside
/// it, for comparison.
pub(super) fn simulator(seeds: u64) -> Vec<Figure> {
    use faultline_sim::{Scenario, BUILT_IN_SCENARIOS};
    let scenarios: Vec<Scenario> =
        BUILT_IN_SCENARIOS.iter().map(|s| Scenario::parse(s.text).expect("scenario")).collect();
    let mut totals =
        Totals { by_scenario: vec![(Duration::ZERO, Duration::ZERO); scenarios.len()], ..Totals::default() };
    for seed in 0..seeds {
        for (i, scenario) in scenarios.iter().enumerate() {
            totals.add(i, time_against_twins(scenario, seed, (seed + i as u64) % 2 == 0));
        }
    }
    let mixed = Scenario::built_in("mixed").expect("mixed");
    let start = Instant::now();
    for seed in 0..seeds * 4 {
        faultline_sim::run(&mixed, seed);
    }
    let mixed_rate = (seeds * 4) as f64 / start.elapsed().as_secs_f64();
    let mut figures = mix_figures(&totals, mixed_rate);
    // The scenarios whose runs cost the most beyond their twins, and their share of the whole
    // mix's excess: where a cut moves the ratio.
    let mut costliest: Vec<(usize, Duration, Duration)> =
        totals.by_scenario.iter().enumerate().map(|(i, &(run, twin))| (i, run, twin)).collect();
    costliest.sort_by_key(|&(_, run, twin)| std::cmp::Reverse(run.saturating_sub(twin)));
    let excess = totals.wall.saturating_sub(totals.twin_wall).as_secs_f64().max(f64::MIN_POSITIVE);
    for &(i, run, twin) in costliest.iter().take(SIMULATOR_COSTLIEST_SHOWN) {
        let share = run.saturating_sub(twin).as_secs_f64() / excess * 100.0;
        figures.push(figure(
            &format!("  {} ({share:.0} % of the excess)", scenarios[i].name),
            seeds as f64 / run.as_secs_f64(),
            "runs/s",
            Some(seeds as f64 / twin.as_secs_f64()),
            None,
        ));
    }
    figures
}

/// One run and its twins, timed.
struct Timed {
    run: Duration,
    twin: Duration,
    byte_less: Duration,
    sim_ms: u64,
}

/// The mix's time, its twins' and per scenario (run, twin): where the ratio is lost.
#[derive(Default)]
struct Totals {
    runs: u64,
    sim_ms: u64,
    wall: Duration,
    twin_wall: Duration,
    byte_less_wall: Duration,
    by_scenario: Vec<(Duration, Duration)>,
}

impl Totals {
    fn add(&mut self, scenario: usize, timed: Timed) {
        self.wall += timed.run;
        self.twin_wall += timed.twin;
        self.byte_less_wall += timed.byte_less;
        self.by_scenario[scenario].0 += timed.run;
        self.by_scenario[scenario].1 += timed.twin;
        self.runs += 1;
        self.sim_ms += timed.sim_ms;
    }
}

/// `scenario` at `seed` timed beside its bare turmoil twin (which goes first when
/// `run_first` is false) and its byte-less twin.
fn time_against_twins(scenario: &faultline_sim::Scenario, seed: u64, run_first: bool) -> Timed {
    // The I/O to replay comes from a recorded run of the same seed (the same run: one seed
    // fixes it); the timed run records nothing.
    let (recorded, io) = faultline_sim::twin::run_recorded(scenario, seed);
    let twin = faultline_sim::twin::Twin { tick_ms: scenario.tick_ms, sim_ms: recorded.sim_ms, io: Arc::new(io) };
    let byte_less = BareWork {
        tick_ms: scenario.tick_ms,
        model_requests: recorded.model_requests,
        gateway_requests: recorded.gateway_requests,
        appends: (recorded.fs_ops / 2) as usize,
        sim_ms: recorded.sim_ms,
    };
    let timed_run = || {
        let start = Instant::now();
        let result = faultline_sim::run(scenario, seed);
        (start.elapsed(), result)
    };
    let timed_twin = || {
        let start = Instant::now();
        faultline_sim::twin::replay(seed, &twin);
        start.elapsed()
    };
    let (run, result, twin_took) = if run_first {
        let (took, result) = timed_run();
        (took, result, timed_twin())
    } else {
        let twin_took = timed_twin();
        let (took, result) = timed_run();
        (took, result, twin_took)
    };
    assert_eq!(result.trace_hash, recorded.trace_hash, "{} seed {seed} replays the same run", scenario.name);
    let start = Instant::now();
    bare_turmoil(seed, byte_less);
    Timed { run, twin: twin_took, byte_less: start.elapsed(), sim_ms: result.sim_ms }
}

/// The mix's rate against its twins, `mixed` alone, and simulated against wall time.
fn mix_figures(totals: &Totals, mixed_rate: f64) -> Vec<Figure> {
    let mix_rate = totals.runs as f64 / totals.wall.as_secs_f64();
    let twin_rate = totals.runs as f64 / totals.twin_wall.as_secs_f64();
    let byte_less_rate = totals.runs as f64 / totals.byte_less_wall.as_secs_f64();
    vec![
        figure(
            "simulator: default mix, runs per second (one core)",
            mix_rate,
            "runs/s",
            Some(twin_rate),
            Some(("≤ 1.5× its bare turmoil twin (ratio ≥ 0.67)", 1.0 / 1.5)),
        ),
        figure("  against the byte-less twin (counts only, no bytes)", mix_rate, "runs/s", Some(byte_less_rate), None),
        figure_at_least(
            "simulator: mixed scenario (one core)",
            mixed_rate,
            "runs/s",
            None,
            ("≥ 100 runs/s/core", 100.0),
        ),
        figure(
            "simulator: simulated / wall time",
            totals.sim_ms as f64 / 1e3 / totals.wall.as_secs_f64(),
            "×",
            None,
            None,
        ),
    ]
}

/// How many scenarios the simulator group names as costliest beyond their twins.
pub(super) const SIMULATOR_COSTLIEST_SHOWN: usize = 6;

/// The work of one scenario run, for the byte-less twin: counts only.
#[derive(Debug, Clone, Copy)]
pub struct BareWork {
    /// The scenario's tick.
    pub tick_ms: u64,
    /// HTTP exchanges with the model host.
    pub model_requests: usize,
    /// HTTP exchanges with the gateway host.
    pub gateway_requests: usize,
    /// Simulated-fs appends, each followed by an fsync.
    pub appends: usize,
    /// Simulated time the run lasts.
    pub sim_ms: u64,
}

/// The byte-less twin (the bench's first baseline): a plain turmoil simulation
/// with the scenario's topology (an `agent` client, `model` and `gateway` hyper servers)
/// doing `work` — as many exchanges (`GET /` answered `ok`), a 512-byte append and fsync per
/// two disk operations, the same tick and simulated time — and nothing else.
pub fn bare_turmoil(seed: u64, work: BareWork) {
    use http_body_util::{BodyExt, Full};
    let mut sim = faultline_sim::twin::twin_sim(seed, work.tick_ms, work.sim_ms);
    for server in ["model", "gateway"] {
        sim.host(server, || async {
            let listener = turmoil::net::TcpListener::bind("0.0.0.0:80").await?;
            loop {
                let (stream, _) = listener.accept().await?;
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(bytes::Bytes::from_static(
                            b"ok",
                        ))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    sim.client("agent", async move {
        let targets = std::iter::repeat_n("model", work.model_requests)
            .chain(std::iter::repeat_n("gateway", work.gateway_requests));
        for target in targets {
            let stream = turmoil::net::TcpStream::connect((target, 80)).await?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            let response = sender
                .send_request(hyper::Request::get("/").header("host", target).body(Full::new(bytes::Bytes::new()))?)
                .await?;
            let _ = response.into_body().collect().await?;
        }
        turmoil::fs::shim::std::fs::create_dir_all("/data")?;
        let mut file = turmoil::fs::shim::std::fs::OpenOptions::new().create(true).append(true).open("/data/log")?;
        for _ in 0..work.appends {
            std::io::Write::write_all(&mut file, &[b'x'; 512])?;
            file.sync_all()?;
        }
        let elapsed = turmoil::sim_elapsed().unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(work.sim_ms).saturating_sub(elapsed)).await;
        Ok(())
    });
    sim.run().expect("bare sim");
}
