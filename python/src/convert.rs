//! Conversions at the boundary: keys (a 64-hex `str` or 32 `bytes`), names and objects
//! (`bytes`, or `str` as UTF-8). Names and objects are borrowed from their
//! Python values, not copied: callers collect the values first (which keeps them alive),
//! then borrow slices that the library reads with the GIL released.

use objstash::Key;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors;

/// A key from a Python value.
pub fn key(value: &Bound<'_, PyAny>) -> PyResult<Key> {
    if let Ok(text) = value.cast::<PyString>() {
        return text.to_str()?.parse().map_err(|e: objstash::ParseKeyError| {
            errors::raise(value.py(), "BadKeyError", e.to_string())
        });
    }
    if let Ok(bytes) = value.cast::<PyBytes>() {
        let bytes = bytes.as_bytes();
        let array: [u8; 32] = bytes.try_into().map_err(|_| {
            errors::raise(
                value.py(),
                "BadKeyError",
                format!("a key is 32 bytes, not {}", bytes.len()),
            )
        })?;
        return Ok(Key::from_bytes(array));
    }
    Err(errors::raise(
        value.py(),
        "BadKeyError",
        format!("a key is a str of 64 hex digits or 32 bytes, not {}", type_name(value)),
    ))
}

/// Keys from an iterable of Python values.
pub fn keys(values: &Bound<'_, PyAny>) -> PyResult<Vec<Key>> {
    values.try_iter()?.map(|v| key(&v?)).collect()
}

/// The values of an iterable, kept alive while their bytes are borrowed.
pub fn collect<'py>(values: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    values.try_iter()?.collect()
}

/// A name's bytes: a `str` as UTF-8, or `bytes`.
pub fn name<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_str()?.as_bytes());
    }
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(bytes.as_bytes());
    }
    Err(errors::raise(
        value.py(),
        "BadNameError",
        format!("a name is a str or bytes, not {}", type_name(value)),
    ))
}

/// The bytes of each name of `held` (values collected with [`collect`]).
pub fn names<'a>(held: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<&'a [u8]>> {
    held.iter().map(name).collect()
}

/// An object's bytes: `bytes`, or a `str` as its UTF-8 bytes (reads return `bytes`).
pub fn object<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(bytes.as_bytes());
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_str()?.as_bytes());
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "an object is bytes (or str, stored as UTF-8), not {}",
        type_name(value)
    )))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_string())
}
