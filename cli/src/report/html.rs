//! Runs and sweeps as pictures: one self-contained, offline HTML file (inline CSS, inline
//! SVG, a few lines of inline script; nothing fetched) per run or sweep.
//!
//! A run's timeline has a lane per agent incarnation, the model server, the gateway, the
//! disk and the injected faults; every item sits at its simulated time and carries its
//! details (hover shows them, a click pins them). Beside it, the recovered transcript, with
//! the records crash repair wrote marked and, for a failing run, the records a violation
//! names highlighted.
//!
//! Everything shown was already checked for secrets by the oracle (trace lines, records);
//! everything is HTML-escaped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use faultline_runtime::event::{Event, Record};

use super::markup::escape;
use faultline_sim::sweep::SweepSummary;
use faultline_sim::RunResult;

/// Width of the time axis, in SVG units.
const AXIS_WIDTH: f64 = 900.0;
/// Left margin for lane names.
const LANE_LABEL_WIDTH: f64 = 110.0;
/// Height of one lane.
const LANE_HEIGHT: f64 = 34.0;
/// Most items drawn per lane (a runaway run stays a readable file; the rest are counted).
const LANE_ITEMS_MAX: usize = 2_000;

/// What one timeline item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Record,
    Start,
    Error,
    Repair,
    Crash,
    Fault,
    Heal,
    Exchange,
    Receipt,
    Durable,
    Violation,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::Record => "record",
            Kind::Start => "start",
            Kind::Error => "error",
            Kind::Repair => "repair",
            Kind::Crash => "crash",
            Kind::Fault => "fault",
            Kind::Heal => "heal",
            Kind::Exchange => "exchange",
            Kind::Receipt => "receipt",
            Kind::Durable => "durable",
            Kind::Violation => "violation",
        }
    }
}

#[derive(Debug, Clone)]
struct Item {
    ms: u64,
    lane: String,
    kind: Kind,
    label: String,
    /// Further items of the same burst folded into this one.
    more: usize,
}

/// A partition window on the faults lane.
#[derive(Debug, Clone)]
struct Window {
    from_ms: u64,
    to_ms: Option<u64>,
    label: String,
}

/// Splits `"    270 agent#2 13 turn/start"` into (270, "agent#2 13 turn/start").
fn split_line(line: &str) -> Option<(u64, &str)> {
    let line = line.trim_start();
    let (ms, rest) = line.split_once(' ')?;
    Some((ms.parse().ok()?, rest))
}

/// The lane and kind of one trace line (`None`: not drawn, e.g. the swarm's description).
fn classify(rest: &str) -> Option<(String, Kind)> {
    if let Some(after) = rest.strip_prefix("agent#") {
        let (life, what) = after.split_once(' ').unwrap_or((after, ""));
        let lane = format!("agent#{life}");
        let kind = if what == "starts" {
            Kind::Start
        } else if what.starts_with("stopped") || what.starts_with("refused") {
            Kind::Error
        } else if what.starts_with("outbox:") {
            Kind::Repair
        } else if what.contains("llm/retry") {
            Kind::Fault
        } else {
            Kind::Record
        };
        return Some((lane, kind));
    }
    if rest.starts_with("gateway received") {
        return Some(("gateway".into(), Kind::Receipt));
    }
    if rest.ends_with("(SIGKILL)") {
        let lane = if rest.contains("filesystem op") { "disk" } else { "faults" };
        return Some((lane.into(), Kind::Crash));
    }
    if rest.starts_with("bit rot") || rest.starts_with("the crash left a power-loss hole") {
        return Some(("disk".into(), Kind::Fault));
    }
    if rest.starts_with("fault window over") {
        return Some(("faults".into(), Kind::Heal));
    }
    if rest == "cancel" {
        return Some(("user".into(), Kind::Fault));
    }
    if rest.starts_with("simulation error") {
        return Some(("faults".into(), Kind::Error));
    }
    None
}

/// The seqs a violation's words name (`seq 12`, `turn 3` is not a seq).
fn named_seqs(text: &str) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
    for pair in words.windows(2) {
        if pair[0] == "seq" {
            if let Ok(seq) = pair[1].parse() {
                out.insert(seq);
            }
        }
    }
    out
}

