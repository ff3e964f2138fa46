//! What the reports say: the size report, the hit and miss report, verify's report, what
//! an eviction took out, and what a recovery kept and lost.

pub(crate) mod counters;
pub(crate) mod model;
pub(crate) mod recovery;
pub(crate) mod stats;
mod words;
