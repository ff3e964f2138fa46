//! The error of parsing a setting's word (`single`, `safe`, `zstd-dict`, ...).
//!
//! [`Layout`](crate::Layout), [`Durability`](crate::Durability) and
//! [`Codec`](crate::Codec) parse the words they are recorded and typed as; a word none of
//! them knows is this error, which names the setting and the words it accepts.

/// A word that is not one of a setting's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {setting} {found:?}: use {expected}")]
pub struct ParseSettingError {
    setting: &'static str,
    found: String,
    expected: &'static str,
}

impl ParseSettingError {
    pub(crate) fn new(setting: &'static str, found: &str, expected: &'static str) -> Self {
        ParseSettingError { setting, found: found.chars().take(80).collect(), expected }
    }

    /// Which setting was being parsed: `layout`, `durability` or `codec`.
    #[must_use]
    pub fn setting(&self) -> &str {
        self.setting
    }
}
