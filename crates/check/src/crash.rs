//! Crash images: what a power failure could leave in a pool file, tested
//! with the program's own consistency check (in the spirit of PMDK's
//! pmreorder).
//!
//! The input is a trace recorded with data (`pmlab trace --data`): the
//! bytes of every PM store and of every line a flush wrote back, and a
//! `PMRANGE` note for the file-backed pool. Replaying it, the *durable*
//! image starts as the file's contents before the program mapped it (saved
//! beside the trace, or zeros for a new file) and takes a line's flushed
//! contents when the flushing thread fences. Every other line the program
//! changed is *pending*: written but not flushed, or flushed but not
//! fenced.
//!
//! A crash point is the moment before a fence (every fence, or a sample of
//! them with [`Points::Sample`]) and the end of the trace. At a point with
//! pending lines P, each line of P may have reached PM (with its latest
//! contents) or not: 2^|P| images (lines whose latest contents equal their
//! durable contents are left out). They are enumerated exhaustively when
//! they fit the point's share of the budget, else drawn at random from the
//! seed (each point's draw depends only on the seed and the point, so a
//! failure is reproduced by the same command line). Each image is written
//! as a pool file and given to the check command (`{}` in it is replaced by
//! the image's path; without `{}` the path is appended); a non-zero exit
//! is a failure. The first failure stops the run.
//!
//! Records are replayed in file order; the tracer interleaves threads by
//! drain batch, so for several threads the order between threads is
//! approximate (each thread's own order is exact). A program whose PM
//! stores and the flush and fence that persist them run on different
//! threads (a task moved between an async runtime's workers) can then get
//! a store replayed after the other thread's flush and fence that really
//! came later: an image no crash leaves. Such stores (a store in the file
//! after another thread's flush of its line, with an earlier timestamp)
//! are counted in [`Outcome::misordered`].
//!
//! Intermediate versions of a line (an older store's contents reaching PM
//! before a newer store) are not generated; a store between a line's flush
//! and its fence leaves the line pending with the newer contents.

use crate::{Error, ErrorKind};
use pmlab_trace::binary::Reader;
use pmlab_trace::ext::{Event, Note};
use pmlab_trace::{Op, Space};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LINE: u64 = 64;
const PAGE: u64 = 4096;

/// Which moments are crash points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Points {
    /// Before every fence, and at the end.
    Fences,
    /// Before this many fences drawn from the seed, and at the end.
    Sample(u64),
    /// At the end only (the images of a process stopped at that moment,
    /// consistent with any files it wrote outside the pool).
    End,
}

impl Points {
    /// Parse `fences`, `end` or a count.
    pub fn parse(s: &str) -> Result<Points, Error> {
        if s == "fences" {
            return Ok(Points::Fences);
        }
        if s == "end" {
            return Ok(Points::End);
        }
        match s.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Points::Sample(n)),
            _ => Err(Error::new(
                ErrorKind::Usage,
                format!("--points '{s}' is neither 'fences', 'end' nor a positive count"),
            )),
        }
    }
}

/// Options of a crash run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Images to test at most, over all points.
    pub budget: u64,
    /// Seed of every random draw.
    pub seed: u64,
    /// Crash points.
    pub points: Points,
    /// The check command (a shell command line).
    pub check: String,
    /// Time allowed to one check.
    pub timeout: Duration,
    /// Directory for the images (the failing one is kept there).
    pub dir: PathBuf,
}

/// The first failing image.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Index of the crash point (0-based, in trace order).
    pub point: u64,
    /// Operations of the trace before the point.
    pub record: u64,
    /// Trace time of the point (ns).
    pub time_ns: u64,
    /// The image file (kept).
    pub image: PathBuf,
    /// Pending lines that did not reach PM: (offset in the pool file, address).
    pub lost: Vec<(u64, u64)>,
    /// Pending lines that did.
    pub kept: Vec<(u64, u64)>,
    /// The check's exit status.
    pub status: String,
    /// The end of its output.
    pub output: String,
}

