//! Small charts for pmlab, written by hand: line charts and bar charts
//! rendered to SVG, or rasterized and encoded as PNG.
//!
//! The profiler draws its latency and bandwidth curves with it (with the
//! inferred inflection points marked), `validate` its accuracy curves and
//! `analyze` its distributions.
//!
//! # Brief overview
//!
//! * [`LineChart`]: several [`Series`] over an x and a y [`Axis`] (linear or
//!   log [`Scale`], ticks written as plain numbers, sizes or durations with
//!   [`Format`]), optional error bars, and labelled [`Mark`]s.
//! * [`BarChart`]: labelled bars, or a histogram from bin edges and counts.
//! * Both have `to_svg`, `to_png` and `save` (format from the extension).
//! * [`png`]: the PNG encoder (CRC-32, Adler-32, zlib with stored or
//!   fixed-Huffman run-length blocks), usable on any RGB buffer.
//! * [`Error`] with an [`ErrorKind`]: empty charts, unplottable values
//!   (NaN, non-positive on a log axis), unwritable files.
//!
//! This crate depends on nothing (not even `pmlab-model`) so any pmlab crate
//! or tool may use it.
//!
//! # Example
//!
//! ```
//! use pmlab_plot::{Axis, Format, LineChart, Scale, Series};
//!
//! let pts: Vec<(f64, f64)> = (6..=24).map(|e| (2f64.powi(e), 90.0 + e as f64)).collect();
//! let chart = LineChart::new("pointer chasing, 64 B blocks")
//!     .x_axis(Axis::new("region").scale(Scale::Log).format(Format::Bytes))
//!     .y_axis(Axis::new("latency per line").format(Format::Nanos))
//!     .series(Series::new("load", pts))
//!     .mark(16384.0, 104.0, "16 KB buffer");
//! let svg = chart.to_svg().unwrap();
//! assert!(svg.contains("16 KB buffer"));
//! let png = chart.to_png().unwrap();
//! assert!(png.starts_with(b"\x89PNG"));
//! ```
#![deny(missing_docs)]

mod chart;
mod error;
mod font;
pub mod png;
mod scene;

pub use chart::{fmt_tick, Axis, BarChart, Format, LineChart, Mark, Scale, Series};
pub use error::{Error, ErrorKind};
