//! The `Stash` class: one library handle, shared by every Python thread that uses it.
//!
//! The handle sits behind a read-write lock: calls take it for reading (so threads run
//! their calls at once, as the library allows), `close` takes it for writing and leaves
//! `None`, after which every call raises `ClosedError`. Calls run with the GIL released.

use std::path::PathBuf;
use std::sync::RwLock;

use objstash::{Codec, Durability, Key, Layout};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::convert;
use crate::errors;

/// A content-addressed object cache in one SQLite file (see the package documentation).
#[pyclass(module = "objstash._objstash", name = "Stash", subclass, frozen)]
pub struct Stash {
    inner: RwLock<Option<objstash::Stash>>,
    path: PathBuf,
}

/// What a call needs from the handle: run `f` on it with the GIL released.
impl Stash {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&objstash::Stash) -> objstash::Result<T> + Send,
    ) -> PyResult<T> {
        let result = py.detach(|| {
            let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
            guard.as_ref().map(f)
        });
        match result {
            Some(result) => result.map_err(errors::to_py),
            None => Err(errors::raise(
                py,
                "ClosedError",
                format!("the stash at {} is closed", self.path.display()),
            )),
        }
    }
}

fn parse<T: std::str::FromStr>(
    py: Python<'_>,
    what: &str,
    value: Option<&str>,
) -> PyResult<Option<T>>
where
    T::Err: std::fmt::Display,
{
    value
        .map(|v| {
            v.parse::<T>().map_err(|e| errors::raise(py, "SettingsError", format!("{what}: {e}")))
        })
        .transpose()
}

fn bytes_list<'py>(py: Python<'py>, values: Vec<Option<Vec<u8>>>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, values.into_iter().map(|v| v.map(|v| PyBytes::new(py, &v))))
}

/// A duration given in seconds: a finite number, at least 0.
fn seconds_arg(what: &str, seconds: f64) -> PyResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{what} must be a number of seconds, at least 0; got {seconds}"
        ))
    })
}

fn key_list(keys: &[Key]) -> Vec<String> {
    keys.iter().map(Key::to_string).collect()
}