/// Seqs the agent incarnations reported writing (what is left in the transcript was written
/// by crash repair, outside any turn).
fn traced_seqs(trace: &[String]) -> BTreeSet<u64> {
    trace
        .iter()
        .filter_map(|l| split_line(l))
        .filter_map(|(_, rest)| rest.strip_prefix("agent#"))
        .filter_map(|rest| rest.split(' ').nth(1))
        .filter_map(|seq| seq.parse().ok())
        .collect()
}

/// Runs of records crash repair wrote, each placed at the start of the incarnation that
/// wrote it: the first one to start after the last record traced before the run.
fn repairs(result: &RunResult) -> Vec<(u64, String, u64, u64)> {
    let traced = traced_seqs(&result.trace);
    // (trace index, ms, lane) of every start, and the trace index of every traced seq.
    let mut starts: Vec<(usize, u64, String)> = Vec::new();
    let mut traced_at: BTreeMap<u64, usize> = BTreeMap::new();
    for (index, line) in result.trace.iter().enumerate() {
        let Some((ms, rest)) = split_line(line) else { continue };
        let Some(after) = rest.strip_prefix("agent#") else { continue };
        let (life, what) = after.split_once(' ').unwrap_or((after, ""));
        if what == "starts" {
            starts.push((index, ms, format!("agent#{life}")));
        } else if let Some(seq) = what.split(' ').next().and_then(|s| s.parse().ok()) {
            traced_at.entry(seq).or_insert(index);
        }
    }
    let mut out: Vec<(u64, String, u64, u64)> = Vec::new();
    for record in &result.transcript {
        if traced.contains(&record.seq) {
            continue;
        }
        if let Some(run) = out.last_mut().filter(|r| r.3 + 1 == record.seq) {
            run.3 = record.seq;
            continue;
        }
        let before = traced_at.range(..record.seq).next_back().map_or(0, |(_, index)| *index);
        let start = starts.iter().find(|(index, _, _)| *index > before).or(starts.last());
        let (ms, lane) = start.map_or((0, "agent#1".to_owned()), |(_, ms, lane)| (*ms, lane.clone()));
        out.push((ms, lane, record.seq, record.seq));
    }
    out
}

fn summary(record: &Record) -> String {
    match &record.event {
        Event::TurnEnd(end) => format!("turn {} {}", end.turn, end.reason.kind()),
        Event::ToolCall(call) => format!("{} {}", call.name, call.call_id),
        Event::ToolResult(result) => match &result.error {
            Some(error) => format!("{} {}", result.call_id, error.code),
            None => format!("{} ok", result.call_id),
        },
        Event::LlmRetry(retry) => format!("retry {} in {} ms: {}", retry.retry, retry.delay_ms, retry.failure.code),
        _ => String::new(),
    }
}

