//! The exit report: per-thread and total epochs by cause, delays, overhead,
//! amortisation and advice on the epoch length (as Quartz reports them).
//! JSON is written by hand (the runtime carries no serialisation crate).
//! The counter source's own numbers come in through the source interface
//! ([`SourceStats`]).

use crate::source::SourceStats;

/// One thread's numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    /// Kernel thread id.
    pub tid: i32,
    /// Epochs ended by the timer, at sync points, at exit.
    pub epochs: [u64; 3],
    /// Delay asked for by the model (latency + bandwidth), ns.
    pub requested_ns: u64,
    /// Delay injected, ns.
    pub injected_ns: u64,
    /// Bandwidth stretch part of `requested_ns`.
    pub stretch_ns: u64,
    /// Emulator overhead, ns.
    pub overhead_ns: u64,
    /// Overhead never absorbed, ns.
    pub pending_overhead_ns: u64,
    /// Overhead in TSC ticks.
    pub overhead_ticks: u64,
    /// Program time covered by epochs, ns.
    pub epoch_time_ns: u64,
    /// Write-model stall at durability points, ns.
    pub write_delay_ns: u64,
    /// Lines flushed through the API.
    pub flushes: u64,
    /// Bytes moved to/from PM according to the source.
    pub pm_bytes: u64,
    /// Time the delay spins (epoch delays and write stalls) spent switched
    /// out, which lengthened them instead of counting as delay, ns.
    pub spin_off_cpu_ns: u64,
    /// Lock/thread sync points passed without ending the epoch (it was
    /// shorter than the minimum epoch length).
    pub sync_skipped: u64,
}

impl Summary {
    fn add(&mut self, o: &Summary) {
        for i in 0..3 {
            self.epochs[i] += o.epochs[i];
        }
        self.requested_ns += o.requested_ns;
        self.injected_ns += o.injected_ns;
        self.stretch_ns += o.stretch_ns;
        self.overhead_ns += o.overhead_ns;
        self.pending_overhead_ns += o.pending_overhead_ns;
        self.overhead_ticks += o.overhead_ticks;
        self.epoch_time_ns += o.epoch_time_ns;
        self.write_delay_ns += o.write_delay_ns;
        self.flushes += o.flushes;
        self.pm_bytes += o.pm_bytes;
        self.spin_off_cpu_ns += o.spin_off_cpu_ns;
        self.sync_skipped += o.sync_skipped;
    }

    fn total_epochs(&self) -> u64 {
        self.epochs.iter().sum()
    }

    fn json(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = write!(
            out,
            "{{\"tid\":{},\"epochs\":{},\"epochs_timer\":{},\"epochs_sync\":{},\"epochs_exit\":{},\
             \"requested_delay_ns\":{},\"injected_delay_ns\":{},\"bandwidth_stretch_ns\":{},\
             \"overhead_ns\":{},\"unabsorbed_overhead_ns\":{},\"amortised\":{},\
             \"overhead_cycles_per_epoch\":{:.0},\"epoch_time_ns\":{},\"write_delay_ns\":{},\
             \"flushed_lines\":{},\"pm_bytes\":{},\"spin_off_cpu_ns\":{},\"sync_points_skipped\":{}}}",
            self.tid,
            self.total_epochs(),
            self.epochs[0],
            self.epochs[1],
            self.epochs[2],
            self.requested_ns,
            self.injected_ns,
            self.stretch_ns,
            self.overhead_ns,
            self.pending_overhead_ns,
            self.pending_overhead_ns == 0,
            self.overhead_ticks as f64 / self.total_epochs().max(1) as f64,
            self.epoch_time_ns,
            self.write_delay_ns,
            self.flushes,
            self.pm_bytes,
            self.spin_off_cpu_ns,
            self.sync_skipped
        );
    }
}

/// The whole process's report.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Process id.
    pub pid: u32,
    /// Counter source name.
    pub source: String,
    /// Delays were injected (not `--no-inject`).
    pub inject: bool,
    /// Emulated PM latency, ns.
    pub pm_latency_ns: f64,
    /// DRAM latency used, ns.
    pub dram_latency_ns: f64,
    /// Remote latency in two-memory mode.
    pub remote_latency_ns: Option<f64>,
    /// Minimum epoch, ns.
    pub epoch_min_ns: f64,
    /// Maximum epoch, ns.
    pub epoch_max_ns: f64,
    /// TSC frequency used.
    pub tsc_ghz: f64,
    /// Bandwidth throttle used (`none`, `software`, `mba`).
    pub throttle: String,
    /// Note on the throttle.
    pub throttle_note: String,
    /// Runtime initialisation time, ns.
    pub init_ns: u64,
    /// Threads registered.
    pub threads_seen: u64,
    /// Threads not tracked (registry full).
    pub threads_untracked: u64,
    /// Signals sent by the monitor.
    pub signals_sent: u64,
    /// This process is a forked child.
    pub forked_child: bool,
    /// Time the main thread spent runnable but waiting for a CPU (from
    /// `/proc/self/schedstat`), ns; lets benchmarks and tests on a busy
    /// machine tell scheduling noise from injected delay.
    pub main_run_delay_ns: u64,
    /// The counter source's own numbers ([`crate::source::Source::stats`]).
    pub source_stats: SourceStats,
    /// Per thread.
    pub threads: Vec<Summary>,
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

