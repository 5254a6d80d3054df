//! Chart descriptions (what to draw) and their layout into a [`Scene`].

use crate::raster;
use crate::scene::{Anchor, Item, Rgb, Scene};
use crate::units::{fmt_count, fmt_duration, fmt_size};
use crate::{Error, ErrorKind};
use std::path::{Path, PathBuf};

/// How an axis maps values to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear; the range includes zero unless set with [`Axis::range`].
    Linear,
    /// Logarithmic; every value must be positive.
    Log,
}

/// How tick labels are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain numbers (`12`, `0.5`, `25k`, `3M`).
    Number,
    /// Sizes in bytes with binary units (`64 B`, `16 KiB`, `4 MiB`); log
    /// ticks at powers of 2.
    Bytes,
    /// Durations from nanoseconds (`80 ns`, `1.5 µs`, `2 ms`).
    Nanos,
}

/// One axis: label, scale, label format and an optional fixed range.
#[derive(Debug, Clone)]
pub struct Axis {
    label: String,
    scale: Scale,
    format: Format,
    range: Option<(f64, f64)>,
}

impl Axis {
    /// A linear axis of plain numbers.
    pub fn new(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
            format: Format::Number,
            range: None,
        }
    }
    /// Use `scale`.
    pub fn scale(mut self, scale: Scale) -> Axis {
        self.scale = scale;
        self
    }
    /// Write tick labels with `format`.
    pub fn format(mut self, format: Format) -> Axis {
        self.format = format;
        self
    }
    /// Fix the range instead of fitting the data.
    pub fn range(mut self, min: f64, max: f64) -> Axis {
        self.range = Some((min, max));
        self
    }
}

/// One named curve: points `(x, y)` and optional error bars `(low, high)`.
#[derive(Debug, Clone)]
pub struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    spread: Vec<(f64, f64)>,
    dots: bool,
}

impl Series {
    /// A curve called `name` through `points` (drawn in the given order).
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            spread: Vec::new(),
            dots: true,
        }
    }
    /// Error bars, one `(low, high)` per point (e.g. min and max of runs).
    pub fn spread(mut self, spread: Vec<(f64, f64)>) -> Series {
        self.spread = spread;
        self
    }
    /// Draw a dot at each point (default true; turn off for dense series).
    pub fn dots(mut self, dots: bool) -> Series {
        self.dots = dots;
        self
    }
}

/// A marked point with a label, such as an inferred inflection.
#[derive(Debug, Clone)]
pub struct Mark {
    /// Position on the x axis.
    pub x: f64,
    /// Position on the y axis.
    pub y: f64,
    /// Text drawn next to it.
    pub label: String,
}

/// A line chart: several series, marked points, linear or log axes.
#[derive(Debug, Clone)]
pub struct LineChart {
    title: String,
    x: Axis,
    y: Axis,
    series: Vec<Series>,
    marks: Vec<Mark>,
    size: (u32, u32),
}

/// A bar chart (or a histogram, with [`BarChart::histogram`]).
#[derive(Debug, Clone)]
pub struct BarChart {
    title: String,
    x_label: String,
    y: Axis,
    bars: Vec<(String, f64)>,
    size: (u32, u32),
}

const PALETTE: [Rgb; 8] = [
    (0x1f, 0x77, 0xb4),
    (0xd6, 0x27, 0x28),
    (0x2c, 0xa0, 0x2c),
    (0xff, 0x7f, 0x0e),
    (0x94, 0x67, 0xbd),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x17, 0xbe, 0xcf),
];
const INK: Rgb = (0x22, 0x22, 0x22);
const GRID: Rgb = (0xe4, 0xe4, 0xe4);
const MARK: Rgb = (0x10, 0x10, 0x10);
const MARGIN_L: f64 = 80.0;
const MARGIN_T: f64 = 44.0;
const MARGIN_B: f64 = 64.0;

