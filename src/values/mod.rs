//! The file of values beside the database (format 9): where each value is, and the
//! segments' space, compacted and given back.

pub(crate) mod value_log;
pub(crate) mod value_space;
