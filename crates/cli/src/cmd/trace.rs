//! `pmlab trace -o app.pmt -- ./app args`: run a program under libpmlab
//! with tracing on and report what was recorded.
//!
//! The recording itself is done inside the program by the runtime's tracer
//! (`crates/runtime/src/tracer.rs`, started by `PMLAB_TRACE_FILE`); this
//! command starts the program under libpmlab with `launch` (as `pmlab run`:
//! signals are forwarded), waits, and checks the trace (records, threads,
//! drops, whether the tracer finished).

use anyhow::{bail, Context};
use pmlab_trace::binary;
use serde_json::json;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Arguments of `pmlab trace`.
#[derive(clap::Args)]
#[command(after_help = "Example:
  pmlab trace -o app.pmt --json app.json -- ./app pool 2 1000
  pmlab analyze app.pmt")]
pub struct Args {
    /// The trace file to write (.pmt).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Also run the program once without tracing first and report the
    /// tracing overhead (the program runs twice).
    #[arg(long)]
    pub overhead: bool,
    /// Write the summary as one JSON line to this file (never to the
    /// program's stdout; `/dev/fd/N` for a descriptor of its own) instead
    /// of a sentence on stderr.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Record the call site of every PM store and flush (for `pmlab
    /// check`; slows the program).
    #[arg(long)]
    pub sites: bool,
    /// Record the bytes every PM store wrote and every flush wrote back
    /// (for `pmlab crash`).
    #[arg(long)]
    pub data: bool,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, required = true, value_name = "PROGRAM")]
    pub command: Vec<String>,
}

/// The program's command line, with libpmlab preloaded and tracing into
/// `out` when `runtime` is given (through `launch`, as `pmlab run`), else
/// plain (the untraced baseline of `--overhead`).
fn command(args: &Args, program: &Path, runtime: Option<&Path>, out: Option<&Path>) -> Command {
    let mut argv = args.command.clone();
    argv[0] = program.to_string_lossy().into_owned();
    let mut env: Vec<(String, String)> = Vec::new();
    if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
        // Without it libpmemobj msyncs a pool on ordinary memory instead of
        // calling libpmem's flush and drain (see runtime/src/pmdk.rs).
        env.push(("PMEM_IS_PMEM_FORCE".into(), "1".into()));
    }
    if let Some(o) = out {
        env.push(("PMLAB_TRACE_FILE".into(), o.to_string_lossy().into_owned()));
        if args.sites {
            env.push(("PMLAB_TRACE_SITES".into(), "1".into()));
        }
        if args.data {
            env.push(("PMLAB_TRACE_DATA".into(), "1".into()));
        }
        if pmlab_emu::elf::is_instrumented(program).unwrap_or(false) {
            // Built with `pmlab cc`: its stores into PM are recorded too.
            env.push(("PMLAB_TRACE_STORES".into(), "1".into()));
        }
    }
    let mut c = match runtime {
        Some(rt) => pmlab_emu::launch::command(rt, &argv, &env),
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]).envs(env.iter().map(|(k, v)| (k, v)));
            c
        }
    };
    c.env_remove("PMLAB_TRACE_NESTED");
    if out.is_none() {
        c.env_remove("PMLAB_TRACE_FILE");
    }
    c
}

