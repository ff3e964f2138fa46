//! Large objects between Python and the library: a save from a path or a binary file
//! object (`Stash.save_file`), and an object read as a binary file object
//! (`Stash.open`, [`ObjectReader`]), both in bounded memory.
//!
//! A save runs with the GIL released; it takes the GIL back only to read a Python file
//! object and, every mebibyte, to check for signals, so Ctrl-C stops it within a fraction
//! of a second: the library's save fails, lets go of what it sent, and
//! `KeyboardInterrupt` is raised with nothing of the object stored. Since a save under way
//! may take the GIL, the fork hook releases it while it waits for calls (`lib.rs`).
//!
//! A reader holds the handle, not a connection: each read runs as a call on the handle, so
//! a fork, which closes and reopens the stash, never carries a connection across; the
//! library reader is opened again at the same position after a reopen.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use objstash::Key;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;
use crate::handle::{CallError, Handle};

/// Bytes read from the source between two checks for signals.
const SIGNAL_EVERY: usize = 1 << 20;

/// Where a save reads from.
pub enum Source {
    Path(PathBuf),
    /// A Python object with `read(n)` returning bytes.
    File(Py<PyAny>),
}

/// A source as the library reads it: the GIL taken for each Python read, signals checked.
struct Guarded {
    source: Opened,
    since_check: usize,
    /// A Python exception raised while reading (Ctrl-C, the file object's own error).
    raised: Arc<Mutex<Option<PyErr>>>,
}

/// A source opened for reading.
enum Opened {
    File(std::fs::File),
    Python(Py<PyAny>),
}

impl Guarded {
    fn fail(&self, err: PyErr) -> io::Error {
        *self.raised.lock().unwrap_or_else(PoisonError::into_inner) = Some(err);
        io::Error::other("interrupted by Python")
    }
}

impl Read for Guarded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.since_check >= SIGNAL_EVERY {
            self.since_check = 0;
            if let Err(err) = Python::attach(|py| py.check_signals()) {
                return Err(self.fail(err));
            }
        }
        let n = match &mut self.source {
            Opened::File(file) => file.read(buf)?,
            Opened::Python(py_file) => {
                let read = Python::attach(|py| -> PyResult<usize> {
                    let got = py_file.bind(py).call_method1("read", (buf.len(),))?;
                    let bytes = got.cast::<PyBytes>().map_err(|_| {
                        PyValueError::new_err(
                            "the file object's read() returned no bytes: open it in binary \
                             mode ('rb')",
                        )
                    })?;
                    let bytes = bytes.as_bytes();
                    if bytes.len() > buf.len() {
                        return Err(PyValueError::new_err("read(n) returned more than n bytes"));
                    }
                    buf[..bytes.len()].copy_from_slice(bytes);
                    Ok(bytes.len())
                });
                read.map_err(|err| self.fail(err))?
            }
        };
        self.since_check += n;
        Ok(n)
    }
}

/// Saves everything `source` yields (named `name` if given); the key, or the Python
/// exception that stopped it.
pub fn save(
    py: Python<'_>,
    handle: &Handle,
    source: Source,
    name: Option<Vec<u8>>,
) -> PyResult<Key> {
    let raised = Arc::new(Mutex::new(None));
    let source = match source {
        Source::Path(path) => Opened::File(std::fs::File::open(&path).map_err(|e| {
            let message = format!("cannot open {} to save it: {e}", path.display());
            // OSError(errno, ...) is the errno's subclass: FileNotFoundError, ...
            match e.raw_os_error() {
                Some(errno) => PyOSError::new_err((errno, message, path.display().to_string())),
                None => PyOSError::new_err(message),
            }
        })?),
        Source::File(file) => Opened::Python(file),
    };
    let guarded = Guarded { source, since_check: 0, raised: Arc::clone(&raised) };
    let reader = io::BufReader::with_capacity(1 << 20, guarded);
    let saved = py.detach(|| {
        handle.run(|stash| match &name {
            Some(name) => stash.save_reader_named(name, reader),
            None => stash.save_reader(reader),
        })
    });
    if let Some(err) = raised.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Err(err);
    }
    saved.map_err(errors::call_to_py)
}

/// An object opened for reading: a binary file object (`read`, `readinto`, `seek`, `tell`),
/// each chunk checked before its bytes are returned.
#[pyclass(module = "objstash._objstash", name = "ObjectReader", frozen)]
pub struct ObjectReader {
    handle: Arc<Handle>,
    key: Key,
    len: u64,
    state: Mutex<ReaderState>,
}

struct ReaderState {
    pos: u64,
    closed: bool,
    /// The library's reader and the handle generation it was opened in.
    open: Option<(u64, objstash::ObjectReader)>,
}

