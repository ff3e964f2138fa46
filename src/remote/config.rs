//! Where the remote is and how to talk to it.
//!
//! A remote is a bucket and a prefix on an S3-compatible store, written as a URL
//! (`s3://bucket/prefix`). What the AWS tools read from the environment is read here too
//! (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//! `AWS_REGION`); settings made on the config win over them. Credentials are never
//! written into the stash.

use std::time::Duration;

use crate::error::{Error, Result};

/// Target size of a pack's body (notes/scale-out.md: 8 MiB packs hold ~30,000 Speckle
/// objects; a push of a million objects is ~40 uploads).
pub const DEFAULT_PACK_SIZE: u64 = 8 << 20;
/// Uploads of packs in flight at once.
const DEFAULT_UPLOADS: usize = 4;
/// How long a key missing from the local copy of the remote's indexes is taken as missing
/// remotely before the copy is refreshed again.
const DEFAULT_REFRESH: Duration = Duration::from_secs(10);
/// How long one request may take before it is abandoned (and retried).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of a failed request; a remote down for longer is reported, not waited for.
const DEFAULT_RETRIES: usize = 3;
/// How far the clocks of a team's machines may disagree (`pack_log.rs`).
const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(600);
/// The most `clock_skew` may be: a refresh lists the pack log that far back each time.
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(24 * 3600);

/// Settings of a stash's remote tier ([`StashBuilder::remote`](crate::StashBuilder::remote)).
#[derive(Clone, Debug)]
#[must_use]
pub struct RemoteConfig {
    pub(crate) bucket: String,
    pub(crate) prefix: String,
    pub(crate) endpoint: Option<String>,
    pub(crate) region: Option<String>,
    pub(crate) access_key: Option<String>,
    pub(crate) secret_key: Option<String>,
    pub(crate) pack_size: u64,
    pub(crate) uploads: usize,
    pub(crate) refresh: Duration,
    pub(crate) timeout: Duration,
    pub(crate) retries: usize,
    pub(crate) write_behind: Option<Duration>,
    pub(crate) clock_skew: Duration,
}

impl RemoteConfig {
    /// A remote at `url`: `s3://bucket` or `s3://bucket/prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for anything else.
    pub fn new(url: &str) -> Result<Self> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| {
            Error::config(format!("remote {url:?} is not an s3:// URL (s3://bucket/prefix)"))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_matches('/');
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
        if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(valid) {
            return Err(Error::config(format!(
                "remote {url:?}: {bucket:?} is not a bucket name (3 to 63 lowercase letters, \
                 digits, '-' or '.')"
            )));
        }
        if prefix.split('/').any(|part| part == "." || part == "..")
            || prefix.contains("//")
            || prefix.chars().any(char::is_control)
        {
            return Err(Error::config(format!("remote {url:?}: {prefix:?} is not a prefix")));
        }
        Ok(RemoteConfig {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            endpoint: None,
            region: None,
            access_key: None,
            secret_key: None,
            pack_size: DEFAULT_PACK_SIZE,
            uploads: DEFAULT_UPLOADS,
            refresh: DEFAULT_REFRESH,
            timeout: DEFAULT_TIMEOUT,
            retries: DEFAULT_RETRIES,
            write_behind: None,
            clock_skew: DEFAULT_CLOCK_SKEW,
        })
    }

    /// The remote named by the environment variable `OBJSTASH_REMOTE`, if it is set.
    ///
    /// # Errors
    /// As [`RemoteConfig::new`].
    pub fn from_env() -> Result<Option<Self>> {
        std::env::var("OBJSTASH_REMOTE").ok().map(|url| RemoteConfig::new(&url)).transpose()
    }

    /// The store's address (`http://127.0.0.1:8333`); default: `AWS_ENDPOINT_URL`, else AWS.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The region; default: `AWS_REGION`, else `us-east-1`.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// An access key and its secret; default: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`.
    pub fn credentials(mut self, access_key: impl Into<String>, secret: impl Into<String>) -> Self {
        self.access_key = Some(access_key.into());
        self.secret_key = Some(secret.into());
        self
    }

    /// Target bytes of one pack's body (default 8 MiB; 64 KiB to 1 GiB).
    pub fn pack_size(mut self, bytes: u64) -> Self {
        self.pack_size = bytes;
        self
    }

    /// Uploads in flight at once during a push (default 4, 1 to 64).
    pub fn uploads(mut self, uploads: usize) -> Self {
        self.uploads = uploads;
        self
    }

    /// How long the local copy of the remote's indexes answers "not there" before a read
    /// of a key it lacks lists the remote again (default 10 s).
    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh = interval;
        self
    }

    /// How long a read may take, its retries included (default 30 s: each attempt gets an
    /// equal share), so that a server that does not answer fails a read after it with
    /// [`Error::Remote`](crate::Error::Remote); an upload gets it for each attempt (a pack
    /// of megabytes on a slow link).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many times a failed request is retried before the call reports the error
    /// (default 3).
    pub fn retries(mut self, retries: usize) -> Self {
        self.retries = retries;
        self
    }

    /// Uploads what the handle saves in the background (write-behind): keys gather for
    /// `interval` (e.g. 1 s), then go up in packs; a save never waits on the network, and
    /// [`RemoteTier::flush`](crate::RemoteTier::flush) waits for the uploads. The
    /// first round after opening pushes everything the remote lacks. Off by default.
    pub fn write_behind(mut self, interval: Duration) -> Self {
        self.write_behind = Some(interval);
        self
    }

    /// How far the clocks of the machines sharing the remote may disagree, the longest
    /// upload of one small file included (default 10 min, at most a day): a refresh lists
    /// the packs announced since its last one less this margin, so a pack pushed by a
    /// machine whose clock is behind by less is never missed.
    pub fn clock_skew(mut self, skew: Duration) -> Self {
        self.clock_skew = skew;
        self
    }

    /// `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !(64 << 10..=1 << 30).contains(&self.pack_size) {
            return Err(Error::config(format!(
                "pack size {} is out of range: use 64 KiB to 1 GiB",
                self.pack_size
            )));
        }
        if !(1..=64).contains(&self.uploads) {
            return Err(Error::config(format!("{} uploads at once: use 1 to 64", self.uploads)));
        }
        if self.timeout.is_zero() {
            return Err(Error::config("a remote timeout of zero"));
        }
        if self.clock_skew > MAX_CLOCK_SKEW {
            return Err(Error::config(format!(
                "a clock skew of {:?} is out of range: use at most a day",
                self.clock_skew
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why_not() {
        let c = RemoteConfig::new("s3://team-cache/objstash/models/").unwrap();
        assert_eq!((c.bucket.as_str(), c.prefix.as_str()), ("team-cache", "objstash/models"));
        assert_eq!(c.url(), "s3://team-cache/objstash/models");
        assert_eq!(RemoteConfig::new("s3://abc").unwrap().url(), "s3://abc");
        for bad in
            ["http://x/y", "s3://", "s3://ab", "s3://Upper/x", "s3://abc/a//b", "s3://abc/../x"]
        {
            assert!(RemoteConfig::new(bad).is_err(), "{bad}");
        }
        assert!(RemoteConfig::new("s3://abc").unwrap().pack_size(1).validate().is_err());
        assert!(RemoteConfig::new("s3://abc").unwrap().uploads(0).validate().is_err());
        let skew = |s| RemoteConfig::new("s3://abc").unwrap().clock_skew(Duration::from_secs(s));
        assert!(skew(0).validate().is_ok() && skew(86_400).validate().is_ok());
        assert!(skew(86_401).validate().is_err());
    }
}
