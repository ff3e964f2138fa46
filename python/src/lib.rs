//! The Python extension `objstash._objstash`: the library's [`objstash::Stash`] as a Python
//! class, its errors as a small exception hierarchy. The Python package around it
//! (`python/objstash/`) adds the dataclasses, the type stubs and the Speckle transport.
//!
//! Every call that does work (saving, reading, flushing, verifying) releases the GIL while
//! the library runs, so other Python threads go on; bytes handed in are borrowed from
//! their Python objects (immutable) rather than copied.

mod calls;
mod closure;
mod convert;
mod errors;
mod handle;
mod model_stream;
mod models;
mod recovery;
mod remote;
mod signals;
mod sigterm;
mod stash;
mod stream;
mod traces;

use pyo3::prelude::*;

/// Before `os.fork`: stops the SIGTERM thread, then closes every open stash, committing
/// what was saved; the next call in either process reopens it (registered by the package
/// with `os.register_at_fork`).
///
/// The GIL is released while it waits for calls under way: a streaming save takes it to
/// read a Python file object (`stream.rs`).
#[pyfunction]
fn _before_fork(py: Python<'_>) {
    py.detach(|| {
        sigterm::before_fork();
        handle::suspend_all();
    });
}

/// After `os.fork`, in the parent: starts the SIGTERM thread again.
#[pyfunction]
fn _after_fork_in_parent() -> PyResult<()> {
    Ok(sigterm::after_fork_in_parent()?)
}

/// After `os.fork`, in the child: a SIGTERM pipe and thread of the child's own.
#[pyfunction]
fn _after_fork_in_child() -> PyResult<()> {
    Ok(sigterm::after_fork_in_child()?)
}

/// Makes SIGTERM commit what every stash saved and then end the process, if SIGTERM is at
/// its default (see `sigterm.rs`); returns whether it does.
#[pyfunction]
fn _take_sigterm() -> PyResult<bool> {
    Ok(sigterm::take()?)
}

/// Closes every stash (the package calls it at interpreter exit). Failures go to stderr.
#[pyfunction]
fn _close_all(py: Python<'_>) {
    py.detach(handle::close_all);
}

/// The key an object is stored under (64 hex digits: the blake3 hash of its bytes, or of
/// a str's UTF-8), computed without storing it.
#[pyfunction]
fn key_of(data: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(objstash::Key::of(&convert::object(data)?).to_string())
}

#[pymodule]
fn _objstash(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<stash::Stash>()?;
    m.add_class::<stash::KeyIterator>()?;
    m.add_class::<stream::ObjectReader>()?;
    m.add_class::<models::Assembly>()?;
    m.add_class::<model_stream::ModelIterator>()?;
    m.add_function(wrap_pyfunction!(_before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_in_parent, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(_take_sigterm, m)?)?;
    m.add_function(wrap_pyfunction!(_close_all, m)?)?;
    m.add_function(wrap_pyfunction!(key_of, m)?)?;
    m.add_function(wrap_pyfunction!(traces::trace_to_logging, m)?)?;
    m.add_function(wrap_pyfunction!(traces::_stop_tracing, m)?)?;
    m.add_function(wrap_pyfunction!(closure::_closure_ids, m)?)?;
    m.add_function(wrap_pyfunction!(recovery::_repair, m)?)?;
    m.add("MAX_NAME_LEN", objstash::MAX_NAME_LEN)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
