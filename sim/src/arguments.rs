//! Tool-call arguments drawn from a tool's JSON schema, so a generated conversation calls an
//! embedder's tools with arguments shaped as the model would send them (FAILURE-USER-HARNESS).
//! The common keywords are honoured (`type`, `properties`, `required`, `enum`, `const`,
//! `minimum`/`maximum`, `minLength`/`maxLength`, `items`, `minItems`/`maxItems`, `anyOf`,
//! `oneOf`); anything else is ignored, never an error.

use faultline_runtime::seams::{Entropy, EntropyExt};
use serde_json::{json, Map, Value};

/// Deepest nesting drawn; below it a value is `null`.
pub const SCHEMA_DEPTH_MAX: usize = 8;
/// Most items drawn for an array.
const ARRAY_ITEMS_MAX: u64 = 3;
/// Longest string drawn, in characters.
const STRING_CHARS_MAX: u64 = 24;

/// A value of `schema`, drawn from `entropy`.
pub fn draw(schema: &Value, entropy: &dyn Entropy) -> Value {
    draw_at(schema, entropy, 0)
}

fn below(entropy: &dyn Entropy, n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        entropy.next_u64() % n
    }
}

fn draw_at(schema: &Value, entropy: &dyn Entropy, depth: usize) -> Value {
    let Some(schema) = schema.as_object() else { return json!({}) };
    if depth > SCHEMA_DEPTH_MAX {
        return Value::Null;
    }
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(Value::Array(options)) = schema.get("enum").filter(|e| e.as_array().is_some_and(|a| !a.is_empty())) {
        return options[below(entropy, options.len() as u64) as usize].clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = schema.get(key).filter(|e| e.as_array().is_some_and(|a| !a.is_empty())) {
            return draw_at(&options[below(entropy, options.len() as u64) as usize], entropy, depth + 1);
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("null"),
        _ if schema.contains_key("properties") => "object",
        _ => "string",
    };
    match kind {
        "object" => object(schema, entropy, depth),
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0).min(ARRAY_ITEMS_MAX);
            let max =
                schema.get("maxItems").and_then(Value::as_u64).unwrap_or(ARRAY_ITEMS_MAX).clamp(min, ARRAY_ITEMS_MAX);
            let items = schema.get("items").cloned().unwrap_or_else(|| json!({}));
            (0..min + below(entropy, max - min + 1)).map(|_| draw_at(&items, entropy, depth + 1)).collect()
        }
        "integer" => {
            let min = schema.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            let max = schema.get("maximum").and_then(Value::as_i64).unwrap_or(min.saturating_add(1000)).max(min);
            let span = max.abs_diff(min).saturating_add(1);
            json!(min.saturating_add_unsigned(below(entropy, span)))
        }
        "number" => {
            let min = schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            let max = schema.get("maximum").and_then(Value::as_f64).unwrap_or(min + 1000.0).max(min);
            json!(((min + (max - min) * entropy.unit_f64()) * 100.0).round() / 100.0)
        }
        "boolean" => json!(entropy.next_u64() % 2 == 0),
        "null" => Value::Null,
        _ => string(schema, entropy),
    }
}

fn object(schema: &Map<String, Value>, entropy: &dyn Entropy, depth: usize) -> Value {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
    let mut out = Map::new();
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, property) in properties {
            // Optional properties come about half the time, as a model sends them.
            if required.contains(&name.as_str()) || entropy.next_u64() % 2 == 0 {
                out.insert(name.clone(), draw_at(property, entropy, depth + 1));
            }
        }
    }
    Value::Object(out)
}

fn string(schema: &Map<String, Value>, entropy: &dyn Entropy) -> Value {
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(1).min(STRING_CHARS_MAX);
    let max = schema.get("maxLength").and_then(Value::as_u64).unwrap_or(12).clamp(min, STRING_CHARS_MAX);
    let len = min + below(entropy, max - min + 1);
    let text: String = (0..len).map(|_| char::from(b'a' + below(entropy, 26) as u8)).collect();
    json!(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_arguments_keep_to_the_schema() {
        let schema = json!({
            "type": "object",
            "required": ["customer", "cents", "currency"],
            "properties": {
                "customer": {"type": "string", "minLength": 3, "maxLength": 5},
                "cents": {"type": "integer", "minimum": 100, "maximum": 200},
                "currency": {"enum": ["EUR", "USD"]},
                "lines": {"type": "array", "maxItems": 2, "items": {"type": "number", "minimum": 1, "maximum": 2}}
            }
        });
        for seed in 0..200 {
            let entropy = crate::seed::Seed::new(seed).fault("arguments");
            let value = draw(&schema, &entropy);
            let customer = value["customer"].as_str().unwrap();
            assert!((3..=5).contains(&customer.len()), "{value}");
            assert!((100..=200).contains(&value["cents"].as_i64().unwrap()), "{value}");
            assert!(["EUR", "USD"].contains(&value["currency"].as_str().unwrap()), "{value}");
            if let Some(lines) = value.get("lines") {
                let lines = lines.as_array().unwrap();
                assert!(
                    lines.len() <= 2 && lines.iter().all(|n| (1.0..=2.0).contains(&n.as_f64().unwrap())),
                    "{value}"
                );
            }
        }
    }
}
