//! Every named object as text in UTF-16, for a caller whose strings are UTF-16 (.NET): a
//! listing of the whole cache (`GetAllObjects` of Speckle's C# SDK) in one call. The
//! library reads the objects in file order in parallel (`Stash::named_objects`:
//! decompressed and checked) and converts them in parallel; the caller makes each string with one copy (`Marshal.PtrToStringUni`) instead
//! of a copy into an array and a UTF-8 decode of its own.
#![allow(unsafe_code)] // the caller's out pointers

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
        let listed = with(handle, |s| Ok(s.named_objects()?))?;
        let pairs: Vec<(&[u8], &[u8])> =
            listed.iter().map(|(name, object)| (name.as_slice(), object.as_slice())).collect();
        // Each text's length in code units, then its place: one pass to size the buffer.
        let lengths: Vec<[usize; 2]> =
            pairs.par_iter().map(|(name, object)| [units_of(name), units_of(object)]).collect();
        let mut spans = Vec::with_capacity(pairs.len() * 4);
        let mut total = 0;
        for [name, object] in &lengths {
            spans.extend([total as u64, *name as u64, (total + name) as u64, *object as u64]);
            total += name + object;
        }
        // One allocation of the caller's, each part of it converted into by one thread.
        let text = buffer_of_units(total)?;
        // SAFETY: `text.data` holds `total` code units (or is a 1-byte buffer when `total`
        // is 0), aligned for u16 (malloc's promise); this slice is its only view until the
        // function returns it.
        let out: &mut [u16] =
            unsafe { std::slice::from_raw_parts_mut(text.data.cast::<u16>(), total) };
        let mut rest = out;
        let mut parts = Vec::new();
        for (texts, sizes) in pairs.chunks(PART).zip(lengths.chunks(PART)) {
            let size: usize = sizes.iter().map(|[n, o]| n + o).sum();
            let (part, tail) = rest.split_at_mut(size);
            parts.push((texts, part));
            rest = tail;
        }
        parts.into_par_iter().for_each(|(texts, mut part)| {
            for (name, object) in texts {
                for text in [name, object] {
                    part = convert(text, part);
                }
            }
        });
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

/// The UTF-16 code units of `text` read as UTF-8 (invalid sequences as U+FFFD).
fn units_of(text: &[u8]) -> usize {
    if text.is_ascii() { text.len() } else { String::from_utf8_lossy(text).encode_utf16().count() }
}

/// Writes `text` as UTF-16 at the start of `out` ([`units_of`] long); the rest of `out`.
fn convert<'a>(text: &[u8], out: &'a mut [u16]) -> &'a mut [u16] {
    let n = units_of(text);
    let (here, rest) = out.split_at_mut(n);
    if text.is_ascii() {
        for (unit, &byte) in here.iter_mut().zip(text) {
            *unit = u16::from(byte);
        }
    } else {
        for (unit, code) in here.iter_mut().zip(String::from_utf8_lossy(text).encode_utf16()) {
            *unit = code;
        }
    }
    rest
}
