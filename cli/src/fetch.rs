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
    let Some(mut reader) = stash.open_reader(&key)? else {
        // Absent, unless damage on the way hid it: that is said as damage.
        stash.check_absent(&key)?;
        return Err(Failure::NotFound(format!("no object {key} in the stash")));
    };
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

/// `export`: every object to `dir`. A damaged stash is read as far as it can be: the
/// objects SQLite still reaches first, then, once anything could not be read, every
/// object that verifies on the file's pages (`objstash::rescue`, what `repair` keeps).
pub fn export(stash: &Stash, db: &Path, dir: &Path, out: &mut Out) -> Result<ExitCode, Failure> {
    let bar = crate::progress(stash.len()?, out.quiet, "objects");
    let mut export = Export { dir, made: HashSet::new(), written: HashSet::new() };
    let mut unread: Vec<Key> = Vec::new();
    let damage = match export.reachable(stash, &bar, &mut unread)? {
        Some(stopped) => Some(stopped.to_string()),
        None if unread.is_empty() => None,
        None => Some(format!("{} objects could not be read", unread.len())),
    };
    bar.finish_and_clear();
    let Some(damage) = damage else {
        let count = export.written.len() as u64;
        if out.json {
            out.json(&ExportReport { exported: count, corrupt: Vec::new(), lost: Some(0) })?;
        } else {
            out.say(&format!("exported {count} objects to {}", dir.display()));
        }
        return Ok(ExitCode::SUCCESS);
    };
    bar.suspend(|| {
        out.warn(&format!(
            "the stash is damaged ({damage}); reading every object that verifies on its pages"
        ));
    });
    let rescued = export.rescued(db)?;
    unread.retain(|key| !export.written.contains(key));
    let count = export.written.len() as u64;
    for key in &unread {
        out.warn(&format!("skipped corrupt object {key}"));
    }
    let lost = rescued.lost();
    if out.json {
        let corrupt = unread.iter().map(ToString::to_string).collect();
        out.json(&ExportReport { exported: count, corrupt, lost })?;
    } else {
        let lost = match lost {
            Some(0) => "none of the objects it records is lost".to_string(),
            Some(n) => {
                format!("{n} of the {} objects it records are lost", rescued.claimed.unwrap_or(0))
            }
            None => "what it held before is unknown, so objects may be lost".to_string(),
        };
        // Lost data is news, `--quiet` or not.
        out.warn(&format!(
            "exported {count} objects to {} from a damaged stash: {lost}; `objstash repair` \
             rebuilds it from the same {} objects",
            dir.display(),
            rescued.recovered
        ));
    }
    Ok(ExitCode::from(1))
}

/// `export --json`'s report.
#[derive(Serialize)]
struct ExportReport {
    exported: u64,
    /// Keys the stash lists whose objects could not be read anywhere.
    corrupt: Vec<String>,
    /// Objects the stash recorded that could not be exported, when its totals could be
    /// read.
    lost: Option<u64>,
}

/// An export under way: what it wrote.
struct Export<'a> {
    dir: &'a Path,
    made: HashSet<String>,
    written: HashSet<Key>,
}

impl Export<'_> {
    fn write(&mut self, key: Key, bytes: &[u8]) -> Result<(), Failure> {
        if self.written.insert(key) {
            write_object(self.dir, &key, bytes, &mut self.made)?;
        }
        Ok(())
    }

    /// Writes every object SQLite reaches; `unread` gets the keys listed but not read.
    /// Stops at damage that stops the listing, and returns it.
    fn reachable(
        &mut self,
        stash: &Stash,
        bar: &indicatif::ProgressBar,
        unread: &mut Vec<Key>,
    ) -> Result<Option<objstash::Error>, Failure> {
        let mut batch = Vec::with_capacity(EXPORT_BATCH);
        let mut entries = stash.entries()?.peekable();
        while entries.peek().is_some() {
            batch.clear();
            for entry in entries.by_ref().take(EXPORT_BATCH) {
                match entry {
                    Ok(entry) => batch.push(entry.key),
                    Err(e) if e.is_damage() => return Ok(Some(e)),
                    Err(e) => return Err(e.into()),
                }
            }
            let objects = match stash.get_many(&batch) {
                Ok(objects) => objects,
                // Damage: this batch key by key, to write the others.
                Err(e) if e.is_damage() => {
                    batch.iter().map(|key| stash.get(key).ok().flatten()).collect()
                }
                Err(e) => return Err(e.into()),
            };
            for (key, object) in batch.iter().zip(objects) {
                match object {
                    Some(bytes) => self.write(*key, &bytes)?,
                    None => unread.push(*key),
                }
            }
            bar.inc(batch.len() as u64);
        }
        Ok(None)
    }

    /// Writes every object that verifies on the damaged stash's pages and was not written
    /// yet: through a rescued copy beside the export, removed after.
    fn rescued(&mut self, db: &Path) -> Result<objstash::RecoveryReport, Failure> {
        std::fs::create_dir_all(self.dir)
            .map_err(|e| Failure::io(format!("creating {}", self.dir.display()), e))?;
        let copy = self.dir.join(".objstash-rescue.db");
        let result = (|| {
            let report = objstash::rescue(db, &copy)?;
            let rescued = Stash::open(&copy)?;
            for entry in rescued.entries()? {
                let key = entry?.key;
                if self.written.contains(&key) {
                    continue;
                }
                if let Some(bytes) = rescued.get(&key)? {
                    self.write(key, &bytes)?;
                }
            }
            rescued.close()?;
            Ok(report)
        })();
        for file in objstash::stash_files(&copy) {
            let _ = std::fs::remove_file(file);
        }
        result
    }
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
