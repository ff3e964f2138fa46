//! Keys: the blake3 hash of an object's bytes, as 32 bytes; of bytes, from and to the 64
//! hex digits the other interfaces print.
#![allow(unsafe_code)] // text pointers from and to the caller

use std::ffi::{CStr, c_char};

use objstash::Key;

use crate::memory::{ObjstashBytes, borrow, bytes, slot};
use crate::status::{ObjstashStatus, guard, refuse};

/// An object's key: 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjstashKey {
    pub bytes: [u8; 32],
}

impl From<Key> for ObjstashKey {
    fn from(key: Key) -> Self {
        ObjstashKey { bytes: *key.as_bytes() }
    }
}

impl From<ObjstashKey> for Key {
    fn from(key: ObjstashKey) -> Self {
        Key::from_bytes(key.bytes)
    }
}

/// The key `data` would be stored under, computed without storing it.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_key_of(data: ObjstashBytes, out: *mut ObjstashKey) -> ObjstashStatus {
    guard(|| {
        let out = slot(out, "out")?;
        *out = Key::of(bytes(data, "data")?).into();
        Ok(())
    })
}

/// The key spelled by `hex` (64 hex digits, NUL-terminated); `OBJSTASH_STATUS_INVALID_ARGUMENT`
/// for anything else.
#[unsafe(no_mangle)]
pub extern "C" fn objstash_key_from_hex(
    hex: *const c_char,
    out: *mut ObjstashKey,
) -> ObjstashStatus {
    guard(|| {
        let hex = borrow(hex, "hex")?;
        let out = slot(out, "out")?;
        // SAFETY: a NUL-terminated string the caller lends for the call.
        let text = unsafe { CStr::from_ptr(hex) };
        let parsed = text.to_str().ok().and_then(|t| t.parse::<Key>().ok());
        match parsed {
            Some(key) => {
                *out = key.into();
                Ok(())
            }
            None => refuse(
                ObjstashStatus::InvalidArgument,
                format!("{:?} is not a key: 64 hex digits", text.to_string_lossy()),
            ),
        }
    })
}

/// Writes the 64 hex digits of `key` and a NUL into `out` (65 bytes).
#[unsafe(no_mangle)]
pub extern "C" fn objstash_key_to_hex(key: *const ObjstashKey, out: *mut c_char) -> ObjstashStatus {
    guard(|| {
        let key = Key::from(*borrow(key, "key")?);
        let text = key.to_string();
        let out = crate::memory::slots(out, 65, "out")?;
        for (slot, byte) in out.iter_mut().zip(text.bytes().chain(std::iter::once(0))) {
            *slot = byte as c_char;
        }
        Ok(())
    })
}
