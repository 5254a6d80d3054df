//! `pmkv`: create, read, write, check and stress the PM key-value engines.
//!
//! Parses arguments, calls `pmlab_kv`, prints. Exit codes: 0 success; 1 a
//! negative answer (`check`: inconsistent; `get`: no such key; `cas`: no
//! match); 2 usage or I/O errors. Every error is one line on stderr.

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser, Subcommand};
use pmlab_kv::{
    create, detect, hex, open, show, unhex, Engine, EngineKind, ErrorKind, Model, Options,
};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "pmkv",
    version,
    about = "PM key-value engines: list, wal, btree, anchor (libpmemobj)"
)]
struct Cli {
    /// Print results as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct PoolArgs {
    /// Engine: list, wal, btree or anchor (default: read from the pool).
    #[arg(long, short)]
    engine: Option<String>,
    /// Writes per group commit for list and btree (1: every write durable).
    #[arg(long, default_value_t = 1)]
    group: u32,
    /// The pool file.
    pool: PathBuf,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a pool (the file must not exist).
    Create {
        /// Engine: list, wal, btree or anchor.
        #[arg(long, short)]
        engine: String,
        /// Pool size (bytes, or with K/M/G, KiB/MiB/GiB).
        #[arg(long, default_value = "64MiB")]
        size: String,
        /// Page size in bytes (power of two, 512..1 MiB).
        #[arg(long, default_value_t = 4096)]
        page_size: u32,
        /// B+-tree fan-out (3..64).
        #[arg(long, default_value_t = 6)]
        fanout: u32,
        /// The pool file.
        pool: PathBuf,
    },
    /// Set KEY to VALUE.
    Set {
        #[command(flatten)]
        p: PoolArgs,
        /// Key and value are hex.
        #[arg(long)]
        hex: bool,
        /// Version (default: the last one + 1).
        #[arg(long)]
        version: Option<u64>,
        key: String,
        value: String,
    },
    /// Print KEY's value (exit 1 when absent).
    Get {
        #[command(flatten)]
        p: PoolArgs,
        #[arg(long)]
        hex: bool,
        /// Read as of this index.
        #[arg(long)]
        at: Option<u64>,
        key: String,
    },
    /// Delete KEY (prints whether it existed).
    Del {
        #[command(flatten)]
        p: PoolArgs,
        #[arg(long)]
        hex: bool,
        #[arg(long)]
        version: Option<u64>,
        key: String,
    },
    /// Set KEY to NEW if its value is EXPECTED (exit 1 if not).
    Cas {
        #[command(flatten)]
        p: PoolArgs,
        #[arg(long)]
        hex: bool,
        /// Expect KEY absent (EXPECTED is then omitted).
        #[arg(long)]
        absent: bool,
        #[arg(long)]
        version: Option<u64>,
        key: String,
        /// EXPECTED then NEW (or NEW alone with --absent).
        values: Vec<String>,
    },
    /// Roll back every write above INDEX.
    Rollback {
        #[command(flatten)]
        p: PoolArgs,
        index: u64,
    },
    /// Discard versions no reader at or above INDEX needs.
    Discard {
        #[command(flatten)]
        p: PoolArgs,
        index: u64,
    },
    /// Print the snapshot at an index (default: the last), or every version.
    Dump {
        #[command(flatten)]
        p: PoolArgs,
        #[arg(long)]
        at: Option<u64>,
        /// Every retained version instead of a snapshot.
        #[arg(long, conflicts_with = "model")]
        history: bool,
        /// The whole state in the model text form (input of check --expect).
        #[arg(long)]
        model: bool,
    },
    /// Open the pool, check every invariant, compare with a model file.
    Check {
        #[command(flatten)]
        p: PoolArgs,
        /// A model file (`pmkv dump --model`'s form) the pool must equal.
        #[arg(long)]
        expect: Option<PathBuf>,
    },
    /// The kill -9 child: run the seeded operation stream, acknowledging
    /// each version once durable.
    Stress {
        #[command(flatten)]
        p: PoolArgs,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Operations to run before exiting.
        #[arg(long, default_value_t = 10_000_000)]
        ops: u64,
        /// A deliberate bug: acknowledge before syncing (to show the test bites).
        #[arg(long, hide = true)]
        plant_early_ack: bool,
    },
    /// The kill -9 parent: RUNS children killed at seeded random points.
    Crashtest {
        /// Engine: list, wal, btree or anchor.
        #[arg(long, short)]
        engine: String,
        #[arg(long, default_value_t = 200)]
        runs: u64,
        /// Seed (default: from the clock; printed).
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 1)]
        group: u32,
        /// Directory for the pool.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Run children with a deliberate bug (acknowledge before syncing).
        #[arg(long, hide = true)]
        plant_early_ack: bool,
    },
    /// The thesis' micro-benchmark on one engine (see docs/kv.md).
    Bench {
        /// Engine: list, wal, btree or anchor.
        #[arg(long, short)]
        engine: String,
        /// Keys inserted, read and deleted.
        #[arg(long, default_value_t = 20_000)]
        keys: u64,
        /// Values of the open/recovery test.
        #[arg(long, default_value_t = 15_000)]
        values: u64,
        /// Bytes per value of the open/recovery test.
        #[arg(long, default_value_t = 4096)]
        value_size: usize,
        #[arg(long, default_value_t = 1)]
        group: u32,
        #[arg(long, default_value_t = 6)]
        fanout: u32,
        #[arg(long, default_value_t = 4096)]
        page_size: u32,
        /// Directory for the pools (DRAM: /dev/shm).
        #[arg(long, default_value = "/dev/shm")]
        dir: PathBuf,
    },
}

