//! Writing to stdout without panicking on a closed pipe, and the failures of a command.

use std::fmt;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

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
                write!(f, "{e}")?;
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    write!(f, "\n  caused by: {cause}")?;
                    source = cause.source();
                }
                Ok(())
            }
        }
    }
}

impl From<objstash::Error> for Failure {
    fn from(e: objstash::Error) -> Self {
        Failure::Stash(e)
    }
}

/// Buffered stdout that turns a closed pipe into [`Failure::BrokenPipe`].
pub struct Out {
    inner: BufWriter<io::Stdout>,
    pub json: bool,
}

impl Out {
    pub fn stdout(json: bool) -> Self {
        Out { inner: BufWriter::new(io::stdout()), json }
    }

    pub fn line(&mut self, text: &str) -> Result<(), Failure> {
        self.raw(text)?;
        self.raw("\n")
    }

    pub fn raw(&mut self, text: &str) -> Result<(), Failure> {
        self.bytes(text.as_bytes())
    }

    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.inner.write_all(bytes).map_err(pipe)
    }

    pub fn flush(&mut self) -> Result<(), Failure> {
        self.inner.flush().map_err(pipe)
    }
}

fn pipe(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure::BrokenPipe
    } else {
        Failure::io("writing to stdout", e)
    }
}
