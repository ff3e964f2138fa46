//! Commands that read: `get`, `has`, `missing`, `export`, `ls`.

use std::collections::HashSet;
use std::io::{self, BufRead};
use std::path::Path;
use std::process::ExitCode;

use objstash::{Key, Stash};
use serde::Serialize;

use crate::output::{Failure, Out};
use crate::parse_key;

/// Objects `export` reads per `get_many` call.
const EXPORT_BATCH: usize = 1_024;

/// How `get` finds its object.
pub enum Object<'a> {
    Key(&'a str),
    Name(&'a str),
}

pub fn get(
    stash: &Stash,
    object: Object<'_>,
    output: Option<&Path>,
    out: &mut Out,
) -> Result<ExitCode, Failure> {
    let key = match object {
        Object::Key(key) => parse_key(key)?,
        Object::Name(name) => match stash.resolve(&[name])?.pop().flatten() {
            Some(key) => key,
            // Not here: `get_named` reads it through the remote if the stash has one
            // (and keeps it, named), then it is here.
            None if stash.get_named(&[name])?.pop().flatten().is_some() => {
                stash.resolve(&[name])?.pop().flatten().ok_or_else(|| {
                    Failure::NotFound(format!("no object named {name:?} in the stash"))
                })?
            }
            None => {
                return Err(Failure::NotFound(format!("no object named {name:?} in the stash")));
            }
        },
    };
    if let Some(path) = output
        && crate::own_files::is_stash_file(stash.path(), path)
    {
        return Err(Failure::Usage(format!(
            "{} is a file of the stash itself: writing an object over it would destroy the \
             stash; give another path",
            path.display()
        )));
    }
    let mut reader = stash
        .open_reader(&key)?
        .ok_or_else(|| Failure::NotFound(format!("no object {key} in the stash")))?;
    // Streamed, one chunk in memory at a time; every chunk is checked before it is written.
    match output {
        Some(path) => {
            let writing = |e| Failure::io(format!("writing {}", path.display()), e);
            let mut file = std::fs::File::create(path).map_err(writing)?;
            let copied = copy(&mut reader, &mut file);
            if copied.is_err() && path.metadata().is_ok_and(|m| m.is_file()) {
                // No partial object is left where the caller asked for the whole one.
                let _ = std::fs::remove_file(path);
            }
            match copied {
                Ok(()) => {}
                Err(Copy::Read(e)) => return Err(read_failure(&key, path, e)),
                Err(Copy::Write(e)) => return Err(writing(e)),
            }
        }
        None => out.copy(&mut reader, |e| read_failure(&key, Path::new("standard output"), e))?,
    }
    Ok(ExitCode::SUCCESS)
}

pub fn has(stash: &Stash, keys: &[String], out: &mut Out) -> Result<ExitCode, Failure> {
    #[derive(Serialize)]
    struct Presence {
        key: String,
        present: bool,
    }
    let keys = keys_arg(keys)?;
    let missing: HashSet<Key> = stash.missing(&keys)?.into_iter().collect();
    if out.json {
        let rows: Vec<Presence> = keys
            .iter()
            .map(|key| Presence { key: key.to_string(), present: !missing.contains(key) })
            .collect();
        out.json(&rows)?;
    } else {
        for key in &keys {
            let word = if missing.contains(key) { "missing" } else { "present" };
            out.line(&format!("{key} {word}"))?;
        }
    }
    Ok(if missing.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The keys given as arguments, or read from stdin when the one argument is `-`.
pub fn keys_arg(keys: &[String]) -> Result<Vec<Key>, Failure> {
    if keys == ["-"] { stdin_keys() } else { keys.iter().map(|k| parse_key(k)).collect() }
}

/// Keys from stdin, any number per line, separated by white space.
fn stdin_keys() -> Result<Vec<Key>, Failure> {
    let mut keys = Vec::new();
    for line in io::stdin().lock().lines() {
        let line = line.map_err(|e| Failure::io("reading keys from stdin", e))?;
        for word in line.split_whitespace() {
            keys.push(parse_key(word)?);
        }
    }
    Ok(keys)
}

/// Names from stdin, one per line (a name may hold spaces; empty lines are skipped).
fn stdin_lines() -> Result<Vec<String>, Failure> {
    let mut names = Vec::new();
    for line in io::stdin().lock().lines() {
        let line = line.map_err(|e| Failure::io("reading names from stdin", e))?;
        if !line.is_empty() {
            names.push(line);
        }
    }
    Ok(names)
}

pub fn missing(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let missing = stash.missing(&stdin_keys()?)?;
    if out.json {
        let keys: Vec<String> = missing.iter().map(Key::to_string).collect();
        out.json(&keys)?;
    } else {
        for key in missing {
            out.line(&key.to_string())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes an object to `dir/<first two hex digits>/<other 62>`, making the subdirectory
/// unless `made` lists it.
pub fn write_object(
    dir: &Path,
    key: &Key,
    bytes: &[u8],
    made: &mut HashSet<String>,
) -> Result<(), Failure> {
    let hex = key.to_string();
    let sub = dir.join(&hex[..2]);
    if made.insert(hex[..2].to_string()) {
        std::fs::create_dir_all(&sub)
            .map_err(|e| Failure::io(format!("creating {}", sub.display()), e))?;
    }
    let path = sub.join(&hex[2..]);
    std::fs::write(&path, bytes).map_err(|e| Failure::io(format!("writing {}", path.display()), e))
}

pub fn export(stash: &Stash, dir: &Path, out: &mut Out) -> Result<ExitCode, Failure> {
    let bar = crate::progress(stash.len()?, out.quiet, "objects");
    let (mut count, mut corrupt) = (0u64, Vec::new());
    let mut made = HashSet::new();
    let mut batch = Vec::with_capacity(EXPORT_BATCH);
    let mut entries = stash.entries()?.peekable();
    while entries.peek().is_some() {
        batch.clear();
        for entry in entries.by_ref().take(EXPORT_BATCH) {
            batch.push(entry?.key);
        }
        let objects = match stash.get_many(&batch) {
            Ok(objects) => objects,
            // One damaged object: read this batch key by key to export the others.
            Err(objstash::Error::Corrupt { .. }) => {
                batch.iter().map(|key| stash.get(key).unwrap_or(None)).collect()
            }
            Err(e) => return Err(e.into()),
        };
        for (key, object) in batch.iter().zip(objects) {
            let Some(bytes) = object else {
                bar.suspend(|| out.warn(&format!("skipped corrupt object {key}")));
                corrupt.push(key.to_string());
                continue;
            };
            write_object(dir, key, &bytes, &mut made)?;
            count += 1;
        }
        bar.inc(batch.len() as u64);
    }
    bar.finish_and_clear();
    if out.json {
        #[derive(Serialize)]
        struct Export {
            exported: u64,
            corrupt: Vec<String>,
        }
        let ok = corrupt.is_empty();
        out.json(&Export { exported: count, corrupt })?;
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    out.say(&format!("exported {count} objects to {}", dir.display()));
    Ok(if corrupt.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub fn ls(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    #[derive(Serialize)]
    struct Listed {
        key: String,
        raw_bytes: u64,
        stored_bytes: u64,
    }
    if out.json {
        // A JSON array written element by element, so a listing of millions streams.
        let mut separator = "[";
        for entry in stash.entries()? {
            let e = entry?;
            out.bytes(separator.as_bytes())?;
            out.json(&Listed {
                key: e.key.to_string(),
                raw_bytes: e.raw_bytes,
                stored_bytes: e.stored_bytes,
            })?;
            separator = ",";
        }
        out.line(if separator == "[" { "[]" } else { "]" })?;
        return Ok(ExitCode::SUCCESS);
    }
    for entry in stash.entries()? {
        let e = entry?;
        out.line(&format!("{} {:>10} {:>10}", e.key, e.raw_bytes, e.stored_bytes))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn resolve(stash: &Stash, names: &[String], out: &mut Out) -> Result<ExitCode, Failure> {
    #[derive(Serialize)]
    struct Resolved<'a> {
        name: &'a str,
        key: Option<String>,
    }
    let names: Vec<String> = if names == ["-"] { stdin_lines()? } else { names.to_vec() };
    let keys = stash.resolve(&names)?;
    let all = keys.iter().all(Option::is_some);
    if out.json {
        let resolved: Vec<Resolved<'_>> = names
            .iter()
            .zip(&keys)
            .map(|(name, key)| Resolved { name, key: key.map(|k| k.to_string()) })
            .collect();
        out.json(&resolved)?;
    } else {
        for (name, key) in names.iter().zip(&keys) {
            match key {
                Some(key) => out.line(&format!("{key} {name}"))?,
                None => out.line(&format!("- {name}"))?,
            }
        }
    }
    Ok(if all { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A streamed `get` that failed: the object's own error (corrupt, removed meanwhile) when
/// the read failed, else the write's.
fn read_failure(key: &Key, target: &Path, e: std::io::Error) -> Failure {
    match objstash::Error::from_io(e) {
        Ok(error) => Failure::from(error),
        Err(e) => Failure::io(format!("reading {key} into {}", target.display()), e),
    }
}

/// Which side of a copy failed.
enum Copy {
    Read(io::Error),
    Write(io::Error),
}

fn copy(reader: &mut impl io::Read, writer: &mut impl io::Write) -> Result<(), Copy> {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return writer.flush().map_err(Copy::Write),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Copy::Read(e)),
        };
        writer.write_all(&buf[..n]).map_err(Copy::Write)?;
    }
}
