//! `objstash`: the command line over the objstash library.
//!
//! A thin layer: argument parsing, progress and printing. Data goes to stdout, messages and
//! progress to stderr. Exit codes: 0 success, 1 a key not found, corruption found or an
//! operation failed, 2 a usage error (bad arguments, bad key, no database path).

use std::io::{self, BufRead, IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use objstash::{Codec, Durability, Key, Layout, Stash, human};

mod output;

use output::{Failure, Out};

const EXAMPLES: &str = "\
Examples:
  objstash --db cache.db put model/*.json      store files, print their keys
  echo hello | objstash --db cache.db put      store stdin
  objstash --db cache.db get <KEY> -o obj.json write an object to a file
  objstash --db cache.db import ./objects      store a whole directory in parallel
  OBJSTASH_DB=cache.db objstash stats --json   the size report as JSON";

#[derive(Parser, Debug)]
#[command(name = "objstash", version, about = "A content-addressed object cache in SQLite", after_help = EXAMPLES)]
struct Cli {
    /// The stash file (default: $OBJSTASH_DB).
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Table layout when creating a stash: single or bucketed.
    #[arg(long, global = true)]
    layout: Option<Layout>,
    /// Durability: fast or safe.
    #[arg(long, global = true)]
    durability: Option<Durability>,
    /// Codec of new objects: gzip (default) or zstd-dict (a dictionary trained on the
    /// stash's first objects; smaller and faster for small objects).
    #[arg(long, global = true)]
    codec: Option<Codec>,
    /// Machine-readable output (stats, verify, has, ls).
    #[arg(long, global = true)]
    json: bool,
    /// Print no messages or progress, only data.
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Store files (or stdin when none or `-`) and print each key.
    #[command(
        after_help = "Example:\n  objstash --db cache.db put a.json b.json\n  cat a.json | objstash --db cache.db put -"
    )]
    Put {
        /// Files to store; `-` or nothing reads stdin.
        files: Vec<PathBuf>,
    },
    /// Write an object to stdout or a file.
    #[command(after_help = "Example:\n  objstash --db cache.db get 5566db…131d -o wall.json")]
    Get {
        /// The object's key: 64 hex digits.
        key: String,
        /// Write to this file instead of stdout.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Print whether each key is stored; exit 1 if any is not.
    #[command(after_help = "Example:\n  objstash --db cache.db has <KEY> <KEY>")]
    Has {
        /// Keys to look up.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Read keys from stdin (one per line) and print those not stored.
    #[command(
        after_help = "Example:\n  objstash --db cache.db missing < wanted.txt > to_fetch.txt"
    )]
    Missing,
    /// Store every file under a directory, in parallel.
    #[command(after_help = "Example:\n  objstash --db cache.db import ./objects")]
    Import {
        /// The directory to walk.
        dir: PathBuf,
    },
    /// Write every object to DIR/<first two hex digits>/<other 62>.
    #[command(after_help = "Example:\n  objstash --db cache.db export ./dump")]
    Export {
        /// The directory to write into (created if needed).
        dir: PathBuf,
    },
    /// List keys with raw and stored sizes.
    #[command(after_help = "Example:\n  objstash --db cache.db ls | head")]
    Ls,
    /// Print the size report.
    #[command(after_help = "Example:\n  objstash --db cache.db stats --json")]
    Stats,
    /// Check every object; exit 1 if anything is damaged.
    #[command(after_help = "Example:\n  objstash --db cache.db verify")]
    Verify,
    /// Rebuild the stash from every object that verifies; the old file is kept aside.
    #[command(after_help = "Example:\n  objstash --db cache.db repair")]
    Repair,
    /// Remove objects; exit 1 if any was not stored.
    #[command(after_help = "Example:\n  objstash --db cache.db rm <KEY>")]
    Rm {
        /// Keys to remove.
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = cli.quiet;
    match run(cli) {
        Ok(code) => code,
        Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(failure) => {
            if !quiet || matches!(failure, Failure::Usage(_)) {
                eprintln!("objstash: {failure}");
            }
            failure.exit_code()
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let db = cli
        .db
        .clone()
        .or_else(|| std::env::var_os("OBJSTASH_DB").filter(|v| !v.is_empty()).map(PathBuf::from))
        .ok_or_else(|| {
            Failure::Usage("no stash given: pass --db PATH or set OBJSTASH_DB".into())
        })?;
    if matches!(cli.command, Command::Repair) {
        // Repair works on the file itself; it takes the stash's lock like an open does.
        let report = objstash::repair(&db)?;
        if !cli.quiet {
            println!("{report}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut builder = Stash::builder();
    if let Some(layout) = cli.layout {
        builder = builder.layout(layout);
    }
    if let Some(codec) = cli.codec {
        builder = builder.codec(codec);
    }
    if let Some(durability) = cli.durability {
        builder = builder.durability(durability);
    }
    let stash = builder.open(&db)?;
    if let (Some(report), false) = (stash.recovery(), cli.quiet) {
        eprintln!("objstash: {report}");
    }
    let mut out = Out::stdout(cli.json);
    let code = match &cli.command {
        Command::Put { files } => put(&stash, files, &mut out)?,
        Command::Get { key, output } => get(&stash, key, output.as_deref(), &mut out)?,
        Command::Has { keys } => has(&stash, keys, &mut out)?,
        Command::Missing => missing(&stash, &mut out)?,
        Command::Import { dir } => import(&stash, dir, cli.quiet, &mut out)?,
        Command::Export { dir } => export(&stash, dir, cli.quiet, &mut out)?,
        Command::Ls => ls(&stash, &mut out)?,
        Command::Stats => stats(&stash, &mut out)?,
        Command::Verify => verify(&stash, &mut out)?,
        Command::Repair => unreachable!("handled before opening"),
        Command::Rm { keys } => rm(&stash, keys, cli.quiet, &mut out)?,
    };
    out.flush()?;
    stash.close()?;
    Ok(code)
}

fn parse_key(text: &str) -> Result<Key, Failure> {
    text.trim().parse().map_err(|e: objstash::ParseKeyError| Failure::Usage(e.to_string()))
}

fn put(stash: &Stash, files: &[PathBuf], out: &mut Out) -> Result<ExitCode, Failure> {
    let stdin_only = [PathBuf::from("-")];
    let files = if files.is_empty() { &stdin_only[..] } else { files };
    for file in files {
        let bytes = if file == Path::new("-") {
            let mut bytes = Vec::new();
            io::stdin()
                .lock()
                .read_to_end(&mut bytes)
                .map_err(|e| Failure::io("reading stdin", e))?;
            bytes
        } else {
            std::fs::read(file)
                .map_err(|e| Failure::io(format!("reading {}", file.display()), e))?
        };
        let key = stash.save(&bytes)?;
        out.line(&key.to_string())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn get(
    stash: &Stash,
    key: &str,
    output: Option<&Path>,
    out: &mut Out,
) -> Result<ExitCode, Failure> {
    let key = parse_key(key)?;
    let Some(bytes) = stash.get(&key)? else {
        return Err(Failure::NotFound(format!("no object {key} in the stash")));
    };
    match output {
        Some(path) => std::fs::write(path, &bytes)
            .map_err(|e| Failure::io(format!("writing {}", path.display()), e))?,
        None => out.bytes(&bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn has(stash: &Stash, keys: &[String], out: &mut Out) -> Result<ExitCode, Failure> {
    let keys: Vec<Key> = keys.iter().map(|k| parse_key(k)).collect::<Result<_, _>>()?;
    let missing = stash.missing(&keys)?;
    let mut rows = Vec::new();
    for key in &keys {
        let present = !missing.contains(key);
        if out.json {
            rows.push(format!("{{\"key\":\"{key}\",\"present\":{present}}}"));
        } else {
            out.line(&format!("{key} {}", if present { "present" } else { "missing" }))?;
        }
    }
    if out.json {
        out.line(&format!("[{}]", rows.join(",")))?;
    }
    Ok(if missing.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn missing(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let mut keys = Vec::new();
    for line in io::stdin().lock().lines() {
        let line = line.map_err(|e| Failure::io("reading keys from stdin", e))?;
        for word in line.split_whitespace() {
            keys.push(parse_key(word)?);
        }
    }
    for key in stash.missing(&keys)? {
        out.line(&key.to_string())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Files read per `save_all` call during import, and the bytes that end a chunk early.
const IMPORT_FILES: usize = 2_048;
const IMPORT_BYTES: usize = 64 << 20;

fn import(stash: &Stash, dir: &Path, quiet: bool, out: &mut Out) -> Result<ExitCode, Failure> {
    if !dir.is_dir() {
        return Err(Failure::Usage(format!("{} is not a directory", dir.display())));
    }
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files.sort();
    let bar = progress(files.len() as u64, quiet, "files");
    let before = stash.stats()?;
    let mut raw = 0u64;
    let mut chunk: Vec<Vec<u8>> = Vec::new();
    let mut chunk_bytes = 0;
    for (i, file) in files.iter().enumerate() {
        let bytes = std::fs::read(file)
            .map_err(|e| Failure::io(format!("reading {}", file.display()), e))?;
        raw += bytes.len() as u64;
        chunk_bytes += bytes.len();
        chunk.push(bytes);
        if chunk.len() >= IMPORT_FILES || chunk_bytes >= IMPORT_BYTES || i + 1 == files.len() {
            stash.save_all(&chunk)?;
            bar.inc(chunk.len() as u64);
            chunk.clear();
            chunk_bytes = 0;
        }
    }
    bar.finish_and_clear();
    let after = stash.stats()?;
    let stored = after.stored_bytes - before.stored_bytes;
    let new = after.objects - before.objects;
    if out.json {
        out.line(&format!(
            "{{\"files\":{},\"raw_bytes\":{raw},\"new_objects\":{new},\"new_stored_bytes\":{stored}}}",
            files.len()
        ))?;
    } else {
        out.line(&format!(
            "imported {} files, {} raw; {new} new objects, {} stored",
            files.len(),
            human(raw),
            human(stored)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Every regular file under `dir`, following no symbolic links.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), Failure> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Failure::io(format!("reading directory {}", dir.display()), e))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| Failure::io(format!("reading directory {}", dir.display()), e))?;
        let kind = entry
            .file_type()
            .map_err(|e| Failure::io(format!("reading {}", entry.path().display()), e))?;
        if kind.is_dir() {
            walk(&entry.path(), files)?;
        } else if kind.is_file() {
            files.push(entry.path());
        }
    }
    Ok(())
}

fn export(stash: &Stash, dir: &Path, quiet: bool, out: &mut Out) -> Result<ExitCode, Failure> {
    let total = stash.len()?;
    let bar = progress(total, quiet, "objects");
    let mut count = 0u64;
    let mut corrupt = 0u64;
    for entry in stash.entries()? {
        let key = entry?.key;
        let hex = key.to_string();
        let sub = dir.join(&hex[..2]);
        std::fs::create_dir_all(&sub)
            .map_err(|e| Failure::io(format!("creating {}", sub.display()), e))?;
        match stash.get(&key) {
            Ok(Some(bytes)) => {
                let path = sub.join(&hex[2..]);
                std::fs::write(&path, bytes)
                    .map_err(|e| Failure::io(format!("writing {}", path.display()), e))?;
                count += 1;
            }
            Ok(None) => {}
            Err(objstash::Error::Corrupt { .. }) => {
                corrupt += 1;
                eprintln!("objstash: skipped corrupt object {key}");
            }
            Err(e) => return Err(e.into()),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !quiet {
        eprintln!("exported {count} objects to {}", dir.display());
    }
    out.flush()?;
    Ok(if corrupt == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn ls(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let mut first = true;
    if out.json {
        out.raw("[")?;
    }
    for entry in stash.entries()? {
        let e = entry?;
        if out.json {
            let sep = if first { "" } else { "," };
            out.raw(&format!(
                "{sep}\n{{\"key\":\"{}\",\"raw_bytes\":{},\"stored_bytes\":{}}}",
                e.key, e.raw_bytes, e.stored_bytes
            ))?;
        } else {
            out.line(&format!("{} {:>10} {:>10}", e.key, e.raw_bytes, e.stored_bytes))?;
        }
        first = false;
    }
    if out.json {
        out.line("\n]")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn stats(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let s = stash.stats()?;
    if out.json {
        out.line(&format!(
            "{{\"objects\":{},\"raw_bytes\":{},\"stored_bytes\":{},\"file_bytes\":{},\"compression_ratio\":{:.4},\"overhead_per_object\":{:.1},\"layout\":\"{}\",\"durability\":\"{}\",\"dictionaries\":{}}}",
            s.objects,
            s.raw_bytes,
            s.stored_bytes,
            s.file_bytes,
            s.compression_ratio(),
            s.overhead_per_object(),
            s.layout,
            s.durability,
            s.dictionaries
        ))?;
    } else {
        out.line(&s.to_string())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    let report = stash.verify()?;
    if out.json {
        let keys = |keys: &[objstash::Key]| {
            keys.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(",")
        };
        let problems: Vec<String> = report.problems.iter().map(|p| format!("{p:?}")).collect();
        out.line(&format!(
            "{{\"checked\":{},\"corrupt\":[{}],\"unreachable\":[{}],\"unnamed\":{},\
             \"problems\":[{}]}}",
            report.checked,
            keys(&report.corrupt),
            keys(&report.unreachable),
            report.unnamed,
            problems.join(",")
        ))?;
    } else {
        out.line(&report.to_string())?;
    }
    Ok(if report.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn rm(stash: &Stash, keys: &[String], quiet: bool, out: &mut Out) -> Result<ExitCode, Failure> {
    let keys: Vec<Key> = keys.iter().map(|k| parse_key(k)).collect::<Result<_, _>>()?;
    let mut all = true;
    for key in keys {
        let removed = stash.remove(&key)?;
        all &= removed;
        if !removed && !quiet {
            eprintln!("objstash: no object {key} in the stash");
        }
    }
    out.flush()?;
    Ok(if all { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn progress(len: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{bar:40}} {{pos}}/{{len}} {what}, {{per_sec}}, eta {{eta}}"
    )) {
        bar.set_style(style);
    }
    bar
}
