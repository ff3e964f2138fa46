//! The remote tier's commands: `push`, `pull`, `remote status`, `remote gc`,
//! `remote trim`, `remote compact`, `remote missing`; with a remote given (`--remote` or `OBJSTASH_REMOTE`), `get` reads
//! through it too.
//!
//! Credentials come from the environment as the AWS tools read them
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`); the command line never takes a secret.

use std::process::ExitCode;

use objstash::{RemoteConfig, Stash};
use serde::Serialize;

use crate::fetch::keys_arg;
use crate::output::{Failure, Out};

/// The remote the command line names, if any: `--remote`, else `OBJSTASH_REMOTE`.
pub fn config(
    url: Option<&str>,
    endpoint: Option<&str>,
    pack_size: Option<u64>,
    timeout: Option<std::time::Duration>,
) -> Result<Option<RemoteConfig>, Failure> {
    let config = match url {
        Some(url) => Some(RemoteConfig::new(url)?),
        None => RemoteConfig::from_env()?,
    };
    let Some(mut config) = config else {
        if endpoint.is_some() || pack_size.is_some() || timeout.is_some() {
            return Err(Failure::Usage(
                "--endpoint, --pack-size and --remote-timeout need a remote: --remote \
                 s3://bucket/prefix or OBJSTASH_REMOTE"
                    .into(),
            ));
        }
        return Ok(None);
    };
    if let Some(endpoint) = endpoint {
        config = config.endpoint(endpoint);
    }
    if let Some(bytes) = pack_size {
        config = config.pack_size(bytes);
    }
    if let Some(timeout) = timeout {
        config = config.timeout(timeout);
    }
    Ok(Some(config))
}

#[derive(Serialize)]
struct Pushed {
    objects: u64,
    bytes: u64,
    packs: u64,
    already_remote: u64,
    corrupt: u64,
    names: u64,
    requests: u64,
}

/// The remote tier of a stash the command opened with one.
fn tier(stash: &Stash) -> Result<objstash::RemoteTier<'_>, Failure> {
    stash.remote().ok_or_else(|| {
        Failure::Usage(
            "this command needs a remote: --remote s3://bucket/prefix or OBJSTASH_REMOTE".into(),
        )
    })
}

pub fn push(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let tier = tier(stash)?;
    let report = crate::working(out.quiet, "pushing", || tier.push())?;
    if out.json {
        out.json(&Pushed {
            objects: report.objects,
            bytes: report.bytes,
            packs: report.packs,
            already_remote: report.already_remote,
            corrupt: report.corrupt,
            names: report.names,
            requests: report.requests,
        })?;
    } else {
        out.say(&report.to_string());
    }
    if report.corrupt > 0 {
        out.warn(&format!(
            "{} stored objects are corrupt and were not pushed: run objstash verify",
            report.corrupt
        ));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct Pulled<'a> {
    objects: u64,
    bytes: u64,
    already_local: u64,
    unreachable_packs: u64,
    damaged_packs: Vec<&'a str>,
    names: u64,
    requests: u64,
}

pub fn pull(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let tier = tier(stash)?;
    let report = crate::working(out.quiet, "pulling", || tier.pull())?;
    if out.json {
        out.json(&Pulled {
            objects: report.objects,
            bytes: report.bytes,
            already_local: report.already_local,
            unreachable_packs: report.unreachable,
            damaged_packs: report.damaged.iter().map(|d| d.pack.as_str()).collect(),
            names: report.names,
            requests: report.requests,
        })?;
    }
    if report.is_complete() {
        if !out.json {
            out.say(&report.to_string());
        }
        Ok(ExitCode::SUCCESS)
    } else {
        // Objects not fetched are news the user must see, even with --quiet.
        out.warn(&report.to_string());
        Ok(ExitCode::from(1))
    }
}

#[derive(Serialize)]
struct Status<'a> {
    url: &'a str,
    packs: u64,
    objects: u64,
    bytes: u64,
    local_index_bytes: u64,
    index_shards: u64,
    damaged_indexes: &'a [String],
    unreadable_indexes: u64,
    full_listing: bool,
    listed: u64,
    requests: u64,
    last_collection: Option<Collected>,
    last_trim: Option<String>,
}

#[derive(Serialize)]
struct Collected {
    finished_ms: Option<u64>,
    holder: Option<String>,
    duplicates: u64,
    deleted: u64,
    waiting: u64,
    orphans: u64,
    bytes_freed: u64,
    events_removed: u64,
    left_unread: u64,
    requests: u64,
}

impl Collected {
    fn of(report: &objstash::CollectReport) -> Collected {
        Collected {
            finished_ms: None,
            holder: None,
            duplicates: report.duplicates,
            deleted: report.deleted,
            waiting: report.waiting,
            orphans: report.orphans,
            bytes_freed: report.bytes_freed,
            events_removed: report.events_removed,
            left_unread: report.left_unread,
            requests: report.requests,
        }
    }
}

#[derive(Serialize)]
struct Trimmed {
    size_before: u64,
    size_after: u64,
    unused: u64,
    repacked: u64,
    objects_moved: u64,
    new_packs: u64,
    over_size: u64,
    brought_back: u64,
    reports: u64,
    left_unread: u64,
    swept: Collected,
    requests: u64,
}

/// Trims the remote (`remote trim`).
pub fn trim(
    stash: &Stash,
    max_size: Option<u64>,
    unused_for: Option<std::time::Duration>,
    grace: std::time::Duration,
    out: &mut Out,
) -> Result<ExitCode, Failure> {
    if max_size.is_none() && unused_for.is_none() {
        return Err(Failure::Usage(
            "remote trim needs --max-size (e.g. 100GiB), --unused-for (e.g. 90d) or both".into(),
        ));
    }
    let mut options = objstash::TrimOptions::default().grace(grace);
    if let Some(bytes) = max_size {
        options = options.max_size(bytes);
    }
    if let Some(age) = unused_for {
        options = options.unused_for(age);
    }
    let r = tier(stash)?.trim(&options)?;
    if out.json {
        out.json(&Trimmed {
            size_before: r.size_before,
            size_after: r.size_after,
            unused: r.unused,
            repacked: r.repacked,
            objects_moved: r.objects_moved,
            new_packs: r.new_packs,
            over_size: r.over_size,
            brought_back: r.brought_back,
            reports: r.reports,
            left_unread: r.left_unread,
            swept: Collected::of(&r.swept),
            requests: r.requests,
        })?;
    } else {
        report_text(out, &r.to_string(), r.is_complete())?;
    }
    Ok(if r.is_complete() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A trim's or collection's report: on stdout, or on stderr (even with --quiet) when it
/// left packs unread, news the user must see.
fn report_text(out: &mut Out, text: &str, complete: bool) -> Result<(), Failure> {
    if complete {
        out.line(text)?;
    } else {
        out.warn(text);
    }
    Ok(())
}

#[derive(Serialize)]
struct Compacted<'a> {
    generation: &'a str,
    packs: u64,
    entries: u64,
    shards: u64,
    bytes: u64,
    requests: u64,
    ms: u64,
}

/// Compacts the remote's indexes (`remote compact`).
pub fn compact(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let r = tier(stash)?.compact()?;
    if out.json {
        out.json(&Compacted {
            generation: &r.generation,
            packs: r.packs,
            entries: r.entries,
            shards: r.shards,
            bytes: r.bytes,
            requests: r.requests,
            ms: r.ms,
        })?;
    } else {
        out.line(&r.to_string())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Collects the remote's garbage (`remote gc`).
pub fn collect(
    stash: &Stash,
    grace: std::time::Duration,
    orphan_grace: std::time::Duration,
    out: &mut Out,
) -> Result<ExitCode, Failure> {
    let options = objstash::CollectOptions::default().grace(grace).orphan_grace(orphan_grace);
    let report = tier(stash)?.collect(&options)?;
    if out.json {
        out.json(&Collected::of(&report))?;
    } else {
        report_text(out, &report.to_string(), report.is_complete())?;
    }
    Ok(if report.is_complete() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub fn status(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let tier = tier(stash)?;
    let status = tier.refresh()?;
    let last = tier.last_collection()?;
    let last_trim = tier.last_trim()?;
    if out.json {
        out.json(&Status {
            url: &status.url,
            packs: status.packs,
            objects: status.objects,
            bytes: status.bytes,
            local_index_bytes: status.local_index_bytes,
            index_shards: status.index_shards,
            damaged_indexes: &status.damaged_indexes,
            unreadable_indexes: status.unreadable_indexes,
            full_listing: status.full_listing,
            listed: status.listed,
            requests: status.requests + 2,
            last_collection: last.as_ref().map(|l| Collected {
                finished_ms: Some(l.finished_ms),
                holder: Some(l.holder.clone()),
                ..Collected::of(&l.report)
            }),
            last_trim: last_trim.clone(),
        })?;
    } else {
        out.line(&status.to_string())?;
        match &last {
            Some(last) => out.line(&last.to_string())?,
            None => out.line("no collection has run (objstash remote gc)")?,
        }
        match &last_trim {
            Some(record) => out.line(&last_trim_line(record))?,
            None => out.line("no trim has run (objstash remote trim)")?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The record of the last trim (`finished MS` and its report) as a line: when, as an age.
fn last_trim_line(record: &str) -> String {
    let record = record.trim();
    let (first, rest) = record.split_once('\n').unwrap_or((record, ""));
    let finished = first.strip_prefix("finished ").and_then(|ms| ms.trim().parse::<u64>().ok());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    match finished {
        Some(ms) => format!("last trim {} s ago: {}", now.saturating_sub(ms) / 1000, rest.trim()),
        None => format!("last trim: {record}"),
    }
}

/// Prints the keys (from stdin or arguments) the remote does not hold.
pub fn missing(stash: &Stash, keys: &[String], out: &mut Out) -> Result<ExitCode, Failure> {
    let keys = keys_arg(keys)?;
    let missing = tier(stash)?.missing(&keys)?;
    if out.json {
        let hex: Vec<String> = missing.iter().map(ToString::to_string).collect();
        out.json(&hex)?;
    } else {
        for key in &missing {
            out.line(&key.to_string())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `remote break-lease`: clears a gone collector's lease; says whose.
pub fn break_lease(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let remote = stash.remote().ok_or_else(|| Failure::Usage("no remote".into()))?;
    let holder = remote.break_lease()?;
    if out.json {
        #[derive(Serialize)]
        struct Broken {
            cleared: Option<String>,
        }
        out.json(&Broken { cleared: holder })?;
    } else {
        match holder {
            Some(holder) => out.line(&format!("cleared the lease of {holder}"))?,
            None => out.line("nobody held the lease")?,
        }
    }
    Ok(ExitCode::SUCCESS)
}