/// The exit code a library error maps to: 1 when the pool is inconsistent
/// or damaged, 2 otherwise.
fn code_of(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<pmlab_kv::Error>().map(|e| e.kind()) {
        Some(ErrorKind::Inconsistent) | Some(ErrorKind::BadPool) => 1,
        _ => 2,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return ExitCode::from(pmlab_kv::cli_error::report(&e, "pmkv")),
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("pmkv: error: {msg}");
            ExitCode::from(code_of(&e))
        }
    }
}

fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        anyhow!("size {s:?}: expected a number with an optional K, M, G (or KiB, MiB, GiB)")
    })?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        _ => bail!("size {s:?}: unknown unit {unit:?}: use K, M or G"),
    };
    n.checked_mul(mult)
        .ok_or_else(|| anyhow!("size {s:?} overflows"))
}

fn engine_of(name: Option<&str>, pool: &Path) -> anyhow::Result<EngineKind> {
    let kind = match name {
        Some(n) => EngineKind::parse(n)?,
        None => detect(pool)?,
    };
    if !kind.available() {
        bail!("engine {} is not in this build (libpmemobj-dev was missing when it was compiled: install it and rebuild)", kind.name());
    }
    Ok(kind)
}

fn open_pool(p: &PoolArgs) -> anyhow::Result<Box<dyn Engine>> {
    let kind = engine_of(p.engine.as_deref(), &p.pool)?;
    let opts = Options {
        group: p.group,
        ..Options::default()
    };
    Ok(open(&p.pool, kind, &opts)?)
}

fn bytes(s: &str, hex_in: bool, what: &str) -> anyhow::Result<Vec<u8>> {
    if hex_in {
        unhex(s)
            .ok_or_else(|| anyhow!("{what} {s:?} is not hex (use pairs of 0-9a-f, or drop --hex)"))
    } else {
        Ok(s.as_bytes().to_vec())
    }
}

fn text(b: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(b) {
        Ok(s) => json!(s),
        Err(_) => serde_json::Value::Null,
    }
}

