//! What the reports say: the size report, verify's report, what an eviction took out, and
//! what a recovery kept and lost.

pub(crate) mod model;
pub(crate) mod recovery;
pub(crate) mod stats;
