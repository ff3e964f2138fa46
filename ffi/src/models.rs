//! Models: a root object and the objects it lists, kept and evicted whole; whenever the
//! root can be read, every object it lists can, else the root reads as absent.
#![allow(unsafe_code)] // exports C symbols (`no_mangle`); the caller's pointers go through `memory.rs`

use objstash::{Key, Model};

use crate::handle::{ObjstashStash, with};
use crate::keys::ObjstashKey;
use crate::memory::{
    ObjstashBuffer, ObjstashBytes, borrow, buffer, buffer_array, bytes, malloc_array, slot,
};
use crate::objects::{keys_of, objects_of};
use crate::status::{Failure, ObjstashStatus, guard};

/// A model as the stash reports it. `name` is a buffer of the library's (free its `data`
/// with `objstash_free`), `{NULL, 0}` when the model has none.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ObjstashModel {
    pub root: ObjstashKey,
    pub name: ObjstashBuffer,
    /// Objects it lists, its root included.
    pub objects: u64,
    /// Of those, how many are not stored: while any is, the root reads as absent.
    pub missing: u64,
    pub stored_bytes: u64,
    /// Milliseconds since 1970 of its last use; -1 if none is known.
    pub last_use_ms: i64,
    pub pinned: bool,
}

fn model_of(model: &Model) -> Result<ObjstashModel, Failure> {
    let name = match &model.name {
        Some(name) => buffer(name)?,
        None => ObjstashBuffer::NONE,
    };
    let last_use_ms = model
        .last_use
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Ok(ObjstashModel {
        root: model.root.into(),
        name,
        objects: model.objects,
        missing: model.missing,
        stored_bytes: model.stored_bytes,
        last_use_ms,
        pinned: model.pinned,
    })
}

/// A name given as bytes: `{NULL, 0}` for none.
fn name_of<'a>(name: ObjstashBytes) -> Result<Option<&'a [u8]>, Failure> {
    if name.data.is_null() && name.len == 0 { Ok(None) } else { bytes(name, "name").map(Some) }
}

/// Saves a model: its `n` members, then its root, as one assembly, and declares it under
/// `name` (`{NULL, 0}` for none); `*out` the model (may be null).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_save_model(
    handle: *const ObjstashStash,
    root: ObjstashBytes,
    members: *const ObjstashBytes,
    n: usize,
    name: ObjstashBytes,
    out: *mut ObjstashModel,
) -> ObjstashStatus {
    guard(|| {
        let root = bytes(root, "root")?;
        let members = objects_of(members, n)?;
        let name = name_of(name)?;
        let model = with(handle, |s| {
            let assembly = s.assemble()?;
            let keys = assembly.save_all(&members)?;
            let root = assembly.save(root)?;
            Ok(match name {
                Some(name) => assembly.finish_named(name, &root, &keys)?,
                None => assembly.finish(&root, &keys)?,
            })
        })?;
        if !out.is_null() {
            *slot(out, "out")? = model_of(&model)?;
        }
        Ok(())
    })
}

/// Declares `root` a model of `n` member keys (the root need not be listed, nor any of them
/// stored yet), under `name` (`{NULL, 0}` for none); `*out` the model (may be null).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_declare_model(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    members: *const ObjstashKey,
    n: usize,
    name: ObjstashBytes,
    out: *mut ObjstashModel,
) -> ObjstashStatus {
    guard(|| {
        let root = Key::from(*borrow(root, "root")?);
        let members = keys_of(members, n)?;
        let name = name_of(name)?;
        let model = with(handle, |s| {
            Ok(match name {
                Some(name) => s.declare_named_model(name, &root, &members)?,
                None => s.declare_model(&root, &members)?,
            })
        })?;
        if !out.is_null() {
            *slot(out, "out")? = model_of(&model)?;
        }
        Ok(())
    })
}

/// The model of `root`: `*out_found`, and `*out` when found (complete when `missing` is 0).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_model(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    out: *mut ObjstashModel,
    out_found: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let root = Key::from(*borrow(root, "root")?);
        let (out, found) = (slot(out, "out")?, slot(out_found, "out_found")?);
        let model = with(handle, |s| Ok(s.model(&root)?))?;
        *found = model.is_some();
        if let Some(model) = model {
            *out = model_of(&model)?;
        }
        Ok(())
    })
}

fn on_model(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    out_found: *mut bool,
    f: impl FnOnce(&objstash::Stash, &Key) -> objstash::Result<bool>,
) -> ObjstashStatus {
    guard(|| {
        let root = Key::from(*borrow(root, "root")?);
        let found = with(handle, |s| Ok(f(s, &root)?))?;
        if !out_found.is_null() {
            *slot(out_found, "out_found")? = found;
        }
        Ok(())
    })
}

/// Pins the model of `root`: never evicted. `*out_found` (may be null): whether there is one.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_pin_model(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    out_found: *mut bool,
) -> ObjstashStatus {
    on_model(handle, root, out_found, |s, root| s.pin_model(root))
}

/// Unpins the model of `root` (a use now).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_unpin_model(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    out_found: *mut bool,
) -> ObjstashStatus {
    on_model(handle, root, out_found, |s, root| s.unpin_model(root))
}

