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

/// How `import` lists and names what it stores.
#[derive(Clone, Copy, Default)]
pub struct ImportOptions {
    /// Print `KEY PATH` for every file stored (text), or list them (`--json`).
    pub keys: bool,
    /// Save each object under its path relative to the directory, as a name.
    pub names: bool,
}

/// A file `import` stored: its path (relative to the directory) and its key.
#[derive(Serialize)]
struct Imported {
    path: String,
    key: String,
}

/// What an import did, reported once the stash is closed (`ImportDone::report`): a capped
/// stash evicts what its closing owes then, and the report's figures are the ones `stats`
/// gives after.
pub struct ImportDone {
    options: ImportOptions,
    before: objstash::Stats,
    stored: Vec<Imported>,
    raw: u64,
    new: u64,
    new_raw: u64,
    failed: Vec<Failed>,
    skipped: Vec<Skipped>,
}

pub fn import(
    stash: &Stash,
    dir: &Path,
    options: ImportOptions,
    out: &mut Out,
) -> Result<ImportDone, Failure> {
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
    let relative = |file: &Path| lossy(file.strip_prefix(dir).unwrap_or(file));
    let bar = crate::progress(files.len() as u64, out.quiet, "files");
    let before = stash.stats()?;
    let (mut raw, mut new, mut new_raw) = (0u64, 0u64, 0u64);
    let mut stored: Vec<Imported> = Vec::new();
    let mut chunk: Vec<(String, Vec<u8>)> = Vec::new();
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
            // A large file is streamed on its own, in bounded memory. Whether it was new is
            // asked of the stash before (a streamed object's key is known only after).
            let path = relative(file);
            let name = options.names.then_some(path.as_str());
            let count_before = stash.len()?;
            save_file(stash, file, name).map(|key| {
                if stash.len().is_ok_and(|after| after > count_before) {
                    new += 1;
                    new_raw += len;
                }
                raw += len;
                if options.keys {
                    bar.suspend(|| text_line(out, &key, &path));
                }
                stored.push(Imported { path, key: key.to_string() });
            })
        } else {
            std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display())).map(
                |bytes| {
                    raw += bytes.len() as u64;
                    chunk_bytes += bytes.len();
                    chunk.push((relative(file), bytes));
                },
            )
        };
        if let Err(error) = read {
            bar.suspend(|| out.warn(&error));
            failed.push(Failed { path: lossy(file), error });
        }
        if chunk.len() >= IMPORT_FILES || chunk_bytes >= IMPORT_BYTES || i + 1 == files.len() {
            // New: not stored when this import asked, just before saving.
            let keys: Vec<Key> = chunk.iter().map(|(_, bytes)| Key::of(bytes)).collect();
            let missing: std::collections::HashSet<Key> =
                stash.missing(&keys)?.into_iter().collect();
            let mut counted = std::collections::HashSet::new();
            for ((_, bytes), key) in chunk.iter().zip(&keys) {
                if missing.contains(key) && counted.insert(*key) {
                    new += 1;
                    new_raw += bytes.len() as u64;
                }
            }
            if options.names {
                stash.save_named(&chunk)?;
            } else {
                let objects: Vec<&[u8]> = chunk.iter().map(|(_, bytes)| &bytes[..]).collect();
                stash.save_all(&objects)?;
            }
            for ((path, _), key) in chunk.drain(..).zip(&keys) {
                if options.keys {
                    bar.suspend(|| text_line(out, key, &path));
                }
                stored.push(Imported { path, key: key.to_string() });
            }
            chunk_bytes = 0;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(ImportDone { options, before, stored, raw, new, new_raw, failed, skipped })
}

impl ImportDone {
    /// Prints the import's summary; `after` is the closed stash's size report.
    pub fn report(self, after: &objstash::Stats, out: &mut Out) -> Result<ExitCode, Failure> {
        let ImportDone { options, before, stored, raw, new, new_raw, failed, skipped } = self;
        let evicted = after.evicted_objects.saturating_sub(before.evicted_objects);
        let evicted_bytes = after.evicted_bytes.saturating_sub(before.evicted_bytes);
        let code = if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
        if out.json {
            #[derive(Serialize)]
            struct Import {
                files: usize,
                raw_bytes: u64,
                new_objects: u64,
                new_raw_bytes: u64,
                evicted_objects: u64,
                evicted_stored_bytes: u64,
                stash_stored_bytes: u64,
                stash_file_bytes: u64,
                max_size: Option<u64>,
                failed: Vec<Failed>,
                skipped: Vec<Skipped>,
                #[serde(skip_serializing_if = "Option::is_none")]
                objects: Option<Vec<Imported>>,
            }
            out.json(&Import {
                files: stored.len(),
                raw_bytes: raw,
                new_objects: new,
                new_raw_bytes: new_raw,
                evicted_objects: evicted,
                evicted_stored_bytes: evicted_bytes,
                stash_stored_bytes: after.stored_bytes,
                stash_file_bytes: after.file_bytes,
                max_size: after.max_size,
                failed,
                skipped,
                objects: options.keys.then_some(stored),
            })?;
        } else {
            let summary = format!(
                "imported {} files, {} raw; {new} of them new to the stash ({} raw){}",
                stored.len(),
                mib(raw),
                mib(new_raw),
                if options.names { ", each named by its path" } else { "" }
            );
            // With --keys, stdout is the `KEY PATH` lines alone.
            if options.keys {
                out.say(&summary);
            } else {
                out.line(&summary)?;
            }
            let holds = match after.max_size {
                Some(cap) => {
                    format!(
                        "the stash's files hold {} of its {} cap",
                        mib(after.file_bytes),
                        mib(cap)
                    )
                }
                None => format!("the stash's files hold {}", mib(after.file_bytes)),
            };
            if evicted > 0 {
                // Objects the cap dropped meanwhile (this import's or others'): news.
                out.warn(&format!(
                    "the size cap evicted {evicted} objects ({} stored) meanwhile; {holds}",
                    mib(evicted_bytes)
                ));
            } else {
                out.say(&holds);
            }
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
                let counts: Vec<String> =
                    kinds.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
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
}

/// `KEY PATH` on stdout, as `resolve` prints `KEY NAME` (text output only).
fn text_line(out: &mut Out, key: &Key, path: &str) {
    if !out.json {
        let _ = out.line(&format!("{key} {path}"));
    }
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
