//! [`System`]: a CPU-side front end (core-to-controller latencies, per
//! thread persistence tracking) on top of a controller and its devices.

use crate::buffer::Lru;
use crate::config::{ParamInfo, Params};
use crate::controller::Controller;
use crate::stats::{Histogram, Stats};
use crate::{presets, registry, Error, ErrorKind, Op};
use std::path::Path;

/// One request to the memory system.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Issue time at the core, in ns.
    pub time_ns: f64,
    /// Operation.
    pub op: Op,
    /// Byte address.
    pub addr: u64,
    /// Bytes (split into 64-byte lines; 0 counts as one line).
    pub size: u32,
    /// Issuing thread (fences wait for this thread's earlier writes).
    pub thread: u32,
}

impl Request {
    /// A request from thread 0.
    pub fn new(time_ns: f64, op: Op, addr: u64, size: u32) -> Request {
        Request {
            time_ns,
            op,
            addr,
            size,
            thread: 0,
        }
    }

    /// The same request from `thread`.
    pub fn on_thread(mut self, thread: u32) -> Request {
        self.thread = thread;
        self
    }
}

/// When a request finished.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion {
    /// The request's issue time (ns).
    pub issue_ns: f64,
    /// When the core sees it complete (ns): data back for reads; for
    /// writes, acceptance into the persistence domain; for fences, when
    /// earlier writes of the thread are persistent.
    pub done_ns: f64,
    /// Writes (and, with `cpu.stores = "cached"`, flushes of dirty lines):
    /// when the last line entered the persistence domain (the controller's
    /// write pending queue, ADR).
    pub persist_ns: Option<f64>,
}

impl Completion {
    /// `done_ns - issue_ns`.
    pub fn latency_ns(&self) -> f64 {
        self.done_ns - self.issue_ns
    }
}

struct Front {
    /// Dirty lines of the last-level cache when stores are cached.
    dirty: Option<Lru>,
    llc_lines: usize,
    cached_store_ns: f64,
    read_ns: f64,
    store_ns: f64,
    nt_store_ns: f64,
    flush_ns: f64,
    fence_ns: f64,
}

/// Latency histograms per operation class.
const CLASSES: [&str; 5] = ["read", "write", "nt_write", "flush", "fence"];

/// A simulated memory system built from a configuration.
pub struct System {
    name: String,
    description: String,
    front: Front,
    ctrl: Box<dyn Controller>,
    params: Vec<ParamInfo>,
    last_persist: Vec<f64>,
    hist: [Histogram; 5],
    bytes_read: u64,
    bytes_written: u64,
    first_issue: f64,
    last_done: f64,
}

impl System {
    /// Build a bundled preset (`ddr4-2666`, `optane-1dimm`, …; see
    /// [`presets::ALL`]).
    pub fn preset(name: &str) -> Result<System, Error> {
        let p = presets::find(name)?;
        System::from_toml(p.toml, &format!("preset {name}"))
    }

