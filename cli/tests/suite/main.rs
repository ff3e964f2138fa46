//! The command line's tests, one test binary: `commands` runs every command as a user
//! would; `models` the model commands; `remote` runs the remote commands against a real S3
//! server.

mod bad_input;
mod commands;
mod common;
mod help_files;
mod models;
#[cfg(feature = "remote")]
mod remote;
#[allow(dead_code)]
#[path = "../../../tests/suite/common/tmpfs.rs"]
mod tmpfs;

// The S3 server harness shared with the library's tests.
#[cfg(feature = "remote")]
#[allow(dead_code)]
#[path = "../../../tests/suite/common/s3.rs"]
mod s3;

// The loopback proxy that fails chosen reads, shared with the library's tests.
#[cfg(feature = "remote")]
#[allow(dead_code)]
#[path = "../../../tests/suite/common/faulty.rs"]
mod faulty;
