//! Small charts for pmlab: line charts and bar charts laid out here into one
//! display list, written as SVG or drawn by `tiny-skia` (anti-aliased) with
//! an embedded font (DejaVu Sans, read by `ab_glyph`) and encoded as PNG, so
//! text reads the same on every machine without installed fonts.
//!
//! The profiler draws its latency and bandwidth curves with it (with the
//! inferred inflection points marked), `validate` its accuracy curves and
//! `analyze` its distributions. See `README.md` for why the layout is ours
//! and the rendering is not.
//!
//! # Brief overview
//!
//! * [`LineChart`]: several [`Series`] over an x and a y [`Axis`] (linear or
//!   log [`Scale`], ticks written as plain numbers, sizes or durations with
//!   [`Format`]), optional error bars, and labelled [`Mark`]s.
//! * [`BarChart`]: labelled bars, or a histogram from bin edges and counts.
//! * Both have `to_svg`, `to_png`, `save` (format from the extension) and
//!   `save_pair` (`<dir>/<name>.svg` and `.png`: the `--plot DIR` convention).
//! * [`fmt_size`], [`fmt_duration`], [`fmt_count`]: numbers in words and
//!   units for titles and ticks (`256 MiB`, `1.5 µs`, `25k`).
//! * [`Error`] with an [`ErrorKind`]: empty charts, unplottable values
//!   (NaN, non-positive on a log axis), unwritable files, render failures.
//!
//! This crate depends on no other pmlab crate (not even `pmlab-model`) so
//! any pmlab crate or tool may use it.
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
//!     .mark(16384.0, 104.0, "16 KiB buffer");
//! let svg = chart.to_svg().unwrap();
//! assert!(svg.contains("16 KiB buffer") && svg.contains(">1 MiB</text>"));
//! let png = chart.to_png().unwrap();
//! assert!(png.starts_with(b"\x89PNG"));
//! ```
#![deny(missing_docs)]

mod chart;
mod error;
mod raster;
mod scene;
mod units;

pub use chart::{fmt_tick, Axis, BarChart, Format, LineChart, Mark, Scale, Series};
pub use error::{Error, ErrorKind};
pub use units::{fmt_count, fmt_duration, fmt_size};
