//! The ids a Speckle object lists as its model: the keys of its own `"__closure"`.
//!
//! Every front end asks this one parser (Rust, Python's transport, C and the .NET cache
//! manager), so a root means the same model whichever wrote or reads it. Speckle's
//! serializers (in the speckle-sharp-sdk repository: the V2 `ObjectSerializer` of its
//! `Serialisation/V2/Send` folder, and the V1 `SpeckleObjectSerializer`) write each
//! detached child inline as
//! `{"speckle_type":"reference","referencedId":ID,"__closure":null}`, a reused reference
//! with a closure map of its own, and the object's own `"__closure":{ID:depth,...}` last:
//! only the field of the top-level object counts, wherever it stands. Ids that start with
//! `blob` name files (Speckle's blobs), which are never cached as objects; the SDK drops
//! them from a closure before it reads one (speckle-sharp-sdk's `ObjectLoader`, in
//! `Serialisation/V2/Receive`), and so does this.
//!
//! Only that field is built: the rest of the object (a root can be megabytes) is read past
//! without being kept.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::error::{Error, Result};

/// The field a Speckle object lists its model's ids in.
pub const CLOSURE_FIELD: &str = "__closure";

/// The ids the JSON object `json` lists in its own `"__closure"`, sorted, each once, with
/// Speckle's blob ids (`blob...`) left out; none when it has no such field or it is `null`.
///
/// # Errors
/// [`Error::BadJson`] if `json` is not a JSON object, or its `"__closure"` is neither an
/// object nor `null`.
pub fn closure_ids(json: &[u8]) -> Result<Vec<String>> {
    let mut reader = serde_json::Deserializer::from_slice(json);
    let ids = reader.deserialize_map(TopLevel).and_then(|ids| reader.end().map(|()| ids));
    let mut ids = ids.map_err(|e| Error::BadJson { reason: e.to_string() })?;
    ids.retain(|id| !id.starts_with("blob"));
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The top-level object: its `"__closure"` read, every other field skipped.
struct TopLevel;

impl<'de> Visitor<'de> for TopLevel {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
        let mut ids = Vec::new();
        while let Some(field) = map.next_key::<FieldName>()? {
            if field.0 {
                ids = map.next_value_seed(Closure)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(ids)
    }
}

/// Whether a field's name is `"__closure"`, read without keeping the name.
struct FieldName(bool);

impl<'de> de::Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = FieldName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<FieldName, E> {
                Ok(FieldName(name == CLOSURE_FIELD))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// A `"__closure"`: an object whose keys are ids (their depths skipped), or `null`.
struct Closure;

impl<'de> DeserializeSeed<'de> for Closure {
    type Value = Vec<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<String>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Closure {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "its {CLOSURE_FIELD:?} to be an object of ids, or null")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Vec<String>, E> {
        Ok(Vec::new())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
        let mut ids = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(id) = map.next_key::<String>()? {
            map.next_value::<IgnoredAny>()?;
            ids.push(id);
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(json: &str) -> Vec<String> {
        closure_ids(json.as_bytes()).unwrap()
    }

    #[test]
    fn only_the_top_level_closure_counts_wherever_it_stands() {
        // A child reference's null closure comes first in the text, as Speckle writes it.
        let root = r#"{"id":"r","@elements":[{"speckle_type":"reference","referencedId":"a",
            "__closure":null},{"speckle_type":"reference","referencedId":"x",
            "__closure":{"y":1}}],"__closure":{"a":1,"b":2}}"#;
        assert_eq!(ids(root), ["a", "b"]);
        let first = r#"{"__closure":{"b":1,"a":2},"child":{"__closure":{"z":1}}}"#;
        assert_eq!(ids(first), ["a", "b"]);
    }

    #[test]
    fn none_null_and_blob_ids_list_nothing() {
        assert!(ids(r#"{"id":"leaf","x":1.5}"#).is_empty());
        assert!(ids(r#"{"__closure":null}"#).is_empty());
        assert_eq!(ids(r#"{"__closure":{"blob:0f3a":1,"blobx":1,"c":3}}"#), ["c"]);
        assert_eq!(ids(r#"{"__closure":{"é字\"q":1}}"#), ["é字\"q"]);
    }

    #[test]
    fn what_is_not_an_object_with_an_object_closure_is_refused() {
        for bad in ["", "1", "[1]", "{", r#"{"__closure":[1]}"#, r#"{"__closure":"a"}"#, "{} x"] {
            let err = closure_ids(bad.as_bytes()).unwrap_err();
            assert!(matches!(err, Error::BadJson { .. }), "{bad}: {err:?}");
        }
    }
}