impl LineChart {
    /// An empty chart titled `title`, 800x480 pixels, linear axes.
    pub fn new(title: impl Into<String>) -> LineChart {
        LineChart {
            title: title.into(),
            x: Axis::new("x"),
            y: Axis::new("y"),
            series: Vec::new(),
            marks: Vec::new(),
            size: (800, 480),
        }
    }
    /// Set the x axis.
    pub fn x_axis(mut self, axis: Axis) -> LineChart {
        self.x = axis;
        self
    }
    /// Set the y axis.
    pub fn y_axis(mut self, axis: Axis) -> LineChart {
        self.y = axis;
        self
    }
    /// Add a series.
    pub fn series(mut self, s: Series) -> LineChart {
        self.series.push(s);
        self
    }
    /// Mark the point `(x, y)` with `label`.
    pub fn mark(mut self, x: f64, y: f64, label: impl Into<String>) -> LineChart {
        self.marks.push(Mark {
            x,
            y,
            label: label.into(),
        });
        self
    }
    /// Set the image size in pixels (minimum 320x200).
    pub fn size(mut self, width: u32, height: u32) -> LineChart {
        self.size = (width.max(320), height.max(200));
        self
    }

    fn scene(&self) -> Result<Scene, Error> {
        let pts = || self.series.iter().flat_map(|s| s.points.iter());
        if pts().next().is_none() {
            return Err(Error::new(
                ErrorKind::Empty,
                format!("chart '{}' has no data points to draw", self.title),
            ));
        }
        let mut xs: Vec<f64> = pts().map(|p| p.0).collect();
        let mut ys: Vec<f64> = pts().map(|p| p.1).collect();
        for s in &self.series {
            for &(lo, hi) in &s.spread {
                ys.push(lo);
                ys.push(hi);
            }
        }
        for m in &self.marks {
            xs.push(m.x);
            ys.push(m.y);
        }
        let xmap = Mapper::fit(&self.x, &xs, &self.title)?;
        let ymap = Mapper::fit(&self.y, &ys, &self.title)?;
        let legend_w = if self.series.len() > 1 || !self.series[0].name.is_empty() {
            let longest = self.series.iter().map(|s| s.name.chars().count()).max();
            (longest.unwrap_or(0) as f64 * 7.0 + 40.0).min(220.0)
        } else {
            20.0
        };
        let frame = Frame::new(self.size, legend_w);
        let mut items = frame.axes(&self.title, &xmap, &ymap, &self.x.label, &self.y.label);
        for (k, s) in self.series.iter().enumerate() {
            let color = PALETTE[k % PALETTE.len()];
            let px: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| (frame.x(xmap.pos(x)), frame.y(ymap.pos(y))))
                .collect();
            for (i, &(lo, hi)) in s.spread.iter().enumerate().take(px.len()) {
                let x = px[i].0;
                let (ylo, yhi) = (frame.y(ymap.pos(lo)), frame.y(ymap.pos(hi)));
                items.push(line((x, ylo), (x, yhi), color, 1.0));
                items.push(line((x - 3.0, ylo), (x + 3.0, ylo), color, 1.0));
                items.push(line((x - 3.0, yhi), (x + 3.0, yhi), color, 1.0));
            }
            items.push(Item::Polyline {
                points: px.clone(),
                color,
                width: 2.0,
            });
            if s.dots {
                for &c in &px {
                    items.push(Item::Circle {
                        c,
                        r: 2.5,
                        fill: color,
                    });
                }
            }
            let ly = MARGIN_T + 14.0 + 18.0 * k as f64;
            let lx = frame.right + 12.0;
            items.push(line((lx, ly - 4.0), (lx + 18.0, ly - 4.0), color, 2.0));
            items.push(text((lx + 24.0, ly), &s.name, 11.0, Anchor::Start));
        }
        for m in &self.marks {
            let (x, y) = (frame.x(xmap.pos(m.x)), frame.y(ymap.pos(m.y)));
            items.push(Item::Line {
                a: (x, y),
                b: (x, frame.bottom),
                color: MARK,
                width: 1.0,
                dashed: true,
            });
            items.push(Item::Circle {
                c: (x, y),
                r: 5.0,
                fill: MARK,
            });
            items.push(Item::Circle {
                c: (x, y),
                r: 3.0,
                fill: (0xff, 0xd7, 0x00),
            });
            let anchor = if x > (frame.left + frame.right) / 2.0 {
                Anchor::End
            } else {
                Anchor::Start
            };
            let dx = if anchor == Anchor::End { -8.0 } else { 8.0 };
            items.push(text((x + dx, y - 8.0), &m.label, 11.0, anchor));
        }
        Ok(Scene {
            width: self.size.0,
            height: self.size.1,
            items,
        })
    }
}

