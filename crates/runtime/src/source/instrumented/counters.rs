//! The `Source` implementation: [`InstrumentedSource`] opens the hooks
//! and hands each thread an [`InstrumentedCounters`], whose epoch readings
//! are differences of the thread's totals and whose overhead is the hooks'
//! own cost in the epoch, charged as the module's documentation
//! ([`super`]) explains.

use super::busy::{self, Sched};
use super::cost::{self, HookCosts};
use super::model::ThreadTotals;
use super::settings::{self, HookConfig};
use super::{hooks, offload, thread};
use crate::error::Error;
use crate::source::{EpochReading, Reading, Source, SourceKind, SourceStats, ThreadCounters};
use pmlab_model::quartz;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Open the instrumented source: configure and activate the hooks.
pub fn open() -> Result<Box<dyn Source>, Error> {
    let cfg = settings::config_from_env(|k| std::env::var(k).ok())?;
    let sample = std::env::var("PMLAB_SAMPLE").unwrap_or_else(|_| "off".into());
    let sample = pmlab_model::options::Sample::parse(&sample).map_err(|why| {
        Error::new(
            crate::error::ErrorKind::Config,
            format!("PMLAB_SAMPLE: {why}"),
        )
    })?;
    super::sample::set_policy(super::sample::Policy::from_option(sample));
    if let Some(d) = crate::config::get()
        .as_ref()
        .ok()
        .and_then(|c| c.device.clone())
    {
        settings::set_device(d);
        let cold = crate::config::get()
            .as_ref()
            .map_or(0.0, |c| c.dram_latency_ns);
        super::model::set_native_costs(super::model::measure_native_costs(cold));
    }
    hooks::activate(cfg);
    let costs = cost::calibrate();
    let lat = match crate::config::get() {
        Ok(c) => Some((c.dram_latency_ns, c.pm_latency_ns)),
        Err(_) => None,
    };
    // The threads' waits for a CPU so far are not the run's.
    let sched0 = busy::process_sched();
    Ok(Box::new(InstrumentedSource {
        cfg,
        costs,
        lat,
        shared: Arc::new(Shared::default()),
        sched0,
    }))
}

/// The source: configuration plus the measured hook costs.
pub struct InstrumentedSource {
    cfg: HookConfig,
    costs: HookCosts,
    /// (DRAM, PM) latencies in ns, to bound the overhead an epoch absorbs.
    lat: Option<(f64, f64)>,
    /// What every thread's counters add up, for the statistics.
    shared: Arc<Shared>,
    /// The process's threads' scheduler statistics when the source opened.
    sched0: Sched,
}

/// Process-wide sums the threads' counters keep (ns).
#[derive(Debug, Default)]
struct Shared {
    /// Hook overhead that no delay absorbed (dropped at a clock read or
    /// at thread exit).
    unabsorbed_ns: AtomicU64,
    /// Window loss charged where it exceeded the calls' cost.
    window_loss_ns: AtomicU64,
    /// Batches the program's threads ran themselves, and their time.
    inline_batches: AtomicU64,
    inline_ns: AtomicU64,
    /// The epochs' wall time, all threads.
    epoch_ns: AtomicU64,
    /// Scheduler statistics of the threads that have exited (their whole
    /// lives: time on a CPU, waiting, slices).
    exited_cpu_ns: AtomicU64,
    exited_wait_ns: AtomicU64,
    exited_slices: AtomicU64,
}

impl Shared {
    /// The busy-machine figures: inline batches, their time and share of
    /// the epochs, and the threads' scheduler statistics since `sched0`
    /// (the live threads' as read now, `live`, plus the exited ones').
    fn busy(&self, sched0: Sched, live: Sched) -> (u64, u64, f64, Sched) {
        let inline_ns = self.inline_ns.load(Ordering::Relaxed);
        let share = busy::share(
            inline_ns as f64,
            self.epoch_ns.load(Ordering::Relaxed) as f64,
        );
        let exited = Sched {
            on_cpu_ns: self.exited_cpu_ns.load(Ordering::Relaxed),
            wait_ns: self.exited_wait_ns.load(Ordering::Relaxed),
            slices: self.exited_slices.load(Ordering::Relaxed),
        };
        (
            self.inline_batches.load(Ordering::Relaxed),
            inline_ns,
            share,
            live.plus(exited).minus(sched0),
        )
    }
}

/// Add `ns` (if positive) to a process-wide nanosecond total.
fn add_ns(total: &AtomicU64, ns: f64) {
    if ns > 0.0 {
        total.fetch_add(ns as u64, Ordering::Relaxed);
    }
}

