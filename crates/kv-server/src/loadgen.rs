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

/// How a floor run's relay processes wait for their socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorWait {
    /// A thread blocked in `read` (woken straight by the socket).
    Blocking,
    /// A current-thread tokio runtime (`epoll_wait`, then `read`), as a
    /// node with `--runtime current` waits.
    Tokio,
}

impl FloorWait {
    /// The name on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            FloorWait::Blocking => "blocking",
            FloorWait::Tokio => "tokio",
        }
    }

    /// Parse [`FloorWait::name`].
    pub fn parse(s: &str) -> Option<FloorWait> {
        match s {
            "blocking" => Some(FloorWait::Blocking),
            "tokio" => Some(FloorWait::Tokio),
            _ => None,
        }
    }
}

/// Serve one relay of the floor measurement on `listener`: every frame (a
/// 4-byte big-endian length and that many bytes) that arrives goes on to
/// `next` and the answer back, or straight back without `next`. Runs until
/// the process is killed.
pub fn floor_relay(
    listener: std::net::TcpListener,
    next: Option<String>,
    wait: FloorWait,
) -> Result<(), Error> {
    match wait {
        FloorWait::Blocking => loop {
            let (sock, _) = listener
                .accept()
                .map_err(|e| Error(format!("floor relay: accept: {e}")))?;
            let next = next.clone();
            std::thread::spawn(move || relay_blocking(sock, next));
        },
        FloorWait::Tokio => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error(format!("floor relay: tokio runtime: {e}")))?;
            rt.block_on(async move {
                listener
                    .set_nonblocking(true)
                    .map_err(|e| Error(format!("floor relay: {e}")))?;
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(|e| Error(format!("floor relay: {e}")))?;
                loop {
                    let (sock, _) = listener
                        .accept()
                        .await
                        .map_err(|e| Error(format!("floor relay: accept: {e}")))?;
                    tokio::spawn(relay_tokio(sock, next.clone()));
                }
            })
        }
    }
}

fn relay_blocking(sock: std::net::TcpStream, next: Option<String>) -> std::io::Result<()> {
    use std::io::Write;
    sock.set_nodelay(true)?;
    let mut next = match next {
        Some(a) => {
            let s = std::net::TcpStream::connect(a)?;
            s.set_nodelay(true)?;
            Some(s)
        }
        None => None,
    };
    let mut sock = sock;
    let mut buf = Vec::new();
    loop {
        read_floor_frame(&mut sock, &mut buf)?;
        if let Some(n) = next.as_mut() {
            n.write_all(&buf)?;
            read_floor_frame(n, &mut buf)?;
        }
        sock.write_all(&buf)?;
    }
}

/// Read one length-prefixed frame (length included) into `buf`.
fn read_floor_frame(r: &mut impl std::io::Read, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let n = u32::from_be_bytes(len) as usize;
    if n > 1 << 20 {
        return Err(std::io::Error::other("floor frame over 1 MiB"));
    }
    buf.clear();
    buf.extend_from_slice(&len);
    buf.resize(4 + n, 0);
    r.read_exact(&mut buf[4..])
}

async fn relay_tokio(sock: tokio::net::TcpStream, next: Option<String>) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sock.set_nodelay(true)?;
    let mut next = match next {
        Some(a) => {
            let s = tokio::net::TcpStream::connect(a).await?;
            s.set_nodelay(true)?;
            Some(s)
        }
        None => None,
    };
    let mut sock = sock;
    let mut buf = Vec::new();
    async fn frame(r: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).await?;
        let n = u32::from_be_bytes(len) as usize;
        if n > 1 << 20 {
            return Err(std::io::Error::other("floor frame over 1 MiB"));
        }
        buf.clear();
        buf.extend_from_slice(&len);
        buf.resize(4 + n, 0);
        r.read_exact(&mut buf[4..]).await.map(|_| ())
    }
    loop {
        frame(&mut sock, &mut buf).await?;
        if let Some(n) = next.as_mut() {
            n.write_all(&buf).await?;
            frame(n, &mut buf).await?;
        }
        sock.write_all(&buf).await?;
    }
}

/// One floor run: round trips of `size`-byte frames from this process
/// through a chain of `hops` relay processes (1: client → A → client;
/// 2: client → A → B → A → client, the crossings of a replicated write
/// that one follower acknowledges).
#[derive(Debug, Clone)]
pub struct FloorResult {
    /// Relay processes in the chain.
    pub hops: usize,
    /// How the relays wait.
    pub wait: FloorWait,
    /// Round-trip times.
    pub run: LoadResult,
}

impl FloorResult {
    /// The run as one JSON object (`bench --mode floor --json`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = self.run.to_json();
        v["hops"] = self.hops.into();
        v["wait"] = self.wait.name().into();
        v
    }

    /// The run as one line.
    pub fn row(&self) -> String {
        format!(
            "floor {} hop(s), {:8}: p50 {:7.1} us  p90 {:7.1} us  p99 {:7.1} us  ({} round trips)",
            self.hops,
            self.wait.name(),
            self.run.quantile_us(0.5),
            self.run.quantile_us(0.9),
            self.run.quantile_us(0.99),
            self.run.latencies.len()
        )
    }
}

/// A relay process started by [`floor`]; killed when dropped.
struct Relay(std::process::Child);

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Measure the floor of a replicated write on this machine: `ops` timed
/// round trips (after `warmup`) of `size`-byte frames through a chain of
/// `hops` relay processes, each started as `bin floor-relay --wait W
/// [--next ADDR]` (it prints its port on stdout).
pub fn floor(
    bin: &Path,
    hops: usize,
    wait: FloorWait,
    ops: usize,
    warmup: usize,
    size: usize,
) -> Result<FloorResult, Error> {
    use std::io::{BufRead, Write};
    if hops == 0 || ops == 0 {
        return Err(Error("floor: --ops and the hops must be at least 1".into()));
    }
    let mut relays = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..hops {
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["floor-relay", "--wait", wait.name()]);
        if let Some(n) = &next {
            cmd.args(["--next", n]);
        }
        // The relay exits when its stdin closes: with this process.
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| Error(format!("floor: start {}: {e}", bin.display())))?;
        let out = child.stdout.take();
        relays.push(Relay(child));
        let mut line = String::new();
        if let Some(out) = out {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        let port: u16 = line.trim().parse().map_err(|_| {
            Error(format!(
                "floor: the relay printed {line:?} instead of its port"
            ))
        })?;
        next = Some(format!("127.0.0.1:{port}"));
    }
    let first = next.unwrap_or_default();
    let mut sock = std::net::TcpStream::connect(&first)
        .map_err(|e| Error(format!("floor: connect {first}: {e}")))?;
    sock.set_nodelay(true)
        .map_err(|e| Error(format!("floor: {e}")))?;
    let mut msg = (size as u32).to_be_bytes().to_vec();
    msg.resize(4 + size, b'x');
    let mut buf = Vec::new();
    let mut lat = Vec::with_capacity(ops);
    let mut start = Instant::now();
    for i in 0..warmup + ops {
        if i == warmup {
            start = Instant::now();
        }
        let t0 = Instant::now();
        sock.write_all(&msg)
            .and_then(|_| read_floor_frame(&mut sock, &mut buf))
            .map_err(|e| Error(format!("floor: round trip through {first}: {e}")))?;
        if i >= warmup {
            lat.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let elapsed = start.elapsed();
    drop(relays);
    lat.sort_unstable();
    Ok(FloorResult {
        hops,
        wait,
        run: LoadResult {
            clients: 1,
            latencies: lat,
            elapsed,
            errors: 0,
        },
    })
}
