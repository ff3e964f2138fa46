//! Objects under names of the caller's own (Speckle ids, paths): saved, read, resolved,
//! removed.
#![allow(unsafe_code)] // exports C symbols (`no_mangle`); the caller's pointers go through `memory.rs`

use crate::handle::{ObjstashStash, with};
use crate::keys::ObjstashKey;
use crate::memory::{
    ObjstashBuffer, ObjstashBytes, buffer_array, bytes, malloc_array, slice, slot, slots,
};
use crate::objects::{fill, objects_of};
use crate::status::{Failure, ObjstashStatus, guard};

/// The `n` names at `names`.
fn names_of<'a>(names: *const ObjstashBytes, n: usize) -> Result<Vec<&'a [u8]>, Failure> {
    slice(names, n, "names")?.iter().map(|name| bytes(*name, "a name")).collect()
}

/// Stores `n` objects under `n` names (a name saved again points to its new object);
/// their keys into `out_keys[n]` (may be null).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_save_named(
    handle: *const ObjstashStash,
    names: *const ObjstashBytes,
    objects: *const ObjstashBytes,
    n: usize,
    out_keys: *mut ObjstashKey,
) -> ObjstashStatus {
    guard(|| {
        let names = names_of(names, n)?;
        let objects = objects_of(objects, n)?;
        let pairs: Vec<(&[u8], &[u8])> = names.into_iter().zip(objects).collect();
        let keys = with(handle, |s| Ok(s.save_named(&pairs)?))?;
        if !out_keys.is_null() {
            for (slot, key) in slots(out_keys, n, "out_keys")?.iter_mut().zip(keys) {
                *slot = key.into();
            }
        }
        Ok(())
    })
}

/// The objects saved under `n` names into `out[n]` (`{NULL, 0}` where none is), read in
/// one snapshot, each checked.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_get_named(
    handle: *const ObjstashStash,
    names: *const ObjstashBytes,
    n: usize,
    out: *mut ObjstashBuffer,
) -> ObjstashStatus {
    guard(|| {
        let names = names_of(names, n)?;
        let out = slots(out, n, "out")?;
        let found = with(handle, |s| Ok(s.get_named(&names)?))?;
        fill(out, found)
    })
}

/// The object saved under one name (`len` bytes at `name`): `*out` a buffer to
/// `objstash_free`, or `{NULL, 0}` when none is. The call a loop of single reads makes
/// (no array to marshal).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_get_one_named(
    handle: *const ObjstashStash,
    name: *const u8,
    len: usize,
    out: *mut ObjstashBuffer,
) -> ObjstashStatus {
    guard(|| {
        let name = bytes(ObjstashBytes { data: name, len }, "name")?;
        let out = slot(out, "out")?;
        let found = with(handle, |s| Ok(s.get_named(&[name])?.pop().flatten()))?;
        *out = match found {
            Some(object) => crate::memory::buffer(&object)?,
            None => ObjstashBuffer::NONE,
        };
        Ok(())
    })
}

/// Whether one name (`len` bytes at `name`) maps to an object that is stored (`*out`): a
/// name whose object is gone, or whose object is the root of a model that misses objects,
/// answers false.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_has_one_named(
    handle: *const ObjstashStash,
    name: *const u8,
    len: usize,
    out: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let name = bytes(ObjstashBytes { data: name, len }, "name")?;
        let out = slot(out, "out")?;
        *out = with(handle, |s| {
            Ok(match s.resolve(&[name])?.pop().flatten() {
                Some(key) => s.missing(&[key])?.is_empty(),
                None => false,
            })
        })?;
        Ok(())
    })
}

/// The keys `n` names map to into `out_keys[n]`, and whether each is saved into
/// `out_found[n]`.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_resolve(
    handle: *const ObjstashStash,
    names: *const ObjstashBytes,
    n: usize,
    out_keys: *mut ObjstashKey,
    out_found: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let names = names_of(names, n)?;
        let keys = slots(out_keys, n, "out_keys")?;
        let found = slots(out_found, n, "out_found")?;
        let resolved = with(handle, |s| Ok(s.resolve(&names)?))?;
        for ((key_slot, found_slot), key) in keys.iter_mut().zip(found.iter_mut()).zip(resolved) {
            *found_slot = key.is_some();
            *key_slot = key.map(Into::into).unwrap_or_default();
        }
        Ok(())
    })
}

/// Removes `n` names (their objects stay) in one transaction; `out_removed[n]` (may be
/// null) whether each was saved.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_remove_named(
    handle: *const ObjstashStash,
    names: *const ObjstashBytes,
    n: usize,
    out_removed: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let names = names_of(names, n)?;
        let removed = with(handle, |s| Ok(s.remove_named(&names)?))?;
        if !out_removed.is_null() {
            slots(out_removed, n, "out_removed")?.copy_from_slice(&removed);
        }
        Ok(())
    })
}

/// Every name and the key it maps to, for a listing (`GetAllObjects`): `*out_names` an
/// array of `*out_n` buffers and `*out_keys` one of keys, both from the library (free each
/// name with `objstash_free_buffers`, then both arrays with `objstash_free`).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_names(
    handle: *const ObjstashStash,
    out_names: *mut *mut ObjstashBuffer,
    out_keys: *mut *mut ObjstashKey,
    out_n: *mut usize,
) -> ObjstashStatus {
    guard(|| {
        let (names_out, keys_out, n_out) =
            (slot(out_names, "out_names")?, slot(out_keys, "out_keys")?, slot(out_n, "out_n")?);
        let listed = with(handle, |s| Ok(s.names()?))?;
        let keys: Vec<ObjstashKey> =
            listed.iter().map(|(_, key)| ObjstashKey::from(*key)).collect();
        let (names, n) = buffer_array(listed.iter().map(|(name, _)| name.as_slice()))?;
        match malloc_array(&keys) {
            Ok(keys) => {
                (*names_out, *keys_out, *n_out) = (names, keys, n);
                Ok(())
            }
            Err(e) => {
                crate::memory::objstash_free_buffers(names, n);
                crate::memory::objstash_free(names.cast());
                Err(e)
            }
        }
    })
}
