//! `pmlab probe`: LENS probes on the host or on the simulator, and the
//! inference of a device profile from their curves (issue 5).

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use pmlab_model::Bytes;
use pmlab_probe::host::{Host, Isa, MemKind, StoreKind};
use pmlab_probe::infer::{self, Thresholds};
use pmlab_probe::pattern::Fence;
use pmlab_probe::probes::{self, Curve, Settings};
use pmlab_probe::sim::Sim;
use pmlab_probe::suite::{self, Plan, Results};
use pmlab_probe::{profile, report, Op, Target};
use std::path::{Path, PathBuf};

use crate::progress::Progress;

/// Write a line to stdout, returning the I/O error (a closed pipe ends the
/// command quietly in `main`) instead of panicking like `println!`.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?;
    }};
}

/// `print!` that returns the I/O error, as [`outln!`].
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($t)*)?;
    }};
}

/// Arguments of `pmlab probe`.
#[derive(clap::Args)]
#[command(
    after_help = "Example: profile the simulated 1-DIMM Optane, keep the curves, plots \
and fitted profile, then replay a trace on that profile:
  pmlab probe all --target sim:optane-1dimm --out res --plot res/plots
  pmlab sim --config res/profile.toml TRACE.pmt"
)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every probe, infer the device's parameters, print the report.
    #[command(
        after_help = "Example: the whole suite on the simulator, with results and plots:
  pmlab probe all --target sim:optane-1dimm --out res --plot res/plots
(res/report.txt, res/results.json, one CSV per curve, res/profile.toml;
res/plots/<curve>.svg and .png)"
    )]
    All(AllArgs),
    /// Pointer chasing: latency per line across regions, or across blocks.
    #[command(
        after_help = "Example: load latency per line from 4 KiB to 64 MiB regions, plotted:
  pmlab probe ptrchase --target sim:optane-1dimm --region 4KiB..64MiB --plot plots
(plots/ptrchase-region-load.svg and .png, the buffers' capacities marked)"
    )]
    Ptrchase(PtrArgs),
    /// Overwrite: time of each iteration, or long-tail frequency per region.
    #[command(
        after_help = "Example: how often 50,000 overwrites of 256 B take a long tail:
  pmlab probe overwrite --target sim:optane-1dimm --region 256B --iterations 50000"
    )]
    Overwrite(OwArgs),
    /// Stride: bandwidth across access sizes, or across strides.
    #[command(
        after_help = "Example: store bandwidth across strides on six interleaved DIMMs, as JSON:
  pmlab probe stride --target sim:optane-6dimm --stride 256B..64KiB --size 256B --json"
    )]
    Stride(StrideArgs),
    /// Infer a profile from saved results; prints the simulator TOML.
    #[command(
        after_help = "Example: fit a profile to saved results and load it in the simulator:
  pmlab probe infer res > profile.toml
  pmlab sim show --config profile.toml"
    )]
    Infer(InferArgs),
}

