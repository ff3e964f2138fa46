//! The connection to the store: an `object_store` S3 client on a small tokio runtime of
//! the remote's own, with every request counted.
//!
//! The rest of objstash is synchronous; calls here block on the runtime. Retries are
//! few and short (`RemoteConfig::retries`): a remote that is down is reported, and the
//! local stash carries on without it.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, PutMode, PutOptions, PutPayload, RetryConfig,
    UpdateVersion,
};
use tracing::Instrument;

use super::config::RemoteConfig;
use crate::error::{Error, Result};

/// Folder of the packs' bodies under the prefix.
const PACKS: &str = "packs";
/// Folder of the packs' indexes under the prefix.
const INDEXES: &str = "indexes";
/// Folder of the indexes of packs found damaged, kept for a look but no longer listed.
const DAMAGED: &str = "damaged";
/// Folder of the pack log (`pack_log.rs`).
const LOG: &str = "log";
/// Folder of the collectors' lease and record (`lease.rs`, `collect.rs`).
const CONTROL: &str = "control";
/// Folder of the machines' use reports (`usage.rs`).
const USES: &str = "uses";
/// Folder of the indexes of packs a trim took out of the listing, kept for the grace
/// period in case a machine turns out to use them (`trim.rs`).
const TRIMMED: &str = "trimmed";
/// Folder of the markers of packs a trim made of moved objects (`trim.rs`).
const MOVED: &str = "moved";
/// Folder of the compacted indexes (`shard.rs`).
const SHARDS: &str = "shards";
/// Folder of the models pushed (`models.rs`).
const MODELS: &str = "models";

/// Which of a pack's two files.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Part {
    Body,
    Index,
    /// The index of a pack found damaged.
    Damaged,
    /// An event of the pack log.
    Log,
    /// The collectors' lease and the record of the last collection.
    Control,
    /// A use report.
    Uses,
    /// The index of a pack a trim took out of the listing.
    Trimmed,
    /// The marker of a pack a trim made of moved objects.
    Moved,
    /// A compacted index's file (`<generation>/<shard>`, or `current`).
    Shards,
    /// A model's members (`models.rs`).
    Models,
}

/// A file as a listing shows it.
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub name: String,
    /// When it was last written, by the store's clock (ms since 1970).
    pub modified_ms: u64,
    pub size: u64,
}

/// A conditional write's condition.
#[derive(Clone, Debug)]
pub(crate) enum Condition {
    /// Only if there is no file by that name.
    Absent,
    /// Only if the file is still the version with this entity tag.
    Unchanged(String),
}

/// A client of one remote.
#[derive(Clone)]
pub(crate) struct Client {
    /// Reads, listings, deletes: a request gives up after the timeout, retries included.
    store: Arc<AmazonS3>,
    /// Writes: each attempt gets the whole timeout.
    uploads: Arc<AmazonS3>,
    prefix: String,
    url: String,
    /// How long a read may take with its retries, in words for errors.
    budget: String,
    /// How long a write may take, in words for errors.
    upload_budget: String,
    requests: Arc<AtomicU64>,
    /// Bytes of indexes read (pack indexes, compacted shards, their manifest): what a
    /// machine downloads to know where objects are.
    index_bytes: Arc<AtomicU64>,
}

