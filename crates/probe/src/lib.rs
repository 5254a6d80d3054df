//! LENS probes for pmlab: reverse-engineer a memory device from the shapes
//! of latency and bandwidth curves (LENS, MICRO'20, section III), on the
//! host's real memory or on pmlab's simulator, and turn the curves into a
//! device profile the simulator loads: the LENS-to-VANS loop in one tool.
//!
//! # Brief overview
//!
//! * [`pattern`]: the request streams ([`pattern::Pattern`]: visit order of
//!   blocks, block size, loads/stores/read-after-write, closed loop or
//!   bounded outstanding requests, fence placement) and the [`Target`]
//!   trait that runs them. The probe logic is written once against it.
//! * [`host`]: the host target (non-temporal AVX-512/AVX2 pointer chain and
//!   stores, `clwb`/`clflushopt`/`clflush`, TSC timing, pinning, huge pages,
//!   file mappings).
//! * [`sim`]: the simulator target (`pmlab-sim`, closed loop or N
//!   outstanding requests).
//! * [`probes`]: pointer chasing (regions, blocks, RaW), overwrite (per
//!   iteration, long-tail frequency per region) and stride (access sizes,
//!   strides), each returning a [`probes::Curve`].
//! * [`suite`]: the full plan of `pmlab probe all` and its result set.
//! * [`infer`]: inflections → capacities, amplification knee → entry size,
//!   RaW vs R + W → inclusion, tails → migration, frequency drop →
//!   migration block, stride pattern → interleaving.
//! * [`profile`]: the simulator TOML, with latencies fitted by simulation,
//!   and the check that it reproduces the measured curve.
//! * [`report`]: the readable report, sysfs cache levels, plots.
//! * [`Error`] with an [`ErrorKind`].
//!
//! Depends on `pmlab-model` (units), `pmlab-sim` (the simulator target) and
//! `pmlab-plot` (charts); never on the runtime or the CLI, and not on
//! `anyhow`.
//!
//! # Example
//!
//! ```
//! use pmlab_probe::probes::{self, Settings};
//! use pmlab_probe::{infer, sim::Sim, Op};
//!
//! let mut sim = Sim::preset("optane-1dimm").unwrap();
//! let s = Settings { repeats: 1, min_lines: 4096, ..Settings::default() };
//! let regions = probes::pow2_sweep(4096, 65536);
//! let c = probes::ptrchase_region(&mut sim, &s, Op::Load, 64, &regions, &mut |_, _, _| {})
//!     .unwrap();
//! let found = infer::inflections(&c.points, infer::Thresholds::default().rise);
//! assert_eq!(found[0].capacity, 16384.0); // the 16 KiB RMW buffer
//! ```
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
