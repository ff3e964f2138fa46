//! Opening a stash: the builder's settings, the open sequence that turns them into a
//! running handle, what a file's header says before SQLite touches it, and `repair`, which
//! works on a closed stash.

pub(crate) mod builder;
pub(crate) mod header;
pub(crate) mod repair;
pub(crate) mod sequence;
