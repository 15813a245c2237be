//! Provider configuration: schema, resolver, retry policy parser, live updates and
//! credentials (FAILURE-CONFIG-RESOLUTION, FAILURE-CREDENTIAL-ROUTE, FAILURE-RETRY-POLICY).

use std::collections::BTreeMap;

use faultline_runtime::event::ErrorCode;
use faultline_runtime::llm::*;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    provider: ProviderConfig,
}

fn resolve(text: &str) -> Result<ResolvedProvider, ConfigError> {
    from_toml::<File>(text)?.provider.resolve("provider")
}

const BASE: &str = r#"
[provider]
preset = "openai-compatible"
base_url = "http://127.0.0.1:8080/v1"
model = "test-model"
"#;

#[test]
fn the_deepseek_preset_fills_its_defaults() {
    let route = resolve("[provider]\npreset = \"deepseek\"\n").unwrap();
    assert_eq!(route.endpoint, Endpoint::parse("https://api.deepseek.com").unwrap());
    assert!(route.endpoint.tls);
    assert_eq!(route.model, "deepseek-chat");
    assert_eq!(route.api_key_env.as_deref(), Some("DEEPSEEK_API_KEY"));
    assert_eq!(route.idle_timeout.as_millis(), 300_000);
    assert_eq!(route.retry, RetryPolicy::default());
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    let error = resolve(&format!("{BASE}surprise = 1\n")).unwrap_err();
    assert_eq!(error.path, "provider.surprise");
    let error =
        resolve(&format!("{BASE}[provider.retry_policy.backoff]\ninitial_delay_ms = 5\nfactor = 2\n")).unwrap_err();
    assert_eq!(error.path, "provider.retry_policy.backoff.factor");
    assert_eq!(error.to_string(), "provider.retry_policy.backoff.factor: unknown key");
}

#[test]
fn the_resolver_validates_every_field() {
    for (extra, path) in [
        ("[provider.retry_policy]\nretryable_codes = []\n", "provider.retry_policy.retryable_codes"),
        (
            "[provider.retry_policy]\nretryable_codes = [\"SERVER\", \"SERVER\"]\n",
            "provider.retry_policy.retryable_codes",
        ),
        ("[provider.retry_policy]\nretryable_codes = [\"NOPE\"]\n", "provider.retry_policy.retryable_codes"),
        ("[provider.retry_policy]\nmode = \"sometimes\"\n", "provider.retry_policy.mode"),
        ("[provider.retry_policy]\nmode = \"always\"\nmax_retries = 3\n", "provider.retry_policy"),
        ("[provider.retry_policy.backoff]\ninitial_delay_ms = 0\n", "provider.retry_policy.backoff"),
        ("[provider.retry_policy.backoff]\ninitial_delay_ms = 20000\n", "provider.retry_policy.backoff"),
        ("[provider.retry_policy.backoff]\nmax_delay_ms = 2147483648\n", "provider.retry_policy.backoff"),
        ("[provider.retry_policy.backoff]\njitter_ratio = 1.5\n", "provider.retry_policy.backoff.jitter_ratio"),
    ] {
        let error = resolve(&format!("{BASE}{extra}")).unwrap_err();
        assert_eq!(error.path, path, "{extra}: {error}");
    }
    let no_model = "[provider]\npreset = \"openai-compatible\"\nbase_url = \"http://x:1\"\n";
    assert_eq!(resolve(no_model).unwrap_err().path, "provider.model");
    let bad_url = "[provider]\npreset = \"openai-compatible\"\nbase_url = \"ftp://x\"\nmodel = \"m\"\n";
    assert_eq!(resolve(bad_url).unwrap_err().path, "provider.base_url");
    let bad_timeout = format!("{BASE}idle_timeout_ms = 0\n");
    assert_eq!(resolve(&bad_timeout).unwrap_err().path, "provider.idle_timeout_ms");
}

#[test]
fn the_policy_key_is_canonical() {
    let route = resolve(&format!(
        "{BASE}[provider.retry_policy]\nretryable_codes = [\"SERVER\", \"RATE_LIMIT\"]\n[provider.retry_policy.backoff]\njitter_ratio = 0\n"
    ))
    .unwrap();
    assert_eq!(route.retry.policy_key(), serde_json::json!(["normal", 2, ["RATE_LIMIT", "SERVER"], 500, 10000, 0]));
    let always = resolve(&format!("{BASE}[provider.retry_policy]\nmode = \"always\"\n")).unwrap();
    assert_eq!(always.retry.policy_key(), serde_json::json!(["always", 500, 10000, 0.1]));
    assert_eq!(always.retry.mode(), "always");
}

#[test]
fn an_invalid_live_update_keeps_the_whole_last_good_snapshot() {
    let first = from_toml::<File>(BASE).unwrap().provider;
    let live = LiveProvider::new(first.resolve("provider").unwrap());
    let in_flight = live.snapshot();

    let invalid = from_toml::<File>(&BASE.replace("test-model", "")).unwrap().provider;
    assert!(live.update(&invalid, "provider").is_err());
    assert_eq!(live.snapshot(), in_flight, "nothing of the invalid update leaked");

    let valid = from_toml::<File>(&BASE.replace("test-model", "next-model")).unwrap().provider;
    live.update(&valid, "provider").unwrap();
    assert_eq!(live.snapshot().model, "next-model");
    assert_eq!(in_flight.model, "test-model", "a snapshot taken for a call never changes");
}

#[test]
fn credentials_resolve_lazily_and_never_print() {
    let route = resolve(&format!("{BASE}api_key_env = \"MY_KEY\"\n")).unwrap();
    let empty = StaticCredentials::default();
    let missing = resolve_credential(&route, &empty).unwrap_err();
    assert_eq!(missing.code, ErrorCode::MissingCredential);
    assert!(missing.message.contains("MY_KEY"));

    let bad = StaticCredentials(BTreeMap::from([("MY_KEY".to_owned(), "sk-abc def".to_owned())]));
    let invalid = resolve_credential(&route, &bad).unwrap_err();
    assert_eq!(invalid.code, ErrorCode::InvalidCredential);
    assert!(!invalid.message.contains("sk-abc"));

    let good = StaticCredentials(BTreeMap::from([("MY_KEY".to_owned(), "sk-abc".to_owned())]));
    let secret = resolve_credential(&route, &good).unwrap().unwrap();
    assert_eq!(secret.expose(), "sk-abc");
    assert_eq!(format!("{secret:?} {secret}"), "Secret(***) ***");
}

/// A config printed for debugging (a panic message, a `tracing` field) never carries a
/// proxy's credentials: the user and password are hidden, the rest stays for diagnosis.
#[test]
fn debug_output_hides_proxy_credentials() {
    let text = format!("{BASE}proxy = \"http://alice:s3cret-pw@proxy.internal:3128\"\n");
    let written = from_toml::<File>(&text).unwrap().provider;
    let resolved = written.resolve("provider").unwrap();
    for printed in [format!("{written:?}"), format!("{resolved:?}"), format!("{resolved:#?}")] {
        assert!(!printed.contains("s3cret-pw") && !printed.contains("alice"), "{printed}");
        assert!(printed.contains("http://***@proxy.internal:3128"), "{printed}");
    }
    let token_as_user = format!("{BASE}proxy = \"http://tok-123456@proxy.internal:3128\"\n");
    let printed = format!("{:?}", resolve(&token_as_user).unwrap());
    assert!(!printed.contains("tok-123456"), "{printed}");
}