/// What a crash run found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The pool file the images stand for.
    pub pool: String,
    /// Crash points visited.
    pub points: u64,
    /// Images tested.
    pub images: u64,
    /// Points where the images were sampled rather than enumerated.
    pub sampled_points: u64,
    /// The budget ran out before the last point.
    pub budget_exhausted: bool,
    /// The first failure, if any.
    pub failure: Option<Failure>,
    /// Pool stores found after another thread's flush of their line with
    /// an earlier timestamp than that flush (cross-thread misordering in
    /// the trace file; images past them may be ones no crash leaves).
    pub misordered: u64,
}

impl Outcome {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        let lines = |v: &[(u64, u64)]| {
            v.iter()
                .map(|(o, a)| json!({"offset": o, "addr": format!("{a:#x}")}))
                .collect::<Vec<_>>()
        };
        json!({
            "pool": self.pool,
            "points": self.points,
            "images": self.images,
            "sampled_points": self.sampled_points,
            "budget_exhausted": self.budget_exhausted,
            "failed": self.failure.is_some(),
            "misordered": self.misordered,
            "failure": self.failure.as_ref().map(|f| json!({
                "point": f.point,
                "record": f.record,
                "time_ns": f.time_ns,
                "image": f.image.display().to_string(),
                "lost": lines(&f.lost),
                "kept": lines(&f.kept),
                "status": f.status,
                "output": f.output,
            })),
        })
    }
}

/// splitmix64: small, seedable, good enough to draw subsets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The pool the images stand for.
struct Pool {
    base: u64,
    len: u64,
    file_offset: u64,
    path: String,
    init: Option<PathBuf>,
    /// Trace time of the mapping: no crash point before it.
    time_ns: u64,
}

struct Pending {
    /// The thread whose fence makes `flushed` durable, if flushed.
    flushed_by: Option<u32>,
    /// The program's view of the line.
    latest: [u8; 64],
    /// The contents the last flush wrote back (what a fence makes durable).
    flushed: [u8; 64],
}

impl Pending {
    fn new(cur: [u8; 64]) -> Pending {
        Pending {
            flushed_by: None,
            latest: cur,
            flushed: cur,
        }
    }
}

fn open(trace: &Path) -> Result<Reader<BufReader<File>>, Error> {
    let f = File::open(trace).map_err(|e| Error::io(trace.display(), e))?;
    Ok(Reader::new(BufReader::with_capacity(1 << 17, f))
        .map_err(|e| Error::new(ErrorKind::Trace, format!("{}: {e}", trace.display())))?
        .with_name(trace.display().to_string()))
}

/// First pass: the pool, and the fences after its mapping.
fn survey(trace: &Path) -> Result<(Pool, u64, bool), Error> {
    let mut r = open(trace)?;
    let mut pool: Option<Pool> = None;
    let mut ranges = 0u64;
    let mut fences_by_time: Vec<u64> = Vec::new();
    let mut data = false;
    while let Some(ev) = r.next_event()? {
        match ev {
            Event::Note {
                time_ns,
                note:
                    Note::PmRange {
                        base,
                        len,
                        file_offset,
                        path,
                        init,
                    },
                ..
            } => {
                let k = ranges;
                ranges += 1;
                if pool.is_none() && !path.is_empty() {
                    pool = Some(Pool {
                        base,
                        len,
                        file_offset,
                        path,
                        init: init.then(|| PathBuf::from(format!("{}.init.{k}", trace.display()))),
                        time_ns,
                    });
                }
            }
            Event::Note {
                note: Note::Data { .. },
                ..
            } => data = true,
            Event::Record(rec) if is_fence(&rec) => fences_by_time.push(rec.time_ns),
            _ => {}
        }
    }
    let pool = pool.ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            format!("{}: the trace declares no file-backed PM mapping: the program must map its pool from a file (PMLAB_PM_FILE for pmlab.h programs, pmemobj_create/pmemobj_open or pmem_map_file for PMDK)", trace.display()),
        )
    })?;
    let fences = fences_by_time
        .iter()
        .filter(|&&t| t >= pool.time_ns)
        .count() as u64;
    Ok((pool, fences, data))
}

