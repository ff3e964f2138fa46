//! Library errors as Python exceptions. The hierarchy is defined in Python
//! (`objstash/errors.py`, where a class can also be a `ValueError` or an `OSError`); this
//! maps each library error to its class by name, with a message in a Python program's
//! words: the keyword arguments of `Stash(...)`, not the Rust builder's methods.

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::handle::CallError;

/// The name of the `objstash.errors` class for a library error.
fn class_of(e: &objstash::Error) -> &'static str {
    use objstash::Error as E;
    match e {
        E::Corrupt { .. } | E::Damaged { .. } | E::DamagedHeader { .. } => "CorruptError",
        E::NotFound { .. } => "NotFoundError",
        E::Locked { .. } | E::Owned { .. } => "LockedError",
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
        E::Remote { .. } => "RemoteError",
        E::RemoteCorrupt { .. } => "RemoteCorruptError",
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            "PermissionDeniedError"
        }
        E::Io { .. } | E::DiskFull { .. } => "FileSystemError",
        _ => "Error",
    }
}

/// The message of a library error, in the words of a Python program where the library's
/// own name a Rust method.
fn message(e: &objstash::Error) -> String {
    use objstash::Error as E;
    match e {
        E::NotFound { path } => format!(
            "there is no stash at {}: check the path, or open it with create=True (the \
             default) to make one",
            path.display()
        ),
        E::TooLarge { size, limit } => format!(
            "an object of {size} bytes is larger than this stash's limit of {limit} bytes; \
             nothing of the call was stored: split it, or open the stash with a larger \
             max_object_size="
        ),
        E::SettingMismatch { path, setting, stored, requested } => format!(
            "{} records {setting} {stored:?} and was opened asking for {requested:?}: leave \
             {setting}= unset to use the recorded one, or change it deliberately with \
             Stash(path, {setting}={requested:?}, reconfigure=True)",
            path.display()
        ),
        E::LayoutMismatch { path, stored, requested } => format!(
            "{} was made with layout {:?} and cannot be opened as {:?}: leave layout= unset \
             to use the recorded one, or make a new stash",
            path.display(),
            stored.to_string(),
            requested.to_string()
        ),
        E::Busy { path, waited, what } => format!(
            "{}: {what} for longer than {:.1} s; nothing stored or queued was lost: try \
             again, or open the stash with a longer busy_timeout=",
            path.display(),
            waited.as_secs_f64()
        ),
        E::ReadOnly { path } => format!(
            "{} is open read-only (read_only=True, or its file or directory cannot be \
             written): it cannot save, remove or change anything",
            path.display()
        ),
        other => other.to_string(),
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
    Python::attach(|py| {
        let err = raise(py, class_of(&e), message(&e));
        // A damaged object names its key, for a program that removes it and fetches it
        // again (the Speckle transport does).
        if let objstash::Error::Corrupt { key, .. } = &e {
            let _ = err.value(py).setattr("key", key.to_string());
        }
        err
    })
}

/// The Python exception for a failed call on a handle.
pub fn call_to_py(e: CallError) -> PyErr {
    match e {
        CallError::Stash(e) => to_py(e),
        CallError::Closed(path) => Python::attach(|py| {
            raise(py, "ClosedError", format!("the stash at {} is closed", path.display()))
        }),
    }
}
