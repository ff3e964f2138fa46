//! The `Stash` class: one library handle ([`Handle`]), shared by every Python thread that
//! uses it and carried across forks. Calls run with the GIL released, long ones answering
//! Ctrl-C (`calls.rs`); models' calls are in `models.rs`.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use objstash::{Codec, Durability, Key, Layout, Values};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::convert;
use crate::errors;
use crate::handle::{CallError, Handle};
use crate::models;
use crate::remote;
use crate::stream;

/// A content-addressed object cache in one SQLite file (see the package documentation).
#[pyclass(module = "objstash._objstash", name = "Stash", subclass, frozen)]
pub struct Stash {
    pub(crate) handle: Arc<Handle>,
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
fn seconds_arg(what: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        PyValueError::new_err(format!(
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
    /// "fast" or "safe", codec "gzip" or "zstd-dict", values "rows" or "file".
    #[new]
    #[pyo3(signature = (
        path, *, layout=None, durability=None, codec=None, values=None, create=true,
        read_only=false,
        reconfigure=false, max_object_size=None, threads=None, max_size=None,
        eviction_grace=None, use_resolution=None, busy_timeout=None, remote=None
    ))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, one per setting
    fn new(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        layout: Option<&str>,
        durability: Option<&str>,
        codec: Option<&str>,
        values: Option<&str>,
        create: bool,
        read_only: bool,
        reconfigure: bool,
        max_object_size: Option<i128>,
        threads: Option<i128>,
        max_size: Option<i128>,
        eviction_grace: Option<f64>,
        use_resolution: Option<f64>,
        busy_timeout: Option<f64>,
        remote: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let path = convert::path(path)?;
        // What every open of this handle uses, a reopen after a fork included; the
        // recorded settings (layout, durability, codec, cap) the reopen finds in the stash.
        let mut base = objstash::Stash::builder().read_only(read_only);
        if let Some(bytes) = max_object_size {
            base = base.max_object_size(convert::unsigned("max_object_size", bytes)?);
        }
        if let Some(threads) = threads {
            let threads = convert::unsigned("threads", threads)?;
            base = base.threads(usize::try_from(threads).unwrap_or(usize::MAX));
        }
        if let Some(seconds) = eviction_grace {
            base = base.eviction_grace(seconds_arg("eviction_grace", seconds)?);
        }
        if let Some(seconds) = use_resolution {
            base = base.use_resolution(seconds_arg("use_resolution", seconds)?);
        }
        if let Some(seconds) = busy_timeout {
            base = base.busy_timeout(seconds_arg("busy_timeout", seconds)?);
        }
        if let Some(remote) = remote.filter(|r| !r.is_none()) {
            base = base.remote(remote::config(py, remote)?);
        }
        let mut first = base.clone().create(create).reconfigure(reconfigure);
        if let Some(layout) = parse::<Layout>(py, "layout", layout)? {
            first = first.layout(layout);
        }
        if let Some(durability) = parse::<Durability>(py, "durability", durability)? {
            first = first.durability(durability);
        }
        if let Some(codec) = parse::<Codec>(py, "codec", codec)? {
            first = first.codec(codec);
        }
        // Where a new stash keeps its values; a reopen finds them where the stash keeps them.
        if let Some(values) = parse::<Values>(py, "values", values)? {
            first = first.values(values);
        }
        if let Some(bytes) = max_size {
            first = first.max_size(convert::unsigned("max_size", bytes)?);
        }
        let reopen = base.create(false);
        let handle = py.detach(|| Handle::open(path, first, reopen)).map_err(errors::to_py)?;
        Ok(Stash { handle })
    }

    /// Stores an object (bytes-like, or str as UTF-8); returns its key (64 hex digits).
    fn save(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        crate::sigterm::keep();
        let data = convert::object(data)?;
        Ok(self.handle.with(py, |s| s.save(&data))?.to_string())
    }

    /// Stores many objects, hashed and compressed in parallel; their keys in input order.
    fn save_all(&self, py: Python<'_>, objects: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        crate::sigterm::keep();
        let held = convert::collect(objects, "objects")?;
        let data = held.iter().map(convert::object).collect::<PyResult<Vec<_>>>()?;
        self.handle.check_sizes(py, &data)?;
        let keys = self.handle.chunked(py, &data, |o| o.len(), |s, chunk| s.save_all(chunk))?;
        Ok(key_list(&keys))
    }

    /// Stores objects and pins them: never evicted. Their keys in input order.
    fn save_pinned(&self, py: Python<'_>, objects: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        crate::sigterm::keep();
        let held = convert::collect(objects, "objects")?;
        let data = held.iter().map(convert::object).collect::<PyResult<Vec<_>>>()?;
        self.handle.check_sizes(py, &data)?;
        let keys = self.handle.chunked(py, &data, |o| o.len(), |s, chunk| s.save_pinned(chunk))?;
        Ok(key_list(&keys))
    }

    /// Pins stored objects; whether each is stored (and so pinned now).
    fn pin(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let keys = convert::keys(keys)?;
        self.handle.waiting(py, move |s| s.pin(&keys))
    }

    /// Unpins objects (a use now); whether each was pinned.
    fn unpin(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let keys = convert::keys(keys)?;
        self.handle.waiting(py, move |s| s.unpin(&keys))
    }

    /// The size cap the stash records, in bytes, or None.
    #[getter]
    fn max_size(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.handle.with(py, objstash::Stash::max_size)
    }

    /// Records a size cap (None removes it); eviction down to it runs in the background.
    fn set_max_size(&self, py: Python<'_>, max_size: Option<i128>) -> PyResult<()> {
        let cap = max_size.map(|bytes| convert::unsigned("max_size", bytes)).transpose()?;
        self.handle.waiting(py, move |s| s.set_max_size(cap))
    }

    /// Evicts least recently used objects until the files fit `max_size` bytes; returns
    /// (objects, stored bytes) evicted.
    fn trim_to(&self, py: Python<'_>, max_size: i128) -> PyResult<(u64, u64)> {
        let size = convert::unsigned("max_size", max_size)?;
        let done = self.handle.waiting(py, move |s| s.trim_to(size))?;
        Ok((done.objects, done.stored_bytes))
    }

    /// Evicts unpinned objects not saved or read for `seconds`; returns (objects, stored
    /// bytes) evicted.
    fn evict_unused_since(&self, py: Python<'_>, seconds: f64) -> PyResult<(u64, u64)> {
        let age = seconds_arg("seconds", seconds)?;
        let done = self.handle.waiting(py, move |s| s.evict_unused_since(age))?;
        Ok((done.objects, done.stored_bytes))
    }

    /// Stores the content of a file as one object, streamed in bounded memory: `source` is
    /// a path (str or os.PathLike) or a binary file object (anything with `read(n)`
    /// returning bytes, e.g. `open(p, "rb")`, a socket's makefile, `io.BytesIO`). Objects
    /// of more than 8 MiB are stored in chunks shared with other objects. With `name`, the
    /// object is also recorded under that name. Committed when it returns; Ctrl-C stops it
    /// with nothing of the object stored.
    #[pyo3(signature = (source, name=None))]
    fn save_file(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        crate::sigterm::keep();
        let name = name.map(|n| convert::name(n).map(|n| n.into_owned())).transpose()?;
        let source = if source.hasattr("read")? {
            stream::Source::File(source.clone().unbind())
        } else {
            stream::Source::Path(convert::path(source)?)
        };
        Ok(stream::save(py, &self.handle, source, name)?.to_string())
    }

    /// Records `name` for the object under `key`, which must be stored already (a name
    /// saved again is pointed at it); whether it was stored, and so named.
    fn name(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        crate::sigterm::keep();
        let name = convert::name(name)?;
        let key = convert::key(key)?;
        Ok(self.handle.with(py, |s| s.name(&[(&name[..], key)]))?[0])
    }

    /// The object under `key` opened as a binary file object (`read`, `readinto`, `seek`,
    /// `tell`; works with `shutil.copyfileobj`), or None when it is not stored. Memory holds
    /// one chunk at a time whatever the object's size; each chunk is checked before its
    /// bytes are returned (a damaged one raises CorruptError).
    fn open(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<Option<stream::ObjectReader>> {
        let key = convert::key(key)?;
        stream::ObjectReader::open(py, &self.handle, key)
    }

    /// The object under `key` (str or bytes), or `default` (None) when it is not stored
    /// or `key` is not a key (as `key in stash` is False). Checked against its key.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        // As `in` and a mapping's `get`: what is not a key is not stored.
        let Some(key) = convert::try_key(key)? else { return Ok(default) };
        match self.handle.with(py, |s| s.get(&key))? {
            Some(found) => Ok(Some(PyBytes::new(py, &found).into_any())),
            None => Ok(default),
        }
    }

    /// `stash[key]`: the object under `key`; `KeyError` when it is not stored.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let parsed = convert::key(key)?;
        match self.handle.with(py, |s| s.get(&parsed))? {
            Some(found) => Ok(PyBytes::new(py, &found)),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    /// The objects under `keys`, in order, None where not stored.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let keys = convert::keys(keys)?;
        let found = self.handle.chunked(py, &keys, |_| 0, |s, chunk| s.get_many(chunk))?;
        bytes_list(py, found)
    }

    /// Whether an object is stored under `key`.
    fn contains(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = convert::key(key)?;
        self.handle.with(py, |s| s.contains(&key))
    }

    /// `key in stash`: False for anything that is not a key, as a mapping's `in` is.
    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        match convert::try_key(key)? {
            Some(key) => self.handle.with(py, |s| s.contains(&key)),
            None => Ok(false),
        }
    }

