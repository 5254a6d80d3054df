//! The `Source` implementation: [`InstrumentedSource`] opens the hooks
//! and hands each thread an [`InstrumentedCounters`], whose epoch readings
//! are differences of the thread's totals and whose overhead is the hooks'
//! own cost in the epoch, charged as the module's documentation
//! ([`super`]) explains.

use super::busy::{self, Sched};
use super::cost::{self, HookCosts};
use super::model::ThreadTotals;
use super::settings::{self, HookConfig, UNIT};
use super::{hooks, offload, thread};
use crate::error::Error;
use crate::source::{EpochReading, Reading, Source, SourceKind, SourceStats, ThreadCounters};
use pmlab_model::quartz;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Open the instrumented source: configure and activate the hooks.
pub fn open() -> Result<Box<dyn Source>, Error> {
    let cfg = settings::config_from_env(|k| std::env::var(k).ok())?;
    let sample = std::env::var("PMLAB_SAMPLE")
        .unwrap_or_else(|_| pmlab_model::options::Sample::DEFAULT.into());
    let sample = pmlab_model::options::Sample::parse(&sample).map_err(|why| {
        Error::new(
            crate::error::ErrorKind::Config,
            format!("PMLAB_SAMPLE (pmlab run --sample): {why}"),
        )
    })?;
    let device = crate::config::get()
        .as_ref()
        .is_ok_and(|c| c.device.is_some());
    super::sample::set_policy(super::sample::Policy::for_run(sample, device));
    super::sample::set_injecting(crate::config::get().as_ref().is_ok_and(|c| !c.no_inject));
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
    set_up_timed_misses()?;
    hooks::activate(cfg);
    let costs = cost::calibrate();
    note_costs(&costs);
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

/// Timed misses (`PMLAB_TIMED_MISSES`, [`super::timed`]): the sampling
/// rate, and the threshold of a slow read: the timing primitive's cost,
/// measured now, plus half the calibrated DRAM latency.
fn set_up_timed_misses() -> Result<(), Error> {
    // Device mode times a share of the loads (unless the environment
    // names its own rate or `off`, or gives the native costs): their
    // native costs teach the delays.
    let every = match settings::timed_from_env(|k| std::env::var(k).ok())? {
        Some(n) => n,
        None if settings::device_on() && super::model::device_times_loads() => {
            super::timed::DEVICE_EVERY
        }
        None => return Ok(()),
    };
    let c = crate::config::get();
    let c = c.as_ref().ok();
    let ghz = c
        .and_then(|c| c.tsc_ghz)
        .unwrap_or_else(|| crate::clock::measure_tsc_ghz(2_000_000));
    let dram = c.map_or(0.0, |c| c.dram_latency_ns);
    let base = super::timed::measure_base_ticks();
    super::timed::set(
        Some(every),
        base,
        super::timed::slow_threshold(base, dram, ghz),
        ghz,
    );
    Ok(())
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
        Ok(Box::new(InstrumentedCounters::new(
            self.costs,
            self.lat,
            Arc::clone(&self.shared),
        )))
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
    /// The thread's time waiting for a CPU so far (scheduler statistics,
    /// ns), read at each epoch's end while loads are timed: the run's
    /// pace ([`super::timed::note_epoch`]) is taken on the CPU.
    waited_ns: u64,
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

/// The hooked-window units of the access callbacks between two totals:
/// one per access, the logged weight ([`HookConfig::logged_weight`]) per
/// logged one (the model's entries less the logged compares), as the
/// model counts them.
pub fn window_units(a: &ThreadTotals, b: &ThreadTotals) -> f64 {
    window_units_at(a, b, settings::logged_weight())
}

/// [`window_units`] with a logged access at `logged_weight` thousandths.
pub fn window_units_at(a: &ThreadTotals, b: &ThreadTotals, logged_weight: u64) -> f64 {
    let accesses = b.accesses.saturating_sub(a.accesses) as f64;
    let logged =
        b.slow_calls
            .saturating_sub(a.slow_calls)
            .saturating_sub(b.compares_logged.saturating_sub(a.compares_logged)) as f64;
    accesses + logged * logged_weight.saturating_sub(UNIT) as f64 / UNIT as f64
}

/// An epoch's serial count in the hooked window (`hooked`, as the model
/// counted it from the access callbacks' `units`) with its `compares`
/// callbacks in the window too: each takes about the reorder-buffer room
/// of a filter hit, so the misses that the window overlapped sit
/// `1 + compares / units` times further apart and overlap that much less
/// (memlat's 8 chains: 3 access callbacks and 0.375 compares per access,
/// 3.25 misses at a time without the compares, 2.97 with them). A count
/// at the native `serial` one (a chase, or misses further apart than the
/// window) is left alone; the result is at most the epoch's `misses`.
pub fn hooked_with_compares(
    hooked: f64,
    serial: f64,
    misses: f64,
    units: f64,
    compares: f64,
) -> f64 {
    if units <= 0.0 || compares <= 0.0 || hooked <= serial * (1.0 + 1e-9) {
        return hooked;
    }
    (hooked * (1.0 + compares / units)).min(misses.max(hooked))
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
    let read = b.pm_lines_read.saturating_sub(a.pm_lines_read);
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

/// Device mode: every thread's timed PM misses whose native cost taught
/// the delays ([`ThreadTotals::device_learned`]), for the statistics.
static DEVICE_LEARNED: AtomicU64 = AtomicU64::new(0);

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
    o.push_str(&format!(
        ",\"native_timed_samples\":{}",
        DEVICE_LEARNED.load(Ordering::Relaxed)
    ));
    if let Some(n) = super::model::native_costs() {
        o.push_str(&format!(
            ",\"native_near_ns\":{:.1},\"native_far_ns\":{:.1},\"native_follow_ns\":{:.1},\"native_fresh_ns\":{:.1},\"native_fresh_follow_ns\":{:.1}",
            n.near_ns, n.far_ns, n.follow_ns, n.fresh_ns, n.fresh_follow_ns
        ));
    }
    o.push_str("},");
    o
}

/// What an epoch was charged for the hooks (see
/// [`InstrumentedCounters::charge`]), ns.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Charge {
    /// The calls at their calibrated costs ([`HookCosts::calls_ns`]).
    pub calls: f64,
    /// The part of `calls` not hidden in the epoch's stalls.
    pub exposed_calls: f64,
    /// The window loss charged ([`LossWindow::charge`]).
    pub loss: f64,
    /// The batches the thread ran, less the one the epoch's end ran.
    pub batches: f64,
    /// The overhead reported for the delay to absorb (absorbed now), and
    /// what is carried to later epochs.
    pub overhead: f64,
    pub carried: f64,
}

impl InstrumentedCounters {
    /// A thread's counters with the source's hook costs, latencies and
    /// shared totals, nothing counted yet.
    fn new(costs: HookCosts, lat: Option<(f64, f64)>, shared: Arc<Shared>) -> InstrumentedCounters {
        InstrumentedCounters {
            costs,
            lat,
            shared,
            last: ThreadTotals::default(),
            last_overhead_ns: 0.0,
            carried_ns: 0.0,
            window: LossWindow::default(),
            owner: 0,
            checks: (0, 0),
            gaps: gap_rate(),
            waited_ns: 0,
        }
    }

    /// Charge the epoch from the last totals to `now` (`epoch_ns` long, of
    /// which `batches` ns were batches the thread ran outside the epoch
    /// end) for the hooks, given its `delay` (None: no latencies known or
    /// no access counts): the calls at their calibrated costs, less the
    /// share hidden in the epoch's stalls ([`stall_share`], [`mlp`]), or
    /// the window loss where larger, plus the batches; what the delay
    /// cannot absorb is carried. Sets the overhead the runtime reads and
    /// the carry.
    pub fn charge(
        &mut self,
        now: &ThreadTotals,
        epoch_ns: f64,
        batches: f64,
        delay: Option<f64>,
    ) -> Charge {
        let calls = self.costs.calls_ns(&self.last, now) + timed_calls_ns(&self.last, now);
        let mut c = Charge {
            calls,
            exposed_calls: calls,
            batches,
            ..Charge::default()
        };
        (c.overhead, c.carried) = match (self.lat, delay) {
            (Some((dram, _)), Some(delay)) => {
                let serial =
                    (now.serial.pm + now.serial.dram - self.last.serial.pm - self.last.serial.dram)
                        .max(0.0);
                let misses = (now.serial.pm_misses + now.serial.dram_misses)
                    .saturating_sub(self.last.serial.pm_misses + self.last.serial.dram_misses)
                    as f64;
                let own_ns = epoch_ns - batches;
                let hidden = stall_share(serial * dram, own_ns) / mlp(misses, serial);
                let hooked = hooked_with_compares(
                    (now.hooked_serial - self.last.hooked_serial).max(0.0),
                    serial,
                    misses,
                    window_units(&self.last, now),
                    now.compares.saturating_sub(self.last.compares) as f64,
                );
                // The calls and the window stalls overlap: while the core
                // waits on a miss that a native run would have overlapped,
                // it runs the hooks that filled its window.
                c.exposed_calls = calls * (1.0 - hidden);
                let loss =
                    self.window
                        .charge(own_ns, serial * dram, window_loss_ns(hooked, serial, dram));
                if loss > c.exposed_calls {
                    add_ns(&self.shared.window_loss_ns, loss);
                }
                c.loss = loss;
                let exposed = c.exposed_calls.max(loss);
                absorb(exposed + batches, self.carried_ns, delay)
            }
            _ => (calls + batches + self.carried_ns, 0.0),
        };
        (self.last_overhead_ns, self.carried_ns) = (c.overhead, c.carried);
        c
    }
}

/// The hooks' counts and charges of every thread's epochs, for the
/// statistics ([`hooks_json`]).
static HOOK_COUNTS: [AtomicU64; 13] = [const { AtomicU64::new(0) }; 13];
const HOOK_NAMES: [&str; 13] = [
    "accesses",
    "logged",
    "compares",
    "compares_logged",
    "misses",
    "serial_milli",
    "calls_ns",
    "exposed_calls_ns",
    "window_loss_ns",
    "timed_loads",
    "timed_real_misses",
    "timed_model_misses",
    "model_serial_milli",
];

/// The timed-miss members of [`hooks_json`] (`v`: its counts): 1 in how
/// many logged loads was timed (0: off), the primitive's cost and the
/// slow threshold (ns), the shares of the timed loads that the machine
/// and the model missed, and the correction applied (serial accesses
/// charged over those the model counted).
fn timed_json(v: &[u64]) -> String {
    let every = super::timed::every();
    let ghz = super::timed::ghz();
    let (base, slow) = super::timed::ticks();
    let ns = |t: u64| if ghz > 0.0 { t as f64 / ghz } else { 0.0 };
    let share = |k: u64| {
        if v[9] > 0 {
            k as f64 / v[9] as f64
        } else {
            0.0
        }
    };
    let correction = if v[12] > 0 {
        v[5] as f64 / v[12] as f64
    } else {
        1.0
    };
    format!(
        ",\"timed_every\":{every},\"timed_pace\":{:.4},\"timed_cost_ns\":{:.1},\"timed_slow_ns\":{:.1},\"timed_real_miss_share\":{:.4},\"timed_model_miss_share\":{:.4},\"timed_correction\":{correction:.4}",
        super::timed::pace(),
        ns(base),
        if every > 0 { ns(slow) } else { 0.0 },
        share(v[10]),
        share(v[11]),
    )
}

/// The timing primitive's cost of the timed loads between two totals
/// ([`super::timed`]; 0 when timing is off), ns.
fn timed_calls_ns(a: &ThreadTotals, b: &ThreadTotals) -> f64 {
    let n = b.timed_loads.saturating_sub(a.timed_loads);
    if n == 0 {
        return 0.0;
    }
    let ghz = super::timed::ghz();
    if ghz > 0.0 {
        n as f64 * super::timed::ticks().0 as f64 / ghz
    } else {
        0.0
    }
}

/// The costs the source calibrated, for [`hooks_json`] (f64 bits).
static HOOK_COSTS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

fn note_costs(c: &HookCosts) {
    for (slot, v) in HOOK_COSTS
        .iter()
        .zip([c.fast_ns, c.miss_ns, c.cmp_ns, c.cmp_logged_ns])
    {
        slot.store(v.to_bits(), Ordering::Relaxed);
    }
}

/// Add one epoch's counts (between two totals) and charge to the
/// process's.
fn note_hooks(a: &ThreadTotals, b: &ThreadTotals, c: &Charge) {
    let serial = b.serial.pm + b.serial.dram - a.serial.pm - a.serial.dram;
    let v = [
        b.accesses.saturating_sub(a.accesses),
        // The model's entries include the logged compares.
        b.slow_calls
            .saturating_sub(a.slow_calls)
            .saturating_sub(b.compares_logged.saturating_sub(a.compares_logged)),
        b.compares.saturating_sub(a.compares),
        b.compares_logged.saturating_sub(a.compares_logged),
        (b.serial.pm_misses + b.serial.dram_misses)
            .saturating_sub(a.serial.pm_misses + a.serial.dram_misses),
        (serial.max(0.0) * 1000.0) as u64,
        c.calls.max(0.0) as u64,
        c.exposed_calls.max(0.0) as u64,
        c.loss.max(0.0) as u64,
        b.timed_loads.saturating_sub(a.timed_loads),
        b.timed_real_misses.saturating_sub(a.timed_real_misses),
        b.timed_model_misses.saturating_sub(a.timed_model_misses),
        ((b.model_serial - a.model_serial).max(0.0) * 1000.0) as u64,
    ];
    for (total, x) in HOOK_COUNTS.iter().zip(v) {
        total.fetch_add(x, Ordering::Relaxed);
    }
}

/// The hooks' statistics as a JSON member (`"hooks":{...},`), empty
/// outside the instrumented source: the calibrated costs per call (ns:
/// `hit_ns`, `logged_miss_ns`, `cmp_ns`, `cmp_logged_ns`) and, over every
/// thread's epochs so far, the calls of each kind, the model's misses and
/// serial accesses (`serial`), and what the epochs were charged for the
/// calls (`calls_ns` at their calibrated costs, `exposed_calls_ns` after
/// the share hidden in stalls) and for the window loss. Dividing by the
/// program's own count of accesses gives, e.g., the serial accesses and
/// the hook time charged per access.
pub fn hooks_json() -> String {
    if HOOK_COSTS[0].load(Ordering::Relaxed) == 0 {
        return String::new();
    }
    let v: Vec<u64> = HOOK_COUNTS
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let costs: Vec<f64> = HOOK_COSTS
        .iter()
        .map(|c| f64::from_bits(c.load(Ordering::Relaxed)))
        .collect();
    let mut o = format!(
        "\"hooks\":{{\"hit_ns\":{:.3},\"logged_miss_ns\":{:.3},\"cmp_ns\":{:.3},\"cmp_logged_ns\":{:.3}",
        costs[0], costs[1], costs[2], costs[3]
    );
    for (n, x) in HOOK_NAMES.iter().zip(&v) {
        match *n {
            "serial_milli" => o.push_str(&format!(",\"serial\":{:.3}", *x as f64 / 1000.0)),
            "model_serial_milli" => {
                o.push_str(&format!(",\"model_serial\":{:.3}", *x as f64 / 1000.0))
            }
            _ => o.push_str(&format!(",\"{n}\":{x}")),
        }
    }
    o.push_str(&timed_json(&v));
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
        self.waited_ns = busy::thread_sched().map_or(0, |s| s.wait_ns);
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
        let delay = match (self.lat, raw.reading) {
            (Some((dram, pm)), Reading::Accesses { pm_serial, .. }) => Some(
                device
                    .unwrap_or_else(|| quartz::delay_from_serial_accesses(pm_serial * f, dram, pm)),
            ),
            _ => None,
        };
        let c = self.charge(&now, epoch_ns, batches, delay);
        if super::timed::every() > 0 {
            // The run's pace, for the timed misses: the program's own time
            // in the epoch over the epoch and the delay injected after it,
            // on the CPU (time waiting for one passes alike natively).
            let waited = busy::thread_sched().map_or(self.waited_ns, |s| s.wait_ns);
            let on_cpu = (epoch_ns - waited.saturating_sub(self.waited_ns) as f64).max(0.0);
            self.waited_ns = waited;
            let own = (on_cpu - c.overhead).max(0.0);
            let injected = delay.map_or(0.0, |d| (d - c.overhead).max(0.0));
            super::timed::note_epoch(own, on_cpu + injected);
        }
        super::sample::hooks_cost(c.calls);
        note_hooks(&self.last, &now, &c);
        if let (Some(d), Some((dram, pm))) = (device, self.lat) {
            // The runtime charges (pm - dram) per serial PM access: the
            // device's delay in those units (pm is the device's slowest
            // level, which `pmlab run` keeps above the DRAM latency).
            if let Reading::Accesses { pm_serial, .. } = &mut r.reading {
                *pm_serial = if pm > dram { d / (pm - dram) } else { 0.0 };
            }
            note_device(&self.last.device, &now.device);
            DEVICE_LEARNED.fetch_add(
                now.device_learned.saturating_sub(self.last.device_learned),
                Ordering::Relaxed,
            );
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
            pm_lines_read: 1_500,
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
            pm_lines_read: 10,
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
            pm_lines_read: 40,
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
        // A sampled run's first-sight rule discounts the latency counts
        // (pm_misses), not the lines the model missed: a stream's lines
        // are first sights, and every one of them crosses the bus.
        let c = ThreadTotals {
            serial: SerialCounts {
                pm_misses: 15,
                ..b.serial
            },
            pm_lines_read: 70,
            ..b
        };
        let r = reading_between(&b, &c);
        assert_eq!(r.pm_read_bytes(), 30 * 64);
    }

    #[test]
    fn the_hooked_window_is_counted_in_the_units_of_each_hook_kind() {
        // A chase of 8 chains with one logged call per miss and `extra`
        // filter hits between misses, as bench/hooked-window.sh runs it.
        // With a logged call at 2.6 units and a window of 12.2 (values
        // of the kind that script fits), the window holds 12.2 / (2.6 +
        // extra) misses: 4.69, 3.39 and 2.65 for 0, 1 and 2 hits.
        let (window, weight) = (12_200, 2_600);
        for (extra, want) in [(0u64, 4.692), (1, 3.389), (2, 2.652)] {
            let a = ThreadTotals::default();
            let b = ThreadTotals {
                accesses: 8_000 * (1 + extra),
                slow_calls: 8_000,
                ..Default::default()
            };
            let units = window_units_at(&a, &b, weight);
            assert!(
                (units - 8_000.0 * (2.6 + extra as f64)).abs() < 1e-6,
                "{units}"
            );
            let gap = (units / 8_000.0 * UNIT as f64).round() as u64;
            let share = pmlab_model::mlp::window_share(gap, window);
            assert!((1.0 / share - want).abs() < 0.001, "{extra}: {share}");
            // What the window loses against 7.4 misses at a time natively,
            // at 155 ns a miss: the charge the epoch is made.
            let hooked = 8_000.0 * share;
            let loss = window_loss_ns(hooked, 8_000.0 / 7.4, 155.0) / 8_000.0;
            let expect = 155.0 * (share - 1.0 / 7.4);
            assert!((loss - expect).abs() < 1e-9, "{extra}: {loss} ns");
        }
        // At the old weight (2) and window (13) the extra-free chase held
        // 6.5 misses: 2.4 ns lost per access where 4.69 would lose 12.1.
        let share = pmlab_model::mlp::window_share(2 * UNIT, settings::DEFAULT_HOOKED_WINDOW);
        assert!((1.0 / share - 6.5).abs() < 1e-9);
    }

    #[test]
    fn compares_take_window_room_as_filter_hits_do() {
        // memlat's 8 chains, per 8,000 accesses: 8,000 misses, 1,000
        // serial natively, 8,000 / 3.25 in the hooked window; 24,000
        // access callbacks of which 8,000 logged (32,000 units) and 3,000
        // compares: 8,000 / 2.97 serial.
        let a = ThreadTotals::default();
        let b = ThreadTotals {
            accesses: 24_000,
            slow_calls: 8_000,
            compares: 3_000,
            ..Default::default()
        };
        let units = window_units_at(&a, &b, settings::DEFAULT_LOGGED_WEIGHT);
        assert_eq!(units, 32_000.0);
        let h = hooked_with_compares(8_000.0 / 3.25, 1_000.0, 8_000.0, units, 3_000.0);
        assert!((h - 8_000.0 / 3.25 * 35.0 / 32.0).abs() < 1e-9, "{h}");
        assert!((8_000.0 / h - 2.971).abs() < 0.001, "{h}");
        // Logged compares are entries of the model, not access units.
        let c = ThreadTotals {
            slow_calls: 8_500,
            compares_logged: 500,
            ..b
        };
        assert_eq!(
            window_units_at(&a, &c, settings::DEFAULT_LOGGED_WEIGHT),
            32_000.0
        );
        // A chase (hooked = native serial) loses nothing to compares.
        assert_eq!(
            hooked_with_compares(1_000.0, 1_000.0, 1_000.0, 4_000.0, 2_000.0),
            1_000.0
        );
        // At most one serial access per miss.
        assert_eq!(
            hooked_with_compares(900.0, 500.0, 1_000.0, 1_000.0, 5_000.0),
            1_000.0
        );
        // No compares: the model's count as it is.
        assert_eq!(
            hooked_with_compares(800.0, 100.0, 1_000.0, 4_000.0, 0.0),
            800.0
        );
    }

    #[test]
    fn a_chase_hooked_only_at_its_misses_loses_what_its_logged_calls_fill() {
        // memlat's 8 chains as the plugin builds them now: one access
        // callback per access, logged (the chain pointers' stack slots
        // are not hooked), no compare callbacks. Per 8,000 accesses:
        // 16,000 window units, 2 a miss, so the default hooked window
        // holds 6.5 misses where 8 overlap natively.
        let a = ThreadTotals::default();
        let b = ThreadTotals {
            accesses: 8_000,
            slow_calls: 8_000,
            ..Default::default()
        };
        let units = window_units_at(&a, &b, settings::DEFAULT_LOGGED_WEIGHT);
        assert_eq!(units, 16_000.0);
        let gap = (units / 8_000.0 * UNIT as f64) as u64;
        let share = pmlab_model::mlp::window_share(gap, settings::DEFAULT_HOOKED_WINDOW);
        let hooked = 8_000.0 * share;
        assert!((8_000.0 / hooked - 6.5).abs() < 1e-9, "{hooked}");
        // No compares: the count stands.
        assert_eq!(
            hooked_with_compares(hooked, 1_000.0, 8_000.0, units, 0.0),
            hooked
        );
        // At 153 ns DRAM: 4.4 ns lost per access, well below the 30.9 ns
        // delay of 400 ns at MLP 8 (with 3 calls and 0.375 compares per
        // access the same window lost 32.5 ns).
        let loss = window_loss_ns(hooked, 1_000.0, 153.0) / 8_000.0;
        assert!((loss - (2.0 / 13.0 - 0.125) * 153.0).abs() < 1e-9, "{loss}");
        assert!(loss < 0.25 * (400.0 - 153.0) / 8.0, "{loss}");
    }

    fn counters_with(costs: HookCosts, lat: Option<(f64, f64)>) -> InstrumentedCounters {
        InstrumentedCounters::new(costs, lat, Arc::default())
    }

    #[test]
    fn each_kind_of_hook_call_is_charged_and_hidden_in_the_stalls() {
        let costs = HookCosts {
            fast_ns: 1.5,
            miss_ns: 20.0,
            cmp_ns: 1.0,
            cmp_logged_ns: 5.0,
            ..HookCosts::default()
        };
        // 3,000 access callbacks (1,000 logged), 2,000 compares (100
        // logged; the model ran 1,100 entries): 2,000 x 1.5 + 1,000 x 20
        // + 1,900 x 1 + 100 x 5.
        let calls = 25_400.0;
        let step = ThreadTotals {
            accesses: 3_000,
            slow_calls: 1_100,
            compares: 2_000,
            compares_logged: 100,
            ..Default::default()
        };
        // Compute only (no miss): every call is paid, and what the delay
        // cannot absorb is carried.
        let mut c = counters_with(costs, Some((150.0, 400.0)));
        let ch = c.charge(&step, 1e6, 0.0, Some(10_000.0));
        assert_eq!(ch.calls, calls);
        assert_eq!(ch.exposed_calls, calls);
        assert_eq!((ch.overhead, ch.carried), (10_000.0, calls - 10_000.0));
        assert_eq!(c.overhead_ns(), 10_000.0);
        // The same calls in a chase that waited on its 1,000 serial misses
        // for the whole epoch: hidden, nothing charged; the carry is paid.
        let mut now = step;
        now.serial.pm = 1_000.0;
        now.serial.pm_misses = 1_000;
        now.hooked_serial = 1_000.0;
        let mut c = counters_with(costs, Some((150.0, 400.0)));
        let ch = c.charge(&now, 150_000.0, 0.0, Some(250_000.0));
        assert_eq!((ch.exposed_calls, ch.loss, ch.overhead), (0.0, 0.0, 0.0));
        // Waiting half the epoch: half the calls are exposed; 2,000 ns of
        // batches are charged on top.
        let mut c = counters_with(costs, Some((150.0, 400.0)));
        let ch = c.charge(&now, 302_000.0, 2_000.0, Some(250_000.0));
        assert!((ch.exposed_calls - calls / 2.0).abs() < 1e-6, "{ch:?}");
        assert!((ch.overhead - (calls / 2.0 + 2_000.0)).abs() < 1e-6);
        // No latencies (or no counts): the calls and batches as they are.
        let mut c = counters_with(costs, None);
        let ch = c.charge(&step, 1e6, 300.0, None);
        assert_eq!((ch.overhead, ch.carried), (calls + 300.0, 0.0));
        // The charge is counted against the epoch's start: a second
        // epoch with nothing new costs nothing.
        let mut c = counters_with(costs, None);
        c.last = step;
        assert_eq!(c.charge(&step, 1e6, 0.0, None).calls, 0.0);
    }

    #[test]
    fn the_threads_unabsorbed_overhead_reaches_the_statistics() {
        let src = InstrumentedSource {
            cfg: HookConfig {
                llc: pmlab_model::cache::CacheConfig::new(1 << 20, 16),
                overlap: pmlab_model::mlp::OverlapConfig::default(),
                hooked_window: settings::DEFAULT_HOOKED_WINDOW,
                logged_weight: settings::DEFAULT_LOGGED_WEIGHT,
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
            carried_ns,
            ..InstrumentedCounters::new(src.costs, src.lat, Arc::clone(&src.shared))
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
        let mut c = InstrumentedCounters::new(costs, None, Arc::clone(&shared));
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

    #[test]
    fn inline_modelling_is_seen_only_without_a_free_cpu() {
        use super::super::hooks::{activate, deactivate, on_access};
        use super::super::log::{tls, LOG_ENTRIES};
        use super::super::offload::TEST_PAUSE;
        use super::super::settings::PmMode;
        use super::super::tests::{cfg, LOCK};
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        activate(cfg(PmMode::All));
        // 20 logs of misses, a periodic epoch's end after each; with the
        // modeller paused (no CPU for it) or with a program slower than it
        // (each log waits until the modeller has run the one before).
        let run = |paused: bool| {
            let shared = Arc::new(Shared::default());
            let sh = Arc::clone(&shared);
            std::thread::spawn(move || {
                // TSC cycles as ns: the shares are ratios.
                let costs = HookCosts {
                    tsc_ghz: 1.0,
                    ..HookCosts::default()
                };
                let mut c = InstrumentedCounters::new(costs, None, sh);
                c.start().unwrap();
                TEST_PAUSE.store(paused, Ordering::Release);
                let v = vec![0u64; 20 * LOG_ENTRIES * 8];
                let mut t0 = thread::tsc();
                for k in 0..20 {
                    for i in 0..LOG_ENTRIES {
                        let p = &v[(k * LOG_ENTRIES + i) * 8] as *const u64;
                        on_access(p as usize, 8, false, Some(p));
                    }
                    let since = std::time::Instant::now();
                    // SAFETY: this thread's own model.
                    while !paused
                        && unsafe { (*(*tls()).slow).queued() } != 0
                        && since.elapsed().as_secs() < 5
                    {
                        std::thread::yield_now();
                    }
                    thread::periodic_next_reading();
                    let t1 = thread::tsc();
                    c.epoch_end(t1.wrapping_sub(t0) as f64);
                    t0 = t1;
                }
                TEST_PAUSE.store(false, Ordering::Release);
                thread::thread_exit();
            })
            .join()
            .unwrap();
            let (batches, ns, share, _) = shared.busy(Sched::default(), Sched::default());
            (batches, ns, share)
        };
        let paused = run(true);
        let free = run(false);
        TEST_PAUSE.store(false, Ordering::Release);
        deactivate();
        if !offload::enabled() {
            return;
        }
        // No CPU for the modeller: the queue fills (LOGS - 1 logs) and the
        // program runs the oldest log for each further one, timed, and
        // the run's summary warns.
        // The share is of the epochs' whole time, which a loaded machine
        // (CI) stretches below the warning's threshold (3.9% there); the
        // inline batches and their time are counted whatever the load, and
        // the warning past its threshold is tested above.
        let (b, ns, share) = paused;
        assert!(b >= 12 && ns > 0 && share > 0.0, "{paused:?}");
        // A free CPU: the epoch ends leave the model's work to the
        // modeller, and nothing is run inline.
        assert_eq!(free.0, 0, "{free:?}");
        assert!(busy::warning(free.2, free.1, 0.0, 0).is_none(), "{free:?}");
    }
}