impl ObjectReader {
    /// Opens `key` on `handle`; `None` if it is not stored.
    pub fn open(py: Python<'_>, handle: &Arc<Handle>, key: Key) -> PyResult<Option<Self>> {
        let opened = py
            .detach(|| handle.run(|stash| Ok((handle.generation(), stash.open_reader(&key)?))))
            .map_err(errors::call_to_py)?;
        let (generation, Some(reader)) = opened else { return Ok(None) };
        Ok(Some(ObjectReader {
            handle: Arc::clone(handle),
            key,
            len: reader.len(),
            state: Mutex::new(ReaderState {
                pos: 0,
                closed: false,
                open: Some((generation, reader)),
            }),
        }))
    }

    /// Reads up to `buf.len()` bytes at the current position.
    fn read_into(&self, py: Python<'_>, buf: &mut [u8]) -> PyResult<usize> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.closed {
            return Err(PyValueError::new_err("I/O operation on a closed object reader"));
        }
        let key = self.key;
        let handle = &self.handle;
        let state = &mut *state;
        let read = py.detach(|| {
            handle.run(|stash| {
                let generation = handle.generation();
                if state.open.as_ref().is_none_or(|(g, _)| *g != generation) {
                    // Reopened since (a fork): open the object again where we were.
                    state.open = stash.open_reader(&key)?.map(|r| (generation, r));
                }
                let Some((_, reader)) = state.open.as_mut() else { return Ok(Err(None)) };
                if let Err(e) = reader.seek(SeekFrom::Start(state.pos)) {
                    return Ok(Err(Some(e)));
                }
                Ok(reader.read(buf).map_err(Some))
            })
        });
        match read {
            Ok(Ok(n)) => {
                state.pos += n as u64;
                Ok(n)
            }
            Ok(Err(None)) => Err(errors::raise(
                py,
                "NotFoundError",
                format!("object {key} was removed while it was read"),
            )),
            Ok(Err(Some(e))) => Err(io_to_py(e)),
            Err(e) => Err(errors::call_to_py(e)),
        }
    }
}

/// A failed read: the library's error inside it (a corrupt chunk) as its Python class.
fn io_to_py(e: io::Error) -> PyErr {
    match objstash::Error::from_io(e) {
        Ok(error) => errors::call_to_py(CallError::Stash(error)),
        Err(e) => PyOSError::new_err(e.to_string()),
    }
}

#[pymethods]
impl ObjectReader {
    /// Reads up to `size` bytes (all the rest when `size` is -1 or omitted).
    #[pyo3(signature = (size=-1))]
    fn read<'py>(&self, py: Python<'py>, size: i64) -> PyResult<Bound<'py, PyBytes>> {
        let pos = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.closed {
                return Err(PyValueError::new_err("I/O operation on a closed object reader"));
            }
            state.pos
        };
        let left = self.len.saturating_sub(pos);
        let want = if size < 0 { left } else { (size as u64).min(left) };
        let want = usize::try_from(want)
            .map_err(|_| PyValueError::new_err("the rest of the object does not fit memory"))?;
        let mut buf = vec![0u8; want];
        let mut filled = 0;
        while filled < want {
            let n = self.read_into(py, &mut buf[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        Ok(PyBytes::new(py, &buf))
    }

    /// Reads into a writable buffer (a bytearray, a memoryview); the bytes read.
    fn readinto(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        let mut buf = vec![0u8; buffer.len()?];
        let n = self.read_into(py, &mut buf)?;
        let slice = pyo3::types::PySlice::new(py, 0, n as isize, 1);
        buffer.set_item(slice, PyBytes::new(py, &buf[..n]))?;
        Ok(n)
    }

    /// Moves to `offset` from the start (`whence` 0), the current position (1) or the end
    /// (2); the new position.
    #[pyo3(signature = (offset, whence=0))]
    fn seek(&self, offset: i64, whence: i32) -> PyResult<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let base = match whence {
            0 => 0,
            1 => state.pos,
            2 => self.len,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "whence must be 0, 1 or 2, not {whence}"
                )));
            }
        };
        let target = base
            .checked_add_signed(offset)
            .ok_or_else(|| PyValueError::new_err("a seek before the start of the object"))?;
        state.pos = target;
        Ok(target)
    }

    fn tell(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).pos
    }

    fn readable(&self) -> bool {
        true
    }

    fn seekable(&self) -> bool {
        true
    }

    fn writable(&self) -> bool {
        false
    }

    /// The object's key.
    #[getter]
    fn key(&self) -> String {
        self.key.to_string()
    }

    /// The object's length in bytes.
    fn __len__(&self) -> usize {
        self.len as usize
    }

    fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.closed = true;
        state.open = None;
    }

    #[getter]
    fn closed(&self) -> bool {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).closed
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }
}
