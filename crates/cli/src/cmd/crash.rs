//! `pmlab crash --check CMD -- PROGRAM ARGS`: trace the program with its
//! stored data (`pmlab trace --sites --data`, run as a child `pmlab`),
//! then test the program's consistency check on the crash images the
//! trace allows (the work is in `pmlab_check::crash`). Exit 0 when every
//! image passes, 1 at the first failing image, 2 on errors.

use anyhow::{bail, Context};
use pmlab_check::crash::{self, Points};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Arguments of `pmlab crash`.
#[derive(clap::Args)]
pub struct Args {
    /// The program's recovery/consistency check, a shell command: `{}` is
    /// replaced by the image's path (else the path is appended); exit 0
    /// means consistent.
    #[arg(long, value_name = "CMD")]
    pub check: String,
    /// Images to test at most, over all crash points.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub budget: u64,
    /// Seed of the random draws (points and images); printed with a
    /// failure to reproduce it.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// Crash points: `fences` (before every fence), a count of fences
    /// drawn from the seed, or `end` (the end only); the end of the program
    /// is always one.
    #[arg(long, default_value = "fences", value_name = "fences|end|N")]
    pub points: String,
    /// Seconds one check may take.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Directory for the trace and the images (kept; default: a new
    /// temporary directory, removed when every image passes).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Use this trace (recorded with `pmlab trace --data`) instead of
    /// running the program.
    #[arg(long, value_name = "TRACE")]
    pub trace: Option<PathBuf>,
    /// Print the outcome as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let points = Points::parse(&args.points)?;
    if args.budget == 0 {
        bail!("--budget must be at least 1");
    }
    if args.trace.is_none() && args.command.is_empty() {
        bail!("give the program to trace after '--' (or --trace TRACE)");
    }
    let temp = args.dir.is_none();
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("pmlab-crash-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let trace = match &args.trace {
        Some(t) => t.clone(),
        None => {
            let t = dir.join("trace.pmt");
            let me = std::env::current_exe().context("cannot find the pmlab executable")?;
            let status = Command::new(me)
                .args(["trace", "--sites", "--data", "-o"])
                .arg(&t)
                .arg("--")
                .args(&args.command)
                .status()
                .context("cannot run pmlab trace")?;
            if !status.success() {
                bail!(
                    "the traced run of {} failed ({status}); pmlab crash needs a run that succeeds",
                    args.command[0]
                );
            }
            t
        }
    };
    let opts = crash::Options {
        budget: args.budget,
        seed: args.seed,
        points,
        check: args.check.clone(),
        timeout: Duration::from_secs(args.timeout.max(1)),
        dir: dir.clone(),
    };
    let out = crash::run(&trace, &opts)?;
    let reproduce = format!(
        "pmlab crash --seed {} --budget {} --points {} --check '{}' --trace {}",
        args.seed,
        args.budget,
        args.points,
        args.check,
        trace.display()
    );
    if args.json {
        let mut v = out.to_json();
        v["seed"] = args.seed.into();
        v["trace"] = trace.display().to_string().into();
        v["reproduce"] = reproduce.clone().into();
        println!("{v}");
    } else {
        match &out.failure {
            None => eprintln!(
                "pmlab: crash: {} images at {} crash points of {} passed the check{}{}",
                out.images,
                out.points,
                out.pool,
                if out.sampled_points > 0 {
                    format!(
                        " ({} points sampled, seed {})",
                        out.sampled_points, args.seed
                    )
                } else {
                    String::new()
                },
                if out.budget_exhausted {
                    " (the budget ran out before the last point: raise --budget or use --points N)"
                } else {
                    ""
                }
            ),
            Some(f) => {
                let when = if f.time_ns == u64::MAX {
                    "at the end of the program".to_string()
                } else {
                    format!("before the fence at {} ns", f.time_ns)
                };
                eprintln!(
                    "pmlab: crash: image {} fails the check ({}): crash point {} ({when}, after {} records)",
                    out.images, f.status, f.point, f.record
                );
                let fmt = |v: &[(u64, u64)]| {
                    v.iter()
                        .map(|(o, a)| format!("{o:#x} ({a:#x})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let none = |s: String| if s.is_empty() { "none".to_string() } else { s };
                eprintln!(
                    "  lines lost (pool offset (address)): {}",
                    none(fmt(&f.lost))
                );
                eprintln!("  lines that reached PM: {}", none(fmt(&f.kept)));
                eprintln!("  image kept: {}", f.image.display());
                if !f.output.is_empty() {
                    eprintln!("  check output:\n    {}", f.output.replace('\n', "\n    "));
                }
                eprintln!("  reproduce: {reproduce}");
            }
        }
    }
    if out.misordered > 0 && !args.json {
        eprintln!(
            "pmlab: crash: note: {} pool stores appear in the trace after another thread's flush of their line but were made before it: the trace orders threads only approximately, so images from there on may be ones no crash leaves (keep the PM writes and the flush and fence that persist them on one thread, e.g. one async worker)",
            out.misordered
        );
    }
    if out.failure.is_none() && temp {
        std::fs::remove_dir_all(&dir).ok();
    }
    Ok(if out.failure.is_some() { 1 } else { 0 })
}
