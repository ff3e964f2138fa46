//! The words of the settings (`single`, `safe`, `zstd-dict`, `file`, ...): how each enum
//! prints and parses, declared once per setting by [`words!`], and the error of a word
//! none of its values has, which names the setting and the words it accepts.

/// Declares a setting's words: `as_str`, `Display` and `FromStr` from one list of each
/// variant's word (and the words also accepted for it).
macro_rules! words {
    ($setting:ident, $name:literal, $expected:literal,
     { $($variant:ident => $word:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $setting {
            #[doc = concat!("The word recorded in the stash and typed on the command line: ", $expected, ".")]
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self {
                    $($setting::$variant => $word,)+
                }
            }
        }

        impl std::fmt::Display for $setting {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $setting {
            type Err = $crate::settings::parse::ParseSettingError;

            #[doc = concat!("Parses ", $expected, ".")]
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($word $(| $alias)* => Ok($setting::$variant),)+
                    other => Err($crate::settings::parse::ParseSettingError::new(
                        $name, other, $expected,
                    )),
                }
            }
        }
    };
}
pub(crate) use words;

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
