//! Commands that keep a stash within its size: `config max-size`, `trim`, `pin`, `unpin`,
//! and the sizes and ages they are given in.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use objstash::{Evicted, Key, Stash};
use serde::Serialize;

use crate::fetch::keys_arg;
use crate::output::{Failure, Out};

/// Parses a size: bytes, or a number with a unit (`K`, `M`, `G`, `T` and their `KB`/`KiB`
/// forms, all powers of 1024 as `du -h` shows them): `2GiB`, `500M`, `1.5G`.
pub fn parse_size(text: &str) -> Result<u64, Failure> {
    let bad = || {
        Failure::Usage(format!("{text:?} is not a size: give bytes or a number with K, M, G or T"))
    };
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let bytes = number * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Parses an age: a number with a unit, `s`, `m`, `h`, `d` or `w`: `30d`, `12h`, `90s`.
pub fn parse_age(text: &str) -> Result<Duration, Failure> {
    let bad = || Failure::Usage(format!("{text:?} is not an age: give e.g. 30d, 12h, 90m or 45s"));
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(number.checked_mul(seconds).ok_or_else(bad)?))
}

#[derive(Serialize)]
struct Trimmed {
    evicted_objects: u64,
    evicted_bytes: u64,
    file_bytes: u64,
    max_size: Option<u64>,
}

fn report(stash: &Stash, evicted: Evicted, out: &mut Out) -> Result<(), Failure> {
    report_stats(&stash.stats()?, &stash.models()?, evicted, out)
}

/// What a stash over its cap keeps, and why: pinned objects, pinned models, the most
/// recently used model (a cap keeps it until another model needs the room), and objects
/// used within the grace period.
fn kept_over_cap(stats: &objstash::Stats, models: &[objstash::Model]) -> String {
    use crate::output::mib;
    let mut kept = Vec::new();
    if stats.pinned_objects > 0 {
        kept.push(format!("{} pinned objects ({})", stats.pinned_objects, mib(stats.pinned_bytes)));
    }
    let pinned: Vec<&objstash::Model> = models.iter().filter(|m| m.pinned).collect();
    if !pinned.is_empty() {
        let objects: u64 = pinned.iter().map(|m| m.objects).sum();
        let bytes: u64 = pinned.iter().map(|m| m.stored_bytes).sum();
        kept.push(format!("{} pinned models of {objects} objects ({})", pinned.len(), mib(bytes)));
    }
    // `models()` lists the least recently used first.
    if let Some(newest) = models.iter().rev().find(|m| !m.pinned) {
        kept.push(format!(
            "the most recently used model ({}: {} objects, {}), which stays until another \
             model needs the room",
            newest.root,
            newest.objects,
            mib(newest.stored_bytes)
        ));
    }
    kept.push("objects used in the last seconds".to_string());
    let cap = stats.max_size.map_or_else(String::new, |cap| format!(" of {}", mib(cap)));
    format!("the stash is over its size cap{cap}; it keeps {}", kept.join(", "))
}

fn report_stats(
    stats: &objstash::Stats,
    models: &[objstash::Model],
    evicted: Evicted,
    out: &mut Out,
) -> Result<(), Failure> {
    if out.json {
        out.json(&Trimmed {
            evicted_objects: evicted.objects,
            evicted_bytes: evicted.stored_bytes,
            file_bytes: stats.file_bytes,
            max_size: stats.max_size,
        })?;
    } else {
        out.line(&format!(
            "{evicted}; the database files are now {}",
            crate::output::mib(stats.file_bytes)
        ))?;
    }
    if stats.over_cap() {
        out.warn(&kept_over_cap(stats, models));
    }
    Ok(())
}

/// `config max-size SIZE|none`: records the cap and evicts down to it before returning.
pub fn set_max_size(db: &Path, value: &str, out: &mut Out) -> Result<ExitCode, Failure> {
    let cap = match value {
        "none" | "off" => None,
        size => Some(parse_size(size)?).filter(|&cap| cap > 0).map(Some).ok_or_else(|| {
            Failure::Usage(
                "a size cap of 0 would refuse every save: give a size, or none (`objstash trim \
                 --max-size 0` evicts every unpinned object once)"
                    .into(),
            )
        })?,
    };
    let stash = Stash::builder().create(false).open(db)?;
    let before = stash.stats()?;
    stash.set_max_size(cap)?;
    if let Some(cap) = cap {
        stash.trim_to(cap)?;
    }
    // Reported once closed: a closing handle evicts what the cap still owes (objects
    // within their grace period), and the figures are then the ones `stats` gives.
    stash.close()?;
    let reopened = Stash::builder().create(false).read_only(true).open(db)?;
    let (after, models) = (reopened.stats()?, reopened.models()?);
    let mut evicted = Evicted::default();
    evicted.objects = after.evicted_objects.saturating_sub(before.evicted_objects);
    evicted.stored_bytes = after.evicted_bytes.saturating_sub(before.evicted_bytes);
    report_stats(&after, &models, evicted, out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `trim --unused-for AGE --max-size SIZE`: a one-off eviction.
pub fn trim(
    stash: &Stash,
    unused_for: Option<&str>,
    max_size: Option<&str>,
    out: &mut Out,
) -> Result<ExitCode, Failure> {
    if unused_for.is_none() && max_size.is_none() {
        return Err(Failure::Usage(
            "trim needs --max-size SIZE (e.g. 1GiB), --unused-for AGE (e.g. 30d) or both".into(),
        ));
    }
    let mut evicted = Evicted::default();
    if let Some(age) = unused_for {
        let done = stash.evict_unused_since(parse_age(age)?)?;
        evicted = add(evicted, done);
    }
    if let Some(size) = max_size {
        let done = stash.trim_to(parse_size(size)?)?;
        evicted = add(evicted, done);
    }
    report(stash, evicted, out)?;
    Ok(ExitCode::SUCCESS)
}

fn add(a: Evicted, b: Evicted) -> Evicted {
    let mut sum = a;
    sum.objects += b.objects;
    sum.stored_bytes += b.stored_bytes;
    sum
}

/// `pin` and `unpin`: exit 1 if any object was not stored (pin) or not pinned (unpin).
pub fn pin(stash: &Stash, keys: &[String], pin: bool, out: &mut Out) -> Result<ExitCode, Failure> {
    let keys: Vec<Key> = keys_arg(keys)?;
    let done = if pin { stash.pin(&keys)? } else { stash.unpin(&keys)? };
    let missed: Vec<String> =
        keys.iter().zip(&done).filter(|(_, d)| !**d).map(|(k, _)| k.to_string()).collect();
    if out.json {
        #[derive(Serialize)]
        struct Pinned<'a> {
            done: usize,
            missed: &'a [String],
        }
        out.json(&Pinned { done: done.iter().filter(|d| **d).count(), missed: &missed })?;
    } else {
        let why = if pin { "is not stored" } else { "was not pinned" };
        for key in &missed {
            out.say(&format!("{key} {why}"));
        }
    }
    Ok(if missed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_read_like_du_and_find() {
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("500M").unwrap(), 500 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("2 parsecs").is_err() && parse_size("-1G").is_err());
        assert_eq!(parse_age("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert_eq!(parse_age("90s").unwrap(), Duration::from_secs(90));
        assert!(parse_age("30").is_err() && parse_age("d").is_err() && parse_age("3y").is_err());
    }
}
