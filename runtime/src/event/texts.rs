//! Every string inside a serialisable value, visited without encoding it: what the secret
//! scrubber searches before a record is stored.
//!
//! Encoding a record only to search its text escaped every byte of it once more (serde_json
//! escapes a byte at a time): a tool output at its 256 KiB limit paid that on top of the
//! encoding the store writes. Visiting the strings themselves finds what the encoded search
//! found — a secret that needs no escaping appears in the encoding exactly where it appears
//! in a string, and one that does is registered in its escaped form too — and map keys are
//! visited as well.

use serde::ser::{self, Serialize};

/// Whether `found` holds for some string (value or map key) inside `value`; stops at the
/// first that does.
pub(crate) fn any_text<T: Serialize + ?Sized>(value: &T, mut found: impl FnMut(&str) -> bool) -> bool {
    matches!(value.serialize(Texts { found: &mut found }), Err(Stop::Found))
}

/// A serializer that writes nothing and shows every string to `found`.
struct Texts<'f> {
    found: &'f mut dyn FnMut(&str) -> bool,
}

/// Why a visit stopped early.
#[derive(Debug)]
enum Stop {
    /// A string matched.
    Found,
    /// The value refused to serialise (never for the runtime's events).
    Custom(String),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Found => f.write_str("found"),
            Stop::Custom(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<M: std::fmt::Display>(message: M) -> Self {
        Stop::Custom(message.to_string())
    }
}

impl Texts<'_> {
    fn text(&mut self, text: &str) -> Result<(), Stop> {
        if (self.found)(text) {
            Err(Stop::Found)
        } else {
            Ok(())
        }
    }

    fn reborrow(&mut self) -> Texts<'_> {
        Texts { found: &mut *self.found }
    }
}

/// The methods that see no string.
macro_rules! no_text {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Result<(), Stop> { Ok(()) })*
    };
}

impl<'f> ser::Serializer for Texts<'f> {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    no_text!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );

    fn serialize_char(mut self, c: char) -> Result<(), Stop> {
        self.text(c.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(mut self, text: &str) -> Result<(), Stop> {
        self.text(text)
    }

    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }

    /// A unit variant is written as its name: seen, as the encoded search saw it (a secret
    /// equal to one of the runtime's own words is then refused by the scrubber, as before).
    fn serialize_unit_variant(mut self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Stop> {
        self.text(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        value.serialize(self)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }

    fn serialize_tuple_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }

    fn serialize_struct_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
}

/// The compound serialisers all do one thing: visit each element (or field, key and value)
/// with the same searcher. One macro writes them so the seven cannot drift apart.
macro_rules! visit_each {
    ($trait:ident, $method:ident $(, $name:ty)?) => {
        impl ser::$trait for Texts<'_> {
            type Ok = ();
            type Error = Stop;
            fn $method<T: Serialize + ?Sized>(&mut self, $(_: $name,)? value: &T) -> Result<(), Stop> {
                value.serialize(self.reborrow())
            }
            fn end(self) -> Result<(), Stop> {
                Ok(())
            }
        }
    };
}

visit_each!(SerializeSeq, serialize_element);
visit_each!(SerializeTuple, serialize_element);
visit_each!(SerializeTupleStruct, serialize_field);
visit_each!(SerializeTupleVariant, serialize_field);
visit_each!(SerializeStruct, serialize_field, &'static str);
visit_each!(SerializeStructVariant, serialize_field, &'static str);

impl ser::SerializeMap for Texts<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Stop> {
        key.serialize(self.reborrow())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        value.serialize(self.reborrow())
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

/// The bytes of every string inside `value` (values and map keys): a lower bound of its JSON
/// encoding's length, which sizes the encoding's buffer ahead.
pub(crate) fn text_bytes<T: Serialize + ?Sized>(value: &T) -> usize {
    let mut bytes = 0usize;
    any_text(value, |text| {
        bytes = bytes.saturating_add(text.len());
        false
    });
    bytes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;

    use super::any_text;

    const NEEDLE: &str = "LEAKCANARYtexts";

    #[derive(Serialize)]
    struct Newtype(String);

    #[derive(Serialize)]
    struct Pair(u8, String);

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(String),
        Tuple(u8, String),
        Struct { n: u8, text: String },
    }

    #[derive(Serialize)]
    #[serde(rename = "LEAKCANARYtexts")]
    struct NamedLikeTheNeedle;

    /// A value holding `text` in every place serde can put a string, one at a time.
    fn every_place(text: &str) -> Vec<(&'static str, Box<dyn erased::Serialize>)> {
        let owned = text.to_owned();
        let first = text.chars().next().unwrap_or('x');
        vec![
            ("str", Box::new(owned.clone())),
            ("char", Box::new(first)),
            ("some", Box::new(Some(owned.clone()))),
            ("seq", Box::new(vec![String::new(), owned.clone()])),
            ("tuple", Box::new((1u8, owned.clone()))),
            ("tuple struct", Box::new(Pair(1, owned.clone()))),
            ("newtype struct", Box::new(Newtype(owned.clone()))),
            ("newtype variant", Box::new(Shape::Newtype(owned.clone()))),
            ("tuple variant", Box::new(Shape::Tuple(1, owned.clone()))),
            ("struct variant", Box::new(Shape::Struct { n: 1, text: owned.clone() })),
            ("map key", Box::new(BTreeMap::from([(owned.clone(), 1u8)]))),
            ("map value", Box::new(BTreeMap::from([(1u8, owned.clone())]))),
            ("json", Box::new(serde_json::json!({"a": [1, {"b": owned}]}))),
        ]
    }

    /// Object-safe `Serialize` for the table above.
    mod erased {
        pub trait Serialize {
            fn found(&self, needle: &str) -> bool;
        }
        impl<T: serde::Serialize> Serialize for T {
            fn found(&self, needle: &str) -> bool {
                super::any_text(self, |text| text.contains(needle))
            }
        }
    }

    #[test]
    fn a_string_is_found_wherever_serde_puts_it() {
        for (place, value) in every_place(NEEDLE) {
            let needle = if place == "char" { "L" } else { NEEDLE };
            assert!(value.found(needle), "{place}");
        }
        for (place, value) in every_place("clean") {
            assert!(!value.found(NEEDLE), "{place}");
        }
    }

    #[test]
    fn a_unit_variant_is_seen_by_its_name_and_a_unit_struct_is_not() {
        assert!(any_text(&Shape::Unit, |text| text == "Unit"));
        assert!(!any_text(&NamedLikeTheNeedle, |text| text.contains(NEEDLE)));
        assert!(!any_text(&(1u8, 2.5f64, true, (), None::<String>), |_| true), "no string inside");
    }

    #[test]
    fn the_visit_stops_at_the_first_match() {
        let mut seen = Vec::new();
        let found = any_text(&vec!["a", "b", "c"], |text| {
            seen.push(text.to_owned());
            text == "b"
        });
        assert!(found);
        assert_eq!(seen, ["a", "b"]);
    }
}