#[derive(Parser)]
struct TargetArgs {
    /// `host`, or `sim:PRESET` / `sim:FILE.toml` (see `pmlab sim presets`).
    #[arg(long, default_value = "host")]
    target: String,
    /// Host memory: auto (huge pages if available), anon, hugepage,
    /// file:PATH, pm-pool or pm-pool:PATH.
    #[arg(long, default_value = "auto")]
    mem: String,
    /// Host vector width: avx512, avx2, scalar (default: the widest).
    #[arg(long)]
    isa: Option<String>,
    /// Host stores: nt (non-temporal) or clwb (store + write-back).
    #[arg(long, default_value = "nt")]
    store: String,
    /// Host CPU to pin to (default: the current one).
    #[arg(long)]
    cpu: Option<usize>,
    /// Runs per point on the host (median and min/max are reported).
    #[arg(long)]
    repeats: Option<u32>,
    /// Minimum timed lines per point.
    #[arg(long)]
    min_lines: Option<u64>,
    /// Requests in flight for bandwidth probes.
    #[arg(long, default_value_t = 16)]
    outstanding: usize,
    /// Fence stores after each block, each pass, or once per run (LENS's
    /// store chase: write queues absorb re-written lines) in latency probes.
    #[arg(long, value_enum, default_value_t = FenceArg::Block)]
    fence: FenceArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum FenceArg {
    Block,
    Pass,
    Run,
}

#[derive(Parser)]
struct OutArgs {
    /// Directory for raw results (results.json, one CSV per curve).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Draw every curve into DIR as CURVE.svg and CURVE.png, with the
    /// inferred points marked (DIR is created).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Print JSON instead of text (curves keyed by id: `.curves["ptrchase-region-load"].points`).
    #[arg(long)]
    json: bool,
    /// Show progress on stderr as plain lines even when it is not a
    /// terminal (or with --json); a terminal gets bars anyway.
    #[arg(long)]
    progress: bool,
}

#[derive(Parser)]
struct AllArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    out: OutArgs,
    /// Largest pointer-chasing region (default 64 MiB on the simulator,
    /// 128 MiB on the host); raise it to see buffers spread over many
    /// interleaved devices.
    #[arg(long)]
    max_region: Option<String>,
    /// Bytes written per region in the overwrite sweep.
    #[arg(long)]
    overwrite_total: Option<String>,
    /// Skip fitting a profile and checking it on the simulator.
    #[arg(long, conflicts_with = "profile")]
    no_profile: bool,
    /// Fit an NVRAM profile even on the host (by default only simulator
    /// targets get one: host DRAM and caches are not an NVRAM DIMM).
    #[arg(long)]
    profile: bool,
}

#[derive(Parser)]
struct PtrArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    out: OutArgs,
    /// PC-region size, or a sweep `LO..HI` (powers of two) or list `A,B,C`.
    #[arg(long, default_value = "4KiB..64MiB")]
    region: String,
    /// PC-block size, or a sweep/list (then --region must be one size).
    #[arg(long, default_value = "64B")]
    block: String,
    /// load, store or raw (read-after-write).
    #[arg(long, default_value = "load")]
    op: String,
}

#[derive(Parser)]
struct OwArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    out: OutArgs,
    /// Region overwritten, or a sweep/list for the long-tail frequency.
    #[arg(long, default_value = "256B")]
    region: String,
    /// Iterations (single region).
    #[arg(long, default_value_t = 50_000)]
    iterations: u32,
    /// Bytes written per region (sweep).
    #[arg(long, default_value = "64MiB")]
    total: String,
}

#[derive(Parser)]
struct StrideArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    out: OutArgs,
    /// Stride, or a sweep/list (interleaving; then --size is one size).
    #[arg(long, default_value = "4KiB")]
    stride: String,
    /// Access size, or a sweep/list.
    #[arg(long, default_value = "64B..4KiB")]
    size: String,
    /// Bytes accessed per point.
    #[arg(long, default_value = "4MiB")]
    total: String,
    /// load or store.
    #[arg(long, default_value = "store")]
    op: String,
}

#[derive(Parser)]
struct InferArgs {
    /// A directory written by `probe ... --out` (or its results.json).
    dir: PathBuf,
    /// Print the inference as JSON instead of the profile TOML.
    #[arg(long)]
    json: bool,
    /// Also print the readable report on stderr.
    #[arg(long)]
    report: bool,
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.cmd {
        Cmd::All(a) => all(a),
        Cmd::Ptrchase(a) => ptrchase(a),
        Cmd::Overwrite(a) => overwrite(a),
        Cmd::Stride(a) => stride(a),
        Cmd::Infer(a) => infer_cmd(a),
    }
}

fn size(s: &str, flag: &str) -> anyhow::Result<u64> {
    let b = Bytes::parse(s).with_context(|| format!("--{flag}"))?;
    Ok(b.get())
}

/// `64B..1GiB` (powers of two), `A,B,C`, or one size.
fn sizes(s: &str, flag: &str) -> anyhow::Result<Vec<u64>> {
    if let Some((lo, hi)) = s.split_once("..") {
        let (lo, hi) = (size(lo, flag)?, size(hi, flag)?);
        if lo == 0 || lo > hi {
            bail!("--{flag} {s}: the range must go from a positive size up to a larger one");
        }
        return Ok(probes::pow2_sweep(lo, hi));
    }
    s.split(',').map(|p| size(p.trim(), flag)).collect()
}

