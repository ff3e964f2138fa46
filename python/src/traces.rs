//! The bridge from the library's spans to Python's `logging`: `objstash.trace_to_logging`
//! (or `OBJSTASH_LOG` at import) routes each span, as it closes, to the logger
//! `objstash.trace` as one record (its name, sizes and how long it took), and the
//! library's log records with it, filtered as `RUST_LOG` filters.
//!
//! A span closes on whatever thread ran it, often the writer's, which must never wait for
//! the GIL (a Python thread holding it may be waiting for the writer). So records go
//! through a bounded queue to a thread of their own that takes the GIL to log them; a full
//! queue drops records and the next one logged says how many. A forked child starts its
//! own thread at its first record; the package stops the thread at interpreter exit.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Sender, bounded};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

/// The logger records go to.
const LOGGER: &str = "objstash.trace";
/// Records waiting for the GIL at most.
const QUEUE: usize = 10_000;

/// One record for `logging`: its level (`logging.DEBUG` ...) and message.
struct LogRecord {
    level: u8,
    message: String,
}

/// The thread that logs, in the process that started it.
struct Forwarder {
    pid: u32,
    tx: Sender<LogRecord>,
    thread: Option<JoinHandle<()>>,
}

static FORWARDER: Mutex<Option<Forwarder>> = Mutex::new(None);
/// Set at interpreter exit: records are dropped from then on.
static STOPPED: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The filter of the installed subscriber, to change it.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Routes the library's spans and log records to the logger `objstash.trace`, filtered by
/// `filter` in `RUST_LOG`'s syntax (`"objstash=debug"`; `"off"` stops it). A later call
/// changes the filter.
#[pyfunction]
#[pyo3(signature = (filter = "objstash=debug"))]
pub fn trace_to_logging(filter: &str) -> PyResult<()> {
    let parsed = EnvFilter::builder().parse(filter).map_err(|e| {
        PyValueError::new_err(format!("{filter:?} is not a filter ({e}); try \"objstash=debug\""))
    })?;
    if let Some(handle) = FILTER.get() {
        return handle
            .reload(parsed)
            .map_err(|e| PyValueError::new_err(format!("changing the trace filter: {e}")));
    }
    let (layer, handle) = reload::Layer::new(parsed);
    tracing_subscriber::registry().with(layer).with(ToLogging).try_init().map_err(|e| {
        PyValueError::new_err(format!("another tracing subscriber is installed: {e}"))
    })?;
    let _ = FILTER.set(handle);
    Ok(())
}

/// Stops the logging thread once it has logged what it holds (at interpreter exit).
#[pyfunction]
pub fn _stop_tracing(py: Python<'_>) {
    STOPPED.store(true, Ordering::SeqCst);
    let forwarder = FORWARDER.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(Forwarder { tx, thread, pid }) = forwarder {
        drop(tx);
        if pid == std::process::id()
            && let Some(thread) = thread
        {
            py.detach(|| {
                let _ = thread.join();
            });
        }
    }
}

/// Queues a record for the logging thread, starting one in this process if need be.
fn send(record: LogRecord) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    // Never wait: a fork may have left the lock taken in a child.
    let Ok(mut forwarder) = FORWARDER.try_lock() else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let pid = std::process::id();
    if forwarder.as_ref().is_none_or(|f| f.pid != pid) {
        *forwarder = start(pid);
    }
    let sent = forwarder.as_ref().is_some_and(|f| f.tx.try_send(record).is_ok());
    if !sent {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

fn start(pid: u32) -> Option<Forwarder> {
    let (tx, rx) = bounded::<LogRecord>(QUEUE);
    let thread = std::thread::Builder::new()
        .name("objstash-trace".into())
        .spawn(move || {
            for record in rx {
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                let _ = Python::attach(|py| -> PyResult<()> {
                    let logger = py.import("logging")?.call_method1("getLogger", (LOGGER,))?;
                    if dropped > 0 {
                        let said = format!(
                            "{dropped} trace records were dropped: the queue to logging was full"
                        );
                        logger.call_method1("warning", (said,))?;
                    }
                    logger.call_method1("log", (record.level, record.message))?;
                    Ok(())
                });
            }
        })
        .ok()?;
    Some(Forwarder { pid, tx, thread: Some(thread) })
}

/// `logging`'s number for a level.
fn python_level(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        Level::TRACE => 5,
    }
}

/// A span's fields as `name=value` pairs, and when it began.
struct Fields {
    text: String,
    began: Instant,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.text, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.text, " {}={value}", field.name());
    }
}

/// The layer that makes records of closed spans and of events.
struct ToLogging;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for ToLogging {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields { text: String::new(), began: Instant::now() };
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields { text: String::new(), began: Instant::now() };
        event.record(&mut fields);
        let meta = event.metadata();
        let message = format!("{}:{}", meta.target(), fields.text);
        send(LogRecord { level: python_level(meta.level()), message });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(fields) = span.extensions_mut().remove::<Fields>() else { return };
        let took = fields.began.elapsed();
        let message =
            format!("{}{} took {:.3} ms", span.name(), fields.text, took.as_secs_f64() * 1e3);
        send(LogRecord { level: python_level(span.metadata().level()), message });
    }
}