fn is_fence(r: &pmlab_trace::Record) -> bool {
    r.space == Space::Pm && r.op.is_fence()
}

/// The durable image: sparse pages of the pool file.
struct Image {
    pages: HashMap<u64, Box<[u8; PAGE as usize]>>,
    len: u64,
}

impl Image {
    fn load(pool: &Pool) -> Result<Image, Error> {
        let mut img = Image {
            pages: HashMap::new(),
            len: pool.len,
        };
        let Some(path) = &pool.init else {
            return Ok(img);
        };
        let mut f = File::open(path).map_err(|e| Error::io(path.display(), e))?;
        let flen = f
            .metadata()
            .map_err(|e| Error::io(path.display(), e))?
            .len();
        let mut off = pool.file_offset;
        let end = pool.file_offset.saturating_add(pool.len).min(flen);
        use std::os::unix::io::AsRawFd;
        let mut page = [0u8; PAGE as usize];
        while off < end {
            // SAFETY: lseek on a descriptor we own.
            let d = unsafe { libc_lseek(f.as_raw_fd(), off as i64) };
            if d < 0 {
                break;
            }
            off = (d as u64) & !(PAGE - 1);
            if off >= end {
                break;
            }
            f.seek(SeekFrom::Start(off))
                .map_err(|e| Error::io(path.display(), e))?;
            let n = f
                .read(&mut page)
                .map_err(|e| Error::io(path.display(), e))?;
            if n == 0 {
                break;
            }
            if page[..n].iter().any(|&b| b != 0) {
                let mut b = Box::new([0u8; PAGE as usize]);
                b[..n].copy_from_slice(&page[..n]);
                img.pages.insert((off - pool.file_offset) / PAGE, b);
            }
            off += n as u64;
        }
        Ok(img)
    }

    fn line(&self, off: u64) -> [u8; 64] {
        let mut out = [0u8; 64];
        if let Some(p) = self.pages.get(&(off / PAGE)) {
            let i = (off % PAGE) as usize;
            out.copy_from_slice(&p[i..i + 64]);
        }
        out
    }

    fn set_line(&mut self, off: u64, bytes: &[u8; 64]) {
        let p = self
            .pages
            .entry(off / PAGE)
            .or_insert_with(|| Box::new([0u8; PAGE as usize]));
        let i = (off % PAGE) as usize;
        p[i..i + 64].copy_from_slice(bytes);
    }

    fn write(&self, path: &Path, extra: &[(u64, &[u8; 64])]) -> Result<(), Error> {
        let mut f = File::create(path).map_err(|e| Error::io(path.display(), e))?;
        f.set_len(self.len)
            .map_err(|e| Error::io(path.display(), e))?;
        let mut keys: Vec<&u64> = self.pages.keys().collect();
        keys.sort();
        for k in keys {
            f.seek(SeekFrom::Start(k * PAGE))
                .map_err(|e| Error::io(path.display(), e))?;
            let p = &self.pages[k];
            let n = (self.len - k * PAGE).min(PAGE) as usize;
            f.write_all(&p[..n])
                .map_err(|e| Error::io(path.display(), e))?;
        }
        for (off, bytes) in extra {
            f.seek(SeekFrom::Start(*off))
                .map_err(|e| Error::io(path.display(), e))?;
            f.write_all(&bytes[..])
                .map_err(|e| Error::io(path.display(), e))?;
        }
        Ok(())
    }
}

extern "C" {
    #[link_name = "lseek"]
    fn libc_lseek_raw(fd: i32, off: i64, whence: i32) -> i64;
}

/// `lseek(fd, off, SEEK_DATA)`.
unsafe fn libc_lseek(fd: i32, off: i64) -> i64 {
    const SEEK_DATA: i32 = 3;
    libc_lseek_raw(fd, off, SEEK_DATA)
}

