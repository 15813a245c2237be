//! The simulated host's set-up: where the agent keeps its files, the model host it calls and
//! the provider file it reads its route from, the network's latency, and the secrets of a run
//! (the provider key and the gateway token, derived from the seed).

use std::collections::BTreeMap;

use faultline_runtime::llm::{from_toml, ProviderConfig, WireFormat};

/// Where the agent keeps its sessions on the simulated disk.
pub(crate) const SESSIONS_DIR: &str = "/data/sessions";
/// The agent's delivery-queue journal.
pub(crate) const OUTBOX_PATH: &str = "/data/outbox.jsonl";
/// The simulated session id.
pub(crate) const SESSION: &str = "sim";
/// The sector a power loss loses whole, in bytes.
pub(crate) const POWER_LOSS_SECTOR_BYTES: u64 = 512;
/// Simulated network latency per hop.
pub(crate) const LATENCY_MS: u64 = 1;

/// The agent's provider configuration file, as the simulated agent reads it.
#[derive(serde::Deserialize)]
pub(crate) struct ProviderFile {
    pub(crate) provider: ProviderConfig,
}

/// The simulated model host's root URL: each wire format's path goes after it, as the one
/// `model-server` answers all three.
pub(crate) const SIM_MODEL_ROOT: &str = "http://model:80";

/// The agent's provider file for `format`: the model host at `root` (`/v1` after it for the
/// OpenAI-compatible preset, whose base URL names the version) plus the scenario's extra lines.
pub(crate) fn provider_file(format: WireFormat, root: &str, extra: &str) -> String {
    let (preset, base_url) = match format {
        WireFormat::Openai => ("openai-compatible", format!("{root}/v1")),
        WireFormat::Anthropic => ("anthropic", root.to_owned()),
        WireFormat::Gemini => ("gemini", root.to_owned()),
    };
    format!(
        "[provider]\npreset = \"{preset}\"\nbase_url = \"{base_url}\"\nmodel = \"sim-model\"\napi_key_env = \"{SIM_KEY_VAR}\"\n{extra}"
    )
}

/// The gateway token of a run (what the delivery queue's receiver authenticates with).
pub fn gateway_token(seed: u64) -> String {
    format!("GATEWAYCANARY{seed:016x}token")
}

/// The variable the simulated agent reads its provider key from.
pub(crate) const SIM_KEY_VAR: &str = "SIM_API_KEY";

/// The provider key of a run: derived from the seed, and shaped like no known key format so
/// that only scrubbing by value (never a pattern) can keep it out of what the agent writes.
pub fn sim_secret(seed: u64) -> String {
    format!("LEAKCANARY{seed:016x}plainKey")
}

/// Which of `keys` (dotted paths) the provider file of `provider` in `format` writes: the
/// liveness bound reads what the file promises, for every run, and the file is the same for
/// every seed of a scenario (parsed once per thread, like [`resolve_route`]).
pub(crate) fn written_keys<const N: usize>(format: WireFormat, provider: &str, keys: [&[&str]; N]) -> [bool; N] {
    type Written = BTreeMap<(WireFormat, String), std::rc::Rc<toml::Table>>;
    thread_local! {
        static WRITTEN: std::cell::RefCell<Written> = const { std::cell::RefCell::new(BTreeMap::new()) };
    }
    let key = (format, provider.to_owned());
    let table = WRITTEN.with_borrow(|files| files.get(&key).cloned()).unwrap_or_else(|| {
        let table = std::rc::Rc::new(
            provider_file(format, SIM_MODEL_ROOT, provider).parse::<toml::Table>().unwrap_or_default(),
        );
        WRITTEN.with_borrow_mut(|files| {
            // A generated workload draws its own files: the memo is a cache, not a record.
            if files.len() >= RESOLVED_ROUTES_MAX {
                files.clear();
            }
            files.insert(key, table.clone());
        });
        table
    });
    keys.map(|path| {
        let Some((last, tables)) = path.split_last() else { return false };
        let mut at = Some(table.as_ref());
        for key in tables {
            at = at.and_then(|t| t.get(*key)).and_then(toml::Value::as_table);
        }
        at.is_some_and(|t| t.contains_key(*last))
    })
}

/// The model route of `provider` (extra `[provider]` lines) in `format`, or why it is invalid. Resolved
/// once per run: every incarnation reads the same file.
///
/// Parsing the TOML was ~5 % of a sweep (the world, the swarm's draw and the oracle each
/// resolve the same text, thousands of runs over a few dozen distinct files), so each thread
/// keeps what it resolved, keyed by the whole text: the same text always resolves the same.
pub(crate) fn resolve_route(
    format: WireFormat,
    root: &str,
    provider: &str,
) -> Result<faultline_runtime::llm::ResolvedProvider, String> {
    type Routes = BTreeMap<(WireFormat, String, String), Result<faultline_runtime::llm::ResolvedProvider, String>>;
    thread_local! {
        static RESOLVED: std::cell::RefCell<Routes> = const { std::cell::RefCell::new(BTreeMap::new()) };
    }
    let key = (format, root.to_owned(), provider.to_owned());
    if let Some(route) = RESOLVED.with_borrow(|routes| routes.get(&key).cloned()) {
        return route;
    }
    let route = from_toml::<ProviderFile>(&provider_file(format, root, provider))
        .and_then(|f| f.provider.resolve("provider"))
        .map_err(|e| e.to_string());
    RESOLVED.with_borrow_mut(|routes| {
        // A generated workload draws its own files: the memo is a cache, not a record.
        if routes.len() >= RESOLVED_ROUTES_MAX {
            routes.clear();
        }
        routes.insert(key, route.clone());
    });
    route
}

/// Provider files a sweep thread keeps resolved (the built-in scenarios have a few dozen).
pub(crate) const RESOLVED_ROUTES_MAX: usize = 256;
