//! Words the reports share.

/// Spells an age in its largest whole unit: `45s`, `12m`, `5h`, `30d`.
pub(super) fn age_words(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
