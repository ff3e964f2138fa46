//! What a stash says of itself: its sizes, its integrity, a rebuild.
#![allow(unsafe_code)] // the repair's path from the caller

use std::ffi::{CStr, c_char};

use crate::handle::{ObjstashStash, with};
use crate::memory::{ObjstashBuffer, borrow, buffer, slot};
use crate::status::{ObjstashStatus, guard, refuse};

/// The size report.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ObjstashStats {
    pub objects: u64,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// Bytes of the stash's files on disk.
    pub file_bytes: u64,
    pub names: u64,
    /// The size cap in bytes; 0 for none.
    pub max_size: u64,
    pub pinned_objects: u64,
    pub evicted_objects: u64,
    pub evicted_bytes: u64,
}

/// What a stash served since counting began (`objstash_counters`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ObjstashCounters {
    /// Milliseconds since the Unix epoch when counting began; 0 if it never has.
    pub since_unix_ms: u64,
    /// Keys read and served (from the stash or through its remote).
    pub hits: u64,
    /// Keys read and found nowhere.
    pub misses: u64,
    /// Of the hits, keys read through the remote, and their bytes.
    pub read_throughs: u64,
    pub read_through_bytes: u64,
    /// Keys looked up (`objstash_contains`, `objstash_missing`) that were stored, and not.
    pub found: u64,
    pub absent: u64,
    /// Objects saved that were new, and saves of objects already stored.
    pub saved: u64,
    pub saved_again: u64,
    /// Objects evicted since counting began, and their stored bytes (0 for a handle).
    pub evicted: u64,
    pub evicted_bytes: u64,
}

/// What `objstash_verify` found. `text` is the report in words (free its `data` with
/// `objstash_free`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ObjstashVerify {
    /// Nothing is wrong.
    pub ok: bool,
    pub checked: u64,
    /// Objects that failed their check.
    pub corrupt: u64,
    /// Intact objects the key index cannot find (a repair brings them back).
    pub unreachable: u64,
    /// Damage beyond single rows: the file needs `objstash_repair`.
    pub problems: u64,
    pub text: ObjstashBuffer,
}

/// The size report into `*out` (waits for pending writes to commit).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_stats(
    handle: *const ObjstashStash,
    out: *mut ObjstashStats,
) -> ObjstashStatus {
    guard(|| {
        let out = slot(out, "out")?;
        let s = with(handle, |s| Ok(s.stats()?))?;
        *out = ObjstashStats {
            objects: s.objects,
            raw_bytes: s.raw_bytes,
            stored_bytes: s.stored_bytes,
            file_bytes: s.file_bytes,
            names: s.names,
            max_size: s.max_size.unwrap_or(0),
            pinned_objects: s.pinned_objects,
            evicted_objects: s.evicted_objects,
            evicted_bytes: s.evicted_bytes,
        };
        Ok(())
    })
}

/// The counters into `*out`: the stash's (every process's calls; this handle's are
/// committed first), or with `this_handle` this handle's since it opened.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_counters(
    handle: *const ObjstashStash,
    this_handle: bool,
    out: *mut ObjstashCounters,
) -> ObjstashStatus {
    guard(|| {
        let out = slot(out, "out")?;
        let c =
            with(handle, |s| Ok(if this_handle { s.handle_counters() } else { s.counters()? }))?;
        let since = c.since.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        *out = ObjstashCounters {
            since_unix_ms: since.map_or(0, |d| d.as_millis() as u64),
            hits: c.hits,
            misses: c.misses,
            read_throughs: c.read_throughs,
            read_through_bytes: c.read_through_bytes,
            found: c.found,
            absent: c.absent,
            saved: c.saved,
            saved_again: c.saved_again,
            evicted: c.evicted,
            evicted_bytes: c.evicted_bytes,
        };
        Ok(())
    })
}

/// Sets the stash's counters to 0; counting begins now.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_reset_counters(handle: *const ObjstashStash) -> ObjstashStatus {
    guard(|| with(handle, |s| Ok(s.reset_counters()?)))
}

/// Reads and checks every object and name into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_verify(
    handle: *const ObjstashStash,
    out: *mut ObjstashVerify,
) -> ObjstashStatus {
    guard(|| {
        let out = slot(out, "out")?;
        let r = with(handle, |s| Ok(s.verify()?))?;
        *out = ObjstashVerify {
            ok: r.is_ok(),
            checked: r.checked,
            corrupt: r.corrupt.len() as u64,
            unreachable: r.unreachable.len() as u64,
            problems: r.problems.len() as u64,
            text: buffer(r.to_string().as_bytes())?,
        };
        Ok(())
    })
}

/// Checks the stash at `path` (UTF-8; no handle may have it open) and rebuilds it from
/// every object that verifies if anything is wrong; `*out_text` (may be null) the report in
/// words, to `objstash_free`; `*out_lost` (may be null) whether objects or names were lost
/// (the damaged file is then kept beside it).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_repair(
    path: *const c_char,
    out_text: *mut ObjstashBuffer,
    out_lost: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let path = borrow(path, "path")?;
        // SAFETY: a NUL-terminated string the caller lends for the call.
        let Ok(path) = unsafe { CStr::from_ptr(path) }.to_str() else {
            return refuse(ObjstashStatus::InvalidArgument, "the path is not UTF-8");
        };
        let report = objstash::repair(path)?;
        if !out_lost.is_null() {
            *slot(out_lost, "out_lost")? = report.lost_anything();
        }
        if !out_text.is_null() {
            *slot(out_text, "out_text")? = buffer(report.to_string().as_bytes())?;
        }
        Ok(())
    })
}
