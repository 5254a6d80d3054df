//! Pure models shared by every part of pmlab.
//!
//! This crate owns the arithmetic that the emulator, the simulator, the
//! profiler and the analyses must agree on, and nothing else: it performs no
//! I/O, reads no clock and depends on no other crate.
//!
//! # Brief overview
//!
//! * [`units`]: parsing and printing of durations ([`Nanos`]), sizes
//!   ([`Bytes`]) and bandwidths ([`Bandwidth`]) as users type them
//!   (`400ns`, `10ms`, `64KiB`, `8GB/s`).
//! * [`quartz`]: the Quartz epoch delay model: stall cycles from counters
//!   (equation 3), the injected delay (equation 2), the DRAM/NVM split of a
//!   two-memory machine, bandwidth stretching and the write (pcommit) model.
//! * [`cache`]: a set-associative cache hierarchy model (LRU, dirty lines,
//!   write-backs) for the instrumented counter source.
//! * [`device`]: a functional (hit/miss) model of a device's buffers
//!   (Optane's RMW and AIT buffers, media, write combining, wear leveling,
//!   interleaving) for `pmlab run --device`.
//! * [`mlp`]: the memory-level-parallelism estimate that turns misses into
//!   serial accesses.
//! * [`options`]: the emulator's run options, defined once for `pmlab run`
//!   (flags, config file) and the runtime (`PMLAB_*` variables).
//! * [`tails`]: long tails of a latency series (slower than a factor times
//!   the median) and the interval between them.
//! * [`Error`]: the one error type, whose [`ErrorKind`] names what was wrong.
//!
//! # Example
//!
//! ```
//! use pmlab_model::{quartz, units::Nanos};
//!
//! let dram = Nanos::parse("100ns").unwrap();
//! let pm = Nanos::parse("400").unwrap(); // bare numbers are nanoseconds
//! // 30,000 stall cycles at 3 GHz with a 100 ns DRAM latency are 100 serial
//! // misses; each costs 300 ns more on PM.
//! let delay = quartz::epoch_delay_ns(30_000.0, 3.0, dram.get(), pm.get());
//! assert!((delay - 30_000.0).abs() < 1e-6);
//! ```
#![deny(missing_docs)]

pub mod cache;
pub mod device;
mod error;
pub mod mlp;
pub mod options;
pub mod quartz;
pub mod tails;
pub mod units;

pub use error::{Error, ErrorKind};
pub use units::{Bandwidth, Bytes, Nanos};