impl Report {
    /// Sum of every thread.
    pub fn total(&self) -> Summary {
        let mut t = Summary::default();
        for s in &self.threads {
            t.add(s);
        }
        t
    }

    /// Advice on the epoch settings, as one sentence.
    pub fn advice(&self) -> String {
        let t = self.total();
        let n = t.total_epochs().max(1) as f64;
        let mean_epoch = t.epoch_time_ns as f64 / n;
        let mean_overhead = t.overhead_ns as f64 / n;
        if t.pending_overhead_ns > 0 && t.requested_ns < t.overhead_ns {
            return format!(
                "the emulator's overhead ({} ns) was not amortised by the delays: the program is not memory-bound at this latency, or epochs are too short; raise --epoch-min/--epoch-max or measure with --no-inject",
                t.pending_overhead_ns
            );
        }
        // Threads that passed most of their lock/thread sync points inside
        // an epoch (at least as many as ended one there): with two or more,
        // delays land in the wrong critical sections.
        let skipping = self
            .threads
            .iter()
            .filter(|s| s.sync_skipped >= 100 && s.sync_skipped >= s.epochs[1])
            .count();
        if skipping >= 2 {
            return format!(
                "{} lock/thread sync points came before --epoch-min and did not end their epoch ({} did): the delay of work done before a lock is then paid inside the next critical section (or a section's after it); lock points end epochs from --lock-epoch-min (a tenth of --epoch-min by default): lower it below the critical sections",
                t.sync_skipped, t.epochs[1]
            );
        }
        if mean_epoch > 0.0 && mean_overhead > 0.05 * mean_epoch {
            return format!(
                "epochs are short for their cost ({:.0} ns of overhead per {:.0} ns epoch): raise --epoch-min",
                mean_overhead, mean_epoch
            );
        }
        if t.epoch_time_ns > 0
            && t.requested_ns as f64 > 0.5 * t.epoch_time_ns as f64
            && self.epoch_max_ns > 1e6
        {
            return "memory-bound program: a shorter --epoch-max (e.g. 1ms) improves accuracy"
                .into();
        }
        "epoch settings look right for this program".into()
    }

