//! A bounded cache: when each object was last used, pins, and eviction within a size cap.

pub(crate) mod evict;
pub(crate) mod uses;