impl BarChart {
    /// An empty bar chart titled `title` with the category axis `x_label`.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>) -> BarChart {
        BarChart {
            title: title.into(),
            x_label: x_label.into(),
            y: Axis::new("count"),
            bars: Vec::new(),
            size: (800, 480),
        }
    }
    /// A histogram: `edges` has one more element than `counts`; bar `i`
    /// covers `[edges[i], edges[i+1])` and is labelled with its lower edge
    /// written in `format`.
    pub fn histogram(
        title: impl Into<String>,
        x_label: impl Into<String>,
        edges: &[f64],
        counts: &[f64],
        format: Format,
    ) -> Result<BarChart, Error> {
        let title = title.into();
        if edges.len() != counts.len() + 1 {
            return Err(Error::new(
                ErrorKind::BadValue,
                format!(
                    "histogram '{title}': {} edges for {} counts (need one more edge than counts)",
                    edges.len(),
                    counts.len()
                ),
            ));
        }
        let mut chart = BarChart::new(title, x_label);
        for (i, &c) in counts.iter().enumerate() {
            chart = chart.bar(fmt_tick(edges[i], format), c);
        }
        Ok(chart)
    }
    /// Set the value axis (its label, scale and format).
    pub fn y_axis(mut self, axis: Axis) -> BarChart {
        self.y = axis;
        self
    }
    /// Add a bar.
    pub fn bar(mut self, label: impl Into<String>, value: f64) -> BarChart {
        self.bars.push((label.into(), value));
        self
    }
    /// Set the image size in pixels (minimum 320x200).
    pub fn size(mut self, width: u32, height: u32) -> BarChart {
        self.size = (width.max(320), height.max(200));
        self
    }

    fn scene(&self) -> Result<Scene, Error> {
        if self.bars.is_empty() {
            return Err(Error::new(
                ErrorKind::Empty,
                format!("chart '{}' has no bars to draw", self.title),
            ));
        }
        let mut ys: Vec<f64> = self.bars.iter().map(|b| b.1).collect();
        if self.y.scale == Scale::Linear {
            ys.push(0.0);
        } else {
            // Empty bins are common in histograms: they draw as nothing.
            ys.retain(|&v| v > 0.0);
            if ys.is_empty() {
                ys.push(1.0);
            }
        }
        let ymap = Mapper::fit(&self.y, &ys, &self.title)?;
        let n = self.bars.len();
        let xmap = Mapper {
            scale: Scale::Linear,
            format: Format::Number,
            lo: 0.0,
            hi: n as f64,
            ticks: Vec::new(),
        };
        let frame = Frame::new(self.size, 20.0);
        let mut items = frame.axes(&self.title, &xmap, &ymap, &self.x_label, &self.y.label);
        let slot = (frame.right - frame.left) / n as f64;
        let longest = self
            .bars
            .iter()
            .map(|b| b.0.chars().count())
            .max()
            .unwrap_or(1);
        let every = ((longest as f64 * 7.0 + 6.0) / slot).ceil().max(1.0) as usize;
        for (i, (label, v)) in self.bars.iter().enumerate() {
            let x0 = frame.left + slot * i as f64 + slot * 0.1;
            let base = if self.y.scale == Scale::Log {
                frame.bottom
            } else {
                frame.y(ymap.pos(0.0))
            };
            if v.is_finite() && (self.y.scale == Scale::Linear || *v > 0.0) {
                let top = frame.y(ymap.pos(*v));
                let (y, h) = if top < base {
                    (top, base - top)
                } else {
                    (base, top - base)
                };
                items.push(Item::Rect {
                    x: x0,
                    y,
                    w: slot * 0.8,
                    h,
                    fill: PALETTE[0],
                });
            }
            if i % every == 0 {
                let cx = frame.left + slot * (i as f64 + 0.5);
                items.push(text((cx, frame.bottom + 16.0), label, 10.0, Anchor::Middle));
            }
        }
        Ok(Scene {
            width: self.size.0,
            height: self.size.1,
            items,
        })
    }
}

