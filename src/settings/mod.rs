//! The settings a user names in words (`single`, `safe`, `zstd-dict`, `file`): each an enum
//! that prints and parses the same way.

pub(crate) mod durability;
pub(crate) mod layout;
pub(crate) mod parse;
pub(crate) mod values;
