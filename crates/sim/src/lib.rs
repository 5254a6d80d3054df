//! The memory-system simulator of pmlab: an event-driven model of NVRAM
//! (Optane DC PMM, after LENS/VANS), DDR4 and CXL memory, fast enough to
//! replay traces of whole programs, and usable one request at a time as a
//! library (the profiler drives it; the persistency replay builds on it).
//!
//! Event-driven, not cycle-ticked: every component keeps the times at which
//! its resources (banks, buses, queues, buffers, media) become free, so a
//! request's path computes its completion directly.
//!
//! # Brief overview
//!
//! * [`System`]: a configured memory system. Build it from a preset
//!   ([`System::preset`]), a TOML string ([`System::from_toml`]) or file;
//!   [`System::submit`] one [`Request`] at a time and get its
//!   [`Completion`] (done time, and for writes when they reached the
//!   persistence domain); [`System::stats`] gives the [`Stats`] tree.
//! * [`drive`]: closed-loop, open-loop (N outstanding) and timed replay of
//!   trace records.
//! * [`controller`] and [`device`]: the component kinds, each one trait
//!   with one file per implementation; [`registry`] builds them by name.
//! * [`presets`]: the bundled configurations (`configs/*.toml`).
//! * [`persistency`]: trace replay under persistency models (x86-nvm,
//!   x86-adr, hops, hops-adr, ideal) on top of [`System`]: each model one
//!   implementation of [`persistency::Persistency`], one file each,
//!   registered by name in [`registry::PERSISTENCY`].
//! * [`functional`]: the conversion of a configuration into the emulator's
//!   functional device model (`pmlab run --device`).
//! * [`validate`]: the validation experiments behind `docs/validation.md`.
//! * [`Error`]: the one error type; messages name the parameter, component,
//!   preset or file.
//!
//! Depends on `pmlab-model` (units) and `pmlab-trace` (records); never on
//! the runtime, the probe or the CLI.
//!
//! # Example
//!
//! ```
//! use pmlab_sim::{Op, Request, System};
//!
//! let mut sys = System::preset("optane-1dimm").unwrap();
//! // A load, then a non-temporal store and a fence: when is it persistent?
//! let r = sys.submit(&Request::new(0.0, Op::Read, 0x1000, 64));
//! assert!(r.latency_ns() > 100.0);
//! let w = sys.submit(&Request::new(r.done_ns, Op::NtWrite, 0x2000, 64));
//! let f = sys.submit(&Request::new(w.done_ns, Op::SFence, 0, 0));
//! assert!(f.done_ns >= w.persist_ns.unwrap());
//! let stats = sys.stats();
//! assert_eq!(stats.get("latency.read.count"), Some(1.0));
//! ```
#![deny(missing_docs)]

pub mod buffer;
pub mod config;
pub mod controller;
pub mod device;
pub mod drive;
mod error;
pub mod functional;
pub mod persistency;
pub mod presets;
pub mod registry;
pub mod stats;
mod system;
pub mod validate;

pub use error::{Error, ErrorKind};
pub use pmlab_trace::Op;
pub use stats::{Histogram, Stats};
pub use system::{Completion, Request, System};