/// Run the check command on `image`: Ok(None) when it passes, else the
/// status and the end of its output.
fn run_check(
    cmd: &str,
    image: &Path,
    timeout: Duration,
) -> Result<Option<(String, String)>, Error> {
    let p = image.display().to_string();
    let line = if cmd.contains("{}") {
        cmd.replace("{}", &p)
    } else {
        format!("{cmd} '{p}'")
    };
    let out_path = image.with_extension("out");
    let out = File::create(&out_path).map_err(|e| Error::io(out_path.display(), e))?;
    let err = out
        .try_clone()
        .map_err(|e| Error::io(out_path.display(), e))?;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&line)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| {
            Error::new(
                ErrorKind::Run,
                format!("cannot run the check command '{cmd}': {e}"),
            )
        })?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Run,
                    format!("waiting for the check command: {e}"),
                ))
            }
        }
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    std::fs::remove_file(&out_path).ok();
    let tail: String = {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    };
    match status {
        Some(s) if s.success() => Ok(None),
        Some(s) => Ok(Some((format!("{s}"), tail))),
        None => Ok(Some((format!("timed out after {:?}", timeout), tail))),
    }
}

/// Test the crash images of the trace at `trace` (recorded with
/// `pmlab trace --data`).
pub fn run(trace: &Path, opts: &Options) -> Result<Outcome, Error> {
    if opts.budget == 0 {
        return Err(Error::new(ErrorKind::Usage, "--budget must be at least 1"));
    }
    let (pool, fences, data) = survey(trace)?;
    if !data {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{}: the trace holds no data: record it with `pmlab trace --data`",
                trace.display()
            ),
        ));
    }
    // Which fences are crash points.
    let chosen: Option<std::collections::HashSet<u64>> = match opts.points {
        Points::Fences => None,
        Points::End => Some(std::collections::HashSet::new()),
        Points::Sample(n) if n >= fences => None,
        Points::Sample(n) => {
            let mut rng = Rng(opts.seed ^ 0x5eed);
            let mut set = std::collections::HashSet::new();
            while (set.len() as u64) < n {
                set.insert(rng.next() % fences);
            }
            Some(set)
        }
    };
    let npoints = match &chosen {
        None => fences + 1,
        Some(s) => s.len() as u64 + 1,
    };
    let per_point = (opts.budget / npoints).max(1);
    let mut durable = Image::load(&pool)?;
    let mut pending: HashMap<u64, Pending> = HashMap::new();
    let mut out = Outcome {
        pool: pool.path.clone(),
        points: 0,
        images: 0,
        sampled_points: 0,
        budget_exhausted: false,
        failure: None,
        misordered: 0,
    };
    std::fs::create_dir_all(&opts.dir).map_err(|e| Error::io(opts.dir.display(), e))?;
    let image_path = opts.dir.join("crash.img");
    let end = pool.base.saturating_add(pool.len);
    let mut r = open(trace)?;
    let mut records = 0u64;
    let mut fence_no = 0u64;
    let mut point_no = 0u64;
    // The lines a thread's last store or flush touched, for its data note.
    let mut last_op: HashMap<u32, Op> = HashMap::new();
    // Each pool line's last flush: (thread, time), to spot misordering.
    let mut last_flush: HashMap<u64, (u32, u64)> = HashMap::new();
    loop {
        let ev = r.next_event()?;
        let at_end = ev.is_none();
        let crash_here = match &ev {
            None => true,
            Some(Event::Record(rec)) if is_fence(rec) && rec.time_ns >= pool.time_ns => {
                let k = fence_no;
                fence_no += 1;
                match &chosen {
                    None => true,
                    Some(s) => s.contains(&k),
                }
            }
            _ => false,
        };
        if crash_here {
            if out.images >= opts.budget {
                out.budget_exhausted = true;
                break;
            }
            out.points += 1;
            let time_ns = match &ev {
                Some(Event::Record(rec)) => rec.time_ns,
                _ => u64::MAX,
            };
            // Lines whose latest contents differ from the durable ones.
            let mut cand: Vec<(u64, [u8; 64])> = pending
                .iter()
                .filter(|(off, p)| p.latest != durable.line(**off))
                .map(|(off, p)| (*off, p.latest))
                .collect();
            cand.sort_by_key(|(o, _)| *o);
            let n = cand.len();
            let left = opts.budget - out.images;
            let want = per_point.min(left).max(1);
            let exhaustive = n < 63 && (1u64 << n) <= want;
            let count = if exhaustive { 1u64 << n } else { want };
            if !exhaustive {
                out.sampled_points += 1;
            }
            let mut rng = Rng(opts.seed ^ point_no.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            for i in 0..count {
                // Image i: bit j of the mask keeps line j. Sampled points
                // with room for three images or more start with "all
                // lost" and "all kept", then draw.
                let keep: Vec<bool> = if exhaustive {
                    (0..n).map(|j| i >> j & 1 == 1).collect()
                } else if i == 0 && count >= 3 {
                    vec![false; n]
                } else if i == 1 && count >= 3 {
                    vec![true; n]
                } else {
                    (0..n).map(|_| rng.next() & 1 == 1).collect()
                };
                let extra: Vec<(u64, &[u8; 64])> = cand
                    .iter()
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .map(|((o, b), _)| (*o + pool.file_offset, b))
                    .collect();
                durable.write(&image_path, &extra)?;
                out.images += 1;
                if let Some((status, output)) = run_check(&opts.check, &image_path, opts.timeout)? {
                    let split = |want: bool| {
                        cand.iter()
                            .zip(&keep)
                            .filter(|(_, k)| **k == want)
                            .map(|((o, _), _)| (*o + pool.file_offset, pool.base + *o))
                            .collect::<Vec<_>>()
                    };
                    out.failure = Some(Failure {
                        point: point_no,
                        record: records,
                        time_ns,
                        image: image_path.clone(),
                        lost: split(false),
                        kept: split(true),
                        status,
                        output,
                    });
                    return Ok(out);
                }
                if out.images >= opts.budget {
                    break;
                }
            }
            point_no += 1;
        }
        if at_end {
            break;
        }
        let Some(ev) = ev else { break };
        match ev {
            Event::Record(rec) => {
                records += 1;
                if rec.space == Space::Dram {
                    continue;
                }
                let t = rec.thread;
                if rec.op.is_store() || rec.op.is_flush() {
                    last_op.insert(t, rec.op);
                }
                let in_pool =
                    rec.addr < end && rec.addr.saturating_add(rec.size as u64) > pool.base;
                if is_fence(&rec) {
                    let done: Vec<u64> = pending
                        .iter()
                        .filter(|(_, p)| p.flushed_by == Some(t))
                        .map(|(o, _)| *o)
                        .collect();
                    for o in done {
                        let p = pending.get_mut(&o).expect("listed");
                        durable.set_line(o, &p.flushed);
                        p.flushed_by = None;
                        if p.latest == p.flushed {
                            pending.remove(&o);
                        }
                    }
                } else if in_pool && rec.op.is_flush() {
                    let mut line = rec.addr.max(pool.base) & !(LINE - 1);
                    while line < rec.addr.saturating_add(rec.size as u64) && line < end {
                        let o = line - pool.base;
                        let cur = durable.line(o);
                        let p = pending.entry(o).or_insert_with(|| Pending::new(cur));
                        p.flushed = p.latest;
                        p.flushed_by = Some(t);
                        last_flush.insert(o, (t, rec.time_ns));
                        if rec.op == Op::Clflush {
                            let l = p.latest;
                            pending.remove(&o);
                            durable.set_line(o, &l);
                        }
                        let Some(next) = line.checked_add(LINE) else {
                            break;
                        };
                        line = next;
                    }
                } else if in_pool && rec.op.is_store() {
                    let mut line = rec.addr.max(pool.base) & !(LINE - 1);
                    while line < rec.addr.saturating_add(rec.size.max(1) as u64) && line < end {
                        let o = line - pool.base;
                        let cur = durable.line(o);
                        pending.entry(o).or_insert_with(|| Pending::new(cur));
                        if let Some(&(ft, fns)) = last_flush.get(&o) {
                            if ft != t && rec.time_ns < fns {
                                out.misordered += 1;
                            }
                        }
                        let Some(next) = line.checked_add(LINE) else {
                            break;
                        };
                        line = next;
                    }
                }
            }
            Event::Note {
                thread,
                note: Note::Data { addr, bytes },
                ..
            } => {
                // The data of the thread's last store, or the contents of
                // the line its last flush wrote back.
                let last = last_op.get(&thread).copied();
                let dend = addr.saturating_add(bytes.len() as u64);
                if dend <= pool.base || addr >= end {
                    continue;
                }
                let mut line = addr.max(pool.base) & !(LINE - 1);
                while line < dend && line < end {
                    let o = line - pool.base;
                    let cur = durable.line(o);
                    let p = pending.entry(o).or_insert_with(|| Pending::new(cur));
                    for i in 0..64u64 {
                        let a = line + i;
                        if a >= addr && a < dend {
                            p.latest[i as usize] = bytes[(a - addr) as usize];
                        }
                    }
                    match last {
                        Some(Op::Clflush) => {
                            let l = p.latest;
                            pending.remove(&o);
                            durable.set_line(o, &l);
                        }
                        // A flush wrote back what the line holds; a
                        // non-temporal store is on its way to PM.
                        Some(op) if op.is_flush() || op == Op::NtWrite => {
                            p.flushed = p.latest;
                            p.flushed_by = Some(thread);
                        }
                        _ => {}
                    }
                    let Some(next) = line.checked_add(LINE) else {
                        break;
                    };
                    line = next;
                }
            }
            Event::Note { .. } => {}
        }
    }
    std::fs::remove_file(&image_path).ok();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace where thread 0 stores a line at `store_ns` and thread 1
    /// flushes and fences it at times 20 and 21 (the store written after
    /// them in the file, as a drain batch can order them).
    fn two_thread_trace(dir: &Path, store_ns: u64) -> PathBuf {
        use pmlab_trace::binary::Writer;
        use pmlab_trace::Record;
        let base = 0x7f00_0000_0000u64;
        let trace = dir.join(format!("t{store_ns}.pmt"));
        let mut w = Writer::new(File::create(&trace).unwrap()).unwrap();
        let range = Note::PmRange {
            base,
            len: PAGE,
            file_offset: 0,
            path: dir.join("pool").display().to_string(),
            init: false,
        };
        w.write_note(1, 1, &range).unwrap();
        let rec = |time_ns, thread, op| Record {
            time_ns,
            thread,
            op,
            space: Space::Pm,
            addr: base,
            size: 8,
        };
        w.write(&rec(20, 1, Op::Clwb)).unwrap();
        w.write(&rec(21, 1, Op::SFence)).unwrap();
        w.write(&rec(store_ns, 0, Op::Write)).unwrap();
        let data = Note::Data {
            addr: base,
            bytes: vec![7; 8],
        };
        w.write_note(store_ns, 0, &data).unwrap();
        w.finish().unwrap();
        trace
    }

    #[test]
    fn a_store_filed_after_a_later_flush_of_another_thread_is_counted() {
        let dir = std::env::temp_dir().join(format!("pmlab-crash-mis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let opts = |sub: &str| Options {
            budget: 4,
            seed: 1,
            points: Points::End,
            check: "true".into(),
            timeout: Duration::from_secs(10),
            dir: dir.join(sub),
        };
        let early = run(&two_thread_trace(&dir, 10), &opts("a")).unwrap();
        assert_eq!(
            early.misordered, 1,
            "store at 10 ns filed after a flush at 20 ns"
        );
        assert!(early.failure.is_none());
        let late = run(&two_thread_trace(&dir, 30), &opts("b")).unwrap();
        assert_eq!(late.misordered, 0, "a store after the flush is in order");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn points_parse_fences_end_and_counts() {
        assert_eq!(Points::parse("fences").unwrap(), Points::Fences);
        assert_eq!(Points::parse("end").unwrap(), Points::End);
        assert_eq!(Points::parse("7").unwrap(), Points::Sample(7));
        for bad in ["0", "ends", "-1", ""] {
            let e = Points::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--points"), "{bad}: {e}");
        }
    }
}
