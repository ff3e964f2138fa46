//! Objects by key: save, read, ask, remove, commit; and the size cap.
#![allow(unsafe_code)] // exports C symbols (`no_mangle`); the caller's pointers go through `memory.rs`

use objstash::Key;

use crate::handle::{ObjstashStash, with};
use crate::keys::ObjstashKey;
use crate::memory::{ObjstashBuffer, ObjstashBytes, borrow, buffer, bytes, slice, slot, slots};
use crate::status::{Failure, ObjstashStatus, guard, refuse};

/// The `n` objects at `objects` as slices.
pub(crate) fn objects_of<'a>(
    objects: *const ObjstashBytes,
    n: usize,
) -> Result<Vec<&'a [u8]>, Failure> {
    slice(objects, n, "objects")?.iter().map(|o| bytes(*o, "an object")).collect()
}

/// The `n` keys at `keys`.
pub(crate) fn keys_of(keys: *const ObjstashKey, n: usize) -> Result<Vec<Key>, Failure> {
    Ok(slice(keys, n, "keys")?.iter().map(|k| Key::from(*k)).collect())
}

/// Stores an object; `*out_key` its key. Every read from every thread sees it once this
/// returns; `objstash_flush` commits it.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_save(
    handle: *const ObjstashStash,
    data: ObjstashBytes,
    out_key: *mut ObjstashKey,
) -> ObjstashStatus {
    guard(|| {
        let data = bytes(data, "data")?;
        let out = slot(out_key, "out_key")?;
        *out = with(handle, |s| Ok(s.save(data)?))?.into();
        Ok(())
    })
}

/// Stores `n` objects, hashed and compressed in parallel; their keys into `out_keys[n]`,
/// in order.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_save_all(
    handle: *const ObjstashStash,
    objects: *const ObjstashBytes,
    n: usize,
    out_keys: *mut ObjstashKey,
) -> ObjstashStatus {
    guard(|| {
        let objects = objects_of(objects, n)?;
        let out = slots(out_keys, n, "out_keys")?;
        let keys = with(handle, |s| Ok(s.save_all(&objects)?))?;
        for (slot, key) in out.iter_mut().zip(keys) {
            *slot = key.into();
        }
        Ok(())
    })
}

/// The object under `key`, checked against it: `*out` a buffer to `objstash_free`, or
/// `{NULL, 0}` when it is not stored.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_get(
    handle: *const ObjstashStash,
    key: *const ObjstashKey,
    out: *mut ObjstashBuffer,
) -> ObjstashStatus {
    guard(|| {
        let key = Key::from(*borrow(key, "key")?);
        let out = slot(out, "out")?;
        let found = with(handle, |s| Ok(s.get(&key)?))?;
        *out = match found {
            Some(object) => buffer(&object)?,
            None => ObjstashBuffer::NONE,
        };
        Ok(())
    })
}

/// The objects under `n` keys into `out[n]` (each to `objstash_free`, or `{NULL, 0}` when
/// not stored; `objstash_free_buffers` frees them all), read in one snapshot and checked in
/// parallel: many times faster than a loop of `objstash_get`.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_get_many(
    handle: *const ObjstashStash,
    keys: *const ObjstashKey,
    n: usize,
    out: *mut ObjstashBuffer,
) -> ObjstashStatus {
    guard(|| {
        let keys = keys_of(keys, n)?;
        let out = slots(out, n, "out")?;
        let found = with(handle, |s| Ok(s.get_many(&keys)?))?;
        fill(out, found)
    })
}

/// Fills `out` from `found`; on failure frees what it filled, so the caller owns nothing.
pub(crate) fn fill(out: &mut [ObjstashBuffer], found: Vec<Option<Vec<u8>>>) -> Result<(), Failure> {
    let mut made = Vec::with_capacity(found.len());
    for object in found {
        match object.as_deref().map(buffer).transpose() {
            Ok(b) => made.push(b.unwrap_or(ObjstashBuffer::NONE)),
            Err(e) => {
                crate::memory::objstash_free_buffers(made.as_mut_ptr(), made.len());
                return Err(e);
            }
        }
    }
    out.copy_from_slice(&made);
    Ok(())
}

/// Whether an object is stored under `key` (`*out`).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_contains(
    handle: *const ObjstashStash,
    key: *const ObjstashKey,
    out: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let key = Key::from(*borrow(key, "key")?);
        let out = slot(out, "out")?;
        *out = with(handle, |s| Ok(s.contains(&key)?))?;
        Ok(())
    })
}

/// Which of `n` keys are not stored: `out_missing[i]` for `keys[i]`, in one call.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_missing(
    handle: *const ObjstashStash,
    keys: *const ObjstashKey,
    n: usize,
    out_missing: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let keys = keys_of(keys, n)?;
        let out = slots(out_missing, n, "out_missing")?;
        let missing: std::collections::HashSet<Key> =
            with(handle, |s| Ok(s.missing(&keys)?))?.into_iter().collect();
        for (slot, key) in out.iter_mut().zip(&keys) {
            *slot = missing.contains(key);
        }
        Ok(())
    })
}

/// Removes `n` objects (and their names) in one transaction; `out_removed[i]` whether
/// `keys[i]` was stored (the array may be null).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_remove(
    handle: *const ObjstashStash,
    keys: *const ObjstashKey,
    n: usize,
    out_removed: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let keys = keys_of(keys, n)?;
        let removed = with(handle, |s| Ok(s.remove_all(&keys)?))?;
        if !out_removed.is_null() {
            slots(out_removed, n, "out_removed")?.copy_from_slice(&removed);
        }
        Ok(())
    })
}

/// Returns once everything saved and removed before is committed.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_flush(handle: *const ObjstashStash) -> ObjstashStatus {
    guard(|| with(handle, |s| Ok(s.flush()?)))
}

/// Records a size cap in bytes (0: none); eviction down to it runs in the background.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_set_max_size(
    handle: *const ObjstashStash,
    max_size: u64,
) -> ObjstashStatus {
    guard(|| with(handle, |s| Ok(s.set_max_size((max_size > 0).then_some(max_size))?)))
}

/// Evicts least recently used objects and models until the files fit `max_size` bytes
/// (works on a full disk too); `*out_objects` and `*out_bytes` (each may be null) what went.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_trim_to(
    handle: *const ObjstashStash,
    max_size: u64,
    out_objects: *mut u64,
    out_bytes: *mut u64,
) -> ObjstashStatus {
    guard(|| {
        if max_size == 0 {
            return refuse(ObjstashStatus::InvalidArgument, "a size of 0 holds nothing");
        }
        let evicted = with(handle, |s| Ok(s.trim_to(max_size)?))?;
        if !out_objects.is_null() {
            *slot(out_objects, "out_objects")? = evicted.objects;
        }
        if !out_bytes.is_null() {
            *slot(out_bytes, "out_bytes")? = evicted.stored_bytes;
        }
        Ok(())
    })
}