impl InstrumentedSource {
    /// The hooks' configuration.
    pub fn config(&self) -> HookConfig {
        self.cfg
    }

    /// The measured costs of the hooks.
    pub fn costs(&self) -> HookCosts {
        self.costs
    }
}

impl Source for InstrumentedSource {
    fn name(&self) -> String {
        "instrumented".into()
    }

    fn kind(&self) -> SourceKind {
        SourceKind::AccessCounts
    }

    fn thread_counters(&self) -> Result<Box<dyn ThreadCounters>, Error> {
        Ok(Box::new(InstrumentedCounters {
            costs: self.costs,
            lat: self.lat,
            shared: Arc::clone(&self.shared),
            last: ThreadTotals::default(),
            last_overhead_ns: 0.0,
            carried_ns: 0.0,
            window: LossWindow::default(),
            owner: 0,
            checks: (0, 0),
            gaps: gap_rate(),
        }))
    }

    fn stats(&self) -> SourceStats {
        let live = busy::process_sched();
        let (inline_batches, inline_ns, inline_share, sched) = self.shared.busy(self.sched0, live);
        SourceStats {
            hook_inline_batches: inline_batches,
            hook_inline_ns: inline_ns,
            hook_inline_share: inline_share,
            run_delay_ns: sched.wait_ns,
            run_delay_share: sched.wait_share(),
            hook_overhead_unabsorbed_ns: self.shared.unabsorbed_ns.load(Ordering::Relaxed),
            hook_hit_ns: self.costs.fast_ns,
            hook_logged_miss_ns: self.costs.miss_ns,
            hook_batches_offloaded: offload::offloaded_batches(),
            hook_window_loss_ns: self.shared.window_loss_ns.load(Ordering::Relaxed),
        }
    }
}

/// One thread's view of the hooks' totals.
pub struct InstrumentedCounters {
    costs: HookCosts,
    lat: Option<(f64, f64)>,
    shared: Arc<Shared>,
    last: ThreadTotals,
    last_overhead_ns: f64,
    /// Hook overhead of earlier epochs that their delays did not absorb.
    carried_ns: f64,
    /// The thread whose hook state these counters read (set by `start`).
    owner: i32,
    /// The recent epochs' window losses, to bound them by the time the
    /// epochs took.
    window: LossWindow,
    /// Sampled programs: the thread's window and gap checks at the last
    /// reading, and the windows' bytes per check, to charge each epoch the
    /// traffic of its own gaps ([`sampled_traffic`]).
    checks: (u64, u64),
    gaps: quartz::GapRate,
}

/// Epochs over which the window loss is bounded together.
pub const LOSS_EPOCHS: usize = 8;

/// One epoch in a [`LossWindow`], in ns.
#[derive(Debug, Clone, Copy, Default)]
struct LossEpoch {
    /// The epoch's own time (its wall time less the batches it ran).
    own: f64,
    /// Its native stall time (serial accesses at the DRAM latency).
    stall: f64,
    /// Its modelled window loss.
    model: f64,
    /// The loss it was charged.
    charged: f64,
}

/// The last [`LOSS_EPOCHS`] epochs of a thread, to bound their window
/// losses together.
#[derive(Debug, Clone, Copy, Default)]
pub struct LossWindow {
    epochs: [LossEpoch; LOSS_EPOCHS],
    next: usize,
}

impl LossWindow {
    /// The loss to charge an epoch of `own_ns` with `stall_ns` of native
    /// stalls whose modelled loss is `model_ns`: what the last
    /// [`LOSS_EPOCHS`] epochs together, this one included, lost by the model
    /// and could have lost by their time ([`window_loss_ns`]'s bound), less
    /// what the earlier ones were charged. Taken together because an
    /// epoch's misses may be counted an epoch late (the modeller thread
    /// runs the logs in the background): epoch by epoch, the bound would cut
    /// the loss of an epoch that received its predecessor's misses.
    pub fn charge(&mut self, own_ns: f64, stall_ns: f64, model_ns: f64) -> f64 {
        let slot = self.next;
        self.epochs[slot] = LossEpoch {
            own: own_ns.max(0.0),
            stall: stall_ns.max(0.0),
            model: model_ns.max(0.0),
            charged: 0.0,
        };
        self.next = (slot + 1) % LOSS_EPOCHS;
        let sum = self
            .epochs
            .iter()
            .fold(LossEpoch::default(), |a, e| LossEpoch {
                own: a.own + e.own,
                stall: a.stall + e.stall,
                model: a.model + e.model,
                charged: a.charged + e.charged,
            });
        let c = (sum.model.min(sum.own - sum.stall) - sum.charged).max(0.0);
        self.epochs[slot].charged = c;
        c
    }
}