macro_rules! outputs {
    ($t:ty) => {
        impl $t {
            /// The chart as an SVG document.
            pub fn to_svg(&self) -> Result<String, Error> {
                Ok(self.scene()?.to_svg())
            }
            /// The chart as PNG bytes, its text in the embedded font.
            pub fn to_png(&self) -> Result<Vec<u8>, Error> {
                raster::png(&self.scene()?)
            }
            /// Write the chart to `path`, as SVG or PNG after its extension.
            pub fn save(&self, path: &Path) -> Result<(), Error> {
                let bytes = match path.extension().and_then(|e| e.to_str()) {
                    Some("svg") => self.to_svg()?.into_bytes(),
                    Some("png") => self.to_png()?,
                    _ => {
                        return Err(Error::new(
                            ErrorKind::Io,
                            format!(
                                "cannot tell the image format of '{}': name it .svg or .png",
                                path.display()
                            ),
                        ))
                    }
                };
                write(path, &bytes)
            }
            /// Write the chart as `<dir>/<name>.svg` and `<dir>/<name>.png`
            /// (creating `dir`), the one plot convention of pmlab's
            /// `--plot DIR`. Returns the two paths, SVG first.
            pub fn save_pair(&self, dir: &Path, name: &str) -> Result<[PathBuf; 2], Error> {
                let scene = self.scene()?;
                save_pair(dir, name, &scene.to_svg(), &raster::png(&scene)?)
            }
        }
    };
}
outputs!(LineChart);
outputs!(BarChart);

/// Write a chart whole or not at all: into a hidden temporary file beside
/// `path`, then renamed over it (a failure removes the temporary file).
fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let r = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot write chart '{}': {e}", path.display()),
        )
    })
}

/// Write `<dir>/<name>.svg` and `<dir>/<name>.png`, creating `dir`.
fn save_pair(dir: &Path, name: &str, svg: &str, png: &[u8]) -> Result<[PathBuf; 2], Error> {
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot create the plot directory '{}': {e}", dir.display()),
        )
    })?;
    let (s, p) = (
        dir.join(format!("{name}.svg")),
        dir.join(format!("{name}.png")),
    );
    write(&s, svg.as_bytes())?;
    write(&p, png)?;
    Ok([s, p])
}

fn line(a: (f64, f64), b: (f64, f64), color: Rgb, width: f64) -> Item {
    Item::Line {
        a,
        b,
        color,
        width,
        dashed: false,
    }
}

fn text(at: (f64, f64), s: &str, size: f64, anchor: Anchor) -> Item {
    Item::Text {
        at,
        text: s.to_string(),
        size,
        anchor,
        color: INK,
        vertical: false,
    }
}

/// The plotting area inside the image.
struct Frame {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    size: (u32, u32),
}