fn op(s: &str, allowed: &[Op]) -> anyhow::Result<Op> {
    let o = match s {
        "load" => Op::Load,
        "store" => Op::Store,
        "raw" => Op::Raw,
        _ => bail!("unknown --op '{s}': use load, store or raw"),
    };
    if !allowed.contains(&o) {
        let names: Vec<&str> = allowed.iter().map(|o| o.name()).collect();
        bail!("--op {s} is not available here: use {}", names.join(" or "));
    }
    Ok(o)
}

fn make_target(t: &TargetArgs) -> anyhow::Result<Box<dyn Target>> {
    if t.target == "host" {
        let isa = match t.isa.as_deref() {
            None => None,
            Some("avx512") => Some(Isa::Avx512),
            Some("avx2") => Some(Isa::Avx2),
            Some("scalar") => Some(Isa::Scalar),
            Some(x) => bail!("unknown --isa '{x}': use avx512, avx2 or scalar"),
        };
        let store = match t.store.as_str() {
            "nt" => StoreKind::Nt,
            "clwb" => StoreKind::Clwb,
            x => bail!("unknown --store '{x}': use nt or clwb"),
        };
        let mem = MemKind::parse(&t.mem)?;
        return Ok(Box::new(Host::new(mem, isa, store, t.cpu)?));
    }
    let Some(spec) = t.target.strip_prefix("sim:") else {
        bail!(
            "unknown --target '{}': use host, sim:PRESET (e.g. sim:optane-1dimm) or sim:FILE.toml",
            t.target
        );
    };
    if spec.ends_with(".toml") || Path::new(spec).is_file() {
        Ok(Box::new(Sim::from_file(Path::new(spec))?))
    } else {
        Ok(Box::new(Sim::preset(spec)?))
    }
}

fn settings(t: &TargetArgs, base: Settings) -> anyhow::Result<Settings> {
    let mut s = base;
    if let Some(r) = t.repeats {
        if r == 0 || r > 1000 {
            bail!("--repeats {r} is out of range: use 1 to 1000");
        }
        s.repeats = r;
    }
    if let Some(m) = t.min_lines {
        // 2^24 lines is seconds a point on the host, far more on the
        // simulator; 2^64 ran for days.
        if m == 0 || m > 1 << 24 {
            bail!("--min-lines {m} is out of range: use 1 to 16777216");
        }
        s.min_lines = m;
    }
    if t.outstanding == 0 || t.outstanding > 4096 {
        bail!(
            "--outstanding {} is out of range: use 1 to 4096",
            t.outstanding
        );
    }
    s.outstanding = t.outstanding;
    s.fence = match t.fence {
        FenceArg::Block => Fence::Block,
        FenceArg::Pass => Fence::Pass,
        FenceArg::Run => Fence::Run,
    };
    Ok(s)
}

fn base_settings(t: &TargetArgs) -> Settings {
    if t.target == "host" {
        Plan::host().settings
    } else {
        Plan::sim().settings
    }
}

fn finish(res: &Results, o: &OutArgs, inf: &infer::Inferred) -> anyhow::Result<()> {
    if let Some(dir) = &o.out {
        let json = serde_json::to_string_pretty(res)?;
        res.save(dir, &json)?;
    }
    if let Some(dir) = &o.plot {
        report::plots(&res.curves, inf, dir).context("--plot")?;
    }
    Ok(())
}

/// `res` as printed by `--json`: its fields with the curves keyed by id, so
/// that one key path reaches a curve (`.curves["overwrite"].points`).
fn json_view(res: &Results) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let serde_json::Value::Object(mut v) = serde_json::to_value(res)? else {
        bail!("probe results did not serialise to a JSON object");
    };
    let by_id: serde_json::Map<String, serde_json::Value> = res
        .curves
        .iter()
        .map(|c| Ok((c.id.clone(), serde_json::to_value(c)?)))
        .collect::<anyhow::Result<_>>()?;
    v.insert("curves".into(), serde_json::Value::Object(by_id));
    Ok(v)
}

