//! The pack log: one empty file per event, named so that the remote lists events in the
//! order they happened, so a refresh lists only what is new, in one request.
//!
//! A push writes `log/<ms>-<pack>.pack` after the pack's body and index (an event implies
//! both are there); taking a damaged pack out of the listing writes `log/<ms>-<pack>.gone`
//! after its index is gone. `<ms>` is the writer's clock in milliseconds since 1970, 13
//! digits, so names sort by time. A refresh lists the names after its cursor less a
//! margin (S3's `start-after`: one request per 1,000 names) and moves its cursor to its
//! own clock at the start of the listing. An event is missed only if it is older than the
//! cursor by more than the margin, so the margin (`RemoteConfig::clock_skew`, 10 minutes
//! by default) covers the clocks of any two machines disagreeing and an event's upload
//! taking long after its time was taken.
//!
//! The log is the listing: a catalog's first refresh lists the whole log (and one
//! refresh a day does again, in case a clock was off by more), so every
//! machine sees the same packs; a pack whose push was killed before its event is not on
//! the remote for anyone (its objects go up again with the next push).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::pack;

/// How often a refresh lists the whole log rather than from its cursor, in case a
/// machine's clock was off by more than the margin.
pub(crate) const LIST_WHOLE_EVERY: Duration = Duration::from_secs(24 * 3600);

/// What happened to a pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    /// Its body and index were uploaded.
    Added,
    /// It was taken out of the listing (its index is gone).
    Gone,
}

/// One event of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub ms: u64,
    pub pack: String,
    pub what: What,
}

/// This machine's clock, in milliseconds since 1970.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The file name of an event.
pub(crate) fn name(ms: u64, pack: &str, what: What) -> String {
    let suffix = match what {
        What::Added => "pack",
        What::Gone => "gone",
    };
    format!("{ms:013}-{pack}.{suffix}")
}

/// The name a refresh with cursor `cursor` lists after: every event of a time at least
/// `cursor - margin` sorts after it.
pub(crate) fn start_after(cursor: u64, margin: Duration) -> String {
    let from = cursor.saturating_sub(margin.as_millis() as u64);
    // A name sorts after its own prefix: the events of `from` itself are listed.
    format!("{from:013}")
}

/// The event a file name records; `None` for a name that is not an event (left alone).
pub(crate) fn parse(name: &str) -> Option<Event> {
    let (ms, rest) = name.split_once('-')?;
    if ms.len() != 13 || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (pack, suffix) = rest.split_once('.')?;
    let what = match suffix {
        "pack" => What::Added,
        "gone" => What::Gone,
        _ => return None,
    };
    let ms = ms.parse().ok()?;
    pack::is_name(pack).then(|| Event { ms, pack: pack.to_string(), what })
}

/// What the pack log's `events` (names, in order) change in a catalog that knows the
/// packs `known`: the packs to read (announced and not known, or left unread by an earlier
/// refresh) and the packs gone (taken out; with `whole`, the events are the whole log, and
/// a known pack it does not announce is gone too). A pack's last event decides: a pack
/// taken out and pushed again (healed) is there.
pub(crate) fn changes(
    events: &[String],
    known: &HashSet<String>,
    unread: Vec<String>,
    whole: bool,
) -> (Vec<String>, Vec<String>) {
    let mut last: BTreeMap<String, What> =
        unread.into_iter().map(|name| (name, What::Added)).collect();
    if whole {
        last.extend(known.iter().map(|name| (name.clone(), What::Gone)));
    }
    for event in events.iter().filter_map(|name| parse(name)) {
        last.insert(event.pack, event.what);
    }
    let mut new = Vec::new();
    let mut gone = Vec::new();
    for (pack, what) in last {
        match what {
            What::Added if !known.contains(&pack) => new.push(pack),
            What::Added => {}
            What::Gone => gone.push(pack),
        }
    }
    (new, gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn names_parse_back_and_sort_by_time() {
        let early = name(999_999_999_999, PACK, What::Gone);
        let late = name(1_764_000_000_000, PACK, What::Added);
        assert!(early < late, "{early} {late}");
        assert_eq!(
            parse(&late),
            Some(Event { ms: 1_764_000_000_000, pack: PACK.into(), what: What::Added })
        );
        assert_eq!(parse(&early).map(|e| e.what), Some(What::Gone));
        for bad in
            ["", "x", "1764000000000-abc.pack", "176400000000-0.pack", &format!("{PACK}.pack")]
        {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse(&format!("1764000000000-{PACK}.tmp")), None);
    }

    #[test]
    fn a_listing_starts_a_margin_before_its_cursor() {
        let cursor = 1_764_000_000_000;
        let margin = 600_000;
        let after = start_after(cursor, Duration::from_millis(margin));
        // An event exactly a margin old is listed; one older is not.
        assert!(name(cursor - margin, PACK, What::Added) > after);
        assert!(name(cursor - margin - 1, PACK, What::Added) < after);
        assert!(name(cursor, PACK, What::Added) > after);
        assert_eq!(start_after(5, Duration::from_millis(margin)), "0000000000000");
        assert!(name(cursor, PACK, What::Gone) > start_after(cursor, Duration::ZERO));
        assert!(name(cursor - 1, PACK, What::Gone) < start_after(cursor, Duration::ZERO));
    }

    #[test]
    fn a_packs_last_event_decides() {
        let [a, b, c, d] = ["a", "b", "c", "d"].map(|x| x.repeat(64));
        let events = [
            name(1, &a, What::Added),
            name(2, &b, What::Added),
            name(3, &a, What::Gone),
            name(4, &b, What::Gone),
            name(5, &b, What::Added),
            name(6, &c, What::Added),
            "not-an-event".to_string(),
        ];
        let known: HashSet<String> = [a.clone(), c.clone()].into();
        // a went; b was taken out and pushed again, so it is read; c is known; d was left
        // unread by an earlier refresh and is read again.
        let (new, gone) = changes(&events, &known, vec![d.clone()], false);
        assert_eq!(new, vec![b.clone(), d.clone()]);
        assert_eq!(gone, vec![a.clone()]);
        // The whole log: a known pack it does not announce is gone.
        let e = "e".repeat(64);
        let known: HashSet<String> = [c.clone(), e.clone()].into();
        let (new, gone) = changes(&events, &known, Vec::new(), true);
        assert_eq!((new, gone), (vec![b], vec![a, e]));
    }
}
