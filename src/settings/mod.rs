//! The settings a user names in words (`single`, `safe`, `file`): each an enum that prints
//! and parses the same way (the codec's words are `codec/`'s).

pub(crate) mod durability;
pub(crate) mod layout;
pub(crate) mod parse;
pub(crate) mod values;