/// Split an epoch's hook `overhead` plus what earlier epochs `carried` into
/// the part the epoch's `delay` absorbs and the part carried on:
/// `(absorbed, carried)`.
pub fn absorb(overhead: f64, carried: f64, delay: f64) -> (f64, f64) {
    let owed = overhead.max(0.0) + carried.max(0.0);
    let absorbed = owed.min(delay.max(0.0));
    (absorbed, owed - absorbed)
}

/// The share of an epoch's own time (`run_ns`: its wall time less the
/// batches the thread ran) that the thread spent waiting for serial misses
/// (`stalled_ns`: the model's serial accesses at this machine's DRAM
/// latency), in 0..=1. The hooks' calls issued during those waits cost
/// nothing: a dependent chase's next address is not known before the miss
/// returns, so the out-of-order core runs the call in the miss's shadow
/// (memlat at 200 ns read 3% low when every call was charged at its
/// calibrated, cache-resident cost). The calls are taken to be spread
/// evenly over the epoch, so this share of them is hidden.
pub fn stall_share(stalled_ns: f64, run_ns: f64) -> f64 {
    if run_ns > 0.0 && stalled_ns > 0.0 {
        (stalled_ns / run_ns).min(1.0)
    } else {
        0.0
    }
}

/// Memory-level parallelism of an epoch: misses per serial access (at
/// least 1). The calls hide in the stalls only as far as the program's
/// misses are one at a time: where several overlap, the calls' own
/// instructions fill the out-of-order window that would hold more misses,
/// so they cost (memlat with 4 chains measured 50-55 ns per access with
/// the hooks counting against 41.5 natively, its stall share near 0.8),
/// and only 1/MLP of the stall share is taken as hidden.
pub fn mlp(misses: f64, serial: f64) -> f64 {
    if serial > 0.0 {
        (misses / serial).max(1.0)
    } else {
        1.0
    }
}

/// The time an epoch lost to the hooks' instructions filling the
/// out-of-order window: the serial accesses of the instrumented run
/// (`hooked_serial`, the misses in the window the hooks leave) beyond those
/// of the native run (`serial`), at this machine's DRAM latency (the run is
/// on DRAM whatever memory it emulates). 8 independent chains (memlat)
/// take 50-60 ns per access under the hooks against 21 natively, 3 times
/// what the calls cost. [`LossWindow`] bounds it by the time the epochs
/// took.
pub fn window_loss_ns(hooked_serial: f64, serial: f64, dram_ns: f64) -> f64 {
    (hooked_serial - serial).max(0.0) * dram_ns.max(0.0)
}

/// The reading between two totals of one thread. The PM traffic it
/// reports to the bandwidth model is the lines read (every PM miss, a
/// store's write-allocate read included) and one write-back per line a
/// store made dirty, charged when it was dirtied rather than when the
/// model evicts it: every dirtied line is written back once, and a
/// sampled model, which sees a fraction of the lines, would evict it
/// long after the program moved on (a triad at `--sample 0.01` never
/// filled the model's cache: no write-back was counted at all).
pub fn reading_between(a: &ThreadTotals, b: &ThreadTotals) -> EpochReading {
    let read = b.serial.pm_misses.saturating_sub(a.serial.pm_misses);
    let written = b.pm_dirtied.saturating_sub(a.pm_dirtied);
    EpochReading {
        reading: Reading::Accesses {
            pm_serial: (b.serial.pm - a.serial.pm).max(0.0),
            dram_serial: (b.serial.dram - a.serial.dram).max(0.0),
        },
        pm_bytes: (read + written) << 6,
        pm_write_bytes: written << 6,
    }
}

/// `r` with its counts multiplied by `f`, the sampling's extrapolation
/// (programs built with the sampling plugin and run with `--sample
/// RATIO`: the windows' counts stand for every check). The bytes, read
/// and written, are scaled with the accesses; the bandwidth model takes
/// its bytes from [`sampled_traffic`] instead, which charges each epoch
/// the traffic of its own checks.
pub fn scaled(mut r: EpochReading, f: f64) -> EpochReading {
    if f == 1.0 {
        return r;
    }
    if let Reading::Accesses {
        pm_serial,
        dram_serial,
    } = r.reading
    {
        r.reading = Reading::Accesses {
            pm_serial: pm_serial * f,
            dram_serial: dram_serial * f,
        };
    }
    r.pm_bytes = (r.pm_bytes as f64 * f).round() as u64;
    r.pm_write_bytes = ((r.pm_write_bytes as f64 * f).round() as u64).min(r.pm_bytes);
    r
}