impl Frame {
    fn new(size: (u32, u32), legend_w: f64) -> Frame {
        Frame {
            left: MARGIN_L,
            right: size.0 as f64 - legend_w - 10.0,
            top: MARGIN_T,
            bottom: size.1 as f64 - MARGIN_B,
            size,
        }
    }
    fn x(&self, t: f64) -> f64 {
        self.left + t * (self.right - self.left)
    }
    fn y(&self, t: f64) -> f64 {
        self.bottom - t * (self.bottom - self.top)
    }
    fn axes(&self, title: &str, xm: &Mapper, ym: &Mapper, xl: &str, yl: &str) -> Vec<Item> {
        let mut v = Vec::new();
        for &t in &xm.ticks {
            let x = self.x(xm.pos(t));
            v.push(line((x, self.top), (x, self.bottom), GRID, 1.0));
            v.push(line((x, self.bottom), (x, self.bottom + 5.0), INK, 1.0));
            v.push(text(
                (x, self.bottom + 18.0),
                &fmt_tick(t, xm.format),
                10.0,
                Anchor::Middle,
            ));
        }
        for &t in &ym.ticks {
            let y = self.y(ym.pos(t));
            v.push(line((self.left, y), (self.right, y), GRID, 1.0));
            v.push(line((self.left - 5.0, y), (self.left, y), INK, 1.0));
            v.push(text(
                (self.left - 8.0, y + 4.0),
                &fmt_tick(t, ym.format),
                10.0,
                Anchor::End,
            ));
        }
        v.push(line(
            (self.left, self.bottom),
            (self.right, self.bottom),
            INK,
            1.0,
        ));
        v.push(line(
            (self.left, self.top),
            (self.left, self.bottom),
            INK,
            1.0,
        ));
        let cx = (self.left + self.right) / 2.0;
        v.push(text(
            (self.size.0 as f64 / 2.0, 24.0),
            title,
            15.0,
            Anchor::Middle,
        ));
        v.push(text(
            (cx, self.size.1 as f64 - 14.0),
            xl,
            12.0,
            Anchor::Middle,
        ));
        v.push(Item::Text {
            at: (20.0, (self.top + self.bottom) / 2.0),
            text: yl.to_string(),
            size: 12.0,
            anchor: Anchor::Middle,
            color: INK,
            vertical: true,
        });
        v
    }
}

/// Maps data values on one axis to [0, 1] and chooses its ticks.
#[derive(Debug)]
struct Mapper {
    scale: Scale,
    format: Format,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Mapper {
    fn fit(axis: &Axis, values: &[f64], title: &str) -> Result<Mapper, Error> {
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Err(Error::new(
                ErrorKind::BadValue,
                format!("chart '{title}': axis '{}' got the value {v}", axis.label),
            ));
        }
        if axis.scale == Scale::Log {
            if let Some(v) = values.iter().find(|&&v| v <= 0.0) {
                return Err(Error::new(
                    ErrorKind::BadValue,
                    format!(
                        "chart '{title}': log axis '{}' got the non-positive value {v}",
                        axis.label
                    ),
                ));
            }
        }
        let (mut lo, mut hi) = match axis.range {
            Some(r) => r,
            None => {
                let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (lo, hi)
            }
        };
        if !(lo.is_finite() && hi.is_finite()) || lo > hi {
            return Err(Error::new(
                ErrorKind::BadValue,
                format!("chart '{title}': axis '{}' has no valid range", axis.label),
            ));
        }
        let ticks;
        match axis.scale {
            Scale::Linear => {
                if axis.range.is_none() {
                    lo = lo.min(0.0);
                    hi = hi.max(0.0);
                    if hi == lo {
                        hi = lo + 1.0;
                    }
                    let pad = (hi - lo) * 0.05;
                    if hi > 0.0 {
                        hi += pad;
                    }
                    if lo < 0.0 {
                        lo -= pad;
                    }
                }
                ticks = linear_ticks(lo, hi);
            }
            Scale::Log => {
                if lo <= 0.0 {
                    return Err(Error::new(
                        ErrorKind::BadValue,
                        format!(
                            "chart '{title}': log axis '{}' needs a positive range",
                            axis.label
                        ),
                    ));
                }
                if hi / lo < 1.0001 {
                    lo /= 2.0;
                    hi *= 2.0;
                } else if axis.range.is_none() {
                    let pad = (hi / lo).powf(0.03);
                    lo /= pad;
                    hi *= pad;
                }
                ticks = log_ticks(lo, hi, axis.format);
            }
        }
        Ok(Mapper {
            scale: axis.scale,
            format: axis.format,
            lo,
            hi,
            ticks,
        })
    }