    /// The keys among `keys` that are not stored, in input order (as hex str).
    fn missing(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let keys = convert::keys(keys)?;
        let missing = self.handle.chunked(py, &keys, |_| 0, |s, chunk| s.missing(chunk))?;
        Ok(key_list(&missing))
    }

    /// Every stored key (as hex str), read a chunk at a time.
    fn keys(&self, py: Python<'_>) -> PyResult<KeyIterator> {
        let entries = self.handle.waiting(py, |s| s.entries())?;
        Ok(KeyIterator { entries: Mutex::new(entries) })
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<KeyIterator> {
        self.keys(py)
    }

    /// Deletes the object under `key` and its names; whether one was stored.
    fn remove(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = convert::key(key)?;
        self.handle.waiting(py, move |s| s.remove(&key))
    }

    /// Deletes objects (and their names) in one transaction; whether each was stored.
    fn remove_all(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let keys = convert::keys(keys)?;
        self.handle.waiting(py, move |s| s.remove_all(&keys))
    }

    /// Stores objects under names: a mapping of names to objects, or an iterable of
    /// (name, object) pairs, a name being a str or bytes. Returns the keys in input order.
    /// A name saved again points to its new object.
    fn save_named(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        crate::sigterm::keep();
        let held = convert::pairs(items)?;
        let pairs = convert::named_objects(py, &held)?;
        let data: Vec<Cow<'_, [u8]>> = pairs.iter().map(|(_, o)| Cow::Borrowed(&o[..])).collect();
        self.handle.check_sizes(py, &data)?;
        let keys =
            self.handle.chunked(py, &pairs, |(_, o)| o.len(), |s, chunk| s.save_named(chunk))?;
        Ok(key_list(&keys))
    }

    /// The object saved under `name`, or None.
    fn get_named<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let name = convert::name(name)?;
        let found = self.handle.with(py, |s| s.get_named(&[&name[..]]))?;
        Ok(found.into_iter().next().flatten().map(|v| PyBytes::new(py, &v)))
    }