fn print_json(v: serde_json::Value) {
    println!("{v}");
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let json = cli.json;
    match cli.cmd {
        Cmd::Create {
            engine,
            size,
            page_size,
            fanout,
            pool,
        } => {
            let kind = engine_of(Some(&engine), &pool)?;
            let opts = Options {
                size: parse_size(&size)?,
                page_size,
                fanout,
                group: 1,
            };
            drop(create(&pool, kind, &opts)?);
            if json {
                print_json(
                    json!({"pool": pool.display().to_string(), "engine": kind.name(), "size": opts.size}),
                );
            } else {
                println!(
                    "created {} pool {} ({} bytes)",
                    kind.name(),
                    pool.display(),
                    opts.size
                );
            }
            Ok(0)
        }
        Cmd::Set {
            p,
            hex: h,
            version,
            key,
            value,
        } => {
            let mut e = open_pool(&p)?;
            let v = version.unwrap_or(e.last_version() + 1);
            e.set(&bytes(&key, h, "key")?, &bytes(&value, h, "value")?, v)?;
            e.sync()?;
            if json {
                print_json(json!({"version": v}));
            } else {
                println!("{v}");
            }
            Ok(0)
        }
        Cmd::Get { p, hex: h, at, key } => {
            let e = open_pool(&p)?;
            let val = e.get_at(&bytes(&key, h, "key")?, at.unwrap_or(u64::MAX))?;
            if json {
                print_json(match &val {
                    Some(v) => json!({"found": true, "value": text(v), "value_hex": hex(v)}),
                    None => json!({"found": false}),
                });
            } else if let Some(v) = &val {
                if h {
                    println!("{}", hex(v));
                } else {
                    let mut out = std::io::stdout().lock();
                    out.write_all(v)
                        .and_then(|_| out.write_all(b"\n"))
                        .context("stdout")?;
                }
            }
            Ok(if val.is_some() { 0 } else { 1 })
        }
        Cmd::Del {
            p,
            hex: h,
            version,
            key,
        } => {
            let mut e = open_pool(&p)?;
            let v = version.unwrap_or(e.last_version() + 1);
            let existed = e.delete(&bytes(&key, h, "key")?, v)?;
            e.sync()?;
            if json {
                print_json(json!({"deleted": existed, "version": v}));
            } else {
                println!("{}", existed as u8);
            }
            Ok(0)
        }
        Cmd::Cas {
            p,
            hex: h,
            absent,
            version,
            key,
            values,
        } => {
            let (expected, new) = match (absent, values.as_slice()) {
                (false, [e, n]) => (
                    Some(bytes(e, h, "expected value")?),
                    bytes(n, h, "new value")?,
                ),
                (true, [n]) => (None, bytes(n, h, "new value")?),
                _ => bail!("cas takes KEY EXPECTED NEW, or KEY NEW with --absent"),
            };
            let mut e = open_pool(&p)?;
            let v = version.unwrap_or(e.last_version() + 1);
            let ok = e.compare_and_set(&bytes(&key, h, "key")?, expected.as_deref(), &new, v)?;
            e.sync()?;
            if json {
                print_json(json!({"swapped": ok, "version": v}));
            } else {
                println!("{}", ok as u8);
            }
            Ok(if ok { 0 } else { 1 })
        }
        Cmd::Rollback { p, index } => {
            let mut e = open_pool(&p)?;
            e.rollback_above(index)?;
            if json {
                print_json(json!({"last": e.last_version()}));
            }
            Ok(0)
        }
        Cmd::Discard { p, index } => {
            let mut e = open_pool(&p)?;
            e.discard_below(index)?;
            if json {
                print_json(json!({"floor": e.floor()}));
            }
            Ok(0)
        }
        Cmd::Dump {
            p,
            at,
            history,
            model,
        } => {
            let e = open_pool(&p)?;
            let mut out = std::io::stdout().lock();
            if model {
                write!(out, "{}", model_of(e.as_ref())?.to_text()).context("stdout")?;
            } else if history {
                for x in e.history()? {
                    if json {
                        writeln!(out, "{}", json!({"key": text(&x.key), "key_hex": hex(&x.key), "version": x.version,
                            "value_hex": x.value.as_deref().map(hex)}))
                    } else {
                        let v = x.value.as_deref().map(show).unwrap_or_else(|| "(deleted)".into());
                        writeln!(out, "{} {} {}", show(&x.key), x.version, v)
                    }
                    .context("stdout")?;
                }
            } else {
                let idx = at.unwrap_or(e.last_version());
                for pair in e.snapshot(idx)? {
                    let (k, v) = pair?;
                    if json {
                        writeln!(out, "{}", json!({"key": text(&k), "key_hex": hex(&k), "value": text(&v), "value_hex": hex(&v)}))
                    } else {
                        writeln!(out, "{} {}", show(&k), show(&v))
                    }
                    .context("stdout")?;
                }
            }
            Ok(0)
        }
        Cmd::Check { p, expect } => {
            let model = match &expect {
                Some(f) => {
                    let t =
                        std::fs::read_to_string(f).with_context(|| format!("{}", f.display()))?;
                    Some(Model::from_text(&t).with_context(|| format!("{}", f.display()))?)
                }
                None => None,
            };
            let inconsistent = |err: &pmlab_kv::Error, engine: &str| {
                if json {
                    print_json(
                        json!({"consistent": false, "engine": engine, "error": err.to_string()}),
                    );
                } else {
                    println!("{}: inconsistent: {err}", p.pool.display());
                }
            };
            let named = p.engine.clone().unwrap_or_default();
            let e = match open_pool(&p) {
                Ok(e) => e,
                Err(err) => match err.downcast_ref::<pmlab_kv::Error>() {
                    // A pool that cannot be recovered is an inconsistent one.
                    Some(k) if matches!(k.kind(), ErrorKind::Inconsistent | ErrorKind::BadPool) => {
                        inconsistent(k, &named);
                        return Ok(1);
                    }
                    _ => return Err(err),
                },
            };
            let verdict = e.check().and_then(|_| match &model {
                Some(m) => pmlab_kv::compare(e.as_ref(), m),
                None => Ok(()),
            });
            let kind = e.kind().name();
            match verdict {
                Ok(()) => {
                    if json {
                        print_json(
                            json!({"consistent": true, "engine": kind, "last": e.last_version(), "floor": e.floor()}),
                        );
                    } else {
                        println!(
                            "{}: consistent ({kind}, last version {}, floor {})",
                            p.pool.display(),
                            e.last_version(),
                            e.floor()
                        );
                    }
                    Ok(0)
                }
                Err(err) if err.kind() == ErrorKind::Inconsistent => {
                    inconsistent(&err, kind);
                    Ok(1)
                }
                Err(err) => Err(err.into()),
            }
        }
        Cmd::Stress {
            p,
            seed,
            ops,
            plant_early_ack,
        } => {
            let kind = engine_of(p.engine.as_deref(), &p.pool)?;
            let mut out = std::io::stdout().lock();
            pmlab_kv::stress::child(&p.pool, kind, seed, p.group, ops, plant_early_ack, &mut out)?;
            Ok(0)
        }
        Cmd::Crashtest {
            engine,
            runs,
            seed,
            group,
            dir,
            plant_early_ack,
        } => {
            let kind = EngineKind::parse(&engine)?;
            if !kind.available() {
                bail!(
                    "engine {} is not in this build (libpmemobj-dev was missing at build time)",
                    kind.name()
                );
            }
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
            let dir = dir.unwrap_or_else(std::env::temp_dir);
            let exe = std::env::current_exe().context("locating pmkv itself")?;
            eprintln!(
                "pmkv crashtest: engine {} seed {seed} runs {runs} group {group}",
                kind.name()
            );
            let r =
                pmlab_kv::stress::crash_runs(&exe, kind, &dir, runs, seed, group, plant_early_ack)?;
            if json {
                print_json(
                    json!({"engine": kind.name(), "seed": seed, "runs": r.runs, "kills": r.kills, "acked": r.acked,
                    "in_flight_present": r.in_flight_present, "in_flight_absent": r.in_flight_absent, "lost": 0}),
                );
            } else {
                println!(
                    "{}: {} runs, {} killed, {} writes acknowledged, 0 lost; in-flight group present {} / absent {} (seed {seed})",
                    kind.name(),
                    r.runs,
                    r.kills,
                    r.acked,
                    r.in_flight_present,
                    r.in_flight_absent
                );
            }
            Ok(0)
        }
        Cmd::Bench {
            engine,
            keys,
            values,
            value_size,
            group,
            fanout,
            page_size,
            dir,
        } => {
            let kind = engine_of(Some(&engine), &dir)?;
            bench(
                kind, keys, values, value_size, group, fanout, page_size, &dir, json,
            )
        }
    }
}

