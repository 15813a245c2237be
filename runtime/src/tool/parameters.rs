//! A tool's `parameters` checked as JSON Schema before any model sees them: a schema the
//! provider would refuse (`"type": "banana"`), or one no validator can compile (a `$ref` to
//! nowhere), is a configuration error with its path, not a 400 on the first request or a
//! tool the model cannot call.

use serde_json::Value;

/// Largest parameter schema accepted, in bytes of its JSON.
pub const PARAMETERS_BYTES_MAX: usize = 64 * 1024;

/// Checks `schema` as a tool's parameter schema: a JSON object of at most
/// [`PARAMETERS_BYTES_MAX`] bytes, valid against its draft's meta-schema (2020-12 unless it
/// names another in `$schema`), that compiles (every `$ref` resolves within it), and whose
/// top-level `type`, when given, is `"object"` (arguments are always an object). The error
/// is `(path, message)`, the path dotted from the schema's root (`properties.to.type`;
/// empty for the root itself).
pub fn check_parameters(schema: &Value) -> Result<(), (String, String)> {
    let Value::Object(fields) = schema else {
        return Err((String::new(), "must be a JSON-schema object".into()));
    };
    let bytes = serde_json::to_vec(schema).map_or(usize::MAX, |b| b.len());
    if bytes > PARAMETERS_BYTES_MAX {
        return Err((String::new(), format!("{bytes} bytes, at most {PARAMETERS_BYTES_MAX}")));
    }
    if let Some(draft) = fields.get("$schema") {
        let known = draft.as_str().is_some_and(|uri| {
            ["draft-04", "draft-06", "draft-07", "2019-09", "2020-12"].iter().any(|d| uri.contains(d))
        });
        if !known {
            return Err((
                "$schema".into(),
                "names no JSON Schema draft this runtime knows (4, 6, 7, 2019-09, 2020-12)".into(),
            ));
        }
    }
    jsonschema::meta::validate(schema).map_err(|e| (dotted(e.instance_path().as_str()), e.to_string()))?;
    jsonschema::validator_for(schema).map_err(|e| (dotted(e.instance_path().as_str()), e.to_string()))?;
    match fields.get("type") {
        None => Ok(()),
        Some(Value::String(t)) if t == "object" => Ok(()),
        Some(other) => {
            Err(("type".into(), format!("must be \"object\" (a tool's arguments are an object), not {other}")))
        }
    }
}

/// `/properties/to/type` as `properties.to.type` (a JSON pointer's `~1` and `~0` read back).
fn dotted(pointer: &str) -> String {
    pointer
        .split('/')
        .filter(|part| !part.is_empty())
        .map(|part| part.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_with_an_unknown_type_is_refused_at_its_path() {
        let (path, message) =
            check_parameters(&json!({"type": "object", "properties": {"to": {"type": "banana"}}})).unwrap_err();
        assert_eq!(path, "properties.to.type");
        assert!(message.contains("banana"), "{message}");
    }

    #[test]
    fn good_schemas_pass_and_the_root_must_describe_an_object() {
        check_parameters(&json!({"type": "object"})).unwrap();
        check_parameters(&json!({})).unwrap();
        check_parameters(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "required": ["cents"],
            "properties": {"cents": {"type": "integer", "minimum": 1}, "note": {"$ref": "#/definitions/note"}},
            "definitions": {"note": {"type": "string", "maxLength": 80}}
        }))
        .unwrap();
        assert_eq!(check_parameters(&json!({"type": "string"})).unwrap_err().0, "type");
        assert_eq!(check_parameters(&json!(["type"])).unwrap_err().0, "");
    }

    #[test]
    fn a_ref_to_nowhere_an_unknown_draft_and_a_huge_schema_are_refused() {
        let dangling = check_parameters(&json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/none"}}}));
        assert!(dangling.is_err(), "{dangling:?}");
        let remote =
            check_parameters(&json!({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}));
        assert!(remote.is_err(), "no network for a schema: {remote:?}");
        assert_eq!(check_parameters(&json!({"$schema": "https://example.com/mine"})).unwrap_err().0, "$schema");
        let huge = json!({"type": "object", "description": "x".repeat(PARAMETERS_BYTES_MAX)});
        assert!(check_parameters(&huge).unwrap_err().1.contains("at most"));
    }

    #[test]
    fn pointers_read_back_escaped_names() {
        assert_eq!(dotted("/properties/a~1b/x~0y"), "properties.a/b.x~y");
        assert_eq!(dotted(""), "");
    }
}
