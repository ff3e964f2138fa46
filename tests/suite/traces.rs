//! Spans: what a subscriber sees of a save, a commit, a checkpoint, an eviction, a model
//! declaration and a repair, with their sizes. A capturing subscriber is installed for the
//! whole test process (the writer's spans are on its own thread, which a thread's default
//! would not see); each test finds its own spans by sizes no other test uses.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use objstash::Stash;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::common::TestResult;

/// A span once closed: its name and its fields as text.
#[derive(Clone, Debug)]
struct Closed {
    name: &'static str,
    fields: HashMap<&'static str, String>,
}

impl Closed {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Fields(HashMap<&'static str, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_string());
    }
}

struct Capture;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
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

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span.extensions_mut().remove::<Fields>().unwrap_or_default();
            let closed = Closed { name: span.name(), fields: fields.0 };
            closed_spans().lock().unwrap_or_else(|p| p.into_inner()).push(closed);
        }
    }
}

fn closed_spans() -> &'static Mutex<Vec<Closed>> {
    static CLOSED: OnceLock<Mutex<Vec<Closed>>> = OnceLock::new();
    CLOSED.get_or_init(|| {
        let registry = tracing_subscriber::registry().with(Capture);
        subscriber::set_global_default(registry).expect("no other subscriber in this process");
        Mutex::new(Vec::new())
    })
}

/// The closed spans named `name` for which `matches` holds.
fn spans(name: &str, matches: impl Fn(&Closed) -> bool) -> Vec<Closed> {
    let closed = closed_spans().lock().unwrap_or_else(|p| p.into_inner());
    closed.iter().filter(|c| c.name == name && matches(c)).cloned().collect()
}

#[test]
fn saves_commits_evictions_models_checkpoints_and_repairs_are_spans_with_their_sizes() -> TestResult
{
    closed_spans();
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("traced.db");
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(&db)?;
    let objects: Vec<Vec<u8>> = (0..1234u32)
        .map(|i| format!(r#"{{"traced":{i},"pad":"{}"}}"#, "y".repeat(50)).into_bytes())
        .collect();
    let bytes: usize = objects.iter().map(Vec::len).sum();
    stash.save_all(&objects)?;
    stash.flush()?;
    let saves = spans("save_batch", |c| c.field("objects") == Some("1234"));
    assert_eq!(saves.len(), 1, "{saves:?}");
    assert_eq!(saves[0].field("bytes"), Some(bytes.to_string().as_str()), "{saves:?}");
    assert_eq!(saves[0].field("new"), Some("1234"), "{saves:?}");
    // The commits of this stash's rows: together, every one of the 1,234 objects.
    let committed: i64 = spans("commit", |_| true)
        .iter()
        .filter_map(|c| c.field("objects")?.parse::<i64>().ok())
        .sum();
    assert!(committed >= 1234, "{committed}");

    let model = stash.save_model(b"{\"traced root\":1}", &objects[..3])?;
    assert!(model.complete());
    assert!(!spans("declare_model", |c| c.field("members") == Some("3")).is_empty());

    let evicted = stash.trim_to(0)?;
    assert!(evicted.objects > 0);
    let evictions = spans("evict", |c| c.field("up_to_bytes").is_some());
    let evicted_in_spans: u64 =
        evictions.iter().filter_map(|c| c.field("objects")?.parse::<u64>().ok()).sum();
    assert!(evicted_in_spans >= evicted.objects, "{evictions:?}");
    stash.close()?;
    // The last close folds the log into the file.
    assert!(!spans("checkpoint", |c| c.field("mode") == Some("close")).is_empty());

    let report = objstash::repair(&db)?;
    let repairs = spans("repair", |c| c.field("path").is_some_and(|p| p.contains("traced.db")));
    assert_eq!(repairs.len(), 1, "{repairs:?}");
    assert_eq!(repairs[0].field("kept"), Some(report.recovered.to_string().as_str()));
    assert_eq!(repairs[0].field("lost_anything"), Some("false"));
    Ok(())
}

/// Requests to the remote are spans with their bytes; reads through it count as hits and
/// read-throughs, with their bytes.
#[cfg(feature = "remote")]
#[test]
fn remote_requests_are_spans_and_reads_through_the_remote_count() -> TestResult {
    use crate::common::s3::S3Server;

    closed_spans();
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = server.remote("traced");
    let a = Stash::builder().remote(remote.clone()).open(dir.path().join("a.db"))?;
    let objects = crate::common::objects(31, 2_000);
    let keys = a.save_all(&objects)?;
    let pushed = a.remote().expect("a remote").push()?;
    assert_eq!(pushed.objects, 2_000);
    let puts = spans("remote_request", |c| {
        c.field("op") == Some("put") && c.field("path").is_some_and(|p| p.contains("traced"))
    });
    assert!(!puts.is_empty());
    assert!(puts.iter().all(|c| c.field("bytes").is_some_and(|b| b.parse::<u64>().is_ok())));

    let b = Stash::builder().remote(remote).open(dir.path().join("b.db"))?;
    let before = b.counters()?;
    assert_eq!(b.get(&keys[5])?.as_deref(), Some(&objects[5][..]));
    let many = b.get_many(&[keys[6], keys[7], objstash::Key::of(b"nowhere")])?;
    assert_eq!(many.iter().filter(|o| o.is_some()).count(), 2);
    let after = b.counters()?;
    assert_eq!(after.hits - before.hits, 3, "{after:?}");
    assert_eq!(after.misses - before.misses, 1, "{after:?}");
    assert_eq!(after.read_throughs - before.read_throughs, 3, "{after:?}");
    let bytes = (objects[5].len() + objects[6].len() + objects[7].len()) as u64;
    assert_eq!(after.read_through_bytes - before.read_through_bytes, bytes, "{after:?}");
    // Read again: served by the stash itself now.
    assert!(b.get(&keys[5])?.is_some());
    let last = b.counters()?;
    assert_eq!((last.hits - after.hits, last.read_throughs), (1, after.read_throughs));
    assert!(!spans("remote_request", |c| c.field("op") == Some("get_ranges")).is_empty());
    Ok(())
}
