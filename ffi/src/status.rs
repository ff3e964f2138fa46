//! Status codes, the last error message of a thread, and the guard every exported
//! function runs its body in: a library error becomes its code and message, a panic
//! `OBJSTASH_STATUS_PANIC`.
#![allow(unsafe_code)] // `objstash_last_error` hands out a pointer to this thread's message

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a call did.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjstashStatus {
    /// Done.
    Ok = 0,
    /// A null pointer where one was needed, a key that is not 64 hex digits, a setting
    /// out of range: nothing was done.
    InvalidArgument = 1,
    /// The handle was closed.
    Closed = 2,
    /// There is no stash at the path (and the options did not allow creating one).
    NotFound = 3,
    /// The file is not a stash (not SQLite, or another application's database).
    NotAStash = 4,
    /// A stored object failed its check, or the file is damaged: see `objstash_repair`.
    Corrupt = 5,
    /// The operation needs every other handle closed, or another process owns the stash.
    Locked = 6,
    /// Another process held the write lock past the busy timeout; nothing was lost.
    Busy = 7,
    /// The handle only reads.
    ReadOnly = 8,
    /// An object larger than the stash's limit; nothing of the call was stored.
    TooLarge = 9,
    /// A setting the stash does not allow, or a newer format.
    Settings = 10,
    /// The writer stopped; writes since the last flush may be lost.
    WriterStopped = 11,
    /// The file system failed.
    Io = 12,
    /// The disk is full; reads go on, `objstash_trim_to` gives space back.
    DiskFull = 13,
    /// SQLite failed.
    Database = 14,
    /// A defect: the library panicked. The handle may be unusable.
    Panic = 15,
    /// Any other failure (the message says).
    Other = 16,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error; returns `status`.
pub(crate) fn fail(status: ObjstashStatus, message: impl Into<String>) -> ObjstashStatus {
    let message = message.into().replace('\0', " ");
    let message = CString::new(message).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
    status
}

/// The status of a library error.
fn status_of(e: &objstash::Error) -> ObjstashStatus {
    use objstash::Error as E;
    if e.is_disk_full() {
        return ObjstashStatus::DiskFull;
    }
    match e {
        E::Corrupt { .. } | E::Damaged { .. } | E::DamagedHeader { .. } => ObjstashStatus::Corrupt,
        E::NotFound { .. } => ObjstashStatus::NotFound,
        E::NotADatabase { .. } | E::ForeignDatabase { .. } | E::InvalidPath { .. } => {
            ObjstashStatus::NotAStash
        }
        E::Locked { .. } | E::Owned { .. } => ObjstashStatus::Locked,
        E::Busy { .. } => ObjstashStatus::Busy,
        E::ReadOnly { .. } => ObjstashStatus::ReadOnly,
        E::TooLarge { .. } => ObjstashStatus::TooLarge,
        E::BadName { .. } | E::BadJson { .. } => ObjstashStatus::InvalidArgument,
        E::InvalidConfig { .. }
        | E::SettingMismatch { .. }
        | E::LayoutMismatch { .. }
        | E::UnsupportedFormat { .. }
        | E::JournalUnsupported { .. } => ObjstashStatus::Settings,
        E::WriterStopped { .. } => ObjstashStatus::WriterStopped,
        E::Io { .. } => ObjstashStatus::Io,
        E::Database { .. } => ObjstashStatus::Database,
        _ => ObjstashStatus::Other,
    }
}

/// The message of a library error, with its causes.
fn message_of(e: &objstash::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Why a call failed.
pub(crate) enum Failure {
    Status(ObjstashStatus, String),
    Library(objstash::Error),
}

impl From<objstash::Error> for Failure {
    fn from(e: objstash::Error) -> Self {
        Failure::Library(e)
    }
}

/// A failure of `status` with `message`.
pub(crate) fn refuse<T>(status: ObjstashStatus, message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Status(status, message.into()))
}

/// Runs an exported function's body: its failure becomes a status and this thread's
/// message; a panic becomes `OBJSTASH_STATUS_PANIC`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> ObjstashStatus {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ObjstashStatus::Ok,
        Ok(Err(Failure::Status(status, message))) => fail(status, message),
        Ok(Err(Failure::Library(e))) => fail(status_of(&e), message_of(&e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            fail(ObjstashStatus::Panic, format!("objstash panicked (a defect): {what}"))
        }
    }
}

/// The message of this thread's last failing call (empty if none failed): valid until
/// this thread's next failing call. Never null; not to be freed.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// The library's version, as text. Never null; not to be freed.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}