    /// The objects saved under `names`, in order, None where not saved.
    fn get_many_named<'py>(
        &self,
        py: Python<'py>,
        names: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let held = convert::collect(names, "names")?;
        let names = convert::names(&held)?;
        let found = self.handle.chunked(py, &names, |_| 0, |s, chunk| s.get_named(chunk))?;
        bytes_list(py, found)
    }

    /// The key `name` maps to, or None.
    fn resolve(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let name = convert::name(name)?;
        let keys = self.handle.with(py, |s| s.resolve(&[&name[..]]))?;
        Ok(keys.into_iter().next().flatten().map(|k| k.to_string()))
    }

    /// The keys `names` map to, in order, None where not saved.
    fn resolve_many(
        &self,
        py: Python<'_>,
        names: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<String>>> {
        let held = convert::collect(names, "names")?;
        let names = convert::names(&held)?;
        let keys = self.handle.chunked(py, &names, |_| 0, |s, chunk| s.resolve(chunk))?;
        Ok(keys.into_iter().map(|k| k.map(|k| k.to_string())).collect())
    }

    /// The names among `names` that are not saved, in input order, as given.
    fn missing_named<'py>(
        &self,
        py: Python<'py>,
        names: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let held = convert::collect(names, "names")?;
        let slices = convert::names(&held)?;
        let keys = self.handle.chunked(py, &slices, |_| 0, |s, chunk| s.resolve(chunk))?;
        Ok(held.into_iter().zip(keys).filter(|(_, k)| k.is_none()).map(|(n, _)| n).collect())
    }

    /// Deletes names (their objects stay) in one transaction; whether each was saved.
    fn remove_named(&self, py: Python<'_>, names: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let held = convert::collect(names, "names")?;
        let names: Vec<Vec<u8>> = convert::names(&held)?.into_iter().map(Cow::into_owned).collect();
        self.handle.waiting(py, move |s| s.remove_named(&names))
    }

    /// Declares `root` (a key) a model of `members` (keys; the root need not be listed),
    /// under `name` if given: they are kept and evicted together, and the root reads as
    /// absent while any member is not stored. The model as it stands (an
    /// `objstash.Model`: `complete` says whether the root can be read).
    #[pyo3(signature = (root, members, name=None))]
    fn declare_model<'py>(
        &self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
        members: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::sigterm::keep();
        let root = convert::key(root)?;
        let members = convert::keys(members)?;
        let name = models::optional_name(name)?;
        let model = self.handle.waiting(py, move |s| match name {
            Some(name) => s.declare_named_model(name, &root, &members),
            None => s.declare_model(&root, &members),
        })?;
        models::model_object(py, &model)
    }

    /// The model of `root` (an `objstash.Model`: `complete` says whether it is whole, in
    /// one read), or None.
    fn model<'py>(
        &self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let root = convert::key(root)?;
        let model = self.handle.with(py, |s| s.model(&root))?;
        model.map(|m| models::model_object(py, &m)).transpose()
    }

    /// Every model (`objstash.Model`), least recently used first.
    fn models<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let all = self.handle.waiting(py, objstash::Stash::models)?;
        all.iter().map(|m| models::model_object(py, m)).collect()
    }

    /// Pins the model of `root` (never evicted); whether there is one.
    fn pin_model(&self, py: Python<'_>, root: &Bound<'_, PyAny>) -> PyResult<bool> {
        let root = convert::key(root)?;
        self.handle.waiting(py, move |s| s.pin_model(&root))
    }

    /// Unpins the model of `root` (a use now); whether there is one.
    fn unpin_model(&self, py: Python<'_>, root: &Bound<'_, PyAny>) -> PyResult<bool> {
        let root = convert::key(root)?;
        self.handle.waiting(py, move |s| s.unpin_model(&root))
    }

    /// Removes the model of `root`: its root and every member no other model lists;
    /// whether there was one.
    fn remove_model(&self, py: Python<'_>, root: &Bound<'_, PyAny>) -> PyResult<bool> {
        let root = convert::key(root)?;
        self.handle.waiting(py, move |s| s.remove_model(&root))
    }

    /// `read_model` as an iterator of (key, bytes) pairs, a chunk at a time, in bounded
    /// memory however large the model; read in one snapshot, so it yields exactly the
    /// model that was complete when it began. None when `root` is no complete model.
    fn read_model_iter(
        &self,
        py: Python<'_>,
        root: &Bound<'_, PyAny>,
    ) -> PyResult<Option<crate::model_stream::ModelIterator>> {
        let root = convert::key(root)?;
        crate::model_stream::ModelIterator::start(py, &self.handle, root)
    }

    /// Every object of the complete model of `root`, root included, as (key, bytes) pairs
    /// in the order the file holds them (one sweep of the file), each checked; None when
    /// `root` is no complete model.
    fn read_model<'py>(
        &self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let root = convert::key(root)?;
        let objects = self.handle.waiting(py, move |s| s.read_model(&root))?;
        objects.map(|objects| models::objects_list(py, objects)).transpose()
    }

    /// Begins assembling a model whose root comes last: objects saved into the assembly,
    /// or held by it when found stored, stay until its root is declared (`finish`) or it
    /// is given up (leaving a `with` block unfinished, `give_up`, or dropped).
    fn assemble(&self, py: Python<'_>) -> PyResult<models::Assembly> {
        models::Assembly::begin(py, &self.handle)
    }

    /// Returns once everything saved and removed before is committed (on disk in safe
    /// mode).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.waiting(py, objstash::Stash::flush)
    }

    /// Uploads, in packs, every stored object the remote lacks (as a dict: the package
    /// makes it `objstash.PushReport`).
    fn _push<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let report = self.handle.waiting(py, |s| s.remote().ok_or_else(remote::none)?.push())?;
        remote::push_report(py, &report)
    }

    /// Fetches every remote object the stash lacks, each checked (as a dict: the package
    /// makes it `objstash.PullReport`).
    fn _pull<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let report = self.handle.waiting(py, |s| s.remote().ok_or_else(remote::none)?.pull())?;
        remote::pull_report(py, &report)
    }

    /// Lists what the remote gained since the last refresh (as a dict: the package makes
    /// it `objstash.RemoteStatus`).
    fn _remote_status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let status = self.handle.waiting(py, |s| s.remote().ok_or_else(remote::none)?.refresh())?;
        remote::status(py, &status)
    }

    /// Collects the remote's garbage (as a dict: the package makes it
    /// `objstash.CollectReport`); durations in seconds.
    #[pyo3(signature = (grace, orphan_grace))]
    fn _remote_gc<'py>(
        &self,
        py: Python<'py>,
        grace: f64,
        orphan_grace: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let options = objstash::CollectOptions::default()
            .grace(remote::duration("grace", grace)?)
            .orphan_grace(remote::duration("orphan_grace", orphan_grace)?);
        let report = self
            .handle
            .waiting(py, move |s| s.remote().ok_or_else(remote::none)?.collect(&options))?;
        remote::collect_report(py, &report)
    }

    /// Trims the remote to a size and an age (as a dict: the package makes it
    /// `objstash.TrimReport`); durations in seconds.
    #[pyo3(signature = (max_size, unused_for, grace, unused_since=None))]
    fn _remote_trim<'py>(
        &self,
        py: Python<'py>,
        max_size: Option<u64>,
        unused_for: Option<f64>,
        grace: f64,
        unused_since: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut options = objstash::TrimOptions::default().grace(remote::duration("grace", grace)?);
        if let Some(bytes) = max_size {
            options = options.max_size(bytes);
        }
        if let Some(age) = unused_for {
            options = options.unused_for(remote::duration("unused_for", age)?);
        }
        if let Some(time) = unused_since {
            let since = remote::duration("unused_since", time)?;
            options = options.unused_since(std::time::UNIX_EPOCH + since);
        }
        let report = self
            .handle
            .waiting(py, move |s| s.remote().ok_or_else(remote::none)?.trim(&options))?;
        remote::trim_report(py, &report)
    }

    /// Compacts the remote's indexes into key-sharded files (as a dict: generation,
    /// packs, entries, shards, bytes, requests, ms, text).
    fn _remote_compact<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.handle.waiting(py, |s| s.remote().ok_or_else(remote::none)?.compact())?;
        let d = PyDict::new(py);
        d.set_item("generation", &r.generation)?;
        d.set_item("packs", r.packs)?;
        d.set_item("entries", r.entries)?;
        d.set_item("shards", r.shards)?;
        d.set_item("bytes", r.bytes)?;
        d.set_item("requests", r.requests)?;
        d.set_item("ms", r.ms)?;
        d.set_item("text", r.to_string())?;
        Ok(d)
    }

    /// The records of the remote's last collection and trim, as text (None where none
    /// ran).
    fn _remote_records(&self, py: Python<'_>) -> PyResult<(Option<String>, Option<String>)> {
        self.handle.waiting(py, |s| {
            let tier = s.remote().ok_or_else(remote::none)?;
            let collection = tier.last_collection()?.map(|c| c.to_string());
            Ok((collection, tier.last_trim()?))
        })
    }

    /// The keys, of `keys`, that the remote does not hold (from the local copy of its
    /// indexes, refreshed first if due): no request per key.
    fn remote_missing(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let keys = convert::keys(keys)?;
        let missing = self
            .handle
            .waiting(py, move |s| s.remote().ok_or_else(remote::none)?.missing(&keys))?;
        Ok(key_list(&missing))
    }

    /// With `write_behind`: returns once everything saved before was uploaded (without
    /// it, pushes everything the remote lacks).
    fn flush_remote(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.waiting(py, |s| s.remote().ok_or_else(remote::none)?.flush())
    }

    /// The remote's URL (`s3://bucket/prefix`), or None for a stash without one.
    #[getter]
    fn remote_url(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.handle.with(py, |s| Ok(s.remote().map(|r| r.url().to_string())))
    }

    /// Flushes and closes the stash; later calls raise ClosedError. Closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.handle.close()).map_err(errors::to_py)
    }

    /// Whether the stash is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.is_closed()
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
        Ok(self.handle.waiting(py, objstash::Stash::len)? as usize)
    }

    /// The path of the database file.
    #[getter]
    fn path(&self) -> std::path::PathBuf {
        self.handle.path.clone()
    }

    /// Whether this handle only reads: opened with read_only=True, or because the stash's
    /// file or directory cannot be written.
    #[getter]
    fn read_only(&self, py: Python<'_>) -> PyResult<bool> {
        self.handle.with(py, |s| Ok(s.is_read_only()))
    }

    /// The largest object a save accepts, in bytes; None for no limit (as `max_size`).
    #[getter]
    fn max_object_size(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.handle.with(py, |s| Ok(Some(s.max_object_size()).filter(|&n| n != u64::MAX)))
    }

    /// The size report as a dict (the package turns it into `objstash.Stats`).
    fn _stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.handle.waiting(py, objstash::Stash::stats)?;
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
        d.set_item("chunks", s.chunks)?;
        d.set_item("chunk_bytes", s.chunk_bytes)?;
        let oldest = s.oldest_use.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        d.set_item("oldest_use", oldest.map(|d| d.as_secs_f64()))?;
        d.set_item("counters", counters_dict(py, &s.counters)?)?;
        d.set_item("text", s.to_string())?;
        Ok(d)
    }

    /// The hit and miss report as a dict (the package turns it into `objstash.Counters`):
    /// the stash's (every process's calls), or with `handle` this handle's since it opened.
    fn _counters<'py>(&self, py: Python<'py>, handle: bool) -> PyResult<Bound<'py, PyDict>> {
        let counters = if handle {
            self.handle.with(py, |s| Ok(s.handle_counters()))?
        } else {
            self.handle.waiting(py, objstash::Stash::counters)?
        };
        counters_dict(py, &counters)
    }

    /// Sets the stash's counters to 0; counting begins now.
    fn reset_counters(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.waiting(py, objstash::Stash::reset_counters)
    }

    /// The integrity report as a dict (the package turns it into `objstash.VerifyReport`).
    fn _verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.handle.waiting(py, objstash::Stash::verify)?;
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
    fn recovery(&self) -> Option<String> {
        self.handle.recovery.as_ref().map(ToString::to_string)
    }

    /// The same as a dict (the package makes it `objstash.RecoveryReport`), or None.
    fn _recovery<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.handle.recovery.as_ref().map(|r| crate::recovery::report(py, r)).transpose()
    }

    /// The stash's settings: layout, durability, codec.
    #[getter]
    fn layout(&self, py: Python<'_>) -> PyResult<String> {
        self.handle.with(py, |s| Ok(s.layout().to_string()))
    }

    /// Where the stash keeps its objects' stored bytes: "rows" or "file" (the `values=`
    /// it was made with). `values()` is a mapping's: the objects.
    #[getter]
    fn values_in(&self, py: Python<'_>) -> PyResult<String> {
        self.handle.with(py, |s| Ok(s.values().to_string()))
    }

    #[getter]
    fn durability(&self, py: Python<'_>) -> PyResult<String> {
        self.handle.with(py, |s| Ok(s.durability().to_string()))
    }

    #[getter]
    fn codec(&self, py: Python<'_>) -> PyResult<String> {
        self.handle.with(py, |s| Ok(s.codec().to_string()))
    }

    fn __repr__(&self) -> String {
        format!("Stash({:?})", self.handle.path.display().to_string())
    }
}

