//! The emulator's library side: everything `pmlab run`, `pmlab trace`,
//! `pmlab cc`, `pmlab cargo`, `pmlab calibrate` and `pmlab validate` do besides parsing
//! their flags and printing.
//!
//! # Brief overview
//!
//! * [`launch`]: find libpmlab.so, resolve the program, build its command
//!   line (`LD_PRELOAD`, `PMLAB_*`), ask the runtime whether it accepts the
//!   settings before the program starts, forward signals, map the exit
//!   status.
//! * [`elf`]: what is read from a program's ELF file before it runs (built
//!   by `pmlab cc`? carrying ThreadSanitizer's runtime?).
//! * [`cc`]: the compiler wrapper (which compiler, its family, the flags
//!   added for clang's coverage hooks or gcc's ThreadSanitizer hooks, the
//!   link line with libpmlab).
//! * [`plugin`]: `pmlab cc`'s sampling plugin (an LLVM pass built from
//!   `plugin/sample.cpp`), where it is cached and whether clang can load it.
//! * [`cargo`]: `pmlab cargo`, the same hooks for Rust programs (rustc's
//!   flags, libpmlab on the link line, a separate target directory).
//! * [`calibrate`]: the DRAM latency and TSC calibration ([`Calibration`])
//!   and its per-machine cache; [`calibrate::Chaser`] to measure again
//!   during a study.
//! * [`validate`]: the accuracy studies (memlat, chains, multilat, mtlat,
//!   overhead): their expectations, [`validate::Point`]s, tolerances and
//!   the [`validate::Report`]'s verdict.
//! * [`Error`] with an [`ErrorKind`].
//!
//! The run options themselves (names, defaults, checks, `PMLAB_*`
//! variables) are `pmlab_model::options`, shared with the runtime.
//!
//! Depends on `pmlab-model`, `pmlab-clock`, `pmlab-probe` (the huge-page
//! pointer chain) and `pmlab-plot`; never on the runtime (which it starts
//! as a separate library), the CLI, clap or anyhow.
//!
//! # Example
//!
//! ```
//! use pmlab_emu::cc::{classify, Mode};
//!
//! let args: Vec<String> = ["-O2", "-c", "a.c"].iter().map(|s| s.to_string()).collect();
//! assert_eq!(classify(&args), Mode::Compile);
//! ```
#![deny(missing_docs)]

pub mod calibrate;
pub mod cargo;
pub mod cc;
pub mod elf;
mod error;
pub mod launch;
pub mod plugin;
pub mod validate;

pub use calibrate::Calibration;
pub use error::{Error, ErrorKind, Result};
