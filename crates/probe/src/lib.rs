//! LENS probes for pmlab (work in progress).
#![deny(missing_docs)]
mod error;
pub mod host;
pub mod infer;
pub mod pattern;
pub mod probes;
pub mod profile;
pub mod report;
pub mod sim;
pub mod suite;
pub use error::{Error, ErrorKind};
pub use pattern::{Op, Target};
