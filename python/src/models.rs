//! Models in Python: the `Stash` methods that declare, list, pin, remove and read models,
//! and the `Assembly` class, a model being assembled (`Stash.assemble()`), usable as a
//! context manager.
//!
//! The library's `Assembly` borrows its stash; a Python object cannot, so the class keeps
//! the assembly's id and resumes it for each call ([`objstash::Stash::resume_assembly`]).
//! An assembly belongs to the process that began it: after a fork the child's calls on an
//! inherited one raise, and the parent's go on (if the parent's reopen found the stash
//! alone and gave the assembly up, its saves are loose and its finish declares the model
//! afresh, as the library documents).

use std::sync::{Arc, Mutex, PoisonError};

use objstash::{AssemblyId, Key, Model};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::convert;
use crate::errors;
use crate::handle::Handle;

/// A model as the package's `objstash.Model` (`objstash/models.py`).
pub fn model_object<'py>(py: Python<'py>, model: &Model) -> PyResult<Bound<'py, PyAny>> {
    let d = PyDict::new(py);
    d.set_item("root", model.root.to_string())?;
    let name = model.name.as_ref().map(|name| name_object(py, name));
    d.set_item("name", name)?;
    d.set_item("objects", model.objects)?;
    d.set_item("missing", model.missing)?;
    d.set_item("stored_bytes", model.stored_bytes)?;
    let used = model.last_use.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    d.set_item("last_use", used.map(|d| d.as_secs_f64()))?;
    d.set_item("pinned", model.pinned)?;
    py.import("objstash.models")?.getattr("Model")?.call((), Some(&d))
}

/// A model's objects as a list of (key, bytes) pairs.
pub fn objects_list<'py>(
    py: Python<'py>,
    objects: Vec<(Key, Vec<u8>)>,
) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        objects.into_iter().map(|(key, bytes)| (key.to_string(), PyBytes::new(py, &bytes))),
    )
}

/// A name as Python sees it: a str if it is UTF-8, else bytes.
fn name_object<'py>(py: Python<'py>, name: &[u8]) -> Bound<'py, PyAny> {
    match std::str::from_utf8(name) {
        Ok(text) => PyString::new(py, text).into_any(),
        Err(_) => PyBytes::new(py, name).into_any(),
    }
}