impl Client {
    pub(crate) fn new(config: &RemoteConfig) -> Result<Client> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&config.bucket);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &config.region {
            builder = builder.with_region(region);
        }
        if let (Some(key), Some(secret)) = (&config.access_key, &config.secret_key) {
            builder = builder.with_access_key_id(key).with_secret_access_key(secret);
        }
        let plain_http = config
            .endpoint
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
            .or_else(|| std::env::var("AWS_ENDPOINT").ok())
            .is_some_and(|e| e.starts_with("http://"));
        // A read's timeout bounds it with its retries (a stuck server held a read four
        // times 30 s): each attempt gets an equal share, and no retry starts after it. An
        // upload (a pack of megabytes on a slow link) gets the whole timeout each attempt.
        let attempts = u32::try_from(config.retries.saturating_add(1)).unwrap_or(u32::MAX);
        let share = (config.timeout / attempts).max(std::time::Duration::from_millis(500));
        let build = |attempt: std::time::Duration, total: std::time::Duration| {
            let retry = RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: std::time::Duration::from_millis(100),
                    max_backoff: std::time::Duration::from_secs(2),
                    base: 2.0,
                },
                max_retries: config.retries,
                retry_timeout: total,
            };
            // Client options replace the builder's (`with_allow_http` included): one set.
            builder
                .clone()
                .with_retry(retry)
                .with_client_options(
                    ClientOptions::new()
                        .with_allow_http(plain_http)
                        .with_timeout(attempt)
                        .with_connect_timeout(attempt.min(std::time::Duration::from_secs(5))),
                )
                .build()
                .map_err(|e| Error::remote(format!("setting up {}", config.url()), e))
        };
        let store = build(share, config.timeout)?;
        let uploads = build(config.timeout, config.timeout * attempts)?;
        Ok(Client {
            store: Arc::new(store),
            uploads: Arc::new(uploads),
            prefix: config.prefix.clone(),
            url: config.url(),
            budget: format!("{:?} in {attempts} attempts", config.timeout),
            upload_budget: format!("{:?} an attempt, {attempts} attempts", config.timeout),
            requests: Arc::new(AtomicU64::new(0)),
            index_bytes: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Requests sent since the client was made (retries not counted).
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Bytes of indexes read since the client was made.
    pub(crate) fn index_bytes(&self) -> u64 {
        self.index_bytes.load(Ordering::Relaxed)
    }

    fn count_index_bytes(&self, part: Part, n: usize) {
        if matches!(part, Part::Index | Part::Shards) {
            self.index_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// The remote's URL, for messages.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn count(&self, n: u64) {
        self.requests.fetch_add(n, Ordering::Relaxed);
    }

    /// Where a pack's part lives.
    pub(crate) fn path(&self, part: Part, name: &str) -> Path {
        let folder = match part {
            Part::Body => PACKS,
            Part::Index => INDEXES,
            Part::Damaged => DAMAGED,
            Part::Log => LOG,
            Part::Control => CONTROL,
            Part::Uses => USES,
            Part::Trimmed => TRIMMED,
            Part::Moved => MOVED,
            Part::Shards => SHARDS,
            Part::Models => MODELS,
        };
        if self.prefix.is_empty() {
            Path::from(format!("{folder}/{name}"))
        } else {
            Path::from(format!("{}/{folder}/{name}", self.prefix))
        }
    }

    /// The names in the pack log, all of them or those after `after` (which the store
    /// skips: S3's `start-after`), in order.
    pub(crate) async fn list_log(&self, after: Option<&str>) -> Result<Vec<String>> {
        let folder = self.path(Part::Log, "");
        let folder = Path::from(folder.as_ref().trim_end_matches('/'));
        self.count(1);
        let listing = match after {
            Some(after) => self.store.list_with_offset(Some(&folder), &self.path(Part::Log, after)),
            None => self.store.list(Some(&folder)),
        };
        let metas: Vec<_> = listing.try_collect().await.map_err(|e| {
            let doing = format!(
                "listing the packs of {} (a request gives up after {})",
                self.url, self.budget
            );
            Error::remote(doing, e)
        })?;
        // A listing comes in pages of 1,000: count the requests it took.
        self.count((metas.len() as u64).saturating_sub(1) / 1_000);
        let mut names: Vec<String> =
            metas.into_iter().filter_map(|m| m.location.filename().map(str::to_string)).collect();
        names.sort_unstable();
        Ok(names)
    }

    /// Every file of a folder with when it was written and its size, in name order.
    pub(crate) async fn list(&self, part: Part) -> Result<Vec<Listed>> {
        let folder = self.path(part, "");
        let folder = Path::from(folder.as_ref().trim_end_matches('/'));
        self.count(1);
        let metas: Vec<_> = self
            .store
            .list(Some(&folder))
            .try_collect()
            .await
            .map_err(|e| self.error("listing", &folder, e))?;
        self.count((metas.len() as u64).saturating_sub(1) / 1_000);
        let within = format!("{}/", folder.as_ref());
        let mut files: Vec<Listed> = metas
            .into_iter()
            .filter_map(|m| {
                Some(Listed {
                    // The path under the folder (a compacted index's files are in folders).
                    name: m.location.as_ref().strip_prefix(&within)?.to_string(),
                    modified_ms: u64::try_from(m.last_modified.timestamp_millis()).unwrap_or(0),
                    size: m.size,
                })
            })
            .collect();
        files.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    /// A whole file and its entity tag, `None` if there is none by that name.
    pub(crate) async fn get_tagged(
        &self,
        part: Part,
        name: &str,
    ) -> Result<Option<(Bytes, Option<String>)>> {
        let path = self.path(part, name);
        let span = request_span("get", &path);
        self.count(1);
        let result = match self.store.get(&path).instrument(span.clone()).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error("reading", &path, e)),
        };
        let tag = result.meta.e_tag.clone();
        let bytes = result
            .bytes()
            .instrument(span.clone())
            .await
            .map_err(|e| self.error("reading", &path, e))?;
        span.record("bytes", bytes.len());
        self.count_index_bytes(part, bytes.len());
        Ok(Some((bytes, tag)))
    }

    /// Writes a file if `condition` holds: its new entity tag, or `None` if the condition
    /// failed (another writer was first). A store that cannot write conditionally fails.
    pub(crate) async fn put_if(
        &self,
        part: Part,
        name: &str,
        bytes: Bytes,
        condition: Condition,
    ) -> Result<Option<String>> {
        let path = self.path(part, name);
        let mode = match condition {
            Condition::Absent => PutMode::Create,
            Condition::Unchanged(e_tag) => {
                PutMode::Update(UpdateVersion { e_tag: Some(e_tag), version: None })
            }
        };
        let options = PutOptions { mode, ..PutOptions::default() };
        let span = request_span("put_if", &path);
        span.record("bytes", bytes.len());
        self.count(1);
        match self.uploads.put_opts(&path, PutPayload::from(bytes), options).instrument(span).await
        {
            Ok(result) => Ok(Some(result.e_tag.unwrap_or_default())),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => Ok(None),
            Err(e) => Err(self.error("writing", &path, e)),
        }
    }

    /// A whole file.
    pub(crate) async fn get(&self, part: Part, name: &str) -> Result<Bytes> {
        let path = self.path(part, name);
        self.get_if_there(part, name).await?.ok_or_else(|| {
            self.error(
                "reading",
                &path,
                object_store::Error::NotFound {
                    path: path.to_string(),
                    source: "no such file".into(),
                },
            )
        })
    }

    /// A whole file, `None` if there is none by that name.
    pub(crate) async fn get_if_there(&self, part: Part, name: &str) -> Result<Option<Bytes>> {
        Ok(self.get_tagged(part, name).await?.map(|(bytes, _)| bytes))
    }

    /// Ranges of a pack's body, neighbours merged into one request (`object_store`
    /// coalesces ranges less than 1 MiB apart).
    pub(crate) async fn get_ranges(&self, name: &str, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let path = self.path(Part::Body, name);
        let span = request_span("get_ranges", &path);
        self.count(coalesced_requests(ranges));
        let parts = self
            .store
            .get_ranges(&path, ranges)
            .instrument(span.clone())
            .await
            .map_err(|e| self.error("reading", &path, e))?;
        span.record("bytes", parts.iter().map(Bytes::len).sum::<usize>());
        Ok(parts)
    }

    /// Ranges of a file of `part` (neighbours merged as for a body); `None` if there is no
    /// such file.
    pub(crate) async fn get_ranges_of(
        &self,
        part: Part,
        name: &str,
        ranges: &[Range<u64>],
    ) -> Result<Option<Vec<Bytes>>> {
        let path = self.path(part, name);
        let span = request_span("get_ranges", &path);
        self.count(coalesced_requests(ranges));
        match self.store.get_ranges(&path, ranges).instrument(span.clone()).await {
            Ok(parts) => {
                span.record("bytes", parts.iter().map(Bytes::len).sum::<usize>());
                self.count_index_bytes(part, parts.iter().map(Bytes::len).sum());
                Ok(Some(parts))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("reading", &path, e)),
        }
    }

    /// Writes a file; with `create`, only if there is none by that name (a pack's name
    /// is its content, so one already there is the same pack).
    pub(crate) async fn put(
        &self,
        part: Part,
        name: &str,
        bytes: Bytes,
        create: bool,
    ) -> Result<()> {
        let path = self.path(part, name);
        let mode = if create { PutMode::Create } else { PutMode::Overwrite };
        let options = PutOptions { mode, ..PutOptions::default() };
        let span = request_span("put", &path);
        span.record("bytes", bytes.len());
        self.count(1);
        let put = self.uploads.put_opts(&path, PutPayload::from(bytes.clone()), options);
        match put.instrument(span.clone()).await {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            // A store without conditional writes: an overwrite writes the same bytes.
            Err(object_store::Error::NotImplemented) if create => {
                self.count(1);
                self.uploads
                    .put(&path, PutPayload::from(bytes))
                    .instrument(span)
                    .await
                    .map(|_| ())
                    .map_err(|e| self.error("writing", &path, e))
            }
            Err(e) => Err(self.error("writing", &path, e)),
        }
    }

    /// Deletes a file; one already gone is no error.
    pub(crate) async fn delete(&self, part: Part, name: &str) -> Result<()> {
        let path = self.path(part, name);
        self.count(1);
        match self.store.delete(&path).instrument(request_span("delete", &path)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("deleting", &path, e)),
        }
    }

    fn error(&self, doing: &str, path: &Path, e: object_store::Error) -> Error {
        let budget = if doing == "writing" { &self.upload_budget } else { &self.budget };
        Error::remote(
            format!("{doing} {path} on {} (a request gives up after {budget})", self.url),
            e,
        )
    }
}

/// Whether `e` says the file asked for is not there (a pack's body deleted by a
/// collection since the local copy of the indexes was refreshed).
pub(crate) fn is_not_found(e: &Error) -> bool {
    match e {
        Error::Remote { source, .. } => matches!(
            source.downcast_ref::<object_store::Error>(),
            Some(object_store::Error::NotFound { .. })
        ),
        _ => false,
    }
}

/// The span of one request to the store: what it does, to which file, how many bytes it
/// moved (recorded once known).
fn request_span(op: &'static str, path: &Path) -> tracing::Span {
    tracing::debug_span!("remote_request", op, path = %path, bytes = tracing::field::Empty)
}

/// Requests `object_store::get_ranges` sends for `ranges`: one per run of ranges less than
/// its coalescing distance (1 MiB) apart.
fn coalesced_requests(ranges: &[Range<u64>]) -> u64 {
    let mut sorted: Vec<_> = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut requests = 0;
    let mut end: Option<u64> = None;
    for r in sorted {
        match end {
            Some(e) if r.start <= e + object_store::OBJECT_STORE_COALESCE_DEFAULT => {
                end = Some(e.max(r.end));
            }
            _ => {
                requests += 1;
                end = Some(r.end);
            }
        }
    }
    requests
}
