//! A bounded cache: when each object was last used, pins, eviction within a size cap, and
//! what the cache served (hits and misses).

pub(crate) mod counts;
pub(crate) mod evict;
pub(crate) mod uses;