/// The keys of a stash, read a chunk of rows at a time (`Stash.keys()`, `iter(stash)`).
#[pyclass(module = "objstash._objstash", name = "KeyIterator", frozen)]
pub struct KeyIterator {
    entries: Mutex<objstash::Entries>,
}

#[pymethods]
impl KeyIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyString>>> {
        let next = py.detach(|| self.entries.lock().unwrap_or_else(PoisonError::into_inner).next());
        match next {
            Some(Ok(entry)) => Ok(Some(PyString::new(py, &entry.key.to_string()))),
            Some(Err(e)) => Err(errors::call_to_py(CallError::Stash(e))),
            None => Ok(None),
        }
    }
}

/// A [`objstash::Counters`] as the dict `objstash.Counters` is made from.
fn counters_dict<'py>(py: Python<'py>, c: &objstash::Counters) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let since = c.since.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    d.set_item("since", since.map(|d| d.as_secs_f64()))?;
    d.set_item("hits", c.hits)?;
    d.set_item("misses", c.misses)?;
    d.set_item("read_throughs", c.read_throughs)?;
    d.set_item("read_through_bytes", c.read_through_bytes)?;
    d.set_item("found", c.found)?;
    d.set_item("absent", c.absent)?;
    d.set_item("saved", c.saved)?;
    d.set_item("saved_again", c.saved_again)?;
    d.set_item("evicted", c.evicted)?;
    d.set_item("evicted_bytes", c.evicted_bytes)?;
    d.set_item("text", c.to_string())?;
    Ok(d)
}