/// Window checks over which [`sampled_traffic`] averages the windows'
/// bytes per check: one window, so that a new phase's rate holds from its
/// first window on (averaged over four, a triad after its arrays'
/// initialisation was charged the initialisation's write share for
/// several epochs: 12% too many write-backs over its first pass).
pub const GAP_RATE_CHECKS: f64 = super::sample::WINDOW as f64;

fn gap_rate() -> quartz::GapRate {
    quartz::GapRate::new(GAP_RATE_CHECKS)
}

/// The bandwidth model's view of a sampled epoch: `r` (the windows'
/// counts, as [`reading_between`] gives them) with its bytes read and
/// written extended to the epoch's `gap_checks` at the windows' rate per
/// check (`gaps`, which learns this epoch's `window_checks` first; see
/// [`quartz::GapRate`]). The gaps' bytes are thus charged in the epoch
/// that ran them, wherever the windows fell. Without gap checks (every
/// access hooked, no sampling plugin) `r`'s bytes stand.
pub fn sampled_traffic(
    mut r: EpochReading,
    window_checks: u64,
    gap_checks: u64,
    gaps: &mut quartz::GapRate,
) -> EpochReading {
    let (read, write) = gaps.extrapolate(
        r.pm_read_bytes() as f64,
        r.pm_write_bytes as f64,
        window_checks as f64,
        gap_checks as f64,
    );
    let (read, write) = (read.round() as u64, write.round() as u64);
    r.pm_bytes = read + write;
    r.pm_write_bytes = write;
    r
}

/// Device mode (`pmlab run --device`): the delay of the epoch between two
/// totals, ns. Each serial PM access costs the latency of the device level
/// that served it less this machine's native cost of that kind of access
/// (a flushed line's re-read or a cold miss: the program ran on DRAM),
/// summed by the model ([`ThreadTotals::device_read_delay_ns`]); the
/// wear-leveling migrations not yet charged at a durability point
/// (`stall_ns`) stall the program for their whole length; the media time
/// of the write-backs (write amplification included) costs only what
/// exceeds the epoch's own time `epoch_ns` (the media drains while the
/// program runs, and slows it only once the writes need more time than
/// the epoch lasted).
pub fn device_delay_ns(a: &ThreadTotals, b: &ThreadTotals, stall_ns: f64, epoch_ns: f64) -> f64 {
    let reads = (b.device_read_delay_ns - a.device_read_delay_ns).max(0.0);
    let media = (b.device.media_write_ns - a.device.media_write_ns).max(0.0);
    reads + stall_ns.max(0.0) + (media - epoch_ns.max(0.0)).max(0.0)
}

/// The device model's counts of every thread, for the statistics.
static DEVICE_COUNTS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
const DEVICE_NAMES: [&str; 8] = [
    "rmw_hits",
    "ait_hits",
    "media_reads",
    "writebacks",
    "media_writes",
    "modify_reads",
    "migrations",
    "migration_stall_ns",
];

fn device_fields(c: &pmlab_model::device::DeviceCounts) -> [u64; 8] {
    [
        c.rmw_hits,
        c.ait_hits,
        c.media_reads,
        c.writes,
        c.media_writes,
        c.modify_reads,
        c.migrations,
        c.stall_ns as u64,
    ]
}

/// Add one thread's device counts between two totals to the process's.
fn note_device(a: &pmlab_model::device::DeviceCounts, b: &pmlab_model::device::DeviceCounts) {
    for ((x, y), total) in device_fields(a)
        .iter()
        .zip(device_fields(b))
        .zip(&DEVICE_COUNTS)
    {
        total.fetch_add(y.saturating_sub(*x), Ordering::Relaxed);
    }
}

