//! Large objects: cut into chunks by content, each stored once, and the manifest row that
//! lists them; the bound on bytes a streaming save has in flight.

pub(crate) mod chunks;
pub(crate) mod inflight;
pub(crate) mod manifest;