/// An optional name's bytes.
pub fn optional_name(name: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u8>>> {
    name.filter(|n| !n.is_none()).map(|n| convert::name(n).map(|n| n.into_owned())).transpose()
}

/// A model being assembled (see `Stash.assemble`).
#[pyclass(module = "objstash._objstash", name = "Assembly", frozen)]
pub struct Assembly {
    handle: Arc<Handle>,
    /// `None` once finished or given up.
    id: Mutex<Option<AssemblyId>>,
    /// The process that began it.
    pid: u32,
}

/// What `Assembly.finish_closure` answers: the model declared, and the names not stored.
type ClosureFinished<'py> = (Option<Bound<'py, PyAny>>, Vec<Bound<'py, PyAny>>);
/// What `Assembly.finish_closure_read` returns: `finish_closure`'s, and the objects read.
type ClosureRead<'py> =
    (Option<Bound<'py, PyAny>>, Vec<Bound<'py, PyAny>>, Option<Bound<'py, PyList>>);

/// What `Assembly.finish_closure` found: the root's key and the members' to declare, no
/// object saved under the root's name, or the names of the closure that are not stored.
enum Closure {
    Members(Key, Vec<Key>),
    NoRoot,
    Absent(Vec<Vec<u8>>),
}

impl Assembly {
    pub fn begin(py: Python<'_>, handle: &Arc<Handle>) -> PyResult<Assembly> {
        let id = handle.with(py, |s| Ok(s.assemble()?.detach()))?;
        Ok(Assembly {
            handle: Arc::clone(handle),
            id: Mutex::new(Some(id)),
            pid: std::process::id(),
        })
    }

    /// The id of an assembly under way in this process, or the error to raise.
    fn current(&self, py: Python<'_>) -> PyResult<AssemblyId> {
        if std::process::id() != self.pid {
            return Err(errors::raise(
                py,
                "Error",
                "this assembly was begun by another process (before a fork): begin one \
                 here with Stash.assemble()"
                    .to_string(),
            ));
        }
        let id = *self.id.lock().unwrap_or_else(PoisonError::into_inner);
        id.ok_or_else(|| {
            errors::raise(py, "Error", "this assembly is finished or given up".to_string())
        })
    }

    /// Runs `f` on the assembly, resumed, with the GIL released; it stays under way.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&objstash::Assembly<'_>) -> objstash::Result<T> + Send,
    ) -> PyResult<T> {
        let id = self.current(py)?;
        self.handle.with(py, |s| {
            let assembly = s.resume_assembly(id);
            let done = f(&assembly);
            let _ = assembly.detach();
            done
        })
    }

    /// Runs `f` on each chunk of `items` on the assembly (as `Handle::chunked`).
    fn chunked<'a, I: Sync, T: Send>(
        &self,
        py: Python<'_>,
        items: &'a [I],
        size: impl Fn(&I) -> usize,
        f: impl Fn(&objstash::Assembly<'_>, &'a [I]) -> objstash::Result<Vec<T>> + Sync,
    ) -> PyResult<Vec<T>> {
        let id = self.current(py)?;
        self.handle.chunked(py, items, size, |s, chunk| {
            let assembly = s.resume_assembly(id);
            let done = f(&assembly, chunk);
            let _ = assembly.detach();
            done
        })
    }

    /// Ends the assembly: `f` finishes it (or gives it up) on the stash.
    fn end<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(objstash::Assembly<'_>) -> objstash::Result<T> + Send,
    ) -> PyResult<T> {
        let id = self.current(py)?;
        *self.id.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.handle.with(py, |s| f(s.resume_assembly(id)))
    }

    /// The members of a closure, by name: the names are looked up, and those the assembly
    /// did not save or hold are held now, if stored.
    fn closure_members(
        &self,
        py: Python<'_>,
        root: &Bound<'_, PyAny>,
        closure: &[std::borrow::Cow<'_, [u8]>],
    ) -> PyResult<Closure> {
        let root = convert::name(root)?.into_owned();
        let id = self.current(py)?;
        self.handle.with(py, |s| {
            let Some(root) = s.resolve(&[&root[..]])?[0] else { return Ok(Closure::NoRoot) };
            let assembly = s.resume_assembly(id);
            let members = assembly.hold_named(closure);
            let _ = assembly.detach();
            let members = members?;
            if members.contains(&None) {
                let absent = closure.iter().zip(&members).filter(|(_, k)| k.is_none());
                return Ok(Closure::Absent(absent.map(|(n, _)| n.to_vec()).collect()));
            }
            Ok(Closure::Members(root, members.into_iter().flatten().collect()))
        })
    }

    /// Finishes the assembly as the model of `root` and `members`, under `name` if given:
    /// the model as it stands (an `objstash.Model`).
    fn declare<'py>(
        &self,
        py: Python<'py>,
        root: &Key,
        members: &[Key],
        name: Option<Vec<u8>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let model = self.end(py, |a| match name {
            Some(name) => a.finish_named(name, root, members),
            None => a.finish(root, members),
        })?;
        model_object(py, &model)
    }
}

#[pymethods]
impl Assembly {
    /// Saves an object into the assembly; its key.
    fn save(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        crate::sigterm::keep();
        let data = convert::object(data)?;
        Ok(self.with(py, |a| a.save(&data))?.to_string())
    }

    /// Saves objects into the assembly; their keys in input order.
    fn save_all(&self, py: Python<'_>, objects: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        crate::sigterm::keep();
        let held = convert::collect(objects, "objects")?;
        let data = held.iter().map(convert::object).collect::<PyResult<Vec<_>>>()?;
        self.handle.check_sizes(py, &data)?;
        let keys = self.chunked(py, &data, |o| o.len(), |a, chunk| a.save_all(chunk))?;
        Ok(keys.iter().map(Key::to_string).collect())
    }

    /// Saves objects under names into the assembly (as `Stash.save_named`); their keys.
    fn save_named(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        crate::sigterm::keep();
        let held = crate::convert::pairs(items)?;
        let pairs = crate::convert::named_objects(py, &held)?;
        let data: Vec<std::borrow::Cow<'_, [u8]>> =
            pairs.iter().map(|(_, o)| std::borrow::Cow::Borrowed(&o[..])).collect();
        self.handle.check_sizes(py, &data)?;
        let keys = self.chunked(py, &pairs, |(_, o)| o.len(), |a, chunk| a.save_named(chunk))?;
        Ok(keys.iter().map(Key::to_string).collect())
    }

    /// Holds the stored objects of `keys` for the assembly; whether each is stored.
    fn hold(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let keys = convert::keys(keys)?;
        self.chunked(py, &keys, |_| 0, |a, chunk| a.hold(chunk))
    }

    /// The keys among `keys` that are not stored, holding the others for the assembly.
    fn missing(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let keys = convert::keys(keys)?;
        let missing = self.chunked(py, &keys, |_| 0, |a, chunk| a.missing(chunk))?;
        Ok(missing.iter().map(Key::to_string).collect())
    }

