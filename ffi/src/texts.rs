//! Every named object as text in UTF-16, for a caller whose strings are UTF-16 (.NET): a
//! listing of the whole cache (`GetAllObjects` of Speckle's C# SDK) in one call. The
//! library reads the objects in parallel (decompressed and checked) and converts them in
//! parallel; the caller makes each string with one copy (`Marshal.PtrToStringUni`) instead
//! of a copy into an array and a UTF-8 decode of its own.
#![allow(unsafe_code)] // the caller's out pointers

use objstash::Key;
use rayon::prelude::*;

use crate::handle::{ObjstashStash, with};
use crate::memory::{ObjstashBuffer, buffer, malloc_array, slot};
use crate::status::{Failure, ObjstashStatus, guard, refuse};

/// Names and objects converted at a time by one thread.
const PART: usize = 4096;

/// Every named object, as UTF-16 text (invalid UTF-8 replaced by U+FFFD, as .NET's decoder
/// does): `*out_text` holds the code units of every name and object one after another
/// (native byte order; `len` counts bytes), and `*out_spans` (4 × `*out_n` integers) where
/// each entry's name and object are: code-unit offset and length of the name, then of the
/// object. Names whose object is not stored (removed since, or the root of an incomplete
/// model) are left out. Free both with `objstash_free`.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_named_texts(
    handle: *const ObjstashStash,
    out_text: *mut ObjstashBuffer,
    out_spans: *mut *mut u64,
    out_n: *mut usize,
) -> ObjstashStatus {
    guard(|| {
        let (text_out, spans_out, n_out) =
            (slot(out_text, "out_text")?, slot(out_spans, "out_spans")?, slot(out_n, "out_n")?);
        let (names, objects) = with(handle, |s| {
            let names = s.names()?;
            let keys: Vec<Key> = names.iter().map(|(_, key)| *key).collect();
            let objects = s.get_many(&keys)?;
            Ok((names, objects))
        })?;
        let pairs: Vec<(&[u8], &[u8])> = names
            .iter()
            .zip(&objects)
            .filter_map(|((name, _), object)| Some((name.as_slice(), object.as_deref()?)))
            .collect();
        // Each part converted on its own, its spans relative to it; then laid end to end.
        let parts: Vec<(Vec<u16>, Vec<u64>)> = pairs
            .par_chunks(PART)
            .map(|part| {
                let mut units = Vec::new();
                let mut spans = Vec::with_capacity(part.len() * 4);
                for (name, object) in part {
                    for text in [name, object] {
                        let start = units.len();
                        units.extend(String::from_utf8_lossy(text).encode_utf16());
                        spans.extend([start as u64, (units.len() - start) as u64]);
                    }
                }
                (units, spans)
            })
            .collect();
        let total: usize = parts.iter().map(|(units, _)| units.len()).sum();
        // One allocation of the caller's, each part copied in once.
        let text = buffer_of_units(total)?;
        let mut spans = Vec::with_capacity(pairs.len() * 4);
        let mut at = 0;
        for (part_units, part_spans) in parts {
            spans.extend(part_spans.chunks(2).flat_map(|s| [s[0] + at as u64, s[1]]));
            // SAFETY: `text.data` holds `total` code units; the parts' lengths sum to it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    part_units.as_ptr(),
                    text.data.cast::<u16>().add(at),
                    part_units.len(),
                );
            }
            at += part_units.len();
        }
        match malloc_array(&spans) {
            Ok(spans) => {
                (*text_out, *spans_out, *n_out) = (text, spans, pairs.len());
                Ok(())
            }
            Err(e) => {
                crate::memory::objstash_free(text.data.cast());
                Err(e)
            }
        }
    })
}

/// A buffer of the caller's for `units` UTF-16 code units (`len` in bytes), uninitialised.
fn buffer_of_units(units: usize) -> Result<ObjstashBuffer, Failure> {
    let bytes = units * 2;
    if bytes == 0 {
        return buffer(&[]);
    }
    // SAFETY: a fresh allocation checked for null; malloc aligns it for any C type.
    let data = unsafe { libc::malloc(bytes).cast::<u8>() };
    if data.is_null() {
        return refuse(ObjstashStatus::Other, format!("out of memory for {bytes} bytes"));
    }
    Ok(ObjstashBuffer { data, len: bytes })
}
