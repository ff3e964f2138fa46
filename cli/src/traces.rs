//! Traces on request: `OBJSTASH_LOG` (or `RUST_LOG`) set to a filter in `RUST_LOG`'s
//! syntax (`objstash=debug`, `debug`, `objstash::writer=trace,warn`) prints the library's
//! spans to stderr as each closes, with how long it took and its sizes (objects, bytes),
//! and its log records. Unset, nothing is installed and spans cost a branch.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::output::Failure;

/// The variables read, in order.
const VARIABLES: [&str; 2] = ["OBJSTASH_LOG", "RUST_LOG"];

/// Installs the subscriber if a filter is set; a filter that does not parse is a usage
/// error that names it.
pub fn init() -> Result<(), Failure> {
    let Some((variable, filter)) = VARIABLES
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|f| !f.trim().is_empty()).map(|f| (v, f)))
    else {
        return Ok(());
    };
    let filter = EnvFilter::builder().parse(&filter).map_err(|e| {
        Failure::Usage(format!("{variable}={filter:?} is not a filter ({e}); try objstash=debug"))
    })?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .map_err(|e| Failure::Usage(format!("installing the trace printer: {e}")))
}
