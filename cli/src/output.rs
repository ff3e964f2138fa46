//! Writing to stdout without panicking on a closed pipe, JSON output, and the failures of
//! a command with their exit codes.

use std::fmt;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use serde::Serialize;

/// What ends a command early.
#[derive(Debug)]
pub enum Failure {
    /// Bad arguments: exit 2.
    Usage(String),
    /// A key that is not stored: exit 1.
    NotFound(String),
    /// stdout was closed by the reader (`objstash ls | head -1`): not an error.
    BrokenPipe,
    /// A file the command reads or writes: exit 1.
    Io(String, io::Error),
    /// The library's error: exit 1.
    Stash(objstash::Error),
}

impl Failure {
    pub fn io(context: impl Into<String>, e: io::Error) -> Self {
        Failure::Io(context.into(), e)
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Usage(_) => ExitCode::from(2),
            // A bad name is bad input, as a bad key is.
            Failure::Stash(objstash::Error::BadName { .. }) => ExitCode::from(2),
            Failure::BrokenPipe => ExitCode::SUCCESS,
            _ => ExitCode::from(1),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::NotFound(m) => f.write_str(m),
            Failure::BrokenPipe => f.write_str("output closed"),
            Failure::Io(context, e) => write!(f, "{context}: {e}"),
            Failure::Stash(e) => {
                write!(f, "{}", in_command_words(&e.to_string()))?;
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    write!(f, "\n  caused by: {cause}")?;
                    source = cause.source();
                }
                if let Some(hint) = hint(e) {
                    write!(f, "\n  on the command line: {hint}")?;
                }
                Ok(())
            }
        }
    }
}

/// A library message with the API it names (builder methods, functions) put as the
/// command line's flags and commands.
fn in_command_words(text: &str) -> String {
    [
        (
            ", or open it with creating allowed (StashBuilder::create)",
            " (only put and import create a stash)",
        ),
        ("repair it (objstash::repair)", "repair it (objstash repair)"),
        (
            "change it deliberately with StashBuilder::reconfigure",
            "change it deliberately with objstash config",
        ),
        (
            "raise the limit with StashBuilder::max_object_size",
            "raise the limit with --max-object-size BYTES",
        ),
        (", or raise StashBuilder::busy_timeout", ""),
        ("or the builder asked for read_only", "or it was asked to be"),
    ]
    .iter()
    .fold(text.to_string(), |text, (api, cli)| text.replace(api, cli))
}

/// What to do about a library error on the command line, where the library's own words
/// name a method of its API.
fn hint(e: &objstash::Error) -> Option<String> {
    use objstash::Error as E;
    match e {
        E::SettingMismatch { setting, requested, .. } => {
            Some(format!("objstash config {setting} {requested}"))
        }
        E::TooLarge { .. } => Some("raise the limit with --max-object-size BYTES".to_string()),
        E::LayoutMismatch { .. } => Some("leave --layout out to use the recorded one".to_string()),
        E::DamagedHeader { .. } => Some("objstash repair rebuilds it".to_string()),
        e if e.is_damage() => Some(
            "the stash is damaged: `objstash verify` says what a repair would keep, \
             `objstash export DIR` writes every object that still verifies, `objstash repair` \
             rebuilds the stash from them"
                .to_string(),
        ),
        // The library's sentence says what holds for this stash; the command names itself.
        E::DiskFull { reserve: true, .. } => {
            Some("`objstash trim --max-size SIZE` gives space back".to_string())
        }
        E::DiskFull { reserve: false, .. } => None,
        e if e.is_disk_full() => Some(
            "the disk is full; reads work meanwhile. `objstash trim --max-size SIZE` gives \
             space back where the stash keeps a reserve of disk space for it (one of 64 MiB or \
             more does); a smaller one needs a few MB freed on the disk first"
                .to_string(),
        ),
        _ => None,
    }
}

impl From<objstash::Error> for Failure {
    fn from(e: objstash::Error) -> Self {
        Failure::Stash(e)
    }
}

/// Buffered stdout that turns a closed pipe into [`Failure::BrokenPipe`], and the
/// messages a command prints on stderr.
pub struct Out {
    inner: BufWriter<io::Stdout>,
    /// Machine-readable output.
    pub json: bool,
    /// No messages or progress (errors and data loss are still printed).
    pub quiet: bool,
}

impl Out {
    pub fn stdout(json: bool, quiet: bool) -> Self {
        Out { inner: BufWriter::new(io::stdout()), json, quiet }
    }

    pub fn line(&mut self, text: &str) -> Result<(), Failure> {
        self.bytes(text.as_bytes())?;
        self.bytes(b"\n")
    }

    /// Prints `value` as one line of JSON.
    pub fn json(&mut self, value: &impl Serialize) -> Result<(), Failure> {
        let text = serde_json::to_string(value)
            .map_err(|e| Failure::io("writing JSON", io::Error::other(e)))?;
        self.line(&text)
    }

    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.inner.write_all(bytes).map_err(pipe)
    }

    /// Copies everything `reader` yields to stdout; a failed read is `on_read`'s failure,
    /// a failed write the pipe's.
    pub fn copy(
        &mut self,
        reader: &mut impl io::Read,
        on_read: impl FnOnce(io::Error) -> Failure,
    ) -> Result<(), Failure> {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(on_read(e)),
            };
            self.inner.write_all(&buf[..n]).map_err(pipe)?;
        }
    }

    pub fn flush(&mut self) -> Result<(), Failure> {
        self.inner.flush().map_err(pipe)
    }

    /// A message for the user on stderr, unless `--quiet`.
    pub fn say(&self, text: &str) {
        if !self.quiet {
            eprintln!("objstash: {text}");
        }
    }

    /// A failure of one item, or news of lost data: on stderr, `--quiet` or not.
    pub fn warn(&self, text: &str) {
        eprintln!("objstash: {text}");
    }
}

fn pipe(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure::BrokenPipe
    } else {
        Failure::io("writing to stdout", e)
    }
}

/// Bytes as MiB with one decimal, for messages.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The JSON form of a recovery report.
#[derive(Serialize)]
pub struct RecoveryJson {
    pub trigger: &'static str,
    pub problem: Option<String>,
    pub recovered: u64,
    pub dropped: u64,
    pub claimed: Option<u64>,
    pub lost: Option<u64>,
    pub lost_anything: bool,
    pub names_recovered: u64,
    pub lost_names: Option<u64>,
    pub damaged_copy: Option<String>,
    pub message: String,
}

impl From<&objstash::RecoveryReport> for RecoveryJson {
    fn from(r: &objstash::RecoveryReport) -> Self {
        RecoveryJson {
            trigger: match r.trigger {
                objstash::Trigger::Repair => "repair",
                objstash::Trigger::DamageFound => "damage-found",
                _ => "unclean-shutdown",
            },
            problem: r.problem.clone(),
            recovered: r.recovered,
            dropped: r.dropped,
            claimed: r.claimed,
            lost: r.lost(),
            lost_anything: r.lost_anything(),
            names_recovered: r.names_recovered,
            lost_names: r.lost_names(),
            damaged_copy: r.damaged_copy.as_ref().map(|p| p.to_string_lossy().into_owned()),
            message: r.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mib_has_one_decimal() {
        assert_eq!(mib(0), "0.0 MiB");
        assert_eq!(mib(3 << 19), "1.5 MiB");
    }
}
