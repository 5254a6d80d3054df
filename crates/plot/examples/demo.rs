//! Writes a sample line chart and histogram to the directory given as the
//! first argument (default: the current directory), as SVG and PNG
//! (`demo-line.svg`, `demo-line.png`, `demo-hist.svg`, `demo-hist.png`).

use pmlab_plot::{Axis, BarChart, Format, LineChart, Scale, Series};
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    let load: Vec<(f64, f64)> = (6..=28)
        .map(|e| {
            let size = 2f64.powi(e);
            let lat = if size <= 16384.0 {
                170.0
            } else if size <= 16.0 * 1048576.0 {
                300.0
            } else {
                620.0
            };
            (size, lat)
        })
        .collect();
    let spread = load.iter().map(|p| (p.1 * 0.95, p.1 * 1.05)).collect();
    let chart = LineChart::new("pointer chasing, 64 B blocks")
        .x_axis(
            Axis::new("PC-region size")
                .scale(Scale::Log)
                .format(Format::Bytes),
        )
        .y_axis(Axis::new("latency per cache line").format(Format::Nanos))
        .series(Series::new("load", load.clone()).spread(spread))
        .series(Series::new(
            "store",
            load.iter().map(|p| (p.0, p.1 * 0.6)).collect(),
        ))
        .mark(16384.0, 170.0, "16 KiB buffer")
        .mark(16.0 * 1048576.0, 300.0, "16 MiB buffer");
    let hist = BarChart::histogram(
        "write latency",
        "latency",
        &[0.0, 100.0, 200.0, 300.0, 400.0, 500.0],
        &[3.0, 40.0, 12.0, 0.0, 1.0],
        Format::Nanos,
    )
    .expect("valid histogram");
    for (name, result) in [
        ("demo-line", chart.save_pair(&dir, "demo-line")),
        ("demo-hist", hist.save_pair(&dir, "demo-hist")),
    ] {
        if let Err(e) = result {
            eprintln!("demo: {name}: {e}");
            std::process::exit(1);
        }
    }
}
