//! Commands that store: `put` (files or stdin) and `import` (a directory tree).
//!
//! One item that cannot be read or stored is reported on stderr and costs only itself:
//! the others are stored and the command exits 1 at the end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use objstash::{Key, Stash};
use serde::Serialize;

use crate::output::{Failure, Out, mib};

/// Files read per `save_all` call during import, and the bytes that end a chunk early.
const IMPORT_FILES: usize = 2_048;
const IMPORT_BYTES: usize = 64 << 20;
/// Files larger than this are streamed on their own (`Stash::save_file`): objects that
/// large are stored in chunks, whichever call saves them.
const STREAM_ABOVE: u64 = 8 << 20;

/// A file that could not be stored, for JSON output.
#[derive(Serialize)]
struct Failed {
    path: String,
    error: String,
}

/// A directory entry import does not follow.
#[derive(Serialize)]
struct Skipped {
    path: String,
    kind: &'static str,
}

#[derive(Serialize)]
struct Stored {
    path: String,
    key: String,
}

fn lossy(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Saves a file (or stdin for `-`) as one object, streamed: any size, in bounded memory.
fn save_file(stash: &Stash, file: &Path, name: Option<&str>) -> Result<objstash::Key, String> {
    let saved = if file == Path::new("-") {
        let stdin = std::io::stdin().lock();
        match name {
            Some(name) => stash.save_reader_named(name, stdin),
            None => stash.save_reader(stdin),
        }
    } else {
        let opened =
            std::fs::File::open(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        let reader = std::io::BufReader::with_capacity(1 << 20, opened);
        match name {
            Some(name) => stash.save_reader_named(name, reader),
            None => stash.save_reader(reader),
        }
    };
    saved.map_err(|e| match e {
        objstash::Error::TooLarge { limit, .. } => format!(
            "{} is larger than the stash's object size limit of {limit} bytes; nothing of it \
             was stored",
            file.display()
        ),
        e => format!("{}: {e}", file.display()),
    })
}

pub fn put(
    stash: &Stash,
    files: &[PathBuf],
    name: Option<&str>,
    pin: bool,
    out: &mut Out,
) -> Result<ExitCode, Failure> {
    let stdin_only = [PathBuf::from("-")];
    let files = if files.is_empty() { &stdin_only[..] } else { files };
    if name.is_some() && files.len() > 1 {
        return Err(Failure::Usage("--name names one object: give one file (or stdin)".into()));
    }
    if let Some(own) = files.iter().find(|f| crate::own_files::is_stash_file(stash.path(), f)) {
        return Err(Failure::Usage(format!(
            "{} is a file of the stash itself; nothing was stored",
            own.display()
        )));
    }
    let (mut stored, mut failed) = (Vec::new(), Vec::new());
    for file in files {
        let key = save_file(stash, file, name);
        match key {
            Ok(key) => stored.push(Stored { path: lossy(file), key: key.to_string() }),
            Err(error) => {
                out.warn(&error);
                failed.push(Failed { path: lossy(file), error });
            }
        }
    }
    // A key is printed only once its object is committed: `K=$(objstash put f)` must never
    // get the key of an object a full disk kept out of the stash.
    stash.flush()?;
    if !out.json {
        for s in &stored {
            out.line(&s.key)?;
        }
    }
    if pin {
        let keys: Vec<Key> = stored
            .iter()
            .map(|s| s.key.parse())
            .collect::<Result<_, _>>()
            .map_err(|e: objstash::ParseKeyError| Failure::Usage(e.to_string()))?;
        stash.pin(&keys)?;
    }
    if out.json {
        #[derive(Serialize)]
        struct Put {
            stored: Vec<Stored>,
            failed: Vec<Failed>,
        }
        let ok = failed.is_empty();
        out.json(&Put { stored, failed })?;
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    Ok(if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Skipped entries named one by one on stderr; the rest are counted.
const SKIPPED_NAMED: usize = 20;

pub fn import(stash: &Stash, dir: &Path, out: &mut Out) -> Result<ExitCode, Failure> {
    if !dir.is_dir() {
        return Err(Failure::Usage(format!("{} is not a directory", dir.display())));
    }
    let (mut files, mut skipped, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    walk(dir, &mut files, &mut skipped, &mut failed, out);
    // The stash's own files, when it lives in the directory: storing them would store the
    // stash in itself (and read files the writer is changing).
    files.retain(|file| {
        let own = crate::own_files::is_stash_file(stash.path(), file);
        if own {
            skipped.push(Skipped { path: lossy(file), kind: "file of the stash itself" });
        }
        !own
    });
    files.sort();
    let bar = crate::progress(files.len() as u64, out.quiet, "files");
    let before = stash.stats()?;
    let (mut raw, mut imported) = (0u64, 0usize);
    let mut chunk: Vec<Vec<u8>> = Vec::new();
    let mut chunk_bytes = 0;
    for (i, file) in files.iter().enumerate() {
        let len = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        let limit = stash.max_object_size();
        let read = if len > limit {
            Err(format!(
                "{} is larger than the stash's object size limit of {limit} bytes; nothing of \
                 it was stored",
                file.display()
            ))
        } else if len > STREAM_ABOVE {
            // A large file is streamed on its own, in bounded memory.
            save_file(stash, file, None).map(|_| {
                imported += 1;
                raw += len;
            })
        } else {
            std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display())).map(
                |bytes| {
                    imported += 1;
                    raw += bytes.len() as u64;
                    chunk_bytes += bytes.len();
                    chunk.push(bytes);
                },
            )
        };
        match read {
            Ok(()) => {}
            Err(error) => {
                bar.suspend(|| out.warn(&error));
                failed.push(Failed { path: lossy(file), error });
            }
        }
        if chunk.len() >= IMPORT_FILES || chunk_bytes >= IMPORT_BYTES || i + 1 == files.len() {
            stash.save_all(&chunk)?;
            chunk.clear();
            chunk_bytes = 0;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let after = stash.stats()?;
    let stored = after.stored_bytes.saturating_sub(before.stored_bytes);
    let new = after.objects.saturating_sub(before.objects);
    let code = if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
    if out.json {
        #[derive(Serialize)]
        struct Import {
            files: usize,
            raw_bytes: u64,
            new_objects: u64,
            new_stored_bytes: u64,
            failed: Vec<Failed>,
            skipped: Vec<Skipped>,
        }
        out.json(&Import {
            files: imported,
            raw_bytes: raw,
            new_objects: new,
            new_stored_bytes: stored,
            failed,
            skipped,
        })?;
    } else {
        out.line(&format!(
            "imported {imported} files, {} raw; {new} new objects, {} stored",
            mib(raw),
            mib(stored)
        ))?;
        if !failed.is_empty() {
            out.warn(&format!("{} files could not be imported (listed above)", failed.len()));
        }
        if !skipped.is_empty() {
            let mut kinds: Vec<(&str, usize)> = Vec::new();
            for entry in &skipped {
                match kinds.iter_mut().find(|(kind, _)| *kind == entry.kind) {
                    Some((_, n)) => *n += 1,
                    None => kinds.push((entry.kind, 1)),
                }
            }
            let counts: Vec<String> = kinds.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
            let unnamed = skipped.len().saturating_sub(SKIPPED_NAMED);
            let more = if unnamed > 0 {
                format!("; {unnamed} not named above (--json lists them all)")
            } else {
                String::new()
            };
            out.say(&format!("skipped {} ({}){more}", skipped.len(), counts.join(", ")));
        }
    }
    Ok(code)
}

/// Reports a path that could not be read, and keeps it for the JSON output.
fn fail(failed: &mut Vec<Failed>, out: &Out, path: &Path, error: String) {
    out.warn(&error);
    failed.push(Failed { path: lossy(path), error });
}

/// Every regular file under `dir`. Symbolic links are not followed (a link can lead out
/// of the tree or round in a loop) and special files (FIFOs, sockets, devices) are not
/// read: both are listed as skipped. A directory that cannot be read is a failure of its
/// own; the walk goes on.
fn walk(
    dir: &Path,
    files: &mut Vec<PathBuf>,
    skipped: &mut Vec<Skipped>,
    failed: &mut Vec<Failed>,
    out: &Out,
) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            return fail(failed, out, dir, format!("reading directory {}: {e}", dir.display()));
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                fail(failed, out, dir, format!("reading directory {}: {e}", dir.display()));
                continue;
            }
        };
        let path = entry.path();
        let kind = match entry.file_type() {
            Ok(kind) => kind,
            Err(e) => {
                fail(failed, out, &path, format!("reading {}: {e}", path.display()));
                continue;
            }
        };
        if kind.is_dir() {
            walk(&path, files, skipped, failed, out);
        } else if kind.is_file() {
            files.push(path);
        } else {
            let kind = if kind.is_symlink() { "symbolic link" } else { "special file" };
            if skipped.len() < SKIPPED_NAMED {
                out.say(&format!("skipped {kind} {}", path.display()));
            }
            skipped.push(Skipped { path: lossy(&path), kind });
        }
    }
}
