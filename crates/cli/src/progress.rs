//! Progress on stderr for long commands: a small facade over `indicatif`.
//!
//! One [`Progress`] per command run, made with [`Progress::new`] from the
//! command's `--json` and `--progress` flags:
//!
//! * stderr is a terminal: a bar per stage ([`Progress::step`]) or a spinner
//!   with a running count ([`Progress::count`]), redrawn in place;
//! * stderr is not a terminal: nothing, unless `--progress` was given, then
//!   plain lines now and then (at most one every few seconds per stage, and
//!   one when a stage completes) so logs stay short;
//! * `--json` without `--progress`: nothing, so a script reading the output
//!   never sees progress text.
//!
//! Library crates report progress through plain callbacks; the command
//! passes one that forwards here. The patterns in use:
//!
//! ```ignore
//! let mut p = Progress::new(args.json, args.progress);
//! // Stages with a known number of steps (the probe suite's curves):
//! probes::run(..., &mut p.callback())?;          // FnMut(&str, usize, usize)
//! // A count with no total (the simulator's records, every 2^20):
//! driver.run(&mut sys, records, |n| p.count("simulating", n, "records"))?;
//! // Named steps of a study (sim validate, the emulator's validate):
//! pmlab_sim::validate::run(quick, |step| p.message(step))?;
//! p.finish();                                    // or let it drop
//! ```
//!
//! Messages go above a running bar, so they are not overwritten. Dropping a
//! `Progress` clears an unfinished bar, so an error line that follows starts
//! on a clean line.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often plain-line mode prints a stage that is still running.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// Progress reporting for one command (see the module docs).
pub struct Progress {
    mode: Mode,
    started: Instant,
}

enum Mode {
    Off,
    Bar {
        bar: Option<ProgressBar>,
        stage: String,
    },
    Lines {
        out: Box<dyn Write + Send>,
        stage: String,
        last: Option<Instant>,
        every: Duration,
    },
}

impl Progress {
    /// The reporter for a command with `--json` = `json` and `--progress` =
    /// `forced`, drawing on stderr as the module docs describe.
    pub fn new(json: bool, forced: bool) -> Progress {
        let mode = if std::io::stderr().is_terminal() && !json {
            Mode::Bar {
                bar: None,
                stage: String::new(),
            }
        } else if forced {
            Mode::Lines {
                out: Box::new(std::io::stderr()),
                stage: String::new(),
                last: None,
                every: LINE_EVERY,
            }
        } else {
            Mode::Off
        };
        Progress {
            mode,
            started: Instant::now(),
        }
    }

    /// A reporter that shows nothing.
    #[allow(dead_code)] // for commands that adopt the facade
    pub fn off() -> Progress {
        Progress {
            mode: Mode::Off,
            started: Instant::now(),
        }
    }

    /// Whether anything will be shown.
    #[allow(dead_code)]
    pub fn is_on(&self) -> bool {
        !matches!(self.mode, Mode::Off)
    }

    /// `done` of `total` steps of `stage` are complete. A new `stage` name
    /// ends the previous stage's bar and starts a new one.
    pub fn step(&mut self, stage: &str, done: u64, total: u64) {
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar { bar, stage: cur } => {
                let b = switch(bar, cur, stage, || {
                    let b =
                        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
                    b.set_style(
                        ProgressStyle::with_template(
                            "{prefix:<30} [{bar:30}] {pos}/{len} {elapsed:>4}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("#>."),
                    );
                    b
                });
                b.set_length(total);
                b.set_position(done);
                if done >= total {
                    b.finish();
                    *bar = None;
                    cur.clear();
                }
            }
            Mode::Lines {
                out,
                stage: cur,
                last,
                every,
            } => {
                if cur != stage {
                    *cur = stage.to_string();
                    *last = Some(Instant::now());
                }
                let due = last.is_none_or(|t| t.elapsed() >= *every);
                if done >= total || due {
                    let _ = writeln!(out, "{stage}: {done}/{total}");
                    *last = Some(Instant::now());
                }
            }
        }
    }

