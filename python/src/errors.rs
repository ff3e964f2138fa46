//! Library errors as Python exceptions. The hierarchy is defined in Python
//! (`objstash/errors.py`, where a class can also be a `ValueError`); this maps each library
//! error to its class by name and keeps the library's message.

use pyo3::prelude::*;
use pyo3::types::PyType;

/// The name of the `objstash.errors` class for a library error.
fn class_of(e: &objstash::Error) -> &'static str {
    use objstash::Error as E;
    match e {
        E::Corrupt { .. } | E::Damaged { .. } => "CorruptError",
        E::NotFound { .. } => "NotFoundError",
        E::Locked { .. } => "LockedError",
        E::Busy { .. } => "BusyError",
        E::ReadOnly { .. } => "ReadOnlyError",
        E::TooLarge { .. } => "TooLargeError",
        E::BadName { .. } => "BadNameError",
        E::InvalidConfig { .. }
        | E::SettingMismatch { .. }
        | E::LayoutMismatch { .. }
        | E::UnsupportedFormat { .. }
        | E::JournalUnsupported { .. } => "SettingsError",
        E::NotADatabase { .. } | E::ForeignDatabase { .. } | E::InvalidPath { .. } => {
            "NotAStashError"
        }
        E::WriterStopped { .. } => "WriterStoppedError",
        _ => "Error",
    }
}

/// An exception of class `name` of `objstash.errors`.
pub fn raise(py: Python<'_>, name: &str, message: String) -> PyErr {
    let class = py
        .import("objstash.errors")
        .and_then(|m| m.getattr(name))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(class) => PyErr::from_type(class, message),
        Err(e) => e,
    }
}

/// The Python exception for a library error.
pub fn to_py(e: objstash::Error) -> PyErr {
    Python::attach(|py| raise(py, class_of(&e), e.to_string()))
}