fn single(t: &TargetArgs, o: &OutArgs, curve: Curve, tgt: &dyn Target) -> anyhow::Result<u8> {
    let mut res = Results::new(&t.target, tgt);
    res.curves.push(curve);
    let inf = infer::infer(&res.curves, &Thresholds::default());
    finish(&res, o, &inf)?;
    if o.json {
        outln!("{}", serde_json::to_string_pretty(&json_view(&res)?)?);
    } else {
        let c = &res.curves[0];
        outln!("# {} on {}", c.id, res.description);
        outln!("# x: {} | y: {}", c.x_label, c.y_label);
        for p in &c.points {
            if res.noisy && p.hi > p.lo {
                outln!(
                    "{:>14} {:>12.3}   (min {:.3}, max {:.3})",
                    p.x,
                    p.y,
                    p.lo,
                    p.hi
                );
            } else {
                outln!("{:>14} {:>12.3}", p.x, p.y);
            }
        }
    }
    Ok(0)
}

fn ptrchase(a: PtrArgs) -> anyhow::Result<u8> {
    let mut t = make_target(&a.target)?;
    let s = settings(&a.target, base_settings(&a.target))?;
    let o = op(&a.op, &[Op::Load, Op::Store, Op::Raw])?;
    let regions = sizes(&a.region, "region")?;
    let blocks = sizes(&a.block, "block")?;
    let mut bar = Progress::new(a.out.json, a.out.progress);
    let mut tick = bar.callback();
    let curve = match (regions.len(), blocks.len()) {
        (_, 1) => probes::ptrchase_region(t.as_mut(), &s, o, blocks[0], &regions, &mut tick)?,
        (1, _) => probes::ptrchase_block(t.as_mut(), &s, o, regions[0], &blocks, &mut tick)?,
        _ => bail!("sweep either --region or --block, not both"),
    };
    single(&a.target, &a.out, curve, t.as_ref())
}

fn overwrite(a: OwArgs) -> anyhow::Result<u8> {
    let mut t = make_target(&a.target)?;
    let s = settings(&a.target, base_settings(&a.target))?;
    let regions = sizes(&a.region, "region")?;
    let mut bar = Progress::new(a.out.json, a.out.progress);
    let mut tick = bar.callback();
    let curve = if regions.len() == 1 {
        probes::overwrite(t.as_mut(), &s, regions[0], a.iterations)?
    } else {
        let total = size(&a.total, "total")?;
        let tf = Thresholds::default().tail_factor;
        probes::overwrite_sweep(t.as_mut(), &s, &regions, total, tf, &mut tick)?
    };
    if regions.len() == 1 && !a.out.json {
        let ys: Vec<f64> = curve.points.iter().map(|p| p.y).collect();
        let tails = infer::tails(&ys, Thresholds::default().tail_factor);
        let mut res = Results::new(&a.target.target, t.as_ref());
        res.curves.push(curve);
        finish(
            &res,
            &a.out,
            &infer::infer(&res.curves, &Thresholds::default()),
        )?;
        outln!(
            "# overwrite of {} B, {} iterations on {}",
            regions[0],
            a.iterations,
            res.description
        );
        outln!("median iteration: {:.1} ns", tails.median);
        outln!(
            "long-tail iterations (> {}x median): {}",
            Thresholds::default().tail_factor,
            tails.index.len()
        );
        if let Some(i) = infer::tail_interval(&tails) {
            outln!(
                "median interval: {i:.0} iterations; tail median {:.1} ns",
                tails.tail_median
            );
        }
        return Ok(0);
    }
    single(&a.target, &a.out, curve, t.as_ref())
}

fn stride(a: StrideArgs) -> anyhow::Result<u8> {
    let mut t = make_target(&a.target)?;
    let s = settings(&a.target, base_settings(&a.target))?;
    let o = op(&a.op, &[Op::Load, Op::Store])?;
    let strides = sizes(&a.stride, "stride")?;
    let sz = sizes(&a.size, "size")?;
    let total = size(&a.total, "total")?;
    let mut bar = Progress::new(a.out.json, a.out.progress);
    let mut tick = bar.callback();
    let curve = match (strides.len(), sz.len()) {
        (1, _) => probes::stride_size(t.as_mut(), &s, o, strides[0], &sz, total, &mut tick)?,
        (_, 1) => probes::stride_interleave(t.as_mut(), &s, o, sz[0], &strides, total, &mut tick)?,
        _ => bail!("sweep either --stride or --size, not both"),
    };
    single(&a.target, &a.out, curve, t.as_ref())
}