    fn pos(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            Scale::Log => {
                (v.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
            }
        }
    }
}

fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let raw = (hi - lo) / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 50 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

fn log_ticks(lo: f64, hi: f64, format: Format) -> Vec<f64> {
    let base: f64 = if format == Format::Bytes { 2.0 } else { 10.0 };
    let (a, b) = (lo.log(base).ceil() as i64, hi.log(base).floor() as i64);
    let n = (b - a + 1).max(0);
    if n >= 2 {
        let need = (n as f64 / 10.0).ceil().max(1.0) as i64;
        // Steps dividing 10 keep 1K, 1M, 1G among the ticks of a size axis.
        let every = [1, 2, 5, 10, 20, 30]
            .into_iter()
            .find(|&k| k >= need)
            .unwrap_or(need);
        // Align to multiples of `every` so sizes land on 1K, 1M, 1G.
        return (a..=b)
            .filter(|e| e.rem_euclid(every) == 0)
            .map(|e| base.powi(e as i32))
            .collect();
    }
    // Narrow range: 1-2-5 steps inside the decade(s).
    let mut out = Vec::new();
    let mut e = lo.log10().floor() as i32;
    while 10f64.powi(e) <= hi && out.len() < 30 {
        for m in [1.0, 2.0, 5.0] {
            let t = m * 10f64.powi(e);
            if t >= lo && t <= hi {
                out.push(t);
            }
        }
        e += 1;
    }
    out
}