    /// Holds the stored objects saved under `names`; the key of each stored one, None for
    /// the others, in input order.
    fn hold_named(
        &self,
        py: Python<'_>,
        names: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<String>>> {
        let held = convert::collect(names, "names")?;
        let names = convert::names(&held)?;
        let keys = self.chunked(py, &names, |_| 0, |a, chunk| a.hold_named(chunk))?;
        Ok(keys.into_iter().map(|k| k.map(|k| k.to_string())).collect())
    }

    /// Declares the model of the object saved under the name `root`, its members the
    /// objects saved under the names of `closure` (those the assembly did not save or hold
    /// are held now, if stored): the names are looked up here, so that a caller saving by
    /// name need not keep the keys (the Speckle transport declares off its sender's path).
    /// Returns `(model, absent)`: the model declared (an `objstash.Model`) and no names;
    /// or, leaving the assembly under way, None and the names of `closure` that are not
    /// stored (none if no object is saved under `root`).
    #[pyo3(signature = (root, closure, name=None))]
    fn finish_closure<'py>(
        &self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
        closure: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<ClosureFinished<'py>> {
        let held = convert::collect(closure, "closure")?;
        let closure = convert::names(&held)?;
        let name = optional_name(name)?;
        match self.closure_members(py, root, &closure)? {
            Closure::NoRoot => Ok((None, Vec::new())),
            Closure::Absent(absent) => {
                let names = absent.iter().map(|n| name_object(py, n)).collect();
                Ok((None, names))
            }
            Closure::Members(root, members) => {
                Ok((Some(self.declare(py, &root, &members, name)?), Vec::new()))
            }
        }
    }

    /// `finish_closure`, and if the model is complete its objects, read in the transaction
    /// that declares it (so another process that evicts or removes the model once it is
    /// declared cannot take them from the caller): `(model, absent, objects)`, `objects` a
    /// list of `(name, bytes)`, one for each name of `closure`, or None.
    #[pyo3(signature = (root, closure, name=None))]
    fn finish_closure_read<'py>(
        &self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
        closure: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<ClosureRead<'py>> {
        let held = convert::collect(closure, "closure")?;
        let closure = convert::names(&held)?;
        let name = optional_name(name)?;
        let (root, members) = match self.closure_members(py, root, &closure)? {
            Closure::NoRoot => return Ok((None, Vec::new(), None)),
            Closure::Absent(absent) => {
                let names = absent.iter().map(|n| name_object(py, n)).collect();
                return Ok((None, names, None));
            }
            Closure::Members(root, members) => (root, members),
        };
        let (model, objects) =
            self.end(py, |a| a.finish_and_read(name.as_deref(), &root, &members))?;
        let objects = match objects {
            Some(objects) => {
                let by_key: std::collections::HashMap<Key, Vec<u8>> = objects.into_iter().collect();
                let named = closure.iter().zip(&members).filter_map(|(name, key)| {
                    let bytes = by_key.get(key)?;
                    Some((name_object(py, name), PyBytes::new(py, bytes)))
                });
                Some(PyList::new(py, named)?)
            }
            None => None,
        };
        Ok((Some(model_object(py, &model)?), Vec::new(), objects))
    }

    /// Declares the model of `root` and `members` (keys; the root need not be listed),
    /// under `name` if given; what the assembly held that it does not list goes back to
    /// being loose. The model as it stands (an `objstash.Model`).
    #[pyo3(signature = (root, members, name=None))]
    fn finish<'py>(
        &self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
        members: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let root = convert::key(root)?;
        let members = convert::keys(members)?;
        let name = optional_name(name)?;
        self.declare(py, &root, &members, name)
    }

    /// Gives the assembly up: what it held goes back to being loose. Nothing if it is
    /// finished or given up already.
    fn give_up(&self, py: Python<'_>) -> PyResult<()> {
        if self.id.lock().unwrap_or_else(PoisonError::into_inner).is_none() {
            return Ok(());
        }
        self.end(py, |a| {
            a.give_up();
            Ok(())
        })
    }

    /// Whether it is under way (neither finished nor given up).
    #[getter]
    fn active(&self) -> bool {
        self.id.lock().unwrap_or_else(PoisonError::into_inner).is_some()
            && std::process::id() == self.pid
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving the block unfinished (by an exception, or without `finish`) gives it up.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        if self.active() {
            self.give_up(py)?;
        }
        Ok(false)
    }
}

impl Drop for Assembly {
    /// An assembly dropped unfinished is given up (in the process that began it).
    fn drop(&mut self) {
        let id = self.id.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(id) = id
            && std::process::id() == self.pid
        {
            let _ = self.handle.run(|s| {
                s.resume_assembly(id).give_up();
                Ok(())
            });
        }
    }
}
