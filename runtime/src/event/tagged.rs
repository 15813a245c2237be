//! Internally tagged enums (`{"type": "text", "text": "…"}`) decoded in one pass when the tag
//! comes first, as faultline writes it.
//!
//! serde's derive buffers every internally tagged object into a generic content tree before
//! it knows the variant, then decodes the variant from the tree: for a recovery that is a
//! fifth of all instructions (every chunk and content block pays it). Here the tag is read
//! first and the rest of the map goes straight into the variant's fields. An object whose tag
//! is not first (written by some other tool) is gathered into a JSON map and decoded the same
//! way, so the accepted inputs and the refusals are the derive's: unknown variants, unknown
//! fields and missing fields are errors either way.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// An internally tagged enum: its tag field, its variant names, and how to decode one
/// variant's fields from the rest of the object.
pub(crate) trait Tagged: Sized {
    /// The tag field (`type`, `kind`).
    const TAG: &'static str;
    /// Every tag value, for error messages.
    const VARIANTS: &'static [&'static str];
    /// The enum's name, for error messages.
    const NAME: &'static str;

    /// Decodes variant `tag` from the object's remaining fields.
    fn variant<'de, D: Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error>;
}

/// `T` from a map whose tag comes first, or anywhere.
pub(crate) fn deserialize<'de, T: Tagged, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
    deserializer.deserialize_map(TagFirst::<T>(PhantomData))
}

/// A string key or value, borrowed from the input when it holds no escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

struct TagFirst<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TagFirst<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "internally tagged enum {}", T::NAME)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let Some(Text(first)) = map.next_key::<Text<'de>>()? else {
            return Err(A::Error::missing_field(T::TAG));
        };
        if first == T::TAG {
            let Text(tag) = map.next_value::<Text<'de>>()?;
            return T::variant(&tag, MapAccessDeserializer::new(map));
        }
        // The tag comes later: gather the object, then decode it the same way.
        let mut object = serde_json::Map::new();
        object.insert(first.into_owned(), map.next_value()?);
        while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
            if object.insert(key.clone(), value).is_some() {
                return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
            }
        }
        let tag = match object.remove(T::TAG) {
            Some(serde_json::Value::String(tag)) => tag,
            Some(_) => return Err(A::Error::custom(format_args!("the `{}` of {} must be a string", T::TAG, T::NAME))),
            None => return Err(A::Error::missing_field(T::TAG)),
        };
        T::variant(&tag, serde_json::Value::Object(object)).map_err(A::Error::custom)
    }
}

/// A variant without fields (`{"kind": "stop"}`): nothing else may follow the tag.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoFields {}

#[cfg(test)]
mod tests {
    use crate::event::{Chunk, ContentBlock, FinishReason};

    /// Whatever the position of the tag, the same value or an error; the derive's refusals
    /// stay refusals.
    #[test]
    fn the_tag_may_come_anywhere_and_refusals_stay_refusals() {
        let same = [
            (r#"{"type":"text","text":"hi"}"#, r#"{"text":"hi","type":"text"}"#),
            (
                r#"{"type":"tool-call","id":"c1","name":"send","arguments":"{}"}"#,
                r#"{"id":"c1","arguments":"{}","name":"send","type":"tool-call"}"#,
            ),
            (r#"{"type":"te\u0078t","text":"a\"b"}"#, r#"{"text":"a\"b","type":"text"}"#),
        ];
        for (first, later) in same {
            let a: ContentBlock = serde_json::from_str(first).unwrap();
            let b: ContentBlock = serde_json::from_str(later).unwrap();
            assert_eq!(a, b, "{first} / {later}");
        }
        let refused = [
            r#"{"type":"video","text":"hi"}"#,
            r#"{"text":"hi","type":"video"}"#,
            r#"{"type":"text","text":"hi","extra":1}"#,
            r#"{"extra":1,"type":"text","text":"hi"}"#,
            r#"{"type":"text"}"#,
            r#"{"text":"hi"}"#,
            r#"{"type":7,"text":"hi"}"#,
            r#"{"text":"hi","type":7}"#,
            r#"{"text":"hi","text":"ho","type":"text"}"#,
            r#"{}"#,
            r#"["text","hi"]"#,
        ];
        for line in refused {
            assert!(serde_json::from_str::<ContentBlock>(line).is_err(), "{line} must be refused");
        }
        let finish: Chunk = serde_json::from_str(r#"{"type":"finish","reason":{"kind":"stop"}}"#).unwrap();
        assert_eq!(finish, Chunk::finish(FinishReason::Stop));
        assert!(serde_json::from_str::<FinishReason>(r#"{"kind":"stop","failure":null}"#).is_err());
        for chunk in [
            Chunk::BlockStart { index: 0, kind: crate::event::BlockKind::ToolCall },
            Chunk::ToolCallDelta { index: 1, id: None, name: Some("n".into()), arguments_delta: "{".into() },
            Chunk::finish(FinishReason::Error {
                failure: crate::event::Failure::new(crate::event::ErrorCode::Timeout, "t"),
            }),
            Chunk::Finish { reason: FinishReason::ToolCalls, inferred: true },
            Chunk::RefusalDelta { index: 2, text: "I can't help with that.".into() },
        ] {
            let text = serde_json::to_string(&chunk).unwrap();
            assert_eq!(serde_json::from_str::<Chunk>(&text).unwrap(), chunk, "{text}");
        }
    }
}