/// The engine's whole state as a model.
fn model_of(e: &dyn Engine) -> anyhow::Result<Model> {
    let mut s = format!(
        "pmkv-model 1 last={} floor={}\n",
        e.last_version(),
        e.floor()
    );
    for x in e.history()? {
        let v = x.value.as_deref().map(hex).unwrap_or_else(|| "-".into());
        s.push_str(&format!("{} {} {}\n", hex(&x.key), x.version, v));
    }
    Ok(Model::from_text(&s)?)
}

#[allow(clippy::too_many_arguments)]
fn bench(
    kind: EngineKind,
    keys: u64,
    values: u64,
    value_size: usize,
    group: u32,
    fanout: u32,
    page_size: u32,
    dir: &Path,
    json: bool,
) -> anyhow::Result<u8> {
    let path = dir.join(format!(
        "pmkv-bench-{}-{}.pool",
        kind.name(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let size = (keys * 4096 + values * (value_size as u64 + 256) * 3 + (256 << 20)).max(512 << 20);
    let opts = Options {
        size,
        page_size,
        fanout,
        group,
    };
    let cleanup = |p: &Path| {
        let _ = std::fs::remove_file(p);
    };
    let res = (|| -> anyhow::Result<serde_json::Value> {
        let mut e = create(&path, kind, &opts)?;
        let key = |i: u64| {
            format!(
                "key{:012}",
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 1_000_000_000_000
            )
        };
        let val = [0x5au8; 16];
        let mut v = 0u64;
        let t = Instant::now();
        for i in 0..keys {
            v += 1;
            e.set(key(i).as_bytes(), &val, v)?;
        }
        e.sync()?;
        let insert = t.elapsed().as_nanos() as f64 / keys as f64;
        let t = Instant::now();
        let mut found = 0u64;
        for i in 0..keys {
            found += e.get(key(i).as_bytes())?.is_some() as u64;
        }
        let read = t.elapsed().as_nanos() as f64 / keys as f64;
        if found != keys {
            bail!("bench: {found} of {keys} keys read back");
        }
        let t = Instant::now();
        for i in 0..keys {
            v += 1;
            e.delete(key(i).as_bytes(), v)?;
        }
        e.sync()?;
        let delete = t.elapsed().as_nanos() as f64 / keys as f64;
        drop(e);
        cleanup(&path);
        // Open/recovery time of a pool holding VALUES values of VALUE_SIZE bytes.
        let mut e = create(&path, kind, &opts)?;
        let big = vec![0xa5u8; value_size];
        for i in 0..values {
            e.set(key(i).as_bytes(), &big, i + 1)?;
        }
        e.sync()?;
        let u = e.usage();
        drop(e);
        let t = Instant::now();
        let e = open(&path, kind, &opts)?;
        let open_ms = t.elapsed().as_secs_f64() * 1e3;
        let n = e.snapshot(values)?.count() as u64;
        if n != values {
            bail!("bench: {n} of {values} values after reopen");
        }
        drop(e);
        cleanup(&path);
        let per_byte = if u.data_bytes > 0 {
            u.pm_bytes as f64 / u.data_bytes as f64
        } else {
            f64::NAN
        };
        Ok(
            json!({"engine": kind.name(), "keys": keys, "group": group, "fanout": fanout, "page_size": page_size,
            "insert_ns": insert, "read_ns": read, "delete_ns": delete,
            "open_values": values, "value_size": value_size, "open_ms": open_ms,
            "pm_bytes": u.pm_bytes, "data_bytes": u.data_bytes, "pm_per_byte": per_byte,
            "flush": pmlab_kv::pm::flush_kind().name()}),
        )
    })();
    cleanup(&path);
    let r = res?;
    if json {
        print_json(r);
    } else {
        println!(
            "{:<10} insert {:>8.0} ns  read {:>7.0} ns  delete {:>8.0} ns  open({} x {} B) {:>8.1} ms  PM bytes per stored byte {:.2}  (group {}, {})",
            if kind == EngineKind::BTree { format!("btree/{fanout}") } else { kind.name().to_string() },
            r["insert_ns"].as_f64().unwrap_or(0.0),
            r["read_ns"].as_f64().unwrap_or(0.0),
            r["delete_ns"].as_f64().unwrap_or(0.0),
            values,
            value_size,
            r["open_ms"].as_f64().unwrap_or(0.0),
            r["pm_per_byte"].as_f64().unwrap_or(0.0),
            group,
            pmlab_kv::pm::flush_kind().name()
        );
    }
    Ok(0)
}