/// Write `v` as a tick label in `format` (`16 KiB`, `1.5 µs`, `25k`).
pub fn fmt_tick(v: f64, format: Format) -> String {
    match format {
        Format::Number => fmt_count(v),
        Format::Bytes => fmt_size(v),
        Format::Nanos => fmt_duration(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiny_skia::Pixmap;

    /// Width, height and RGB pixels of a PNG.
    fn decode_rgb(png: &[u8]) -> Result<(u32, u32, Vec<u8>), String> {
        let p = Pixmap::decode_png(png).map_err(|e| e.to_string())?;
        let px = p
            .pixels()
            .iter()
            .flat_map(|c| [c.red(), c.green(), c.blue()])
            .collect();
        Ok((p.width(), p.height(), px))
    }

    fn sample() -> LineChart {
        let pts: Vec<(f64, f64)> = (6..=20).map(|e| (2f64.powi(e), 100.0 + e as f64)).collect();
        LineChart::new("pointer chasing")
            .x_axis(Axis::new("region").scale(Scale::Log).format(Format::Bytes))
            .y_axis(Axis::new("latency").format(Format::Nanos))
            .series(Series::new("load", pts.clone()))
            .series(Series::new(
                "store",
                pts.iter().map(|p| (p.0, p.1 * 2.0)).collect(),
            ))
            .mark(16384.0, 114.0, "16 KiB buffer")
    }

    #[test]
    fn svg_is_well_formed() {
        let svg = sample().to_svg().unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        // Every element is self-closed or closed.
        let opens = svg.matches("<text").count();
        assert_eq!(opens, svg.matches("</text>").count());
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">16 KiB buffer</text>"));
        assert!(svg.contains(">1 KiB</text>") && svg.contains(">1 MiB</text>"));
        assert!(svg.contains(">pointer chasing</text>"));
    }

    #[test]
    fn png_decodes_to_the_right_size_with_ink() {
        let png = sample().size(640, 400).to_png().unwrap();
        let (w, h, px) = decode_rgb(&png).unwrap();
        assert_eq!((w, h), (640, 400));
        // Anti-aliased edges blend with white: count pixels near each colour.
        let near = |c: [u8; 3]| {
            px.chunks(3)
                .filter(|p| p.iter().zip(c).all(|(&a, b)| a.abs_diff(b) < 24))
                .count()
        };
        let blue = near([0x1f, 0x77, 0xb4]);
        let red = near([0xd6, 0x27, 0x28]);
        assert!(blue > 200 && red > 200, "blue {blue} red {red}");
    }

    #[test]
    fn empty_and_bad_values_are_errors() {
        let e = LineChart::new("t").to_svg().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Empty);
        let e = LineChart::new("t")
            .x_axis(Axis::new("x").scale(Scale::Log))
            .series(Series::new("s", vec![(0.0, 1.0), (1.0, 2.0)]))
            .to_svg()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadValue);
        assert!(e.to_string().contains("non-positive"));
        let e = LineChart::new("t")
            .series(Series::new("s", vec![(1.0, f64::NAN)]))
            .to_png()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadValue);
    }

    #[test]
    fn histogram_draws_one_bar_per_bin() {
        let h = BarChart::histogram(
            "latency",
            "ns",
            &[0.0, 100.0, 200.0, 300.0],
            &[5.0, 0.0, 2.0],
            Format::Nanos,
        )
        .unwrap();
        let svg = h.to_svg().unwrap();
        // Background rect plus two non-empty bars (an empty bin has height 0).
        assert_eq!(svg.matches("<rect").count(), 4);
        assert!(svg.contains(">100 ns</text>"));
        assert!(BarChart::histogram("x", "y", &[0.0], &[1.0], Format::Number).is_err());
        let png = h.to_png().unwrap();
        assert!(decode_rgb(&png).is_ok());
    }

    #[test]
    fn ticks_are_readable() {
        assert_eq!(fmt_tick(16384.0, Format::Bytes), "16 KiB");
        assert_eq!(fmt_tick(64.0, Format::Bytes), "64 B");
        assert_eq!(fmt_tick(1536.0, Format::Nanos), "1.54 µs");
        assert_eq!(fmt_tick(25_000.0, Format::Number), "25k");
        assert_eq!(linear_ticks(0.0, 10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = log_ticks(64.0, 1024.0 * 1024.0 * 1024.0, Format::Bytes);
        assert!(
            t.len() <= 11 && t.contains(&1024.0) && t.contains(&1048576.0),
            "{t:?}"
        );
        let t = log_ticks(50.0, 400.0, Format::Nanos);
        assert_eq!(t, vec![50.0, 100.0, 200.0]);
    }

    #[test]
    fn save_picks_format_from_extension() {
        let dir = std::env::temp_dir().join(format!("pmlab-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        sample().save(&dir.join("c.svg")).unwrap();
        sample().save(&dir.join("c.png")).unwrap();
        assert!(std::fs::read(dir.join("c.png"))
            .unwrap()
            .starts_with(b"\x89PNG"));
        let e = sample().save(&dir.join("c.jpg")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A chart is written whole or not at all: a save that fails (here the
    /// path is a directory) leaves no temporary file, and one that works
    /// replaces the old file in one step.
    #[test]
    fn a_failed_save_leaves_no_partial_file() {
        let dir = std::env::temp_dir().join(format!("pmlab-plot-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("c.svg")).unwrap();
        let e = sample().save(&dir.join("c.svg")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["c.svg"], "left behind: {names:?}");
        std::fs::write(dir.join("d.svg"), b"old").unwrap();
        sample().save(&dir.join("d.svg")).unwrap();
        let text = std::fs::read_to_string(dir.join("d.svg")).unwrap();
        assert!(
            text.starts_with("<svg") || text.starts_with("<?xml"),
            "{text}"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn save_pair_writes_svg_and_png_into_a_new_directory() {
        let dir = std::env::temp_dir().join(format!("pmlab-plot-pair-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sub = dir.join("plots");
        let [svg, png] = sample().save_pair(&sub, "latency").unwrap();
        assert_eq!(svg, sub.join("latency.svg"));
        assert_eq!(png, sub.join("latency.png"));
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains(">pointer chasing</text>"));
        let (w, h, _) = decode_rgb(&std::fs::read(&png).unwrap()).unwrap();
        assert_eq!((w, h), (800, 480));
        // A directory that cannot be made is an Io error naming it.
        let blocker = dir.join("file");
        std::fs::write(&blocker, b"x").unwrap();
        let e = sample().save_pair(&blocker.join("sub"), "x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(e.to_string().contains("plot directory"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