/// Removes the model of `root`: its root and every object no other model lists.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_remove_model(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    out_found: *mut bool,
) -> ObjstashStatus {
    on_model(handle, root, out_found, |s, root| s.remove_model(root))
}

/// Every object of the complete model of `root`, root included, in the order the file
/// holds them (one sweep), each checked: `*out_keys` and `*out_objects` arrays of `*out_n`
/// from the library (free the objects with `objstash_free_buffers`, then both arrays with
/// `objstash_free`); `*out_found` false (and nothing allocated) when `root` is no complete
/// model.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_read_model(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    out_keys: *mut *mut ObjstashKey,
    out_objects: *mut *mut ObjstashBuffer,
    out_n: *mut usize,
    out_found: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let root = Key::from(*borrow(root, "root")?);
        let (keys_out, objects_out) =
            (slot(out_keys, "out_keys")?, slot(out_objects, "out_objects")?);
        let (n_out, found_out) = (slot(out_n, "out_n")?, slot(out_found, "out_found")?);
        let Some(read) = with(handle, |s| Ok(s.read_model(&root)?))? else {
            *found_out = false;
            *n_out = 0;
            *keys_out = std::ptr::null_mut();
            *objects_out = std::ptr::null_mut();
            return Ok(());
        };
        let keys: Vec<ObjstashKey> = read.iter().map(|(k, _)| (*k).into()).collect();
        let mut objects = vec![ObjstashBuffer::NONE; read.len()];
        crate::objects::fill(&mut objects, read.into_iter().map(|(_, o)| Some(o)).collect())?;
        let (k, o) = match (malloc_array(&keys), malloc_array(&objects)) {
            (Ok(k), Ok(o)) => (k, o),
            (k, o) => {
                crate::memory::objstash_free_buffers(objects.as_mut_ptr(), objects.len());
                if let Ok(k) = k {
                    crate::memory::objstash_free(k.cast());
                }
                if let Ok(o) = o {
                    crate::memory::objstash_free(o.cast());
                }
                return Err(Failure::Status(ObjstashStatus::Other, "out of memory".into()));
            }
        };
        *keys_out = k;
        *objects_out = o;
        *n_out = keys.len();
        *found_out = true;
        Ok(())
    })
}

/// Called by [`objstash_read_model_each`] for each object of a model: `key` and the
/// `len` bytes at `bytes` are borrowed for the call only. Returns 0 to go on, anything
/// else to stop.
pub type ObjstashModelObjectFn = Option<
    unsafe extern "C" fn(
        context: *mut std::ffi::c_void,
        key: *const ObjstashKey,
        bytes: *const u8,
        len: usize,
    ) -> i32,
>;

/// Streams the complete model of `root`: `callback(context, key, bytes, len)` for each of
/// its objects, root included, in the order the file holds them, each checked, a chunk at
/// a time (memory stays bounded however large the model), on the calling thread, all from
/// one snapshot (exactly the model that was complete when the call began). `*out_found`
/// false (and no call) when `root` is no complete model. A non-zero return from the
/// callback stops the stream; the call then returns `OBJSTASH_STATUS_OK`.
/// `OBJSTASH_STATUS_CORRUPT` for an object that does not check (the objects before it were
/// handed over).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_read_model_each(
    handle: *const ObjstashStash,
    root: *const ObjstashKey,
    callback: ObjstashModelObjectFn,
    context: *mut std::ffi::c_void,
    out_found: *mut bool,
) -> ObjstashStatus {
    guard(|| {
        let root = Key::from(*borrow(root, "root")?);
        let found_out = slot(out_found, "out_found")?;
        let Some(callback) = callback else {
            return Err(Failure::Status(
                ObjstashStatus::InvalidArgument,
                "callback is null".into(),
            ));
        };
        *found_out = with(handle, |s| {
            let Some(reader) = s.model_reader(&root)? else { return Ok(false) };
            for object in reader {
                let (key, bytes) = object?;
                let key = ObjstashKey::from(key);
                // SAFETY: the caller's callback, given what it was promised: a key and bytes
                // that live for the call.
                let stop = unsafe { callback(context, &key, bytes.as_ptr(), bytes.len()) };
                if stop != 0 {
                    break;
                }
            }
            Ok(true)
        })?;
        Ok(())
    })
}

/// The ids the JSON object `json` lists in its own `"__closure"`, by Speckle's rules
/// (`objstash::closure_ids`: the top-level object's field only, whatever its children's
/// references carry; blob ids left out; sorted, each once): `*out_ids` an array of `*out_n`
/// buffers from the library (free each with `objstash_free_buffers`, then the array with
/// `objstash_free`), null with `*out_n` 0 when it lists none.
/// `OBJSTASH_STATUS_INVALID_ARGUMENT` if `json` is not a JSON object or its `"__closure"` is
/// neither an object nor null.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_closure_ids(
    json: ObjstashBytes,
    out_ids: *mut *mut ObjstashBuffer,
    out_n: *mut usize,
) -> ObjstashStatus {
    guard(|| {
        let json = bytes(json, "json")?;
        let (ids_out, n_out) = (slot(out_ids, "out_ids")?, slot(out_n, "out_n")?);
        let ids = objstash::closure_ids(json)?;
        (*ids_out, *n_out) = buffer_array(ids.iter().map(|id| id.as_bytes()))?;
        Ok(())
    })
}