fn load_results(dir: &Path) -> anyhow::Result<Results> {
    let path = if dir.is_dir() {
        dir.join("results.json")
    } else {
        dir.to_path_buf()
    };
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read results '{}' (run `pmlab probe all --out DIR` first)",
            path.display()
        )
    })?;
    let res: Results = serde_json::from_str(&text)
        .with_context(|| format!("'{}' is not a pmlab probe result set", path.display()))?;
    if res.curves.is_empty() {
        bail!("'{}' holds no curves: nothing to infer", path.display());
    }
    Ok(res)
}

fn load_curve(res: &Results) -> Option<&Curve> {
    res.curves.iter().find(|c| {
        c.kind == probes::Kind::PtrchaseRegion
            && c.op == Op::Load
            && !c.params.contains_key("outstanding")
    })
}

fn infer_cmd(a: InferArgs) -> anyhow::Result<u8> {
    let res = load_results(&a.dir)?;
    let inf = infer::infer(&res.curves, &Thresholds::default());
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&inf)?);
        return Ok(0);
    }
    if a.report {
        eprint!(
            "{}",
            report::text(&res.target, &res.description, &inf, &[], None)
        );
    }
    let load = load_curve(&res)
        .context("the results have no load pointer-chasing curve: cannot fit a profile")?;
    let (_, toml) = profile::fit(&inf, load, &res.target, &Plan::sim().settings)?;
    out!("{toml}");
    Ok(0)
}

fn all(a: AllArgs) -> anyhow::Result<u8> {
    let is_host = a.target.target == "host";
    let mut plan = if is_host { Plan::host() } else { Plan::sim() };
    plan.settings = settings(&a.target, plan.settings)?;
    if let Some(m) = &a.max_region {
        let m = size(m, "max-region")?;
        plan.regions = probes::pow2_sweep(plan.regions[0], m);
        if plan.regions.len() < 3 {
            bail!("--max-region {m} leaves fewer than three regions to sweep");
        }
    }
    if let Some(t) = &a.overwrite_total {
        plan.overwrite_total = size(t, "overwrite-total")?;
    }
    let mut t = make_target(&a.target)?;
    let mut bar = Progress::new(a.out.json, a.out.progress);
    let mut tick = bar.callback();
    let res = suite::run_all(t.as_mut(), &a.target.target, &plan, &mut tick)?;
    let inf = infer::infer(&res.curves, &Thresholds::default());
    let caches = if is_host {
        report::host_caches()
    } else {
        Vec::new()
    };
    // Close the loop on NVRAM-like results: fit a profile, check it.
    let mut fitted = None;
    let want_profile = !a.no_profile && (!is_host || a.profile);
    if want_profile && inf.read_buffers.len() >= 2 {
        if let Some(load) = load_curve(&res) {
            match profile::fit(&inf, load, &res.target, &plan.settings) {
                Ok((_, toml)) => {
                    let (worst, _) = profile::check(&toml, load, &plan.settings)?;
                    fitted = Some((toml, worst));
                }
                Err(e) => eprintln!("pmlab: note: no profile: {e}"),
            }
        }
    }
    finish(&res, &a.out, &inf)?;
    let text = report::text(
        &res.target,
        &res.description,
        &inf,
        &caches,
        fitted.as_ref().map(|f| f.1),
    );
    if let Some(dir) = &a.out.out {
        crate::cmd::write_atomic(&dir.join("report.txt"), text.as_bytes(), "--out")?;
        if let Some((toml, _)) = &fitted {
            crate::cmd::write_atomic(&dir.join("profile.toml"), toml.as_bytes(), "--out")?;
        }
    }
    if a.out.json {
        let mut v = json_view(&res)?;
        v.insert("inferred".into(), serde_json::to_value(&inf)?);
        v.insert("host_caches".into(), serde_json::to_value(&caches)?);
        v.insert(
            "profile_check_max_error".into(),
            serde_json::to_value(fitted.as_ref().map(|f| f.1))?,
        );
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        out!("{text}");
        let secs: f64 = res.seconds.values().sum();
        outln!("\n(probes took {secs:.1} s)");
    }
    Ok(0)
}
