//! Commands that change a stash without storing: `rm` and `config`.

use std::path::Path;
use std::process::ExitCode;

use objstash::{Codec, Durability, Key, Stash};
use serde::Serialize;

use crate::output::{Failure, Out};
use crate::parse_key;

pub fn rm(stash: &Stash, keys: &[String], out: &mut Out) -> Result<ExitCode, Failure> {
    let keys: Vec<Key> = keys.iter().map(|k| parse_key(k)).collect::<Result<_, _>>()?;
    let removed = stash.remove_all(&keys)?;
    let absent: Vec<String> =
        keys.iter().zip(&removed).filter(|(_, r)| !**r).map(|(k, _)| k.to_string()).collect();
    if out.json {
        #[derive(Serialize)]
        struct Rm<'a> {
            removed: usize,
            absent: &'a [String],
        }
        out.json(&Rm { removed: removed.iter().filter(|r| **r).count(), absent: &absent })?;
    } else {
        for key in &absent {
            out.say(&format!("no object {key} in the stash"));
        }
    }
    Ok(if absent.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub fn unname(stash: &Stash, names: &[String], out: &mut Out) -> Result<ExitCode, Failure> {
    let removed = stash.remove_named(names)?;
    let absent: Vec<&String> =
        names.iter().zip(&removed).filter(|(_, r)| !**r).map(|(n, _)| n).collect();
    if out.json {
        #[derive(Serialize)]
        struct Unname<'a> {
            removed: usize,
            absent: &'a [&'a String],
        }
        out.json(&Unname { removed: removed.iter().filter(|r| **r).count(), absent: &absent })?;
    } else {
        for name in &absent {
            out.say(&format!("no name {name:?} in the stash"));
        }
    }
    Ok(if absent.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[derive(Serialize)]
struct Config {
    layout: String,
    values: String,
    durability: String,
    codec: String,
    /// `None`: no limit.
    max_object_size: Option<u64>,
    max_size: Option<u64>,
}

fn show(stash: &Stash, out: &mut Out) -> Result<(), Failure> {
    let config = Config {
        layout: stash.layout().to_string(),
        values: stash.values().to_string(),
        durability: stash.durability().to_string(),
        codec: stash.codec().to_string(),
        max_object_size: Some(stash.max_object_size()).filter(|&n| n != u64::MAX),
        max_size: stash.max_size()?,
    };
    if out.json {
        out.json(&config)?;
    } else {
        out.line(&format!("layout      {}", config.layout))?;
        out.line(&format!("values      in {}", config.values))?;
        out.line(&format!("durability  {}", config.durability))?;
        out.line(&format!("codec       {}", config.codec))?;
        let cap = config.max_size.map_or_else(
            || "none".to_string(),
            |cap| format!("{cap} bytes ({})", crate::output::mib(cap)),
        );
        out.line(&format!("max-size    {cap}"))?;
    }
    Ok(())
}

pub fn config_show(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    show(stash, out)?;
    Ok(ExitCode::SUCCESS)
}

/// Changes a recorded setting: the one deliberate way to give a stash another durability
/// or codec.
/// A recorded setting `config` changes (the cap has its own path: `bound.rs`).
#[derive(Clone, Copy, Debug)]
pub enum Change {
    Durability(Durability),
    Codec(Codec),
}

pub fn config_set(db: &Path, change: Change, out: &mut Out) -> Result<ExitCode, Failure> {
    let builder = Stash::builder().create(false).reconfigure(true);
    let builder = match change {
        Change::Durability(durability) => builder.durability(durability),
        Change::Codec(codec) => builder.codec(codec),
    };
    let stash = builder.open(db)?;
    if let Some(report) = stash.recovery().filter(|r| r.lost_anything()) {
        out.warn(&report.to_string());
    }
    show(&stash, out)?;
    out.flush()?;
    stash.close()?;
    Ok(ExitCode::SUCCESS)
}
