//! The remote tier in Python: the `remote=` argument (a URL, or an `objstash.Remote` with
//! the builder's settings) made a [`RemoteConfig`], and the reports of push, pull and
//! refresh made dicts (the package turns them into dataclasses).

use std::time::Duration;

use objstash::{CollectReport, PullReport, PushReport, RemoteConfig, RemoteStatus, TrimReport};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::convert;
use crate::errors;

/// The settings `remote` gives: a URL (`s3://bucket/prefix`), or an object with the
/// attributes of `objstash.Remote` (`url` and, each None for the default, `endpoint`,
/// `region`, `access_key`, `secret_key`, `pack_size`, `uploads`, `refresh_interval`,
/// `timeout`, `retries`, `write_behind`, `clock_skew`; durations in seconds). What is
/// left unset comes from the environment as for the AWS tools (`AWS_ENDPOINT_URL`,
/// `AWS_ACCESS_KEY_ID`, ...).
pub fn config(py: Python<'_>, remote: &Bound<'_, PyAny>) -> PyResult<RemoteConfig> {
    let bad = |e: objstash::Error| errors::raise(py, "SettingsError", e.to_string());
    if let Ok(url) = remote.cast::<PyString>() {
        return RemoteConfig::new(url.to_str()?).map_err(bad);
    }
    let Ok(url) = remote.getattr("url") else {
        return Err(PyTypeError::new_err(format!(
            "remote must be a URL (s3://bucket/prefix) or an objstash.Remote, not {}",
            remote.get_type().name()?
        )));
    };
    let mut config = RemoteConfig::new(&url.extract::<String>()?).map_err(bad)?;
    // A setting the object lacks is left to its default.
    let attr = |name: &str| -> PyResult<Bound<'_, PyAny>> {
        Ok(remote.getattr_opt(name)?.unwrap_or_else(|| py.None().into_bound(py)))
    };
    let text = |name: &str| -> PyResult<Option<String>> { attr(name)?.extract() };
    let number = |name: &str| -> PyResult<Option<u64>> {
        attr(name)?.extract::<Option<i128>>()?.map(|n| convert::unsigned(name, n)).transpose()
    };
    let seconds = |name: &str| -> PyResult<Option<Duration>> {
        attr(name)?
            .extract::<Option<f64>>()?
            .map(|s| {
                Duration::try_from_secs_f64(s).map_err(|_| {
                    PyValueError::new_err(format!(
                        "{name} must be a number of seconds, at least 0; got {s}"
                    ))
                })
            })
            .transpose()
    };
    if let Some(endpoint) = text("endpoint")? {
        config = config.endpoint(endpoint);
    }
    if let Some(region) = text("region")? {
        config = config.region(region);
    }
    match (text("access_key")?, text("secret_key")?) {
        (Some(key), Some(secret)) => config = config.credentials(key, secret),
        (None, None) => {}
        _ => {
            return Err(errors::raise(
                py,
                "SettingsError",
                "remote: give both access_key and secret_key, or neither".to_string(),
            ));
        }
    }
    if let Some(bytes) = number("pack_size")? {
        config = config.pack_size(bytes);
    }
    if let Some(uploads) = number("uploads")? {
        config = config.uploads(usize::try_from(uploads).unwrap_or(usize::MAX));
    }
    if let Some(retries) = number("retries")? {
        config = config.retries(usize::try_from(retries).unwrap_or(usize::MAX));
    }
    if let Some(interval) = seconds("refresh_interval")? {
        config = config.refresh_interval(interval);
    }
    if let Some(timeout) = seconds("timeout")? {
        config = config.timeout(timeout);
    }
    if let Some(interval) = seconds("write_behind")? {
        config = config.write_behind(interval);
    }
    if let Some(skew) = seconds("clock_skew")? {
        config = config.clock_skew(skew);
    }
    Ok(config)
}

/// The error for a remote call on a stash opened without `remote=`.
pub fn none() -> objstash::Error {
    objstash::Error::InvalidConfig {
        reason: "this stash has no remote: open it with remote=\"s3://bucket/prefix\" or \
                 remote=objstash.Remote(...)"
            .to_string(),
    }
}

pub fn push_report<'py>(py: Python<'py>, r: &PushReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("objects", r.objects)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("packs", r.packs)?;
    d.set_item("already_remote", r.already_remote)?;
    d.set_item("corrupt", r.corrupt)?;
    d.set_item("names", r.names)?;
    d.set_item("models", r.models)?;
    d.set_item("requests", r.requests)?;
    d.set_item("text", r.to_string())?;
    Ok(d)
}

pub fn pull_report<'py>(py: Python<'py>, r: &PullReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("objects", r.objects)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("already_local", r.already_local)?;
    let damaged: Vec<(String, u64, String)> =
        r.damaged.iter().map(|d| (d.pack.clone(), d.objects, d.reason.clone())).collect();
    d.set_item("damaged", damaged)?;
    d.set_item("unreachable", r.unreachable)?;
    d.set_item("names", r.names)?;
    d.set_item("requests", r.requests)?;
    d.set_item("text", r.to_string())?;
    Ok(d)
}

pub fn status<'py>(py: Python<'py>, s: &RemoteStatus) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("url", &s.url)?;
    d.set_item("packs", s.packs)?;
    d.set_item("objects", s.objects)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("local_index_bytes", s.local_index_bytes)?;
    d.set_item("index_shards", s.index_shards)?;
    d.set_item("new_packs", s.new_packs)?;
    d.set_item("gone_packs", s.gone_packs)?;
    d.set_item("damaged_indexes", s.damaged_indexes.clone())?;
    d.set_item("unreadable_indexes", s.unreadable_indexes)?;
    d.set_item("full_listing", s.full_listing)?;
    d.set_item("listed", s.listed)?;
    d.set_item("requests", s.requests)?;
    d.set_item("text", s.to_string())?;
    Ok(d)
}

/// A duration given in seconds.
pub fn duration(name: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be a number of seconds, at least 0; got {seconds}"
        ))
    })
}

pub fn collect_report<'py>(py: Python<'py>, r: &CollectReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("duplicates", r.duplicates)?;
    d.set_item("deleted", r.deleted)?;
    d.set_item("waiting", r.waiting)?;
    d.set_item("orphans", r.orphans)?;
    d.set_item("bytes_freed", r.bytes_freed)?;
    d.set_item("events_removed", r.events_removed)?;
    d.set_item("left_unread", r.left_unread)?;
    d.set_item("requests", r.requests)?;
    d.set_item("text", r.to_string())?;
    Ok(d)
}

pub fn trim_report<'py>(py: Python<'py>, r: &TrimReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("size_before", r.size_before)?;
    d.set_item("size_after", r.size_after)?;
    d.set_item("unused", r.unused)?;
    d.set_item("repacked", r.repacked)?;
    d.set_item("objects_moved", r.objects_moved)?;
    d.set_item("new_packs", r.new_packs)?;
    d.set_item("over_size", r.over_size)?;
    d.set_item("brought_back", r.brought_back)?;
    d.set_item("reports", r.reports)?;
    d.set_item("left_unread", r.left_unread)?;
    d.set_item("bytes_freed", r.swept.bytes_freed)?;
    d.set_item("requests", r.requests)?;
    d.set_item("text", r.to_string())?;
    Ok(d)
}
