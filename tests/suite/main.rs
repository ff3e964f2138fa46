//! The integration tests, one test binary (one link, one file on disk, instead of one per
//! file): each module is one concern, run with `cargo nextest run` or `cargo test --test
//! suite -- <module>::`. A test that runs a child process runs an ignored test of this
//! binary by its full name (`crash::crash_child`).

mod common;

mod bad_input;
mod bounded;
mod codec;
mod concurrency;
mod contention;
mod corruption;
mod counters;
mod crash;
mod crash_eviction;
mod formats;
mod fuzz_read_path;
mod gzip_code;
mod large;
mod layouts_agree;
mod models;
mod models_damage;
mod models_handles;
mod models_liveness;
mod models_nested;
mod models_processes;
mod models_stream;
mod names;
#[cfg(feature = "async")]
mod nonblocking;
mod owned;
mod read_your_writes;
#[cfg(feature = "remote")]
mod remote;
#[cfg(feature = "remote")]
mod remote_gc;
#[cfg(feature = "remote")]
mod remote_shards;
#[cfg(feature = "remote")]
mod remote_trim;
mod reopen;
mod round_trip;
mod settings;
mod shared_dictionaries;
mod sharing;
mod snapshots;
mod traces;
mod uses_apart;
mod values_in_file;