/// The device model's statistics as a JSON member (`"device":{...},`),
/// empty when no device is modelled: the device's name, the reads each
/// level served, the write-backs, media writes, write amplification and
/// wear-leveling migrations of every thread's epochs so far.
pub fn device_json() -> String {
    let Some(p) = settings::device() else {
        return String::new();
    };
    let v: Vec<u64> = DEVICE_COUNTS
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let mut o = format!(
        "\"device\":{{\"name\":\"{}\"",
        p.name.replace(['"', '\\'], "_")
    );
    for (n, x) in DEVICE_NAMES.iter().zip(&v) {
        o.push_str(&format!(",\"{n}\":{x}"));
    }
    let amp = if v[3] > 0 {
        (v[4] * p.xpline) as f64 / (v[3] * 64) as f64
    } else {
        0.0
    };
    o.push_str(&format!(
        ",\"write_amplification\":{amp:.4},\"rmw_ns\":{:.1},\"ait_ns\":{:.1},\"media_ns\":{:.1}",
        p.rmw_ns, p.ait_ns, p.media_ns
    ));
    if let Some(n) = super::model::native_costs() {
        o.push_str(&format!(
            ",\"native_near_ns\":{:.1},\"native_far_ns\":{:.1},\"native_follow_ns\":{:.1},\"native_fresh_ns\":{:.1}",
            n.near_ns, n.far_ns, n.follow_ns, n.fresh_ns
        ));
    }
    o.push_str("},");
    o
}

impl ThreadCounters for InstrumentedCounters {
    fn start(&mut self) -> Result<(), Error> {
        // Also called in a forked child: the totals carry on from the
        // parent's, so the baseline is simply "now".
        self.owner = crate::sys::gettid();
        self.last = thread::totals();
        self.last_overhead_ns = 0.0;
        self.carried_ns = 0.0;
        self.window = LossWindow::default();
        self.checks = super::sample::thread_events();
        self.gaps = gap_rate();
        Ok(())
    }

    fn epoch_end(&mut self, epoch_ns: f64) -> EpochReading {
        // Reads the thread's own counters; no allocation, no pthread
        // locks (it may spin until the modeller thread, which never waits
        // for this one, finishes a batch of this thread's log).
        let (now, ran) = thread::totals_and_ran();
        // Sampled programs: the windows' counts stand for every check.
        // The hooks' costs are those of the windows, the delay that of
        // every check.
        let f = super::sample::thread_epoch_factor();
        let raw = reading_between(&self.last, &now);
        let mut r = scaled(raw, f);
        // The bandwidth model's bytes: the windows' own, and the gaps' at
        // the windows' rate per check, in the epoch that ran them.
        let checks = super::sample::thread_events();
        let (dw, dg) = (
            checks.0.saturating_sub(self.checks.0),
            checks.1.saturating_sub(self.checks.1),
        );
        self.checks = checks;
        let t = sampled_traffic(raw, dw, dg, &mut self.gaps);
        (r.pm_bytes, r.pm_write_bytes) = (t.pm_bytes, t.pm_write_bytes);
        let device = settings::device_on()
            .then(|| {
                self.lat.map(|_| {
                    let stall = super::model::take_stall(now.device.stall_ns);
                    device_delay_ns(&self.last, &now, stall, epoch_ns) * f
                })
            })
            .flatten();
        let calls = self.costs.calls_ns(&self.last, &now);
        // The batch this reading ran is in the runtime's own timing of the
        // epoch end, which counts it as overhead already.
        let inline_ns = self.costs.batches_ns(&self.last, &now);
        let batches = (inline_ns - self.costs.ran_ns(ran)).max(0.0);
        add_ns(&self.shared.inline_ns, inline_ns);
        add_ns(&self.shared.epoch_ns, epoch_ns);
        self.shared.inline_batches.fetch_add(
            now.batches.saturating_sub(self.last.batches),
            Ordering::Relaxed,
        );
        (self.last_overhead_ns, self.carried_ns) = match (self.lat, raw.reading) {
            (
                Some((dram, pm)),
                Reading::Accesses {
                    pm_serial,
                    dram_serial,
                },
            ) => {
                let delay = device
                    .unwrap_or_else(|| quartz::delay_from_serial_accesses(pm_serial * f, dram, pm));
                let serial = pm_serial + dram_serial;
                let misses = (now.serial.pm_misses + now.serial.dram_misses)
                    .saturating_sub(self.last.serial.pm_misses + self.last.serial.dram_misses)
                    as f64;
                let own_ns = epoch_ns - batches;
                let hidden = stall_share(serial * dram, own_ns) / mlp(misses, serial);
                let hooked = (now.hooked_serial - self.last.hooked_serial).max(0.0);
                // The calls and the window stalls overlap: while the core
                // waits on a miss that a native run would have overlapped,
                // it runs the hooks that filled its window.
                let exposed_calls = calls * (1.0 - hidden);
                let loss =
                    self.window
                        .charge(own_ns, serial * dram, window_loss_ns(hooked, serial, dram));
                if loss > exposed_calls {
                    add_ns(&self.shared.window_loss_ns, loss);
                }
                let exposed = exposed_calls.max(loss);
                absorb(exposed + batches, self.carried_ns, delay)
            }
            _ => (calls + batches + self.carried_ns, 0.0),
        };
        if let (Some(d), Some((dram, pm))) = (device, self.lat) {
            // The runtime charges (pm - dram) per serial PM access: the
            // device's delay in those units (pm is the device's slowest
            // level, which `pmlab run` keeps above the DRAM latency).
            if let Reading::Accesses { pm_serial, .. } = &mut r.reading {
                *pm_serial = if pm > dram { d / (pm - dram) } else { 0.0 };
            }
            note_device(&self.last.device, &now.device);
        }
        self.last = now;
        r
    }

