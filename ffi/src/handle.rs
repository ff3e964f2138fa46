//! The handle: opened with options, shared by the caller's threads, closed, released.
//!
//! A handle holds the library's `Stash` behind a read-write lock: calls take it shared
//! (any number at once), `objstash_close` takes it alone, closes the stash and leaves the
//! handle answering `OBJSTASH_STATUS_CLOSED`. The memory of the handle is released by
//! `objstash_free_handle`, which the caller calls once, when no thread uses it any more (a
//! .NET `SafeHandle` guarantees exactly that).
#![allow(unsafe_code)] // the handle's pointer, owned by the caller between open and free

use std::ffi::{CStr, c_char};
use std::path::PathBuf;
use std::sync::{PoisonError, RwLock};

use objstash::{Codec, Durability, Layout, Stash, Values};

use crate::memory::{borrow, slot};
use crate::status::{Failure, ObjstashStatus, guard, refuse};

/// An open stash (opaque).
pub struct ObjstashStash {
    stash: RwLock<Option<Stash>>,
    path: PathBuf,
}

/// How to open a stash. Zero everywhere (`{0}`) means: the recorded settings, or the
/// defaults for a new stash, created if absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ObjstashOptions {
    /// 0 the recorded (or single), 1 single, 2 bucketed: fixed when a stash is made.
    pub layout: i32,
    /// 0 the recorded (or fast), 1 fast, 2 safe, 3 owned.
    pub durability: i32,
    /// 0 the recorded (or gzip), 1 gzip, 2 zstd-dict.
    pub codec: i32,
    /// 0 where the stash keeps them (rows for a new one), 1 rows, 2 a file beside it.
    pub values: i32,
    /// A size cap in bytes to record; 0 leaves the recorded one.
    pub max_size: u64,
    /// Bytes of the database file each read connection may map into memory (SQLite's
    /// `mmap_size`, at most about 2 GiB): a read then finds its pages in the OS page
    /// cache with no system call. 0: the library's default (a small file whole, a file of
    /// values' database whole). Speckle's own cache maps 30 GB.
    pub read_map_bytes: u64,
    /// Only read (and never create).
    pub read_only: bool,
    /// Fail with `OBJSTASH_STATUS_NOT_FOUND` rather than create a stash that is not there.
    pub must_exist: bool,
    /// Record a durability or codec that differs from the recorded one (else that is
    /// `OBJSTASH_STATUS_SETTINGS`).
    pub reconfigure: bool,
    /// Evict objects used moments ago too (no grace period): for tests and one-off trims.
    pub no_eviction_grace: bool,
}

fn setting<T>(value: i32, what: &str, choices: &[T]) -> Result<Option<T>, Failure>
where
    T: Copy,
{
    match usize::try_from(value) {
        Ok(0) => Ok(None),
        Ok(i) if i <= choices.len() => Ok(Some(choices[i - 1])),
        _ => refuse(
            ObjstashStatus::InvalidArgument,
            format!("{what} {value} is not one of 0 to {}", choices.len()),
        ),
    }
}

/// Opens (or creates) the stash at `path` (UTF-8) with `options` (null: the defaults);
/// `*out` is the handle, to be closed with `objstash_close` and released with
/// `objstash_free_handle`.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_open(
    path: *const c_char,
    options: *const ObjstashOptions,
    out: *mut *mut ObjstashStash,
) -> ObjstashStatus {
    guard(|| {
        let path = borrow(path, "path")?;
        let out = slot(out, "out")?;
        // SAFETY: a NUL-terminated string the caller lends for the call.
        let path = unsafe { CStr::from_ptr(path) };
        let Ok(path) = path.to_str() else {
            return refuse(ObjstashStatus::InvalidArgument, "the path is not UTF-8");
        };
        let options = if options.is_null() {
            ObjstashOptions::default()
        } else {
            *borrow(options, "options")?
        };
        let mut builder = Stash::builder()
            .read_only(options.read_only)
            .create(!options.must_exist && !options.read_only)
            .reconfigure(options.reconfigure);
        if let Some(layout) =
            setting(options.layout, "layout", &[Layout::Single, Layout::Bucketed])?
        {
            builder = builder.layout(layout);
        }
        let durabilities = [Durability::Fast, Durability::Safe, Durability::Owned];
        if let Some(durability) = setting(options.durability, "durability", &durabilities)? {
            builder = builder.durability(durability);
        }
        if let Some(codec) = setting(options.codec, "codec", &[Codec::Gzip, Codec::ZstdDict])? {
            builder = builder.codec(codec);
        }
        if let Some(values) = setting(options.values, "values", &[Values::InRows, Values::InFile])?
        {
            builder = builder.values(values);
        }
        if options.max_size > 0 {
            builder = builder.max_size(options.max_size);
        }
        if options.no_eviction_grace {
            builder = builder.eviction_grace(std::time::Duration::ZERO);
        }
        if options.read_map_bytes > 0 {
            builder = builder.read_mmap_size(options.read_map_bytes);
        }
        let stash = builder.open(path)?;
        let handle = ObjstashStash { stash: RwLock::new(Some(stash)), path: PathBuf::from(path) };
        *out = Box::into_raw(Box::new(handle));
        Ok(())
    })
}

/// Runs `f` on the open stash of `handle`.
pub(crate) fn with<T>(
    handle: *const ObjstashStash,
    f: impl FnOnce(&Stash) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let handle = borrow(handle, "handle")?;
    let stash = handle.stash.read().unwrap_or_else(PoisonError::into_inner);
    match stash.as_ref() {
        Some(stash) => f(stash),
        None => refuse(
            ObjstashStatus::Closed,
            format!("the stash at {} is closed", handle.path.display()),
        ),
    }
}

/// Flushes and closes the stash; later calls on the handle answer `OBJSTASH_STATUS_CLOSED`.
/// Closing twice is fine. Waits for calls under way on other threads.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_close(handle: *mut ObjstashStash) -> ObjstashStatus {
    guard(|| {
        let handle = borrow(handle.cast_const(), "handle")?;
        let stash = handle.stash.write().unwrap_or_else(PoisonError::into_inner).take();
        match stash {
            Some(stash) => Ok(stash.close()?),
            None => Ok(()),
        }
    })
}

/// Releases the handle (closing it first if it is open, its failure then lost: close it
/// first to see it). Null is ignored. No thread may use the handle during or after.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_free_handle(handle: *mut ObjstashStash) {
    if handle.is_null() {
        return;
    }
    let _ = guard(|| {
        // SAFETY: a handle `objstash_open` made, released once, used by no other thread.
        let handle = unsafe { Box::from_raw(handle) };
        let stash = handle.stash.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some(stash) = stash {
            stash.close()?;
        }
        Ok(())
    });
}

/// Whether the handle only reads (`*out`).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_is_read_only(
    handle: *const ObjstashStash,
    out: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let out = slot(out, "out")?;
        *out = with(handle, |s| Ok(s.is_read_only()))?;
        Ok(())
    })
}
