//! Conversions at the boundary: keys (a 64-hex `str`, or 32 bytes as `bytes`, `bytearray`
//! or `memoryview`), names and objects (`bytes`, `bytearray`, `memoryview`, or `str` as
//! UTF-8), sequences of them, and paths (`str`, `bytes`, `os.PathLike`).
//!
//! `bytes` and `str` are borrowed from their Python values, not copied: callers collect the
//! values first (which keeps them alive, and they cannot change), then borrow slices that
//! the library reads with the GIL released. `bytearray` and `memoryview` can change while
//! the GIL is released, so their bytes are copied. A `str` or `bytes` where a sequence of
//! keys, names or objects is expected is a `TypeError`, never a sequence of characters.

use std::borrow::Cow;
use std::path::PathBuf;

use objstash::Key;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyMemoryView, PyString};

use crate::errors;

/// The bytes of a `bytes`, `bytearray` or `memoryview` (borrowed from `bytes`).
fn buffer<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Option<Cow<'a, [u8]>>> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(Some(Cow::Borrowed(bytes.as_bytes())));
    }
    if let Ok(array) = value.cast::<PyByteArray>() {
        return Ok(Some(Cow::Owned(array.to_vec())));
    }
    if value.cast::<PyMemoryView>().is_ok() {
        let bytes = value.call_method0("tobytes")?;
        return Ok(Some(Cow::Owned(bytes.cast::<PyBytes>()?.as_bytes().to_vec())));
    }
    Ok(None)
}

/// A key from a Python value, if it is one.
pub fn try_key(value: &Bound<'_, PyAny>) -> PyResult<Option<Key>> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_str()?.parse().ok());
    }
    Ok(buffer(value)?.and_then(|bytes| <[u8; 32]>::try_from(&bytes[..]).ok().map(Key::from_bytes)))
}

/// A key from a Python value.
pub fn key(value: &Bound<'_, PyAny>) -> PyResult<Key> {
    if let Ok(text) = value.cast::<PyString>() {
        return text.to_str()?.parse().map_err(|e: objstash::ParseKeyError| {
            errors::raise(value.py(), "BadKeyError", e.to_string())
        });
    }
    if let Some(bytes) = buffer(value)? {
        let array: [u8; 32] = bytes[..].try_into().map_err(|_| {
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
    collect(values, "keys")?.iter().map(key).collect()
}

/// The values of an iterable, kept alive while their bytes are borrowed. `what` names the
/// items in the error for a `str` or bytes-like value, which is one item, not a sequence.
pub fn collect<'py>(values: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if values.cast::<PyString>().is_ok()
        || values.cast::<PyBytes>().is_ok()
        || values.cast::<PyByteArray>().is_ok()
        || values.cast::<PyMemoryView>().is_ok()
    {
        return Err(PyTypeError::new_err(format!(
            "expected an iterable of {what}, not a single {}: wrap it in a list",
            type_name(values)
        )));
    }
    values.try_iter()?.collect()
}

/// A name's bytes: a `str` as UTF-8, or bytes-like.
pub fn name<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Cow::Borrowed(text.to_str()?.as_bytes()));
    }
    buffer(value)?.ok_or_else(|| {
        errors::raise(
            value.py(),
            "BadNameError",
            format!("a name is a str or bytes, not {}", type_name(value)),
        )
    })
}

/// The bytes of each name of `held` (values collected with [`collect`]).
pub fn names<'a>(held: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<Cow<'a, [u8]>>> {
    held.iter().map(name).collect()
}

/// An object's bytes: bytes-like, or a `str` as its UTF-8 bytes (reads return `bytes`).
pub fn object<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Cow::Borrowed(text.to_str()?.as_bytes()));
    }
    buffer(value)?.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "an object is bytes, bytearray or memoryview (or str, stored as UTF-8), not {}",
            type_name(value)
        ))
    })
}

/// A path: `str`, `bytes` or `os.PathLike`, as `os.fsdecode` reads it.
pub fn path(value: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let decoded = value.py().import("os")?.call_method1("fsdecode", (value,))?;
    decoded.extract()
}

/// A count or size that must not be negative (a Python `int` of any size).
pub fn unsigned(what: &str, value: i128) -> PyResult<u64> {
    u64::try_from(value).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{what} must be a whole number from 0 to {}, not {value}",
            u64::MAX
        ))
    })
}

pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_string())
}

/// The (name, object) pairs of `items`: an iterable of pairs, or a mapping.
pub(crate) fn pairs<'py>(
    items: &Bound<'py, PyAny>,
) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let items = if items.cast::<PyDict>().is_ok() || items.hasattr("keys")? {
        items.call_method0("items")?
    } else {
        items.clone()
    };
    collect(&items, "(name, object) pairs")?.iter().map(|item| item.extract()).collect()
}

/// A name's bytes and its object's.
pub(crate) type NamedBytes<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// The (name, object) bytes of `held` pairs, names checked: a name out of bounds raises
/// `BadNameError` before anything is stored.
pub(crate) fn named_objects<'a>(
    py: Python<'_>,
    held: &'a [(Bound<'_, PyAny>, Bound<'_, PyAny>)],
) -> PyResult<Vec<NamedBytes<'a>>> {
    let pairs =
        held.iter().map(|(n, o)| Ok((name(n)?, object(o)?))).collect::<PyResult<Vec<_>>>()?;
    if let Some((name, _)) =
        pairs.iter().find(|(name, _)| name.is_empty() || name.len() > objstash::MAX_NAME_LEN)
    {
        return Err(errors::raise(
            py,
            "BadNameError",
            format!(
                "a name must be 1 to {} bytes long, not {}; nothing of the call was stored",
                objstash::MAX_NAME_LEN,
                name.len()
            ),
        ));
    }
    Ok(pairs)
}