    fn overhead_ns(&self) -> f64 {
        self.last_overhead_ns
    }

    fn time_observed(&mut self) {
        add_ns(
            &self.shared.unabsorbed_ns,
            std::mem::take(&mut self.carried_ns),
        );
    }

    fn stop(&mut self) {
        add_ns(
            &self.shared.unabsorbed_ns,
            std::mem::take(&mut self.carried_ns),
        );
        // The hook state is the calling thread's: in a forked child the
        // runtime stops the counters of threads that do not exist there
        // from the forking thread, whose own model must survive.
        if crate::sys::gettid() == self.owner {
            if let Some(s) = busy::thread_sched() {
                let sh = &self.shared;
                sh.exited_cpu_ns.fetch_add(s.on_cpu_ns, Ordering::Relaxed);
                sh.exited_wait_ns.fetch_add(s.wait_ns, Ordering::Relaxed);
                sh.exited_slices.fetch_add(s.slices, Ordering::Relaxed);
                busy::stopped();
            }
            thread::thread_exit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmlab_model::mlp::SerialCounts;

    #[test]
    fn overhead_a_delay_cannot_absorb_is_carried_to_later_delays() {
        // A DRAM stretch: 3 ms of hook cost, no delay: all carried.
        let (a, c) = absorb(3e6, 0.0, 0.0);
        assert_eq!((a, c), (0.0, 3e6));
        // A PM stretch after it: its own 1 ms and the 3 carried fit in 23 ms.
        let (a, c) = absorb(1e6, c, 23e6);
        assert_eq!((a, c), (4e6, 0.0));
        // A delay shorter than what is owed absorbs what it can.
        let (a, c) = absorb(2e6, 1e6, 2.5e6);
        assert_eq!((a, c), (2.5e6, 0.5e6));
    }

    #[test]
    fn calls_are_hidden_in_proportion_to_the_stalls() {
        // A chase: the whole epoch waits on misses, the calls are free.
        assert_eq!(stall_share(9e6, 8e6), 1.0);
        // Compute only: every call is paid.
        assert_eq!(stall_share(0.0, 8e6), 0.0);
        // A quarter of the time stalled: a quarter of the calls hidden.
        assert_eq!(stall_share(2e6, 8e6), 0.25);
        // An epoch without time of its own (all batches) hides nothing.
        assert_eq!(stall_share(1e6, 0.0), 0.0);
        assert_eq!(stall_share(1e6, -5.0), 0.0);
    }

    #[test]
    fn overlapping_misses_hide_fewer_calls() {
        // A chase: one miss per serial access.
        assert_eq!(mlp(1000.0, 1000.0), 1.0);
        // Four chains: four misses per serial access.
        assert_eq!(mlp(4000.0, 1000.0), 4.0);
        // No serial access, or fewer misses than serial accesses (rounding
        // of the estimator): no parallelism to speak of.
        assert_eq!(mlp(10.0, 0.0), 1.0);
        assert_eq!(mlp(999.0, 1000.0), 1.0);
    }

    #[test]
    fn the_window_loss_is_the_extra_serial_time_at_dram_latency() {
        // memlat's 8 chains: 1000 serial natively, 8000 / 3.25 = 2461.54
        // under hooks; 1461.54 more, at 165 ns each: 241,153.8 ns.
        let l = window_loss_ns(8000.0 / 3.25, 1000.0, 165.0);
        assert!((l - 241_153.85).abs() < 0.01, "{l}");
        // A chase, or an estimate below the native one: nothing lost.
        assert_eq!(window_loss_ns(1000.0, 1000.0, 165.0), 0.0);
        assert_eq!(window_loss_ns(900.0, 1000.0, 165.0), 0.0);
    }

    #[test]
    fn the_window_loss_is_bounded_by_the_recent_epochs_time() {
        let mut w = LossWindow::default();
        // 10 ms epochs, 4 ms of native stalls: up to 6 ms can be loss.
        assert_eq!(w.charge(10e6, 4e6, 5e6), 5e6);
        // A run the hooks slowed less: the model says 5, the time allows
        // 6 + 1 (left by the first epoch) + 3.
        assert_eq!(w.charge(7e6, 4e6, 5e6), 4e6);
        // An epoch that got none of its misses (counted late) and the one
        // that got twice its share: charged together as two normal epochs.
        let mut w = LossWindow::default();
        let a = w.charge(10e6, 0.0, 0.0);
        let b = w.charge(10e6, 8e6, 10e6);
        assert_eq!(a + b, 10e6);
        // Epochs older than LOSS_EPOCHS no longer count: a long compute
        // phase leaves no slack for a later, faster-than-modelled one once
        // LOSS_EPOCHS of those have passed (each then allows 1 ms).
        let mut w = LossWindow::default();
        for _ in 0..LOSS_EPOCHS {
            w.charge(10e6, 0.0, 0.0);
        }
        let charged: Vec<f64> = (0..2 * LOSS_EPOCHS)
            .map(|_| w.charge(5e6, 4e6, 5e6))
            .collect();
        let late: f64 = charged[LOSS_EPOCHS..].iter().sum();
        assert!((late - LOSS_EPOCHS as f64 * 1e6).abs() < 1.0, "{charged:?}");
        // Nothing to charge when faster than the native stalls.
        let mut w = LossWindow::default();
        assert_eq!(w.charge(3e6, 4e6, 5e6), 0.0);
    }

    #[test]
    fn sampled_readings_are_extrapolated_bytes_included() {
        let r = EpochReading {
            reading: Reading::Accesses {
                pm_serial: 10.0,
                dram_serial: 4.0,
            },
            pm_bytes: 640,
            pm_write_bytes: 128,
        };
        let s = scaled(r, 2.5);
        assert_eq!(
            s.reading,
            Reading::Accesses {
                pm_serial: 25.0,
                dram_serial: 10.0
            }
        );
        assert_eq!((s.pm_bytes, s.pm_write_bytes), (1600, 320));
        assert_eq!(scaled(r, 1.0), r);
    }

    #[test]
    fn a_sampled_epoch_is_charged_its_gaps_traffic_at_the_windows_rate() {
        // A triad's window: 1,500 lines in, 500 dirtied, in 2,000 checks;
        // the epoch also ran 198,000 checks of gap.
        let a = ThreadTotals::default();
        let b = ThreadTotals {
            serial: SerialCounts {
                pm_misses: 1_500,
                ..Default::default()
            },
            pm_dirtied: 500,
            ..Default::default()
        };
        let mut g = gap_rate();
        let r = sampled_traffic(reading_between(&a, &b), 2_000, 198_000, &mut g);
        assert_eq!(r.pm_read_bytes(), 1_500 * 64 * 100);
        assert_eq!(r.pm_write_bytes, 500 * 64 * 100);
        // The next epoch ran in a gap only: charged at the same rate.
        let r = sampled_traffic(reading_between(&b, &b), 0, 20_000, &mut g);
        assert_eq!((r.pm_read_bytes(), r.pm_write_bytes), (960_000, 320_000));
        // Every access hooked: the counts as they are.
        let mut g = gap_rate();
        let r = sampled_traffic(reading_between(&a, &b), 2_000, 0, &mut g);
        assert_eq!((r.pm_bytes, r.pm_write_bytes), (2_000 * 64, 500 * 64));
        // The latency counts are left to `scaled`.
        assert_eq!(r.reading, reading_between(&a, &b).reading);
    }

    #[test]
    fn epoch_reading_is_the_difference_of_totals() {
        let a = ThreadTotals {
            serial: SerialCounts {
                pm: 10.0,
                dram: 5.0,
                pm_misses: 10,
                ..Default::default()
            },
            pm_writebacks: 2,
            pm_dirtied: 3,
            ..Default::default()
        };
        let b = ThreadTotals {
            serial: SerialCounts {
                pm: 30.0,
                dram: 5.0,
                pm_misses: 40,
                ..Default::default()
            },
            pm_writebacks: 7,
            pm_dirtied: 11,
            ..Default::default()
        };
        let r = reading_between(&a, &b);
        assert_eq!(
            r.reading,
            Reading::Accesses {
                pm_serial: 20.0,
                dram_serial: 0.0
            }
        );
        // 30 lines read; 8 lines dirtied (the write-backs the model's
        // evictions counted, 5, are not what the bandwidth model charges).
        assert_eq!(r.pm_bytes, (30 + 8) * 64);
        assert_eq!((r.pm_read_bytes(), r.pm_write_bytes), (30 * 64, 8 * 64));
    }

    #[test]
    fn the_threads_unabsorbed_overhead_reaches_the_statistics() {
        let src = InstrumentedSource {
            cfg: HookConfig {
                llc: pmlab_model::cache::CacheConfig::new(1 << 20, 16),
                overlap: pmlab_model::mlp::OverlapConfig::default(),
                hooked_window: settings::DEFAULT_HOOKED_WINDOW,
                pm_mode: settings::PmMode::All,
                random_replacement: true,
            },
            costs: HookCosts {
                fast_ns: 1.5,
                miss_ns: 4.0,
                ..HookCosts::default()
            },
            lat: None,
            shared: Arc::default(),
            sched0: Sched::default(),
        };
        let counters = |carried_ns| InstrumentedCounters {
            costs: src.costs,
            lat: src.lat,
            shared: Arc::clone(&src.shared),
            last: ThreadTotals::default(),
            last_overhead_ns: 0.0,
            carried_ns,
            window: LossWindow::default(),
            owner: 0,
            checks: (0, 0),
            gaps: gap_rate(),
        };
        // Two threads drop what they carry at a clock read.
        counters(2e6).time_observed();
        counters(5e5).time_observed();
        let s = src.stats();
        assert_eq!(s.hook_overhead_unabsorbed_ns, 2_500_000);
        assert_eq!((s.hook_hit_ns, s.hook_logged_miss_ns), (1.5, 4.0));
        assert_eq!(s.hook_window_loss_ns, 0);
    }

    #[test]
    fn inline_batches_and_cpu_waits_make_the_busy_figures() {
        let costs = HookCosts {
            tsc_ghz: 2.0,
            tsc_pair_ns: 10.0,
            ..HookCosts::default()
        };
        let shared = Arc::new(Shared::default());
        let mut c = InstrumentedCounters {
            costs,
            lat: None,
            shared: Arc::clone(&shared),
            last: ThreadTotals::default(),
            last_overhead_ns: 0.0,
            carried_ns: 0.0,
            window: LossWindow::default(),
            owner: 0,
            checks: (0, 0),
            gaps: gap_rate(),
        };
        // Totals as if the thread had run 3 batches of 2,000,000 cycles
        // (1 ms each at 2 GHz) itself: the epoch-end reading takes the
        // difference from the thread's real totals, so feed the synthetic
        // ones through the same arithmetic.
        let now = ThreadTotals {
            batches: 3,
            slow_cycles: 6_000_000,
            ..ThreadTotals::default()
        };
        let inline = c.costs.batches_ns(&c.last, &now);
        assert!((inline - 3_000_030.0).abs() < 1e-6, "{inline}");
        add_ns(&shared.inline_ns, inline);
        add_ns(&shared.epoch_ns, 30e6);
        shared.inline_batches.fetch_add(3, Ordering::Relaxed);
        c.last = now;
        // One thread exited after 80 ms on a CPU and 20 ms waiting; one is
        // live with 10 ms of each; 5 ms of waiting predate the source.
        shared
            .exited_cpu_ns
            .fetch_add(80_000_000, Ordering::Relaxed);
        shared
            .exited_wait_ns
            .fetch_add(20_000_000, Ordering::Relaxed);
        let live = Sched {
            on_cpu_ns: 10_000_000,
            wait_ns: 10_000_000,
            slices: 4,
        };
        let sched0 = Sched {
            on_cpu_ns: 0,
            wait_ns: 5_000_000,
            slices: 1,
        };
        let (batches, ns, share, sched) = shared.busy(sched0, live);
        assert_eq!((batches, ns), (3, 3_000_030));
        assert!((share - 0.1).abs() < 1e-4, "{share}");
        assert_eq!(sched.wait_ns, 25_000_000);
        assert!((sched.wait_share() - 25.0 / 115.0).abs() < 1e-9);
        assert!(busy::warning(share, ns, sched.wait_share(), sched.wait_ns).is_some());
        // A quiet run: everything offloaded, no waits.
        let quiet = Shared::default();
        let (_, _, share, sched) = quiet.busy(Sched::default(), Sched::default());
        assert_eq!((share, sched.wait_ns), (0.0, 0));
        assert!(busy::warning(share, 0, sched.wait_share(), 0).is_none());
    }
}
