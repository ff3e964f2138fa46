//! `_closure_ids`: the ids a Speckle object lists in its own `__closure`, read by the
//! library's one parser (`objstash::closure_ids`, which C and .NET call too) without the
//! GIL. The transport reads them when it declares a model and when it reads one. Parsed by
//! `json.loads`, a root of 100,000 ids held the GIL for 54 ms, in a background thread,
//! which stalled the sender's own thread for as long (`notes/performance.md`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// The ids the JSON object `text` lists in its own `__closure`, sorted, each once, with
/// Speckle's blob ids left out; none if it has no such field or it is null. Raises
/// ValueError if `text` is not a JSON object, or the field is neither an object nor null.
#[pyfunction]
pub fn _closure_ids(py: Python<'_>, text: &Bound<'_, PyString>) -> PyResult<Vec<String>> {
    let text = text.to_str()?;
    py.detach(|| objstash::closure_ids(text.as_bytes()))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}