#[pymethods]
impl Stash {
    /// Opens (or creates) the stash at `path`. Settings left as None use what the stash
    /// records (or the defaults for a new one): layout "single" or "bucketed", durability
    /// "fast" or "safe", codec "gzip" or "zstd-dict".
    #[new]
    #[pyo3(signature = (
        path, *, layout=None, durability=None, codec=None, create=true, read_only=false,
        reconfigure=false, max_object_size=None, threads=None, max_size=None,
        eviction_grace=None, use_resolution=None
    ))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, one per setting
    fn new(
        py: Python<'_>,
        path: PathBuf,
        layout: Option<&str>,
        durability: Option<&str>,
        codec: Option<&str>,
        create: bool,
        read_only: bool,
        reconfigure: bool,
        max_object_size: Option<u64>,
        threads: Option<usize>,
        max_size: Option<u64>,
        eviction_grace: Option<f64>,
        use_resolution: Option<f64>,
    ) -> PyResult<Self> {
        let mut builder =
            objstash::Stash::builder().create(create).read_only(read_only).reconfigure(reconfigure);
        if let Some(layout) = parse::<Layout>(py, "layout", layout)? {
            builder = builder.layout(layout);
        }
        if let Some(durability) = parse::<Durability>(py, "durability", durability)? {
            builder = builder.durability(durability);
        }
        if let Some(codec) = parse::<Codec>(py, "codec", codec)? {
            builder = builder.codec(codec);
        }
        if let Some(bytes) = max_object_size {
            builder = builder.max_object_size(bytes);
        }
        if let Some(threads) = threads {
            builder = builder.threads(threads);
        }
        if let Some(bytes) = max_size {
            builder = builder.max_size(bytes);
        }
        if let Some(seconds) = eviction_grace {
            builder = builder.eviction_grace(seconds_arg("eviction_grace", seconds)?);
        }
        if let Some(seconds) = use_resolution {
            builder = builder.use_resolution(seconds_arg("use_resolution", seconds)?);
        }
        let opened = py.detach(|| builder.open(&path)).map_err(errors::to_py)?;
        Ok(Stash { inner: RwLock::new(Some(opened)), path })
    }

    /// Stores an object (bytes, or str as UTF-8); returns its key (64 hex digits).
    fn save(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        let data = convert::object(data)?;
        Ok(self.with(py, |s| s.save(data))?.to_string())
    }

    /// Stores many objects, hashed and compressed in parallel; their keys in input order.
    fn save_all(&self, py: Python<'_>, objects: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let held = convert::collect(objects)?;
        let data = held.iter().map(convert::object).collect::<PyResult<Vec<&[u8]>>>()?;
        Ok(key_list(&self.with(py, |s| s.save_all(&data))?))
    }

    /// Stores objects and pins them: never evicted. Their keys in input order.
    fn save_pinned(&self, py: Python<'_>, objects: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let held = convert::collect(objects)?;
        let data = held.iter().map(convert::object).collect::<PyResult<Vec<&[u8]>>>()?;
        Ok(key_list(&self.with(py, |s| s.save_pinned(&data))?))
    }

    /// Pins stored objects; whether each is stored (and so pinned now).
    fn pin(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let keys = convert::keys(keys)?;
        self.with(py, |s| s.pin(&keys))
    }

    /// Unpins objects (a use now); whether each was pinned.
    fn unpin(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let keys = convert::keys(keys)?;
        self.with(py, |s| s.unpin(&keys))
    }

    /// The size cap the stash records, in bytes, or None.
    #[getter]
    fn max_size(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.with(py, objstash::Stash::max_size)
    }

    /// Records a size cap (None removes it); eviction down to it runs in the background.
    fn set_max_size(&self, py: Python<'_>, max_size: Option<u64>) -> PyResult<()> {
        self.with(py, |s| s.set_max_size(max_size))
    }

    /// Evicts least recently used objects until the files fit `max_size` bytes; returns
    /// (objects, stored bytes) evicted.
    fn trim_to(&self, py: Python<'_>, max_size: u64) -> PyResult<(u64, u64)> {
        let done = self.with(py, |s| s.trim_to(max_size))?;
        Ok((done.objects, done.stored_bytes))
    }

    /// Evicts unpinned objects not saved or read for `seconds`; returns (objects, stored
    /// bytes) evicted.
    fn evict_unused_since(&self, py: Python<'_>, seconds: f64) -> PyResult<(u64, u64)> {
        let age = seconds_arg("seconds", seconds)?;
        let done = self.with(py, |s| s.evict_unused_since(age))?;
        Ok((done.objects, done.stored_bytes))
    }

    /// The object under `key` (str or bytes), or None. Checked against its key.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = convert::key(key)?;
        let found = self.with(py, |s| s.get(&key))?;
        Ok(found.map(|v| PyBytes::new(py, &v)))
    }

    /// The objects under `keys`, in order, None where not stored.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let keys = convert::keys(keys)?;
        let found = self.with(py, |s| s.get_many(&keys))?;
        bytes_list(py, found)
    }

    /// Whether an object is stored under `key`.
    fn contains(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = convert::key(key)?;
        self.with(py, |s| s.contains(&key))
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.contains(py, key)
    }

    /// The keys among `keys` that are not stored, in input order (as hex str).
    fn missing(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let keys = convert::keys(keys)?;
        Ok(key_list(&self.with(py, |s| s.missing(&keys))?))
    }

    /// Deletes the object under `key` and its names; whether one was stored.
    fn remove(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = convert::key(key)?;
        self.with(py, |s| s.remove(&key))
    }

    /// Deletes objects (and their names) in one transaction; whether each was stored.
    fn remove_all(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let keys = convert::keys(keys)?;
        self.with(py, |s| s.remove_all(&keys))
    }

    /// Stores objects under names: an iterable of (name, bytes) pairs, a name being a str
    /// or bytes. Returns the keys in input order. A name saved again points to its new
    /// object.
    fn save_named(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let held: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> =
            items.try_iter()?.map(|item| item?.extract()).collect::<PyResult<_>>()?;
        let pairs = held
            .iter()
            .map(|(name, object)| Ok((convert::name(name)?, convert::object(object)?)))
            .collect::<PyResult<Vec<(&[u8], &[u8])>>>()?;
        Ok(key_list(&self.with(py, |s| s.save_named(&pairs))?))
    }

    /// The object saved under `name`, or None.
    fn get_named<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let name = convert::name(name)?;
        let found = self.with(py, |s| s.get_named(&[name]))?;
        Ok(found.into_iter().next().flatten().map(|v| PyBytes::new(py, &v)))
    }

    /// The objects saved under `names`, in order, None where not saved.
    fn get_many_named<'py>(
        &self,
        py: Python<'py>,
        names: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let held = convert::collect(names)?;
        let names = convert::names(&held)?;
        let found = self.with(py, |s| s.get_named(&names))?;
        bytes_list(py, found)
    }

    /// The key `name` maps to, or None.
    fn resolve(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let name = convert::name(name)?;
        let keys = self.with(py, |s| s.resolve(&[name]))?;
        Ok(keys.into_iter().next().flatten().map(|k| k.to_string()))
    }

    /// The keys `names` map to, in order, None where not saved.
    fn resolve_many(
        &self,
        py: Python<'_>,
        names: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<String>>> {
        let held = convert::collect(names)?;
        let names = convert::names(&held)?;
        let keys = self.with(py, |s| s.resolve(&names))?;
        Ok(keys.into_iter().map(|k| k.map(|k| k.to_string())).collect())
    }

    /// The names among `names` that are not saved, in input order, as given.
    fn missing_named<'py>(
        &self,
        py: Python<'py>,
        names: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let held = convert::collect(names)?;
        let slices = convert::names(&held)?;
        let keys = self.with(py, |s| s.resolve(&slices))?;
        Ok(held.into_iter().zip(keys).filter(|(_, k)| k.is_none()).map(|(n, _)| n).collect())
    }

    /// Deletes names (their objects stay) in one transaction; whether each was saved.
    fn remove_named(&self, py: Python<'_>, names: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let held = convert::collect(names)?;
        let names = convert::names(&held)?;
        self.with(py, |s| s.remove_named(&names))
    }

    /// Returns once everything saved and removed before is committed (on disk in safe
    /// mode).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, objstash::Stash::flush)
    }

    /// Flushes and closes the stash; later calls raise ClosedError. Closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = py.detach(|| self.inner.write().unwrap_or_else(|p| p.into_inner()).take());
        match taken {
            Some(stash) => py.detach(|| stash.close()).map_err(errors::to_py),
            None => Ok(()),
        }
    }

    /// Whether the stash is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.with(py, objstash::Stash::len)? as usize)
    }

    /// The path of the database file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The size report as a dict (the package turns it into `objstash.Stats`).
    fn _stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, objstash::Stash::stats)?;
        let d = PyDict::new(py);
        d.set_item("objects", s.objects)?;
        d.set_item("raw_bytes", s.raw_bytes)?;
        d.set_item("stored_bytes", s.stored_bytes)?;
        d.set_item("file_bytes", s.file_bytes)?;
        d.set_item("names", s.names)?;
        d.set_item("layout", s.layout.to_string())?;
        d.set_item("durability", s.durability.to_string())?;
        d.set_item("codec", s.codec.to_string())?;
        d.set_item("dictionaries", s.dictionaries)?;
        d.set_item("max_size", s.max_size)?;
        d.set_item("over_cap", s.over_cap())?;
        d.set_item("pinned_objects", s.pinned_objects)?;
        d.set_item("pinned_bytes", s.pinned_bytes)?;
        d.set_item("evicted_objects", s.evicted_objects)?;
        d.set_item("evicted_bytes", s.evicted_bytes)?;
        let oldest = s.oldest_use.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        d.set_item("oldest_use", oldest.map(|d| d.as_secs_f64()))?;
        Ok(d)
    }

    /// The integrity report as a dict (the package turns it into `objstash.VerifyReport`).
    fn _verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.with(py, objstash::Stash::verify)?;
        let d = PyDict::new(py);
        d.set_item("ok", r.is_ok())?;
        d.set_item("checked", r.checked)?;
        d.set_item("names", r.names)?;
        d.set_item("corrupt", key_list(&r.corrupt))?;
        d.set_item("unreachable", key_list(&r.unreachable))?;
        d.set_item("unnamed", r.unnamed)?;
        d.set_item("problems", r.problems.clone())?;
        d.set_item("text", r.to_string())?;
        Ok(d)
    }

    /// What opening found if the last session did not close cleanly, as text; else None.
    #[getter]
    fn recovery(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |s| Ok(s.recovery().map(ToString::to_string)))
    }

    /// The stash's settings: layout, durability, codec.
    #[getter]
    fn layout(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |s| Ok(s.layout().to_string()))
    }

    #[getter]
    fn durability(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |s| Ok(s.durability().to_string()))
    }

    #[getter]
    fn codec(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |s| Ok(s.codec().to_string()))
    }

    fn __repr__(&self) -> String {
        format!("Stash({:?})", self.path.display().to_string())
    }
}