fn exit_code(status: std::process::ExitStatus) -> (u8, String) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c.clamp(0, 255) as u8, format!("exit {c}")),
        (None, Some(s)) => (128 + s as u8, format!("killed by signal {s}")),
        _ => (1, "unknown status".into()),
    }
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if let Some(p) = &args.json {
        crate::cmd::check_output(p, "--json")?;
    }
    let runtime = pmlab_emu::launch::find_runtime()?;
    let program = pmlab_emu::launch::resolve_program(&args.command[0])?;
    pmlab_emu::launch::check_environment()?;
    let out = if args.output.is_absolute() {
        args.output.clone()
    } else {
        std::env::current_dir()?.join(&args.output)
    };
    // Fail early, with a clear message, on an unwritable output, without
    // touching an existing trace there: the program traces into a
    // temporary file beside it, renamed over it once the program is done,
    // so a run that writes no trace leaves the old one as it was.
    if out.is_dir() {
        bail!(
            "cannot create trace file {}: is a directory: give a file name",
            out.display()
        );
    }
    let tmp = crate::cmd::temp_beside(&out);
    File::create(&tmp).with_context(|| format!("cannot create trace file {}", out.display()))?;
    std::fs::remove_file(&tmp).ok();

    let baseline = if args.overhead {
        let t = Instant::now();
        let mut c = command(&args, &program, None, None);
        c.stdout(std::process::Stdio::null());
        let status = pmlab_emu::launch::spawn_and_wait(c)?;
        if !status.success() {
            bail!(
                "the untraced run of {} failed ({}); --overhead needs a program that succeeds",
                args.command[0],
                exit_code(status).1
            );
        }
        Some(t.elapsed().as_secs_f64())
    } else {
        None
    };

    let t = Instant::now();
    let status =
        pmlab_emu::launch::spawn_and_wait(command(&args, &program, Some(&runtime), Some(&tmp)))?;
    let secs = t.elapsed().as_secs_f64();
    let (code, how) = exit_code(status);

    let wrote = tmp.exists();
    if wrote {
        // The files written beside it (TMP.PID of children, TMP.init.N
        // pool images) move with it (OUT.PID, OUT.init.N).
        let name = out.file_name().unwrap_or_default().to_string_lossy();
        let prefix = format!("{}.", tmp.file_name().unwrap_or_default().to_string_lossy());
        let dir = tmp.parent().unwrap_or(Path::new("."));
        for e in std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok())
        {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = n.strip_prefix(&prefix) {
                std::fs::rename(e.path(), out.with_file_name(format!("{name}.{rest}")))
                    .with_context(|| format!("cannot write {}.{rest}", out.display()))?;
            }
        }
        std::fs::rename(&tmp, &out)
            .with_context(|| format!("cannot write trace file {}", out.display()))?;
    }
    if !wrote {
        bail!(
            "{} wrote no trace: it did not load {} (statically linked or setuid program?)",
            args.command[0],
            runtime.display()
        );
    }
    let summary = inspect(&out)?;
    let children = child_traces(&out);
    let overhead = baseline.map(|b| secs / b.max(1e-9));
    let why_empty = (summary.records == 0 && summary.dropped == 0)
        .then(|| why_no_records(&program, &args.command[0]));
    if let Some(path) = &args.json {
        let v = json!({
            "trace": out.display().to_string(),
            "records": summary.records,
            "threads": summary.threads,
            "dropped": summary.dropped,
            "buffer_waits": summary.waits,
            "finished": summary.finished,
            "program_status": how,
            "seconds": secs,
            "baseline_seconds": baseline,
            "overhead": overhead,
            "child_traces": children.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "why_no_records": why_empty,
        });
        crate::cmd::run::write_json(path, &v)?;
        if let Some(why) = &why_empty {
            eprintln!("pmlab: trace: warning: {why}");
        }
    } else {
        let mut msg = format!(
            "pmlab: trace: {} records from {} threads in {} ({how}, {secs:.3} s)",
            summary.records,
            summary.threads,
            out.display()
        );
        if let (Some(b), Some(o)) = (baseline, overhead) {
            msg.push_str(&format!("; untraced {b:.3} s, overhead {o:.2}x"));
        }
        eprintln!("{msg}");
        if summary.waits > 0 {
            eprintln!(
                "pmlab: trace: note: threads waited {} times for the trace writer (full buffers); the program's timing was disturbed there, its results were not",
                summary.waits
            );
        }
        if summary.dropped > 0 {
            eprintln!(
                "pmlab: trace: warning: {} records were dropped (a thread's ring was full); the analysis undercounts",
                summary.dropped
            );
        }
        if !summary.finished {
            eprintln!("pmlab: trace: warning: the program ended without running exit handlers (_exit or a signal); the trace holds what was written before");
        }
        for c in &children {
            eprintln!("pmlab: trace: an exec'd child wrote {}", c.display());
        }
        if let Some(why) = &why_empty {
            eprintln!("pmlab: trace: warning: {why}");
        }
    }
    Ok(code)
}

/// Why a trace holds no record: the program made no PM operation the
/// tracer sees. Says which of the ways in the program lacks, from its
/// ELF file: pmlab's PM API (`pmalloc`), `pmlab cc`'s instrumentation,
/// libpmem or libpmemobj.
fn why_no_records(program: &Path, name: &str) -> String {
    use pmlab_emu::elf;
    let imports = |prefix: &str| elf::imports_symbol(program, prefix).unwrap_or(false);
    let needs = |lib: &str| elf::needs_library(program, lib).unwrap_or(false);
    let mut has = Vec::new();
    if imports("pmalloc") || imports("pflush") || imports("pm_") {
        has.push("calls pmlab's PM API");
    }
    if elf::is_instrumented(program).unwrap_or(false) {
        has.push("was built by pmlab cc");
    }
    if needs("libpmem.so") || needs("libpmemobj.so") {
        has.push("links libpmem/libpmemobj");
    }
    if has.is_empty() {
        format!(
            "no records: {name} made no PM operations that pmlab sees: it never calls pmalloc (pmlab.h), was not built with pmlab cc, and links neither libpmem nor libpmemobj"
        )
    } else {
        format!(
            "no records: {name} {} but made no PM operations in this run (no pmem mapping, flush or fence was reached)",
            has.join(" and ")
        )
    }
}

/// What a trace file holds.
pub struct Summary {
    /// Records read.
    pub records: u64,
    /// Distinct threads.
    pub threads: u64,
    /// Records the tracer dropped.
    pub dropped: u64,
    /// Times a thread waited for room in its buffer.
    pub waits: u64,
    /// The tracer finished the file (its header counters are filled in).
    pub finished: bool,
}

/// Read a trace written by the tracer and check it.
pub fn inspect(path: &Path) -> anyhow::Result<Summary> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let r = binary::Reader::new(BufReader::new(f))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        .with_name(path.display().to_string());
    let num = |k: &str| r.meta_value(k).and_then(|v| v.parse::<u64>().ok());
    let header_records = num("records").unwrap_or(0);
    let dropped = num("dropped").unwrap_or(0);
    let waits = num("waits").unwrap_or(0);
    let mut records = 0u64;
    let mut seen = std::collections::HashSet::new();
    for rec in r {
        let rec = rec?;
        records += 1;
        seen.insert(rec.thread);
    }
    Ok(Summary {
        waits,
        records,
        threads: seen.len() as u64,
        dropped,
        finished: header_records == records && (records > 0 || dropped == 0),
    })
}

fn child_traces(out: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (out.parent(), out.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.strip_prefix(&prefix).is_some_and(|pid| {
                        !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
                    })
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
