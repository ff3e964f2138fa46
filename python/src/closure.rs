//! `_json_field_keys`: the keys of one field of a JSON object, parsed without the GIL. A
//! Speckle root lists its model's ids as the keys of its `__closure`; the transport reads
//! them when it declares a model and when it reads one. Parsed by `json.loads`, a root of
//! 100,000 ids held the GIL for 54 ms, in a background thread, which stalled the sender's
//! own thread for as long (`notes/performance.md`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// The keys of the object `field` of the JSON object `text`, sorted (a name given twice
/// once); none if `text` has no such field or it is null. Raises ValueError if `text` is
/// not a JSON object, or the field is neither an object nor null.
#[pyfunction]
pub fn _json_field_keys(
    py: Python<'_>,
    text: &Bound<'_, PyString>,
    field: &str,
) -> PyResult<Vec<String>> {
    let text = text.to_str()?;
    py.detach(|| field_keys(text, field)).map_err(PyValueError::new_err)
}

/// [`_json_field_keys`] in Rust.
fn field_keys(text: &str, field: &str) -> Result<Vec<String>, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let serde_json::Value::Object(mut object) = value else {
        return Err("not a JSON object".to_string());
    };
    match object.remove(field) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Object(listed)) => Ok(listed.into_iter().map(|(k, _)| k).collect()),
        Some(_) => Err(format!("its {field:?} is not a JSON object")),
    }
}
