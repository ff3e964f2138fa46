//! What crosses the boundary: the caller's bytes and arrays, borrowed for a call (checked
//! for null where they must not be), and what the library hands back, allocated with
//! `malloc` so that one function, `objstash_free` (or the C library's `free`), releases
//! all of it.
#![allow(unsafe_code)] // raw pointers from the caller, `malloc` and `free`

use std::ffi::c_void;

use crate::status::{Failure, ObjstashStatus, refuse};

/// Bytes the caller lends for a call: `data` may be null only when `len` is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ObjstashBytes {
    pub data: *const u8,
    pub len: usize,
}

/// Bytes the library returns: allocated with `malloc`, released with `objstash_free(data)`.
/// A null `data` (with `len` 0) owns nothing: an object not stored, a name not given.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ObjstashBuffer {
    pub data: *mut u8,
    pub len: usize,
}

impl ObjstashBuffer {
    pub(crate) const NONE: ObjstashBuffer = ObjstashBuffer { data: std::ptr::null_mut(), len: 0 };
}

/// The bytes `bytes` lends.
pub(crate) fn bytes<'a>(bytes: ObjstashBytes, what: &str) -> Result<&'a [u8], Failure> {
    if bytes.len == 0 {
        return Ok(&[]);
    }
    if bytes.data.is_null() {
        return refuse(
            ObjstashStatus::InvalidArgument,
            format!("{what}: null data of length {}", bytes.len),
        );
    }
    // SAFETY: the caller lends `len` readable bytes at `data` for the call.
    Ok(unsafe { std::slice::from_raw_parts(bytes.data, bytes.len) })
}

/// The `n` items at `items`: null only when `n` is 0.
pub(crate) fn slice<'a, T>(items: *const T, n: usize, what: &str) -> Result<&'a [T], Failure> {
    if n == 0 {
        return Ok(&[]);
    }
    if items.is_null() {
        return refuse(ObjstashStatus::InvalidArgument, format!("{what}: null array of {n}"));
    }
    // SAFETY: the caller lends `n` initialized items at `items` for the call.
    Ok(unsafe { std::slice::from_raw_parts(items, n) })
}

/// The caller's `n` output slots at `out`: null only when `n` is 0.
pub(crate) fn slots<'a, T>(out: *mut T, n: usize, what: &str) -> Result<&'a mut [T], Failure> {
    if n == 0 {
        return Ok(&mut []);
    }
    if out.is_null() {
        return refuse(
            ObjstashStatus::InvalidArgument,
            format!("{what}: null output array of {n}"),
        );
    }
    // SAFETY: the caller lends `n` writable items at `out` for the call; each is
    // overwritten whole (`T` is a plain C value: nothing is dropped).
    Ok(unsafe { std::slice::from_raw_parts_mut(out, n) })
}

/// The caller's output slot at `out`.
pub(crate) fn slot<'a, T>(out: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    if out.is_null() {
        return refuse(ObjstashStatus::InvalidArgument, format!("{what}: null output pointer"));
    }
    // SAFETY: the caller lends a writable `T` at `out` for the call.
    Ok(unsafe { &mut *out })
}

/// The caller's input at `value`.
pub(crate) fn borrow<'a, T>(value: *const T, what: &str) -> Result<&'a T, Failure> {
    if value.is_null() {
        return refuse(ObjstashStatus::InvalidArgument, format!("{what}: null pointer"));
    }
    // SAFETY: the caller lends a readable `T` at `value` for the call.
    Ok(unsafe { &*value })
}

/// `items` copied into memory from `malloc` (null for none).
pub(crate) fn malloc_array<T: Copy>(items: &[T]) -> Result<*mut T, Failure> {
    if items.is_empty() {
        return Ok(std::ptr::null_mut());
    }
    let size = std::mem::size_of_val(items);
    // SAFETY: a fresh allocation of `size` bytes, checked for null, aligned for any C
    // type (malloc's promise), filled whole from `items` before it is handed out.
    unsafe {
        let out = libc::malloc(size).cast::<T>();
        if out.is_null() {
            return refuse(ObjstashStatus::Other, format!("out of memory for {size} bytes"));
        }
        std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len());
        Ok(out)
    }
}

/// `data` as a buffer of the caller's.
pub(crate) fn buffer(data: &[u8]) -> Result<ObjstashBuffer, Failure> {
    if data.is_empty() {
        // A stored empty object is not "absent": one byte is allocated, none counted.
        // SAFETY: as in `malloc_array`.
        let one = unsafe { libc::malloc(1).cast::<u8>() };
        if one.is_null() {
            return refuse(ObjstashStatus::Other, "out of memory");
        }
        return Ok(ObjstashBuffer { data: one, len: 0 });
    }
    Ok(ObjstashBuffer { data: malloc_array(data)?, len: data.len() })
}

/// Each of `items` as a buffer of the caller's, in an array of the caller's (null for
/// none): what a call that returns a list of strings hands back. On failure nothing is left
/// allocated.
pub(crate) fn buffer_array<'a>(
    items: impl ExactSizeIterator<Item = &'a [u8]>,
) -> Result<(*mut ObjstashBuffer, usize), Failure> {
    let mut buffers = Vec::with_capacity(items.len());
    let made = items.map(buffer).try_for_each(|b| b.map(|b| buffers.push(b)));
    let array = made.and_then(|()| malloc_array(&buffers));
    match array {
        Ok(array) => Ok((array, buffers.len())),
        Err(e) => {
            objstash_free_buffers(buffers.as_mut_ptr(), buffers.len());
            Err(e)
        }
    }
}

/// Releases what the library returned: a buffer's `data`, an array. Null is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_free(ptr: *mut c_void) {
    // SAFETY: `ptr` came from this library's `malloc`, or is null.
    unsafe { libc::free(ptr) }
}

/// Releases the `data` of each of `n` buffers at `buffers` (not the array itself, which
/// is the caller's unless the library returned it: then `objstash_free` it too).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_free_buffers(buffers: *mut ObjstashBuffer, n: usize) {
    if buffers.is_null() {
        return;
    }
    // SAFETY: `n` buffers the library filled; each `data` from its `malloc` or null.
    let buffers = unsafe { std::slice::from_raw_parts_mut(buffers, n) };
    for b in buffers {
        // SAFETY: as above.
        unsafe { libc::free(b.data.cast()) };
        *b = ObjstashBuffer::NONE;
    }
}
