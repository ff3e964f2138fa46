//! Commands that inspect and mend: `stats`, `verify`, `repair`.

use std::path::Path;
use std::process::ExitCode;

use objstash::{Key, Stash};
use serde::Serialize;

use crate::output::{Failure, Out, RecoveryJson};

pub fn stats(stash: &Stash, zero: bool, out: &mut Out) -> Result<ExitCode, Failure> {
    let s = stash.stats()?;
    if out.json {
        #[derive(Serialize)]
        struct Stats {
            objects: u64,
            raw_bytes: u64,
            stored_bytes: u64,
            chunks: u64,
            chunk_bytes: u64,
            file_bytes: u64,
            compression_ratio: f64,
            overhead_per_object: f64,
            layout: String,
            durability: String,
            codec: String,
            dictionaries: usize,
            names: u64,
            max_size: Option<u64>,
            over_cap: bool,
            pinned_objects: u64,
            pinned_bytes: u64,
            evicted_objects: u64,
            evicted_bytes: u64,
            oldest_use_unix_ms: Option<u128>,
            counters: Counters,
        }
        #[derive(Serialize)]
        struct Counters {
            since_unix_ms: Option<u128>,
            hits: u64,
            misses: u64,
            hit_rate: Option<f64>,
            read_throughs: u64,
            read_through_bytes: u64,
            found: u64,
            absent: u64,
            saved: u64,
            saved_again: u64,
            evicted: u64,
            evicted_bytes: u64,
        }
        let c = &s.counters;
        out.json(&Stats {
            objects: s.objects,
            raw_bytes: s.raw_bytes,
            stored_bytes: s.stored_bytes,
            chunks: s.chunks,
            chunk_bytes: s.chunk_bytes,
            file_bytes: s.file_bytes,
            compression_ratio: s.compression_ratio(),
            overhead_per_object: s.overhead_per_object(),
            layout: s.layout.to_string(),
            durability: s.durability.to_string(),
            codec: s.codec.to_string(),
            dictionaries: s.dictionaries,
            names: s.names,
            max_size: s.max_size,
            over_cap: s.over_cap(),
            pinned_objects: s.pinned_objects,
            pinned_bytes: s.pinned_bytes,
            evicted_objects: s.evicted_objects,
            evicted_bytes: s.evicted_bytes,
            oldest_use_unix_ms: s
                .oldest_use
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis()),
            counters: Counters {
                since_unix_ms: c
                    .since
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis()),
                hits: c.hits,
                misses: c.misses,
                hit_rate: c.hit_rate(),
                read_throughs: c.read_throughs,
                read_through_bytes: c.read_through_bytes,
                found: c.found,
                absent: c.absent,
                saved: c.saved,
                saved_again: c.saved_again,
                evicted: c.evicted,
                evicted_bytes: c.evicted_bytes,
            },
        })?;
    } else {
        out.line(&s.to_string())?;
    }
    if zero {
        stash.reset_counters()?;
        out.say("counters zeroed: counting begins now");
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks every object. The open that came before may have had to salvage the file: that
/// is damage found, so it fails the check and its report is part of the output.
pub fn verify(stash: &Stash, db: &Path, out: &mut Out) -> Result<ExitCode, Failure> {
    let report = crate::working(out.quiet, "verifying every object", || stash.verify())?;
    let salvaged = stash.recovery().filter(|r| r.problem.is_some());
    // Damage: what a repair would keep, so that this report and the repair's agree.
    let repairable = (!report.is_ok()).then(|| would_keep(db));
    if out.json {
        #[derive(Serialize)]
        struct Verify {
            checked: u64,
            corrupt: Vec<String>,
            unreachable: Vec<String>,
            damaged_rows_with_unreadable_keys: u64,
            problems: Vec<String>,
            recovery: Option<RecoveryJson>,
            repair_would_keep: Option<u64>,
            repair_would_lose: Option<u64>,
        }
        let keys = |keys: &[Key]| keys.iter().map(Key::to_string).collect();
        let kept = repairable.as_ref().and_then(|r| r.as_ref().ok());
        out.json(&Verify {
            checked: report.checked,
            corrupt: keys(&report.corrupt),
            unreachable: keys(&report.unreachable),
            damaged_rows_with_unreadable_keys: report.unnamed,
            problems: report.problems.clone(),
            recovery: stash.recovery().map(RecoveryJson::from),
            repair_would_keep: kept.map(|r| r.recovered),
            repair_would_lose: kept.and_then(objstash::RecoveryReport::lost),
        })?;
    } else {
        out.line(&report.to_string())?;
        match &repairable {
            Some(Ok(kept)) => out.line(&format!(
                "a repair would keep {} objects{}",
                kept.recovered,
                match (kept.lost(), kept.claimed) {
                    (Some(0), _) => ", all the stash records: nothing would be lost".to_string(),
                    (Some(lost), Some(claimed)) => {
                        format!(" of the {claimed} the stash records: {lost} would be lost")
                    }
                    _ => "; what the stash held before is unknown".to_string(),
                }
            ))?,
            Some(Err(e)) => out.line(&format!("what a repair would keep is unknown: {e}"))?,
            None => {}
        }
        if let Some(salvaged) = salvaged {
            out.line(&format!("before this check, opening the stash {salvaged}"))?;
        }
    }
    Ok(if report.is_ok() && salvaged.is_none() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// What a repair of the damaged stash at `db` would keep: it is rescued into a copy
/// (beside it, or in the temporary directory where its directory is read-only), which
/// is removed after.
fn would_keep(db: &Path) -> objstash::Result<objstash::RecoveryReport> {
    let mut name = db.as_os_str().to_owned();
    name.push("-verify-rescue");
    let beside = std::path::PathBuf::from(name);
    let elsewhere = std::env::temp_dir().join(format!("objstash-rescue-{}.db", std::process::id()));
    let mut result = objstash::rescue(db, &beside);
    for copy in [&beside, &elsewhere] {
        if copy == &elsewhere && result.is_err() {
            result = objstash::rescue(db, copy);
        }
        for file in objstash::stash_files(copy) {
            let _ = std::fs::remove_file(file);
        }
    }
    result
}

/// Repair works on the closed file itself; it takes the stash's lock like an open does.
pub fn repair(db: &Path, out: &mut Out) -> Result<ExitCode, Failure> {
    let report =
        crate::working(out.quiet, "checking, and rebuilding if damaged", || objstash::repair(db))?;
    if out.json {
        out.json(&RecoveryJson::from(&report))?;
    } else {
        out.line(&report.to_string())?;
    }
    if report.lost_anything() {
        out.warn(&report.to_string());
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