    /// `n` `unit`s of `stage` are done, with no known total (a spinner).
    pub fn count(&mut self, stage: &str, n: u64, unit: &str) {
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar { bar, stage: cur } => {
                let b = switch(bar, cur, stage, || {
                    let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                    b.set_style(
                        ProgressStyle::with_template("{spinner} {prefix} {msg} {elapsed:>4}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    b.enable_steady_tick(Duration::from_millis(200));
                    b
                });
                b.set_message(format!("{} {unit}", human_count(n)));
            }
            Mode::Lines {
                out,
                stage: cur,
                last,
                every,
            } => {
                if cur != stage {
                    *cur = stage.to_string();
                    *last = Some(Instant::now());
                    return;
                }
                if last.is_none_or(|t| t.elapsed() >= *every) {
                    let _ = writeln!(out, "{stage}: {} {unit}", human_count(n));
                    *last = Some(Instant::now());
                }
            }
        }
    }

    /// A one-line message, such as the name of the step just finished; it
    /// carries the seconds since the command started.
    pub fn message(&mut self, msg: &str) {
        let line = format!("[{:>4.0}s] {msg}", self.started.elapsed().as_secs_f64());
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar { bar: Some(b), .. } => b.println(line),
            Mode::Bar { bar: None, .. } => eprintln!("{line}"),
            Mode::Lines { out, .. } => {
                let _ = writeln!(out, "{line}");
            }
        }
    }

    /// A callback for library functions taking `FnMut(stage, done, total)`
    /// (the probe suite's `Progress`).
    pub fn callback(&mut self) -> impl FnMut(&str, usize, usize) + '_ {
        move |stage, done, total| self.step(stage, done as u64, total as u64)
    }

    /// End the current bar or spinner, leaving a finished bar visible.
    pub fn finish(&mut self) {
        if let Mode::Bar { bar, stage } = &mut self.mode {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
            stage.clear();
        }
    }

    #[cfg(test)]
    fn lines(out: Box<dyn Write + Send>, every: Duration) -> Progress {
        Progress {
            mode: Mode::Lines {
                out,
                stage: String::new(),
                last: None,
                every,
            },
            started: Instant::now(),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The bar for `stage`: the current one, or a new one from `make` (ending
/// the previous stage's, which stays visible).
fn switch<'a>(
    bar: &'a mut Option<ProgressBar>,
    cur: &mut String,
    stage: &str,
    make: impl FnOnce() -> ProgressBar,
) -> &'a ProgressBar {
    if cur != stage {
        if let Some(old) = bar.take() {
            old.finish();
        }
        *cur = stage.to_string();
    }
    bar.get_or_insert_with(|| {
        let b = make();
        b.set_prefix(stage.to_string());
        b
    })
}

/// `1048576` as `1.05 M`, `950` as `950`.
fn human_count(n: u64) -> String {
    let v = n as f64;
    if v >= 1e9 {
        format!("{:.2} G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1} k", v / 1e3)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer whose text the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn plain_lines_print_completed_stages_and_skip_the_rest() {
        let out = Shared::default();
        let mut p = Progress::lines(Box::new(out.clone()), Duration::from_secs(3600));
        for d in 1..=4 {
            p.step("ptrchase-region-load", d, 4);
        }
        let mut cb = p.callback();
        cb("stride-size-store", 1, 2);
        cb("stride-size-store", 2, 2);
        assert_eq!(
            out.text(),
            "ptrchase-region-load: 4/4\nstride-size-store: 2/2\n"
        );
    }

    #[test]
    fn plain_lines_with_no_interval_print_every_step_and_count() {
        let out = Shared::default();
        let mut p = Progress::lines(Box::new(out.clone()), Duration::ZERO);
        p.step("a", 1, 2);
        p.count("simulating", 1 << 20, "records");
        p.count("simulating", 2 << 20, "records");
        p.message("memlat done");
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "a: 1/2");
        // The first count of a stage only starts it; the next one prints.
        assert_eq!(lines[1], "simulating: 2.10 M records");
        assert!(lines[2].ends_with("s] memlat done"), "{text}");
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn off_prints_nothing_and_counts_are_readable() {
        let mut p = Progress::off();
        assert!(!p.is_on());
        p.step("x", 1, 1);
        p.count("x", 5, "records");
        p.message("m");
        assert_eq!(human_count(950), "950");
        assert_eq!(human_count(25_000), "25.0 k");
        assert_eq!(human_count(3_000_000_000), "3.00 G");
    }
}
