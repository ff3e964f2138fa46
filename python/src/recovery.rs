//! Recovery in Python: the report of a rebuild (after a crash, on damage found, or by
//! `objstash.repair`) as a dict the package makes `objstash.RecoveryReport`, and `repair`.

use objstash::{RecoveryReport, Trigger};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert;
use crate::errors;

/// A recovery report as a dict.
pub fn report<'py>(py: Python<'py>, r: &RecoveryReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let trigger = match r.trigger {
        Trigger::Repair => "repair",
        Trigger::DamageFound => "damage-found",
        _ => "unclean-shutdown",
    };
    d.set_item("trigger", trigger)?;
    d.set_item("problem", r.problem.clone())?;
    d.set_item("recovered", r.recovered)?;
    d.set_item("dropped", r.dropped)?;
    d.set_item("claimed", r.claimed)?;
    d.set_item("lost", r.lost())?;
    d.set_item("lost_anything", r.lost_anything())?;
    d.set_item("names_recovered", r.names_recovered)?;
    d.set_item("lost_names", r.lost_names())?;
    d.set_item("damaged_copy", r.damaged_copy.as_ref().map(|p| p.to_string_lossy().into_owned()))?;
    d.set_item("text", r.to_string())?;
    Ok(d)
}

/// Checks the stash at `path` and, if anything is wrong, rebuilds it from every object
/// that verifies, keeping the damaged file aside when anything was lost (as a dict: the
/// package makes it `objstash.RecoveryReport`). Every handle must be closed.
#[pyfunction]
pub fn _repair<'py>(py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let path = convert::path(path)?;
    let done = py.detach(|| crate::signals::blocked(|| objstash::repair(&path)));
    report(py, &done.map_err(errors::to_py)?)
}
