//! FAILURE-SECRETS: the scrubber replaces secrets by value, whatever their shape.

use faultline_runtime::event::*;
use faultline_runtime::{secrets::Scrubber, secrets::SECRET_BYTES_MIN};

#[test]
fn a_registered_value_is_scrubbed_raw_in_its_bearer_form_and_json_escaped() {
    let secrets = Scrubber::new();
    assert!(secrets.register("LEAKCANARY2plainKey"));
    assert!(secrets.register("we\"ird\\key-123"));
    let text = "Your api key: LEAKCANARY2plainKey; Authorization: Bearer LEAKCANARY2plainKey";
    assert_eq!(secrets.scrub(text), "Your api key: ***; Authorization: Bearer ***");
    // A key with JSON-special characters, quoted inside a JSON error body.
    let body = serde_json::json!({"error": {"message": "bad we\"ird\\key-123"}}).to_string();
    assert!(!secrets.scrub(&body).contains("ird"), "{}", secrets.scrub(&body));
}

#[test]
fn a_text_leaks_exactly_when_it_holds_a_registered_value() {
    let secrets = Scrubber::new();
    assert!(!secrets.leaks("LEAKCANARY2plainKey"), "nothing registered yet");
    secrets.register("LEAKCANARY2plainKey");
    secrets.register("we\"ird\\key-123");
    assert!(secrets.leaks("a LEAKCANARY2plainKey b"));
    assert!(secrets.leaks(r#"{"k":"we\"ird\\key-123"}"#), "its JSON-escaped form");
    assert!(!secrets.leaks("LEAKCANARY2plain"), "a prefix is not the value");
    assert!(!secrets.leaks(""));
    // Scrubbing what does not leak changes nothing but the pattern net's matches.
    assert_eq!(secrets.scrub("LEAKCANARY2plain and more"), "LEAKCANARY2plain and more");
}

#[test]
fn a_secret_is_scrubbed_from_parsed_json_as_a_value_and_as_a_member_name() {
    let secrets = Scrubber::new();
    secrets.register("LEAKCANARY2plainKey");
    // As a model could write tool arguments: the key escaped (hidden from a raw search) as a
    // member name, and as a value deep inside.
    let mut arguments: serde_json::Value = serde_json::from_str(
        r#"{"\u004cEAKCANARY2plainKey": {"note": ["LEAKCANARY2plainKey", 1]}, "to": "ops", "x-LEAKCANARY2plainKey-y": true}"#,
    )
    .unwrap();
    secrets.scrub_json(&mut arguments);
    let text = arguments.to_string();
    assert!(!text.contains("LEAKCANARY"), "{text}");
    assert_eq!(arguments, serde_json::json!({"***": {"note": ["***", 1]}, "to": "ops", "x-***-y": true}));
}

#[test]
fn a_value_too_short_to_be_a_key_is_not_registered() {
    let secrets = Scrubber::new();
    assert!(!secrets.register(&"k".repeat(SECRET_BYTES_MIN - 1)));
    assert_eq!(secrets.scrub("kkkkkkk"), "kkkkkkk");
}

#[test]
fn the_pattern_net_still_catches_keys_the_process_never_held() {
    let secrets = Scrubber::new();
    assert_eq!(secrets.scrub("Authorization: Bearer abc.def-123"), "Authorization: Bearer ***");
}

#[test]
fn every_string_inside_an_event_is_scrubbed_and_the_record_still_decodes() {
    let secrets = Scrubber::new();
    secrets.register("LEAKCANARY2plainKey");
    let event = Event::ToolResult(ToolResult {
        turn: 1,
        step: 1,
        call_id: "c1".into(),
        content: vec![ContentBlock::Text { text: "env: KEY=LEAKCANARY2plainKey".into() }],
        is_error: false,
        error: None,
    });
    let scrubbed = secrets.scrub_event(event);
    let line = Record::new(0, 0, scrubbed).encode();
    assert!(line.contains("env: KEY=***") && !line.contains("LEAKCANARY"), "{line}");
}

#[test]
fn a_secret_anywhere_in_an_event_is_found_without_encoding_it_and_a_clean_event_is_kept_as_is() {
    let secrets = Scrubber::new();
    secrets.register("LEAKCANARY2plainKey");
    secrets.register("we\"ird\\key-123");
    let message = |blocks: Vec<ContentBlock>| {
        Event::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            message: Message { role: Role::Assistant, content: blocks },
            usage: None,
        })
    };
    // Deep in a later block, in a tool call's arguments, needing JSON escapes.
    let leaky = message(vec![
        ContentBlock::Text { text: "clean".into() },
        ContentBlock::tool_call("c1", "post", r#"{"token":"we\"ird\\key-123","again":"LEAKCANARY2plainKey"}"#),
    ]);
    let line = Record::new(0, 0, secrets.scrub_event(leaky)).encode();
    assert!(!line.contains("LEAKCANARY") && !line.contains("ird"), "{line}");
    // Nothing to scrub: the very event comes back.
    let clean = message(vec![ContentBlock::Text { text: "y".repeat(300_000) }]);
    assert_eq!(secrets.scrub_event(clean.clone()), clean);
}

#[test]
fn a_secret_split_across_deltas_is_held_back_until_it_can_be_scrubbed() {
    let secrets = Scrubber::new();
    secrets.register("LEAKCANARY2plainKey");
    let mut stream = faultline_runtime::secrets::StreamScrubber::default();
    let key = (0, 0);
    let mut out = String::new();
    for delta in ["Your key: LEAK", "CANARY2pla", "inKey. And L", "ater: LEAKCANARY2plainKey!"] {
        let released = stream.push(&secrets, key, delta);
        assert!(!released.contains("LEAK") || released.contains("LEAKY"), "released {released:?}");
        out.push_str(&released);
    }
    out.push_str(&stream.flush(key).unwrap_or_default());
    assert_eq!(out, "Your key: ***. And Later: ***!");
    // A tail that only looked like the start of a secret is released when the block ends.
    assert_eq!(stream.push(&secrets, (0, 1), "ends with LEA"), "ends with ");
    assert_eq!(stream.flush((0, 1)).as_deref(), Some("LEA"));
}

/// A model can write a key into a tool call's arguments with a letter as a JSON `\u` escape:
/// the same key to the tool that parses them, invisible to a search of the raw text. The
/// argument stream writes such escapes as their characters first, and holds back an escape a
/// delta ends inside.
#[test]
fn a_key_with_an_escaped_letter_in_tool_arguments_is_scrubbed_even_split_across_deltas() {
    let secrets = Scrubber::new();
    secrets.register("LEAKCANARY2plainKey");
    let whole = |deltas: &[&str]| {
        let mut stream = faultline_runtime::secrets::StreamScrubber::default();
        let mut out = String::new();
        for delta in deltas {
            let released = stream.push_json(&secrets, (2, 0), delta);
            assert!(!released.contains("CANARY"), "released {released:?} of {deltas:?}");
            out.push_str(&released);
        }
        out + &stream.flush((2, 0)).unwrap_or_default()
    };
    let escaped = r#"{"to":"ops","\u004cEAKCANARY2plainKey":"x","t":"\u004c\u0045AKCANARY2plainKey"}"#;
    assert_eq!(whole(&[escaped]), r#"{"to":"ops","***":"x","t":"***"}"#);
    // Cut inside the escape, at every byte of it.
    for cut in r#"{"k":""#.len()..r#"{"k":"\u004c"#.len() + 1 {
        let text = r#"{"k":"\u004cEAKCANARY2plainKey"}"#;
        assert_eq!(whole(&[&text[..cut], &text[cut..]]), r#"{"k":"***"}"#, "cut at {cut}");
    }
    // What JSON must keep escaped stays escaped; an escaped backslash is not an escape.
    let kept = r#"{"q":"\u0022","b":"\u005c","c":"\u0001","e":"\u00e9","s":"\\u004c","x":"\u00zz"}"#;
    assert_eq!(whole(&[kept]), kept);
    // A stream that ends inside an escape releases what it holds when the block ends; one
    // that ends just after a complete escape releases it at once, as it came.
    assert_eq!(whole(&[r#"{"k":"ab\u00"#]), r#"{"k":"ab\u00"#);
    assert_eq!(whole(&[r#"{"k":"ab\u0041"#]), r#"{"k":"ab\u0041"#);
    // Escapes without a secret behind them are the model's bytes: kept as they came, cut
    // anywhere (the search sees their characters, the output does not change).
    let plain = r#"{"k":"\u0041\u0062 \n a\/b"}"#;
    for cut in 0..=plain.len() {
        assert_eq!(whole(&[&plain[..cut], &plain[cut..]]), plain, "cut at {cut}");
    }
}

/// FAILURE-SECRETS (revised): what a model writes is never rewritten but for a held secret's
/// value. Prose and code that look like credentials — "basic", `key=value`, "bearer token",
/// an `sk-` word, a URL with a user — pass byte for byte in text, reasoning and tool
/// arguments, however the provider splits them (at every byte, into two deltas), while a
/// held key in the same stream is still replaced.
#[test]
fn model_text_that_looks_like_a_credential_is_kept_byte_for_byte_at_every_split() {
    let secrets = Scrubber::new();
    secrets.register("LEAKCANARY3plainKey");
    let sentences = [
        "The most basic representation",
        "The basic idea: call f(key=value) with a bearer token",
        "Authorization: Basic dXNlcjpwYXNz and Bearer abc.def",
        "use sk-proj-abcdefghijklmnop, token=abc&secret=xyz, password=hunter2",
        r#"{"api_key": "not-ours", "url": "https://user:pass@example.com/x"}"#,
    ];
    for sentence in sentences {
        for cut in (0..=sentence.len()).filter(|&cut| sentence.is_char_boundary(cut)) {
            for (kind, json) in [(0u8, false), (1, false), (2, true)] {
                let mut stream = faultline_runtime::secrets::StreamScrubber::default();
                let mut out = String::new();
                for delta in [&sentence[..cut], &sentence[cut..]] {
                    out.push_str(&if json {
                        stream.push_json(&secrets, (kind, 0), delta)
                    } else {
                        stream.push(&secrets, (kind, 0), delta)
                    });
                }
                out.push_str(&stream.flush((kind, 0)).unwrap_or_default());
                assert_eq!(out, sentence, "stream {kind}, cut at {cut}");
            }
        }
    }
    // The same stream still replaces a held key, and only it.
    let mut stream = faultline_runtime::secrets::StreamScrubber::default();
    let text = "basic f(key=value) LEAKCANARY3plainKey bearer token";
    let mut out = stream.push(&secrets, (0, 0), text);
    out.push_str(&stream.flush((0, 0)).unwrap_or_default());
    assert_eq!(out, "basic f(key=value) *** bearer token");
    assert_eq!(secrets.scrub_held(text), "basic f(key=value) *** bearer token");
}
