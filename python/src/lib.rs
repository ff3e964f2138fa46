//! The Python extension `objstash._objstash`: the library's [`objstash::Stash`] as a Python
//! class, its errors as a small exception hierarchy. The Python package around it
//! (`python/objstash/`) adds the dataclasses, the type stubs and the Speckle transport.
//!
//! Every call that does work (saving, reading, flushing, verifying) releases the GIL while
//! the library runs, so other Python threads go on; bytes handed in are borrowed from
//! their Python objects (immutable) rather than copied.

mod convert;
mod errors;
mod stash;

use pyo3::prelude::*;

#[pymodule]
fn _objstash(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<stash::Stash>()?;
    m.add("MAX_NAME_LEN", objstash::MAX_NAME_LEN)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
