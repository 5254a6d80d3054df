//! A closed-loop load generator: N client threads each send SET (or GET)
//! to the leader one at a time and time every answer.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmlab_plot::{Axis, Format, LineChart, Scale, Series};

use crate::client::{leader_of, Conn};
use crate::resp::Value;
use crate::server::Error;

/// One measured run.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Client threads.
    pub clients: usize,
    /// Every operation's latency in ns, sorted.
    pub latencies: Vec<u64>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Operations that failed (not counted in the latencies).
    pub errors: u64,
}

impl LoadResult {
    /// The `q`-quantile latency in µs (0 when nothing was measured).
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[i] as f64 / 1000.0
    }

    /// Completed operations per second.
    pub fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The run as one JSON object (`bench --json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "clients": self.clients, "ops": self.latencies.len(), "errors": self.errors,
            "p50_us": self.quantile_us(0.5), "p90_us": self.quantile_us(0.9),
            "p99_us": self.quantile_us(0.99), "throughput_ops": self.throughput(),
        })
    }

    /// The run as one table row (`bench` without `--json`).
    pub fn row(&self) -> String {
        format!(
            "clients {:3}: p50 {:8.1} us  p90 {:8.1} us  p99 {:8.1} us  {:9.0} ops/s  ({} ops, {} errors)",
            self.clients,
            self.quantile_us(0.5),
            self.quantile_us(0.9),
            self.quantile_us(0.99),
            self.throughput(),
            self.latencies.len(),
            self.errors
        )
    }
}

/// Find the leader among `addrs` (client addresses), waiting up to `timeout`.
pub fn find_leader(addrs: &[String], timeout: Duration) -> Result<String, Error> {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        for a in addrs {
            if let Some(l) = leader_of(a, Duration::from_millis(500)) {
                return Ok(l);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Error(format!(
        "no leader among {addrs:?} within {timeout:?}: is the cluster running?"
    )))
}

/// Run `clients` threads against `leader` for `ops` operations each
/// (`write`: SET of `value_size` bytes to distinct keys, else GET), after
/// `warmup` untimed operations per thread. Prints progress every second.
pub fn run(
    leader: &str,
    clients: usize,
    ops: usize,
    warmup: usize,
    value_size: usize,
    write: bool,
) -> Result<LoadResult, Error> {
    if clients == 0 || ops == 0 {
        return Err(Error("--clients and --ops must be at least 1".into()));
    }
    let value = vec![b'x'; value_size];
    let done = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = Instant::now();
    let mut threads = Vec::new();
    for t in 0..clients {
        let (leader, value, counter) = (leader.to_string(), value.clone(), counter.clone());
        threads.push(std::thread::spawn(
            move || -> Result<(Vec<u64>, u64), Error> {
                let mut c = Conn::connect(&leader, Duration::from_secs(10))
                    .map_err(|e| Error(format!("connect {leader}: {e}")))?;
                let mut lat = Vec::with_capacity(ops);
                let mut errors = 0;
                for i in 0..warmup + ops {
                    let key = format!("bench:{t}:{}", i % 10_000);
                    let t0 = Instant::now();
                    let r = if write {
                        c.call(&[b"SET", key.as_bytes(), &value])
                    } else {
                        c.call(&[b"GET", key.as_bytes()])
                    };
                    let ns = t0.elapsed().as_nanos() as u64;
                    match r {
                        Ok(Value::Error(_)) => errors += 1,
                        Ok(_) => {
                            if i >= warmup {
                                lat.push(ns);
                                counter.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) => return Err(Error(format!("client {t}: {e}"))),
                    }
                }
                Ok((lat, errors))
            },
        ));
    }
    let total = (clients * ops) as u64;
    let d2 = done.clone();
    let c2 = counter.clone();
    let progress = std::thread::spawn(move || {
        while !d2.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let n = c2.load(Ordering::Relaxed);
            eprint!("\r  {n}/{total} operations");
        }
        eprintln!();
    });
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut failure = None;
    for t in threads {
        match t.join() {
            Ok(Ok((l, e))) => {
                latencies.extend(l);
                errors += e;
            }
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(Error("a client thread panicked".into())),
        }
    }
    let elapsed = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = progress.join();
    if let Some(e) = failure {
        return Err(e);
    }
    latencies.sort_unstable();
    Ok(LoadResult {
        clients,
        latencies,
        elapsed,
        errors,
    })
}

/// Plot the latency distributions (CDF over a log latency axis) to `path`
/// (`.svg` or `.png`).
pub fn plot(results: &[(String, &LoadResult)], path: &Path) -> Result<(), Error> {
    let mut chart = LineChart::new("pmkv write latency (3 nodes)")
        .x_axis(Axis::new("latency").scale(Scale::Log).format(Format::Nanos))
        .y_axis(Axis::new("fraction of operations").range(0.0, 1.0));
    for (name, r) in results {
        let n = r.latencies.len();
        if n == 0 {
            continue;
        }
        let step = (n / 200).max(1);
        let mut pts: Vec<(f64, f64)> = (0..n)
            .step_by(step)
            .map(|i| (r.latencies[i].max(1) as f64, (i + 1) as f64 / n as f64))
            .collect();
        pts.push((r.latencies[n - 1].max(1) as f64, 1.0));
        chart = chart.series(Series::new(name.clone(), pts));
    }
    chart
        .save(path)
        .map_err(|e| Error(format!("latency plot {}: {e}", path.display())))
}