    /// JSON (one object).
    pub fn to_json(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let t = self.total();
        let src = &self.source_stats;
        let _ = write!(
            o,
            "{{\"pmlab_stats\":1,\"pid\":{},\"source\":\"{}\",\"inject\":{},\"pm_latency_ns\":{},\
             \"dram_latency_ns\":{},\"remote_latency_ns\":{},\"epoch_min_ns\":{},\"epoch_max_ns\":{},\
             \"tsc_ghz\":{:.4},\"bandwidth_throttle\":\"{}\",\"throttle_note\":\"{}\",\"init_ns\":{},\
             \"hook_overhead_unabsorbed_ns\":{},\"hook_hit_ns\":{:.3},\"hook_logged_miss_ns\":{:.3},\
             \"hook_batches_offloaded\":{},\"hook_window_loss_ns\":{},\
             \"hook_inline_batches\":{},\"hook_inline_ns\":{},\"hook_inline_share\":{:.4},\
             \"run_delay_ns\":{},\"run_delay_share\":{:.4},\"busy_warning\":{},\
             \"threads_seen\":{},\"threads_untracked\":{},\"signals_sent\":{},\"forked_child\":{},\
             \"main_run_delay_ns\":{},\
             \"advice\":\"{}\",{}\"total\":",
            self.pid,
            esc(&self.source),
            self.inject,
            self.pm_latency_ns,
            self.dram_latency_ns,
            self.remote_latency_ns.map_or("null".to_string(), |v| v.to_string()),
            self.epoch_min_ns,
            self.epoch_max_ns,
            self.tsc_ghz,
            esc(&self.throttle),
            esc(&self.throttle_note),
            self.init_ns,
            src.hook_overhead_unabsorbed_ns,
            src.hook_hit_ns,
            src.hook_logged_miss_ns,
            src.hook_batches_offloaded,
            src.hook_window_loss_ns,
            src.hook_inline_batches,
            src.hook_inline_ns,
            src.hook_inline_share,
            src.run_delay_ns,
            src.run_delay_share,
            self.busy_warning()
                .map_or("null".to_string(), |w| format!("\"{}\"", esc(&w))),
            self.threads_seen,
            self.threads_untracked,
            self.signals_sent,
            self.forked_child,
            self.main_run_delay_ns,
            esc(&self.advice()),
            crate::source::instrumented::counters::device_json()
                + &crate::source::instrumented::counters::hooks_json()
                + &crate::source::instrumented::sample::json()
        );
        t.json(&mut o);
        o.push_str(",\"threads\":[");
        for (i, s) in self.threads.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            s.json(&mut o);
        }
        o.push_str("]}\n");
        o
    }

    /// The warning for a run whose overhead could not be hidden (a busy
    /// machine), one line, if past the thresholds of
    /// [`busy`](crate::source::instrumented::busy).
    pub fn busy_warning(&self) -> Option<String> {
        let s = &self.source_stats;
        crate::source::instrumented::busy::warning(
            s.hook_inline_share,
            s.hook_inline_ns,
            s.run_delay_share,
            s.run_delay_ns,
        )
    }

    /// Human-readable text (stderr).
    pub fn to_text(&self) -> String {
        let t = self.total();
        let warning = self
            .busy_warning()
            .map_or(String::new(), |w| format!("pmlab: warning: {w}\n"));
        warning
            + &format!(
            "pmlab: {} threads, {} epochs ({} timer, {} sync, {} exit), delay injected {:.3} ms of {:.3} ms requested{}, overhead {:.3} ms ({}){}, write stalls {:.3} ms, source {}, bandwidth throttle {}\npmlab: advice: {}\n",
            self.threads.len(),
            t.total_epochs(),
            t.epochs[0],
            t.epochs[1],
            t.epochs[2],
            t.injected_ns as f64 / 1e6,
            t.requested_ns as f64 / 1e6,
            if self.inject { "" } else { " (--no-inject: not injected)" },
            t.overhead_ns as f64 / 1e6,
            if t.pending_overhead_ns == 0 { "amortised".to_string() } else { format!("{} ns not amortised", t.pending_overhead_ns) },
            match self.source_stats.hook_overhead_unabsorbed_ns {
                0 => String::new(),
                n => format!(", instrumentation overhead not absorbed {:.3} ms", n as f64 / 1e6),
            },
            t.write_delay_ns as f64 / 1e6,
            self.source,
            self.throttle,
            self.advice()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_json_shape() {
        let a = Summary {
            tid: 1,
            epochs: [2, 3, 1],
            requested_ns: 1000,
            injected_ns: 900,
            overhead_ns: 100,
            epoch_time_ns: 10_000,
            ..Default::default()
        };
        let r = Report {
            source: "synthetic:\"x\"".into(),
            threads: vec![a, a],
            ..Default::default()
        };
        assert_eq!(r.total().epochs, [4, 6, 2]);
        let j = r.to_json();
        assert!(j.contains("\"epochs_sync\":6"));
        assert!(j.contains("synthetic:\\\"x\\\""));
        assert!(j.contains("\"amortised\":true"));
        assert!(r.to_text().contains("12 epochs"));
    }

    #[test]
    fn advice_names_sync_points_skipped_by_the_minimum_epoch() {
        let a = Summary {
            tid: 1,
            epochs: [1, 10, 1],
            requested_ns: 1_000_000,
            epoch_time_ns: 10_000_000,
            sync_skipped: 500,
            ..Default::default()
        };
        let one = Report {
            threads: vec![a],
            ..Default::default()
        };
        // One thread: its skipped sync points order nothing.
        assert!(
            !one.advice().contains("--epoch-min below"),
            "{}",
            one.advice()
        );
        let two = Report {
            threads: vec![a, a],
            ..Default::default()
        };
        let adv = two.advice();
        assert!(adv.starts_with("1000 lock/thread sync points"), "{adv}");
        assert!(two.to_json().contains("\"sync_points_skipped\":1000"));
    }

    #[test]
    fn the_sources_numbers_come_from_the_source() {
        let quiet = Report::default();
        assert!(quiet.to_json().contains("\"hook_batches_offloaded\":0,"));
        assert!(!quiet.to_text().contains("instrumentation overhead"));
        let r = Report {
            source_stats: SourceStats {
                hook_overhead_unabsorbed_ns: 2_500_000,
                hook_hit_ns: 1.25,
                hook_logged_miss_ns: 3.5,
                hook_batches_offloaded: 7,
                hook_window_loss_ns: 11,
                hook_inline_batches: 5,
                hook_inline_ns: 4_000_000,
                hook_inline_share: 0.25,
                run_delay_ns: 9,
                run_delay_share: 0.001,
            },
            ..Default::default()
        };
        let j = r.to_json();
        for want in [
            "\"hook_overhead_unabsorbed_ns\":2500000,",
            "\"hook_hit_ns\":1.250,",
            "\"hook_logged_miss_ns\":3.500,",
            "\"hook_batches_offloaded\":7,",
            "\"hook_window_loss_ns\":11,",
            "\"hook_inline_batches\":5,",
            "\"hook_inline_ns\":4000000,",
            "\"hook_inline_share\":0.2500,",
            "\"run_delay_ns\":9,",
            "\"run_delay_share\":0.0010,",
            "\"busy_warning\":\"busy machine: the program's threads ran the cache model themselves for 25.0%",
        ] {
            assert!(j.contains(want), "{want} not in {j}");
        }
        assert!(r
            .to_text()
            .contains("instrumentation overhead not absorbed 2.500 ms"));
        // The warning is the text's first line, and absent on a quiet run.
        assert!(r.to_text().starts_with("pmlab: warning: busy machine: "));
        assert!(quiet.to_json().contains("\"busy_warning\":null,"));
        assert!(!quiet.to_text().contains("warning"));
    }
}