/// The timeline and transcript of one run, as an HTML fragment (no page chrome).
pub fn timeline_fragment(result: &RunResult) -> String {
    let (items, windows, swarm) = gather(result);
    let (svg, left_out) = draw(result, &items, &windows);
    let mut out = String::new();
    let verdict = if result.passed() { "PASS" } else { "FAIL" };
    let _ = write!(
        out,
        r#"<section class="run" data-verdict="{verdict}"><h2>{verdict} {} seed {}</h2><p class="meta">{} ms simulated · trace {} · replay: <code>faultline run {} --seed {}</code></p>"#,
        escape(&result.scenario),
        result.seed,
        result.sim_ms,
        escape(&result.trace_hash),
        escape(&result.scenario),
        result.seed,
    );
    if let Some(swarm) = swarm {
        let _ = write!(out, r#"<p class="meta">swarm: {}</p>"#, escape(&swarm));
    }
    for violation in &result.violations {
        let _ = write!(
            out,
            r#"<p class="violated" data-invariant="{inv}">violated <b>{inv}</b> at {} ms: {}</p>"#,
            violation.at_ms,
            escape(&violation.detail),
            inv = escape(violation.invariant.name()),
        );
    }
    if let Some(refused) = &result.refused {
        let _ = write!(out, r#"<p class="violated">recovery refused the files: {}</p>"#, escape(refused));
    }
    if left_out > 0 {
        let _ = write!(out, r#"<p class="meta">{left_out} items not drawn (lane limit {LANE_ITEMS_MAX})</p>"#);
    }
    let _ = write!(out, r#"<div class="panes"><div class="pane-timeline">{svg}</div><div class="pane-transcript">"#);
    out.push_str(&transcript_table(result));
    out.push_str("</table></div></div></section>");
    out
}

/// What the timeline shows, from the trace, the model server's exchanges, repairs, durable
/// batches and violations: the items, the partition windows, and the swarm's description.
fn gather(result: &RunResult) -> (Vec<Item>, Vec<Window>, Option<String>) {
    let mut items: Vec<Item> = Vec::new();
    let mut windows: Vec<Window> = Vec::new();
    let mut swarm = None;
    for line in &result.trace {
        let Some((ms, rest)) = split_line(line) else { continue };
        if let Some(pair) = rest.strip_prefix("partition ") {
            windows.push(Window { from_ms: ms, to_ms: None, label: format!("partition {pair}") });
            continue;
        }
        if let Some(pair) = rest.strip_prefix("heal ") {
            if let Some(w) = windows.iter_mut().rev().find(|w| w.to_ms.is_none() && w.label.ends_with(pair)) {
                w.to_ms = Some(ms);
            }
            continue;
        }
        if let Some(described) = rest.strip_prefix("swarm: ") {
            swarm = Some(described.to_owned());
            continue;
        }
        let Some((lane, kind)) = classify(rest) else { continue };
        // Chunks of one attempt land at the same ms: one item per burst keeps the lane readable.
        let is_chunk = rest.contains("assistant/chunk");
        if let Some(last) =
            items.last_mut().filter(|l| is_chunk && l.lane == lane && l.ms == ms && l.label.contains("assistant/chunk"))
        {
            last.more += 1;
            continue;
        }
        items.push(Item { ms, lane, kind, label: rest.to_owned(), more: 0 });
    }
    for exchange in &result.model_exchanges {
        let failed = !exchange.served.starts_with("stream of") || exchange.served.contains("no [DONE]");
        items.push(Item {
            ms: exchange.at_ms,
            lane: "model".into(),
            kind: if failed { Kind::Fault } else { Kind::Exchange },
            label: format!("request #{}: {}", exchange.n, exchange.served),
            more: 0,
        });
    }
    for (ms, lane, first, last) in repairs(result) {
        let label = format!("crash repair wrote seq {first}..={last} (the closers of the interrupted turn)");
        items.push(Item { ms, lane, kind: Kind::Repair, label, more: 0 });
    }
    for &(ms, first, last) in &result.durable_batches {
        let label =
            if first == last { format!("durable: seq {first}") } else { format!("durable: seq {first}..={last}") };
        items.push(Item { ms, lane: "disk".into(), kind: Kind::Durable, label, more: 0 });
    }
    for violation in &result.violations {
        items.push(Item {
            ms: violation.at_ms,
            lane: "faults".into(),
            kind: Kind::Violation,
            label: format!("VIOLATED {}: {}", violation.invariant, violation.detail),
            more: 0,
        });
    }

    (items, windows, swarm)
}

/// The SVG timeline: one lane per incarnation and per host, items capped per lane (how many
/// were left out is returned with it).
fn draw(result: &RunResult, items: &[Item], windows: &[Window]) -> (String, usize) {
    let lives: BTreeSet<u64> =
        items.iter().filter_map(|i| i.lane.strip_prefix("agent#").and_then(|n| n.parse().ok())).collect();
    let mut lanes: Vec<String> = vec!["user".into()];
    lanes.extend(lives.iter().map(|n| format!("agent#{n}")));
    lanes.extend(["model", "gateway", "disk", "faults"].map(String::from));
    let end_ms = result.sim_ms.max(items.iter().map(|i| i.ms).max().unwrap_or(0)).max(1);
    let x = |ms: u64| LANE_LABEL_WIDTH + AXIS_WIDTH * ms as f64 / end_ms as f64;
    let height = LANE_HEIGHT * lanes.len() as f64 + 30.0;
    let width = LANE_LABEL_WIDTH + AXIS_WIDTH + 50.0;

    let mut svg = String::new();
    let _ = write!(svg, r#"<svg class="timeline" viewBox="0 0 {width} {height}" width="{width}" height="{height}">"#);
    draw_lanes(&mut svg, &lanes, width);
    let faults_row = lanes.iter().position(|l| l == "faults").expect("faults lane");
    for window in windows {
        let to = window.to_ms.unwrap_or(end_ms);
        let y = LANE_HEIGHT * faults_row as f64 + 3.0;
        let _ = write!(
            svg,
            r#"<rect class="mark window" x="{x0}" y="{y}" width="{w}" height="{h}" data-detail="{d}"><title>{d}</title></rect>"#,
            x0 = x(window.from_ms),
            w = (x(to) - x(window.from_ms)).max(2.0),
            h = LANE_HEIGHT - 6.0,
            d = escape(&format!("{} from {} ms to {} ms", window.label, window.from_ms, to)),
        );
    }
    let mut per_lane: BTreeMap<&str, usize> = BTreeMap::new();
    let mut stack: BTreeMap<(String, u64), usize> = BTreeMap::new();
    let mut left_out = 0usize;
    for item in items {
        let drawn = per_lane.entry(item.lane.as_str()).or_default();
        if *drawn >= LANE_ITEMS_MAX {
            left_out += 1;
            continue;
        }
        *drawn += 1;
        let row = lanes.iter().position(|l| *l == item.lane).expect("every lane is listed");
        let level = stack.entry((item.lane.clone(), item.ms)).or_default();
        let y = LANE_HEIGHT * row as f64 + 8.0 + (*level % 3) as f64 * 8.0;
        *level += 1;
        draw_mark(&mut svg, item, x(item.ms), y);
    }
    let axis_y = LANE_HEIGHT * lanes.len() as f64 + 18.0;
    for tick in 0..=10u64 {
        let ms = end_ms * tick / 10;
        let _ = write!(svg, r#"<text class="tick" x="{}" y="{axis_y}">{ms} ms</text>"#, x(ms) - 10.0);
    }
    svg.push_str("</svg>");

    (svg, left_out)
}

/// One row per lane: its background and its name.
fn draw_lanes(svg: &mut String, lanes: &[String], width: f64) {
    for (row, lane) in lanes.iter().enumerate() {
        let y = LANE_HEIGHT * row as f64;
        let _ = write!(
            svg,
            r#"<g class="lane" data-lane="{lane}"><rect class="lane-bg" x="0" y="{y}" width="{width}" height="{LANE_HEIGHT}"/><text class="lane-name" x="6" y="{ty}">{lane}</text></g>"#,
            lane = escape(lane),
            ty = y + LANE_HEIGHT / 2.0 + 4.0,
        );
    }
}

/// One item's mark at (`cx`, `y`): a cross for a crash or a violation, a dot otherwise, its
/// detail as the tooltip.
fn draw_mark(svg: &mut String, item: &Item, cx: f64, y: f64) {
    let more = if item.more > 0 { format!(" (+{} more)", item.more) } else { String::new() };
    let detail = escape(&format!("{} ms · {} · {}{more}", item.ms, item.lane, item.label));
    let class = item.kind.class();
    match item.kind {
        Kind::Crash | Kind::Violation => {
            let _ = write!(
                svg,
                r#"<path class="mark {class}" d="M{a} {b} L{c} {d} M{c} {b} L{a} {d}" data-detail="{detail}"><title>{detail}</title></path>"#,
                a = cx - 6.0,
                b = y - 2.0,
                c = cx + 6.0,
                d = y + 10.0,
            );
        }
        _ => {
            let _ = write!(
                svg,
                r#"<circle class="mark {class}" cx="{cx}" cy="{cy}" r="4" data-detail="{detail}"><title>{detail}</title></circle>"#,
                cy = y + 4.0,
            );
        }
    }
}

/// The recovered transcript as a table: records repair wrote and records a violation names
/// marked.
fn transcript_table(result: &RunResult) -> String {
    let repaired: BTreeSet<u64> = {
        let traced = traced_seqs(&result.trace);
        result.transcript.iter().map(|r| r.seq).filter(|s| !traced.contains(s)).collect()
    };
    let named: BTreeSet<u64> = result.violations.iter().flat_map(|v| named_seqs(&v.detail)).collect();
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<table class="transcript"><caption>recovered transcript ({} records; <span class="repair">written by repair</span>, <span class="named">named by a violation</span>)</caption><tr><th>seq</th><th>type</th><th>what</th></tr>"#,
        result.transcript.len()
    );
    for record in &result.transcript {
        let mut classes = Vec::new();
        if repaired.contains(&record.seq) {
            classes.push("repair");
        }
        if named.contains(&record.seq) {
            classes.push("named");
        }
        let _ = write!(
            out,
            r#"<tr class="{}" data-seq="{}" data-detail="{}"><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            classes.join(" "),
            record.seq,
            escape(&record.encode()),
            record.seq,
            escape(record.event.type_name()),
            escape(&summary(record)),
        );
    }
    out
}

const STYLE: &str = r#"
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #1d1d1f; }
h1 { font-size: 18px; } h2 { font-size: 15px; margin: 18px 0 4px; }
code { background: #f2f2f2; padding: 0 3px; }
.meta { color: #555; margin: 2px 0; }
.violated { color: #a00; font-weight: 600; }
.panes { display: flex; gap: 16px; align-items: flex-start; }
.pane-transcript { max-height: 520px; overflow: auto; flex: 1; min-width: 320px; }
.lane-bg { fill: #fafafa; stroke: #e4e4e4; }
.lane-name { font-size: 12px; fill: #333; }
.tick { font-size: 10px; fill: #777; }
.mark { cursor: pointer; }
.record { fill: #6b8fd6; } .start { fill: #2a9d3f; } .error { fill: #c0392b; }
.repair { fill: #e67e22; } .exchange { fill: #7d5ba6; } .receipt { fill: #16a085; }
.durable { fill: #95a5a6; } .fault { fill: #e74c3c; } .heal { fill: #27ae60; }
.crash { stroke: #c0392b; stroke-width: 3; fill: none; }
.violation { stroke: #ff00aa; stroke-width: 4; fill: none; }
.window { fill: rgba(231, 76, 60, 0.18); stroke: #e74c3c; }
table { border-collapse: collapse; }
td, th { border-bottom: 1px solid #eee; padding: 1px 6px; text-align: left; font-size: 12px; }
tr.repair td { background: #fdebd0; } tr.named td { background: #ffd6f0; font-weight: 600; }
span.repair { background: #fdebd0; } span.named { background: #ffd6f0; }
.grid td.zero { background: #f9d6d5; } .grid td.hit { background: #d5f5e3; }
#detail { position: sticky; top: 0; background: #fffbe6; border: 1px solid #e6d98c; padding: 6px;
          min-height: 1.4em; white-space: pre-wrap; word-break: break-all; z-index: 1; }
"#;

/// Hover shows an item's details in the panel; a click pins them until the next click.
const SCRIPT: &str = r#"
(function () {
  var panel = document.getElementById('detail');
  var pinned = false;
  document.addEventListener('mouseover', function (e) {
    var el = e.target.closest('[data-detail]');
    if (el && !pinned) { panel.textContent = el.getAttribute('data-detail'); }
  });
  document.addEventListener('click', function (e) {
    var el = e.target.closest('[data-detail]');
    pinned = !!el;
    if (el) { panel.textContent = el.getAttribute('data-detail'); }
  });
  document.body.setAttribute('data-ready', 'yes');
})();
"#;

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1><div id=\"detail\">hover or click an item for its details</div>{body}<script>{SCRIPT}</script></body></html>\n",
        escape(title),
        escape(title),
    )
}

/// One run's timeline as a self-contained page.
pub fn run_page(result: &RunResult) -> String {
    page(&format!("faultline: {} seed {}", result.scenario, result.seed), &timeline_fragment(result))
}

/// Runs, failures and simulated time per `what` (a scenario, a wire format).
fn totals_table(class: &str, what: &str, totals: &BTreeMap<String, faultline_sim::sweep::ScenarioSummary>) -> String {
    let mut body = format!(
        r#"<h2>{class}</h2><table class="{class}"><tr><th>{what}</th><th>runs</th><th>failures</th><th>sim time s</th></tr>"#
    );
    for (name, s) in totals {
        let _ = write!(
            body,
            r#"<tr class="{}"><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td></tr>"#,
            if s.failures > 0 { "named" } else { "" },
            escape(name),
            s.runs,
            s.failures,
            s.sim_ms as f64 / 1000.0
        );
    }
    body.push_str("</table>");
    body
}

/// A sweep's summary page: per-scenario totals, the coverage grid, every failure with its
/// replay command, and the timeline of each scenario's first failing seed (`timelines`).
pub fn sweep_page(summary: &SweepSummary, timelines: &[RunResult]) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        r#"<p class="meta" data-runs="{}" data-failures="{}">{} runs, {} failures ({} no-liveness), seeds {}, shard {}</p>"#,
        summary.runs,
        summary.failures.len(),
        summary.runs,
        summary.failures.len(),
        summary.liveness_only_failures,
        escape(&summary.seeds),
        escape(&summary.shard),
    );
    body.push_str(&totals_table("scenarios", "scenario", &summary.scenarios));
    body.push_str(&totals_table("formats", "wire format", &summary.formats));
    body.push_str("<h2>coverage</h2>");
    let points: Vec<String> = faultline_runtime::seams::CRASH_POINTS.iter().map(|p| p.to_string()).collect();
    let sometimes: Vec<String> = faultline_sim::SOMETIMES.iter().map(|s| (*s).to_owned()).collect();
    body.push_str(&grid("crash points reached (hits)", &points, &summary.crash_point_hits));
    body.push_str(&grid("fault families fired (runs)", &[], &summary.fault_families_fired));
    body.push_str(&grid("sometimes conditions reached (runs)", &sometimes, &summary.sometimes_reached));
    for site in &summary.never_fired {
        let _ = write!(body, r#"<p class="violated">COVERAGE: {} never fired</p>"#, escape(site));
    }
    body.push_str(&failures_section(summary));
    for result in timelines {
        let _ = write!(
            body,
            r#"<details open><summary>timeline of {} seed {}</summary>{}</details>"#,
            escape(&result.scenario),
            result.seed,
            timeline_fragment(result)
        );
    }
    page("faultline sweep", &body)
}

/// A coverage grid: every declared site and every site hit, with its count.
fn grid(title: &str, declared: &[String], hits: &BTreeMap<String, u32>) -> String {
    let mut names: BTreeSet<String> = declared.iter().cloned().collect();
    names.extend(hits.keys().cloned());
    let mut out = format!(r#"<table class="grid"><caption>{}</caption><tr>"#, escape(title));
    for (i, name) in names.iter().enumerate() {
        let n = hits.get(name).copied().unwrap_or(0);
        let _ = write!(
            out,
            r#"<td class="{}" data-detail="{}">{}<br><b>{n}</b></td>"#,
            if n == 0 { "zero" } else { "hit" },
            escape(&format!("{name}: {n}")),
            escape(name)
        );
        if i % 6 == 5 {
            out.push_str("</tr><tr>");
        }
    }
    out.push_str("</tr></table>");
    out
}

/// The sweep's failures, each with its replay command and what it broke.
fn failures_section(summary: &SweepSummary) -> String {
    let mut body = String::from("<h2>failures</h2>");
    if summary.failures.is_empty() {
        body.push_str(r#"<p class="meta">none</p>"#);
    }
    for failure in &summary.failures {
        let _ = write!(
            body,
            r#"<p class="failure">FAIL {} seed {}: replay with <code>{}</code> — {}</p>"#,
            escape(&failure.scenario),
            failure.seed,
            escape(&failure.replay),
            escape(
                &failure
                    .violations
                    .iter()
                    .map(|v| format!("{}: {}", v.invariant, v.detail))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        );
    }
    body
}