    /// Build from a TOML configuration; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<System, Error> {
        let mut root: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let msg = e.message().trim().replace('\n', " ");
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
            match line {
                Some(l) => Error::config(format!("{origin}: line {l}: {msg}")),
                None => Error::config(format!("{origin}: {msg}")),
            }
        })?;
        let wrap = |e: Error| Error::new(e.kind(), format!("{origin}: {e}"));
        let name = match root.remove("name") {
            Some(toml::Value::String(s)) => s,
            Some(_) => return Err(Error::config(format!("{origin}: 'name' must be a string"))),
            None => origin.to_string(),
        };
        let description = match root.remove("description") {
            Some(toml::Value::String(s)) => s,
            _ => String::new(),
        };
        let cpu = match root.remove("cpu") {
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err(Error::config(format!("{origin}: 'cpu' must be a table"))),
            None => {
                let mut t = toml::Table::new();
                t.insert("impl".into(), "core".into());
                t
            }
        };
        let ctrl_table = match root.remove("controller") {
            Some(toml::Value::Table(t)) => t,
            _ => {
                return Err(Error::config(format!(
                "{origin}: missing [controller] table (the memory controller, e.g. impl = \"imc\")"
            )))
            }
        };
        if let Some(k) = root.keys().next() {
            return Err(Error::config(format!("{origin}: unknown top-level key '{k}': valid keys are name, description, cpu, controller")));
        }
        let mut p = Params::new("cpu", cpu).map_err(wrap)?;
        if p.implementation() != "core" {
            return Err(Error::new(
                ErrorKind::UnknownName,
                format!(
                    "{origin}: unknown cpu implementation '{}' at 'cpu.impl': valid ones are core",
                    p.implementation()
                ),
            ));
        }
        let stores = p
            .choice(
                "stores",
                "memory",
                &["memory", "cached"],
                "memory: a W record is a memory write (DRAM-simulator traces); cached: it dirties a last-level-cache line that a flush or an eviction writes back (program traces)",
            )
            .map_err(wrap)?;
        let llc = p
            .bytes(
                "llc_bytes",
                32 << 20,
                64,
                "last-level cache capacity for dirty lines when stores = \"cached\"",
            )
            .map_err(wrap)?;
        let cached_store_ns = p
            .ns(
                "cached_store_ns",
                1.0,
                "cost of a store that stays in the cache",
            )
            .map_err(wrap)?;
        let front = Front {
            dirty: (stores == "cached").then(|| Lru::new((llc / 64) as usize)),
            llc_lines: (llc / 64) as usize,
            cached_store_ns,
            read_ns: p
                .ns(
                    "read_ns",
                    60.0,
                    "core-to-controller-to-core time of a load miss, outside the device",
                )
                .map_err(wrap)?,
            store_ns: p
                .ns(
                    "store_ns",
                    60.0,
                    "time for a written-back line (store + clwb) to reach the controller",
                )
                .map_err(wrap)?,
            nt_store_ns: p
                .ns(
                    "nt_store_ns",
                    88.0,
                    "time for a non-temporal store to reach the controller",
                )
                .map_err(wrap)?,
            flush_ns: p
                .ns(
                    "flush_ns",
                    1.0,
                    "issue cost of a flush instruction (its data moves with the write)",
                )
                .map_err(wrap)?,
            fence_ns: p
                .ns(
                    "fence_ns",
                    0.0,
                    "cost of a fence once earlier writes are persistent",
                )
                .map_err(wrap)?,
        };
        let mut params = p.finish().map_err(wrap)?;
        let (ctrl, info) = registry::build_controller("controller", ctrl_table).map_err(wrap)?;
        // Channels share one [controller.dimm] table: list each parameter once.
        for i in info {
            if !params
                .iter()
                .any(|p| p.component == i.component && p.name == i.name)
            {
                params.push(i);
            }
        }
        Ok(System {
            name,
            description,
            front,
            ctrl,
            params,
            last_persist: Vec::new(),
            hist: Default::default(),
            bytes_read: 0,
            bytes_written: 0,
            first_issue: f64::INFINITY,
            last_done: 0.0,
        })
    }

    /// Build from a TOML file.
    pub fn from_file(path: &Path) -> Result<System, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read config {}: {e}", path.display()),
            )
        })?;
        System::from_toml(&text, &path.display().to_string())
    }

    /// The configuration's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration's one-line description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Every resolved parameter.
    pub fn params(&self) -> &[ParamInfo] {
        &self.params
    }

    /// Simulate one request and return its completion. Requests should be
    /// submitted in (nearly) non-decreasing `time_ns`.
    pub fn submit(&mut self, r: &Request) -> Completion {
        let t = r.time_ns;
        let lines = || {
            let first = r.addr & !63;
            let last = r.addr.saturating_add(r.size.max(1) as u64 - 1) & !63;
            (first..=last).step_by(64)
        };
        let (done, persist, class) = match r.op {
            Op::Read => {
                let half = self.front.read_ns / 2.0;
                let mut done = t;
                for l in lines() {
                    done = done.max(self.ctrl.read(l, t + half) + half);
                    self.bytes_read += 64;
                }
                (done, None, 0)
            }
            Op::Write if self.front.dirty.is_some() => {
                let wb = t + self.front.store_ns;
                for l in lines() {
                    let dirty = self.front.dirty.as_mut().expect("cached stores");
                    if let Some((victim, _)) = dirty.insert(l, t, 1) {
                        // An eviction writes the victim back; nobody waits.
                        self.ctrl.write(victim, wb, r.thread);
                        self.bytes_written += 64;
                    }
                }
                (t + self.front.cached_store_ns, None, 1)
            }
            Op::Clwb | Op::ClflushOpt | Op::Clflush if self.front.dirty.is_some() => {
                // Write back the dirty lines; the thread does not wait, its
                // next fence does.
                let mut p = None;
                for l in lines() {
                    if self.front.dirty.as_mut().expect("cached stores").remove(l) {
                        let a = self.ctrl.write(l, t + self.front.store_ns, r.thread);
                        self.bytes_written += 64;
                        p = Some(p.unwrap_or(a).max(a));
                    }
                }
                if let Some(p) = p {
                    let th = r.thread as usize;
                    if th >= self.last_persist.len() {
                        self.last_persist.resize(th + 1, 0.0);
                    }
                    self.last_persist[th] = self.last_persist[th].max(p);
                }
                (t + self.front.flush_ns, p, 3)
            }
            Op::Write | Op::NtWrite => {
                let (lat, class) = if r.op == Op::Write {
                    (self.front.store_ns, 1)
                } else {
                    (self.front.nt_store_ns, 2)
                };
                let mut p = t;
                for l in lines() {
                    p = p.max(self.ctrl.write(l, t + lat, r.thread));
                    self.bytes_written += 64;
                }
                let th = r.thread as usize;
                if th >= self.last_persist.len() {
                    self.last_persist.resize(th + 1, 0.0);
                }
                self.last_persist[th] = self.last_persist[th].max(p);
                (p, Some(p), class)
            }
            Op::Clwb | Op::ClflushOpt | Op::Clflush => (t + self.front.flush_ns, None, 3),
            Op::SFence | Op::DFence => {
                self.ctrl.fence(t, r.thread);
                let lp = self
                    .last_persist
                    .get(r.thread as usize)
                    .copied()
                    .unwrap_or(0.0);
                (t.max(lp) + self.front.fence_ns, None, 4)
            }
            _ => {
                return Completion {
                    issue_ns: t,
                    done_ns: t,
                    persist_ns: None,
                }
            }
        };
        self.hist[class].add(done - t);
        self.first_issue = self.first_issue.min(t);
        self.last_done = self.last_done.max(done);
        Completion {
            issue_ns: t,
            done_ns: done,
            persist_ns: persist,
        }
    }

    /// Override the configuration's `cpu.stores`: with `cached` true, a
    /// `Write` dirties a last-level-cache line (of `cpu.llc_bytes`) that a
    /// flush or an eviction writes back; with false, every `Write` is a
    /// memory write. Switching drops the cache's dirty lines.
    pub fn set_cached_stores(&mut self, cached: bool) {
        if cached != self.front.dirty.is_some() {
            self.front.dirty = cached.then(|| Lru::new(self.front.llc_lines));
        }
    }

    /// Push every buffered write to the media starting at `t`; returns when
    /// the last one arrived (the simulated time a clean shutdown needs).
    pub fn drain(&mut self, t: f64) -> f64 {
        self.ctrl.drain(t)
    }

    /// Zero every statistic (the state — buffers, queues — stays: use this
    /// after a warm-up).
    pub fn reset_stats(&mut self) {
        self.hist = Default::default();
        self.bytes_read = 0;
        self.bytes_written = 0;
        self.first_issue = f64::INFINITY;
        self.last_done = 0.0;
        self.ctrl.reset_stats();
    }

    /// The latency histogram of an operation class: `read`, `write`,
    /// `nt_write`, `flush` or `fence`.
    pub fn latency(&self, class: &str) -> Option<&Histogram> {
        CLASSES
            .iter()
            .position(|c| *c == class)
            .map(|i| &self.hist[i])
    }

    /// All statistics as a tree rooted at `system`.
    pub fn stats(&self) -> Stats {
        let mut root = Stats::new("system");
        let span = if self.last_done > self.first_issue {
            self.last_done - self.first_issue
        } else {
            0.0
        };
        root.set("simulated_time", span, "ns");
        root.set("bytes_read", self.bytes_read as f64, "B");
        root.set("bytes_written", self.bytes_written as f64, "B");
        let bw = |b: u64| if span > 0.0 { b as f64 / span } else { 0.0 };
        root.set("read_bandwidth", bw(self.bytes_read), "GB/s");
        root.set("write_bandwidth", bw(self.bytes_written), "GB/s");
        let mut lat = Stats::new("latency");
        for (i, c) in CLASSES.iter().enumerate() {
            let h = &self.hist[i];
            if h.count() == 0 {
                continue;
            }
            let mut n = Stats::new(*c);
            n.set("count", h.count() as f64, "count");
            n.set("mean", h.mean(), "ns");
            n.set("p50", h.percentile(50.0), "ns");
            n.set("p90", h.percentile(90.0), "ns");
            n.set("p99", h.percentile(99.0), "ns");
            n.set("p999", h.percentile(99.9), "ns");
            n.set("p9999", h.percentile(99.99), "ns");
            n.set("p99999", h.percentile(99.999), "ns");
            n.set("max", h.max(), "ns");
            lat.push(n);
        }
        root.push(lat);
        let mut c = Stats::new("controller");
        self.ctrl.stats(&mut c);
        root.push(c);
        root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: &str = "[controller]\nimpl = \"imc\"\n[controller.dimm]\nimpl = \"ddr4\"\n";

    #[test]
    fn fence_waits_for_earlier_writes_of_its_thread() {
        let mut s = System::from_toml(MINI, "t").unwrap();
        let w = s.submit(&Request::new(0.0, Op::NtWrite, 0, 64));
        let p = w.persist_ns.unwrap();
        assert_eq!(p, 88.0, "default nt_store_ns to an idle WPQ");
        let f = s.submit(&Request::new(1.0, Op::SFence, 0, 0));
        assert_eq!(f.done_ns, p);
        let other = s.submit(&Request::new(1.0, Op::SFence, 0, 0).on_thread(1));
        assert_eq!(other.done_ns, 1.0, "another thread has nothing to wait for");
    }

    /// Thread 0 stores the four 64 B lines of each XPLine in turn while
    /// thread 1 fences between them: on Optane, thread 0's lines still
    /// combine in the LSQ (a fence orders only its own thread's writes);
    /// when thread 0 fences itself they do not, and combine only later, in
    /// the write-combining buffer. One media write per XPLine either way.
    #[test]
    fn another_threads_fences_do_not_split_combining() {
        let run = |fencer: u32| {
            let mut s = System::preset("optane-1dimm").unwrap();
            let mut t = 0.0;
            for x in 0..64u64 {
                for k in 0..4 {
                    let a = (1 << 30) + x * 4096 + k * 64;
                    s.submit(&Request::new(t, Op::NtWrite, a, 64));
                    s.submit(&Request::new(t, Op::SFence, 0, 0).on_thread(fencer));
                    t += 1.0;
                }
                t += 10_000.0;
            }
            s.drain(t);
            let st = s.stats();
            let get = |k: &str| st.get(&format!("controller.dimm0.{k}")).unwrap();
            (
                get("lsq.merges"),
                get("rmw_buffer.write_merges"),
                get("media.writes"),
            )
        };
        assert_eq!(run(1), (192.0, 0.0, 64.0), "thread 1's fences");
        assert_eq!(run(0), (0.0, 192.0, 64.0), "thread 0's own fences");
    }

    #[test]
    fn multi_line_requests_complete_with_their_last_line() {
        let mut s = System::from_toml(MINI, "t").unwrap();
        let one = s
            .submit(&Request::new(0.0, Op::Read, 1 << 20, 64))
            .latency_ns();
        let four = s
            .submit(&Request::new(10_000.0, Op::Read, 2 << 20, 256))
            .latency_ns();
        assert!(four > one);
        assert_eq!(s.stats().get("bytes_read"), Some(5.0 * 64.0));
    }

    #[test]
    fn extreme_addresses_and_times_do_not_panic() {
        for preset in crate::presets::ALL {
            let mut s = System::from_toml(preset.toml, preset.name).unwrap();
            for op in [Op::Read, Op::Write, Op::NtWrite, Op::Clwb, Op::SFence] {
                s.submit(&Request::new(0.0, op, u64::MAX, 64));
                s.submit(&Request::new(0.0, op, u64::MAX - 63, 4096));
                // Time going backwards is treated as "now".
                let c = s.submit(&Request::new(1e12, op, 0, 64));
                let back = s.submit(&Request::new(5.0, op, 1 << 40, 64));
                assert!(c.done_ns >= 1e12 && back.done_ns >= 5.0);
            }
            assert!(s.drain(0.0) >= 0.0);
        }
    }

    #[test]
    fn cached_stores_reach_memory_at_the_flush() {
        let cfg = format!("[cpu]\nimpl = \"core\"\nstores = \"cached\"\n{MINI}");
        let mut s = System::from_toml(&cfg, "t").unwrap();
        let w1 = s.submit(&Request::new(0.0, Op::Write, 0x40, 8));
        s.submit(&Request::new(1.0, Op::Write, 0x48, 8));
        assert_eq!(w1.latency_ns(), 1.0, "a cached store");
        assert_eq!(s.stats().get("bytes_written"), Some(0.0));
        let f = s.submit(&Request::new(2.0, Op::Clwb, 0x40, 64));
        assert_eq!(f.done_ns, 3.0, "clwb does not wait");
        assert_eq!(f.persist_ns, Some(62.0), "store_ns to an idle WPQ");
        let fence = s.submit(&Request::new(4.0, Op::SFence, 0, 0));
        assert_eq!(fence.done_ns, 62.0, "the fence waits for the write-back");
        assert_eq!(
            s.stats().get("bytes_written"),
            Some(64.0),
            "one write for two stores"
        );
        let again = s.submit(&Request::new(100.0, Op::Clwb, 0x40, 64));
        assert_eq!(again.persist_ns, None, "a clean line moves nothing");
    }

    #[test]
    fn cached_stores_write_back_on_eviction() {
        let cfg = format!("[cpu]\nimpl = \"core\"\nstores = \"cached\"\nllc_bytes = 128\n{MINI}");
        let mut s = System::from_toml(&cfg, "t").unwrap();
        for i in 0..3u64 {
            s.submit(&Request::new(i as f64, Op::Write, i * 64, 64));
        }
        assert_eq!(
            s.stats().get("bytes_written"),
            Some(64.0),
            "the third store evicted the first"
        );
    }

    fn err(text: &str) -> String {
        System::from_toml(text, "my.toml")
            .err()
            .expect("must fail")
            .to_string()
    }

    #[test]
    fn config_errors_name_the_parameter_and_component() {
        let e = err(&format!("{MINI}tcl = 3\n"));
        assert!(
            e.contains("unknown parameter 'controller.dimm.tcl'") && e.contains("valid keys are"),
            "{e}"
        );
        let e = err("[controller]\nimpl = \"imc\"\n[controller.dimm]\nimpl = \"dd4\"\n");
        assert!(
            e.contains("unknown device implementation 'dd4'") && e.contains("ddr4, nvram"),
            "{e}"
        );
        let e = err(&format!("{MINI}cl = \"fast\"\n"));
        assert!(
            e.contains("'controller.dimm.cl'") && e.contains("ddr4"),
            "{e}"
        );
        let e = err("[controller]\nimpl = \"imc\"\n");
        assert!(e.contains("needs a child table [controller.dimm]"), "{e}");
        let e = err("name = \"x\"\n");
        assert!(e.contains("missing [controller]"), "{e}");
        let e = err("[controller\n");
        assert!(e.starts_with("my.toml: line 1:"), "{e}");
        let e = err(&format!("{MINI}trfc = 9000\n"));
        assert!(e.contains("trfc"), "{e}");
        let e = err(&format!("colour = 1\n{MINI}"));
        assert!(e.contains("unknown top-level key 'colour'"), "{e}");
        for e in [err(&format!("{MINI}cl = 0\n")), err("[controller]\nimpl = \"imc\"\ninterleave = \"3KiB\"\n[controller.dimm]\nimpl = \"ddr4\"\n")] {
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
