//! Trace recording: the seam between the PM API / instrumentation hooks and
//! the trace writer.
//!
//! Every PM operation the runtime sees is offered to [`record`]. When
//! tracing is off (the default) that costs one relaxed atomic load.
//!
//! # How it works
//!
//! * Tracing starts in a constructor when `PMLAB_TRACE_FILE` names a file
//!   (`pmlab trace` sets it). The header's metadata names the program, the
//!   pid, the clock and whether libpmem's entry points are interposed
//!   (`pmdk=interposed`), plus fixed-width fields filled in when the trace
//!   is finished: `records`, `dropped`, `waits`, and `stores`
//!   (`instrumented` when the program's own stores were recorded by `pmlab
//!   cc` instrumentation, else `flushes-only`: the analyses then count
//!   flushed lines as stored). `PMLAB_TRACE_STORES=1` (set by `pmlab
//!   trace` for instrumented programs) turns the instrumentation hooks on:
//!   they record PM stores one by one and count DRAM accesses and PM loads
//!   as `UNTRACED` records (see `source::instrumented::trace`); [`finish`]
//!   first records the calling thread's pending counts (the hooks register
//!   that with [`before_finish`]: the tracer itself knows nothing of them).
//! * Each thread, at its first record, maps (with a raw `mmap` system call)
//!   its own ring of [`RING_ENTRIES`] records and takes the next thread
//!   number (0, 1, … in order of first record; at most [`MAX_THREADS`]).
//! * [`record`] reads `CLOCK_MONOTONIC` (vDSO, no system call), writes one
//!   entry into the calling thread's ring and publishes it with a release
//!   store. It takes no lock, allocates nothing and calls no function that
//!   pmlab interposes, so it is async-signal-safe. A record made while the
//!   same thread is already inside `record` (a signal handler interrupting
//!   it) is dropped and counted.
//! * A full ring **blocks** the recording thread by default: it yields the
//!   CPU until the writer has made room, so the trace stays complete (a
//!   dropped record would corrupt epochs and dependencies), at the price of
//!   the program's timing while the writer catches up. The waits are
//!   counted (`waits` in the header). It gives up after one second (the
//!   writer died?) and drops. With `PMLAB_TRACE_FULL=drop` a full ring
//!   drops at once, never changing timing. Drops are counted per thread and
//!   written into the header's `dropped` field; `pmlab trace` reports both.
//!   A record made by a signal handler that interrupted `record` on the
//!   same thread is always dropped (never blocks).
//! * One writer thread drains the rings every millisecond, encodes with
//!   `pmlab_trace::binary::Writer` and writes the file. Records of one
//!   thread are in order; threads interleave by drain batch (the format
//!   allows it).
//! * At `exit` (an `atexit` handler) the writer drains everything, flushes
//!   and patches the header's counters. `_exit` and `_Exit` skip `atexit`:
//!   the interposed ones (`api.rs`) stop recording and wait, at most 2 s,
//!   for the writer to do the same ([`finish_before_exit`]). A program
//!   ended by a signal leaves a readable trace up to the last drain, with
//!   counters 0.
//! * `fork`: the child stops recording (its copy of the rings has no writer
//!   thread). `exec`: the constructor of the new image sees
//!   `PMLAB_TRACE_NESTED` (set by the first traced process) and records
//!   into `<file>.<pid>` instead, so a traced program's children never
//!   overwrite its trace. Records not yet drained when a process calls
//!   `exec` (at most ~1 ms worth) are lost.

use crate::clock::monotonic_ns;
use crate::trace_notes as notes;
use pmlab_trace::ext::{code as note_code, Note};
use pmlab_trace::{binary, Op, Record, Space};
use std::cell::{Cell, UnsafeCell};
use std::ffi::CStr;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Records each thread's ring holds before it drops.
pub const RING_ENTRIES: usize = 1 << 17;
/// Threads that can record; later threads' records are dropped and counted.
pub const MAX_THREADS: usize = 1024;

/// Environment variable naming the trace file.
pub const ENV_FILE: &str = "PMLAB_TRACE_FILE";
/// Set by the first traced process so that exec'd children trace into
/// `<file>.<pid>`.
pub const ENV_NESTED: &str = "PMLAB_TRACE_NESTED";

/// True when a trace is being recorded.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    time: u64,
    addr: u64,
    /// Call site of a store or flush (0: not recorded).
    site: u64,
    size: u32,
    /// An [`Op`] code, or an annotation code ([`note_code::TXADD`],
    /// [`note_code::DATA`]: `size` bytes follow in the next
    /// `ceil(size / 32)` entries).
    op: u8,
    space: u8,
}

/// Bytes of data one ring entry carries after a `DATA` entry.
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();
/// The longest data one `DATA` entry announces; longer stores are split.
const DATA_CHUNK: usize = 4096;

/// One thread's single-producer single-consumer ring.
#[repr(C)]
struct Ring {
    /// Next entry the writer reads (written by the writer only).
    head: AtomicUsize,
    /// Next entry the thread writes (written by the thread only).
    tail: AtomicUsize,
    dropped: AtomicU64,
    entries: [UnsafeCell<Entry>; RING_ENTRIES],
}

static SLOTS: [AtomicPtr<Ring>; MAX_THREADS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; MAX_THREADS];
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
/// Block (true, default) or drop (PMLAB_TRACE_FULL=drop) on a full ring.
static BLOCK_WHEN_FULL: AtomicBool = AtomicBool::new(true);
/// Times a thread waited for room in its ring.
static WAITS: AtomicU64 = AtomicU64::new(0);
/// Records dropped without a ring (too many threads, no memory, re-entry).
static DROPPED_GLOBAL: AtomicU64 = AtomicU64::new(0);
static START_NS: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
static IN_CHILD: AtomicBool = AtomicBool::new(false);
static WRITER: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);
/// The writer thread has completed the file (or given up on it).
static WRITER_DONE: AtomicBool = AtomicBool::new(false);
/// The process that started the trace (a `vfork` child shares our memory
/// but not our pid).
static OWNER_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

thread_local! {
    static LOCAL: Cell<*mut Ring> = const { Cell::new(ptr::null_mut()) };
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Record one operation of the calling thread. Async-signal-safe; never
/// calls back into an interposed function; never blocks.
#[inline]
pub fn record(op: Op, space: Space, addr: u64, size: u32) {
    if !enabled() {
        return;
    }
    record_slow(op, space, addr, size);
}

fn record_slow(op: Op, space: Space, addr: u64, size: u32) {
    with_ring(|r| {
        let data = notes::data_on();
        if data {
            emit_pending_data(r);
        }
        let site = if notes::sites_on() && space == Space::Pm && (op.is_store() || op.is_flush()) {
            notes::call_site()
        } else {
            0
        };
        push(
            r,
            &[Entry {
                time: now(),
                addr,
                site,
                size,
                op: op.code(),
                space: (space == Space::Dram) as u8,
            }],
        );
        if data && space == Space::Pm {
            if op.is_store() {
                PENDING.with(|p| p.set((addr, size)));
            } else if op.is_flush() {
                emit_data(r, addr, size);
            }
        }
    });
}

/// The monotonic time at which the trace started.
pub(crate) fn start_ns() -> u64 {
    START_NS.load(Ordering::Relaxed)
}

fn now() -> u64 {
    monotonic_ns().saturating_sub(START_NS.load(Ordering::Relaxed))
}

thread_local! {
    /// A store whose data is read at the thread's next record (the
    /// instrumentation hooks record a store before it happens).
    static PENDING: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// Record the bytes of the thread's pending store, if any.
fn emit_pending_data(r: &Ring) {
    let (addr, size) = PENDING.with(|p| p.replace((0, 0)));
    if size > 0 {
        emit_data(r, addr, size);
    }
}

/// Record what `[addr, addr+size)` holds now, in chunks of at most
/// [`DATA_CHUNK`] bytes. Memory that cannot be read (unmapped since) is
/// skipped.
fn emit_data(r: &Ring, addr: u64, size: u32) {
    let mut done = 0usize;
    let total = size as usize;
    let mut entries = [Entry {
        time: 0,
        addr: 0,
        site: 0,
        size: 0,
        op: 0,
        space: 0,
    }; 1 + DATA_CHUNK / ENTRY_BYTES];
    while done < total {
        let n = (total - done).min(DATA_CHUNK);
        let a = addr + done as u64;
        let k = n.div_ceil(ENTRY_BYTES);
        // SAFETY: entries[1..=k] is plain old data of at least n bytes.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(entries[1..].as_mut_ptr() as *mut u8, k * ENTRY_BYTES)
        };
        if !notes::read_own_memory(a, &mut dst[..n]) {
            return;
        }
        entries[0] = Entry {
            time: now(),
            addr: a,
            site: 0,
            size: n as u32,
            op: note_code::DATA,
            space: 0,
        };
        push(r, &entries[..1 + k]);
        done += n;
    }
}

/// Record an annotation entry (`TXADD`) of the calling thread.
pub(crate) fn record_code(code: u8, addr: u64, size: u32) {
    if !enabled() {
        return;
    }
    with_ring(|r| {
        if notes::data_on() {
            emit_pending_data(r);
        }
        push(
            r,
            &[Entry {
                time: now(),
                addr,
                site: 0,
                size,
                op: code,
                space: 0,
            }],
        )
    });
}

/// Run `f` with the calling thread's ring, under the re-entrancy guard.
fn with_ring(f: impl FnOnce(&Ring)) {
    // try_with: a record from a thread being torn down is dropped.
    let Ok(busy) = BUSY.try_with(|b| b.replace(true)) else {
        DROPPED_GLOBAL.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if busy {
        DROPPED_GLOBAL.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut ring = LOCAL.with(|l| l.get());
    if ring.is_null() {
        ring = register_thread();
        if ring.is_null() {
            DROPPED_GLOBAL.fetch_add(1, Ordering::Relaxed);
            BUSY.with(|b| b.set(false));
            return;
        }
        LOCAL.with(|l| l.set(ring));
    }
    // SAFETY: ring points to a live mapping owned by this thread (producer
    // side) and never unmapped.
    f(unsafe { &*ring });
    BUSY.with(|b| b.set(false));
}

/// Append `es` to the ring and publish them together (a `DATA` entry and
/// its bytes are never seen apart); waits for room as configured.
fn push(r: &Ring, es: &[Entry]) {
    let need = es.len();
    let tail = r.tail.load(Ordering::Relaxed);
    let mut head = r.head.load(Ordering::Acquire);
    let full = |head: usize| tail.wrapping_sub(head) + need > RING_ENTRIES;
    if full(head) && BLOCK_WHEN_FULL.load(Ordering::Relaxed) {
        WAITS.fetch_add(1, Ordering::Relaxed);
        let give_up = monotonic_ns() + 1_000_000_000;
        while full(head) && monotonic_ns() < give_up {
            // SAFETY: sched_yield has no preconditions and is
            // async-signal-safe.
            unsafe { libc::sched_yield() };
            head = r.head.load(Ordering::Acquire);
        }
    }
    if full(head) {
        r.dropped.fetch_add(need as u64, Ordering::Relaxed);
        return;
    }
    for (i, e) in es.iter().enumerate() {
        // SAFETY: the slots from tail are not visible to the writer until
        // the release store below; the index is in bounds.
        unsafe {
            r.entries[tail.wrapping_add(i) % RING_ENTRIES]
                .get()
                .write(*e)
        };
    }
    r.tail.store(tail.wrapping_add(need), Ordering::Release);
}

#[cold]
fn register_thread() -> *mut Ring {
    let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    if n >= MAX_THREADS {
        return ptr::null_mut();
    }
    let len = std::mem::size_of::<Ring>();
    // SAFETY: anonymous private mapping via the raw system call, so no
    // interposed mmap is reached; zeroed memory is a valid empty Ring.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            ptr::null_mut::<libc::c_void>(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1i64,
            0i64,
        )
    };
    if p < 0 {
        return ptr::null_mut();
    }
    let ring = p as *mut Ring;
    SLOTS[n].store(ring, Ordering::Release);
    ring
}

/// Start recording into `path`. Called by the constructor; public for the
/// runtime's own tests. Fails if tracing already runs.
pub fn start(path: &str, meta_extra: &[(&str, &str)]) -> std::io::Result<()> {
    if enabled() || STOP.load(Ordering::Relaxed) {
        return Err(std::io::Error::other("tracing already started"));
    }
    START_NS.store(monotonic_ns(), Ordering::Relaxed);
    let file = File::create(path)?;
    notes::set_trace_path(path);
    let program = program_name();
    let pid = std::process::id().to_string();
    let mut meta: Vec<(&str, &str)> = vec![
        ("producer", "libpmlab"),
        ("program", &program),
        ("pid", &pid),
        ("clock", "CLOCK_MONOTONIC"),
    ];
    meta.extend_from_slice(meta_extra);
    meta.push(("records", PLACEHOLDER));
    meta.push(("dropped", PLACEHOLDER));
    meta.push(("waits", PLACEHOLDER));
    meta.push(("stores", STORES_FLUSHES));
    let offsets = placeholder_offsets(&meta);
    let w = binary::Writer::with_meta(file, &meta).map_err(std::io::Error::other)?;
    let handle = std::thread::Builder::new()
        .name("pmlab-trace".into())
        .spawn(move || writer_loop(w, offsets))?;
    *WRITER.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
    OWNER_PID.store(crate::sys::own_pid(), Ordering::Relaxed);
    ENABLED.store(true, Ordering::Release);
    Ok(())
}

const PLACEHOLDER: &str = "00000000000000000000";
/// Values of the `stores` key (same width: the writer patches it in
/// place): the program's plain stores were seen (built with `pmlab cc`),
/// or only flushes and library copies were.
const STORES_FLUSHES: &str = "flushes-only";
const STORES_INSTRUMENTED: &str = "instrumented";
/// The program's own stores are seen: the instrumentation hooks were
/// turned on (before the trace started or while it records).
static STORES_SEEN: AtomicBool = AtomicBool::new(false);

/// Called by the instrumentation hooks when they turn on: the trace's
/// `stores` field says `instrumented` (the program's plain stores are
/// recorded), not `flushes-only`.
pub fn note_instrumented() {
    STORES_SEEN.store(true, Ordering::Relaxed);
}

/// A function run on the finishing thread before recording stops (set by
/// the instrumentation hooks: it records that thread's pending `UNTRACED`
/// counts); 0 when none.
static BEFORE_FINISH: AtomicUsize = AtomicUsize::new(0);

/// Have `f` run by [`finish`] and [`finish_before_exit`] before recording
/// stops. Async-signal-safe `f` only (it may run in `_exit`).
pub fn before_finish(f: fn()) {
    BEFORE_FINISH.store(f as usize, Ordering::Release);
}

/// Run the function given to [`before_finish`], if any.
fn run_before_finish() {
    let f = BEFORE_FINISH.load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: only `before_finish` stores here, a `fn()`.
        unsafe { std::mem::transmute::<usize, fn()>(f)() }
    }
}

/// Byte offsets in the file of the `records`, `dropped`, `stores` and
/// `waits` values.
fn placeholder_offsets(meta: &[(&str, &str)]) -> [u64; 4] {
    let mut off = 16u64;
    let mut found = [0u64; 4];
    for (k, v) in meta {
        off += k.len() as u64 + 1;
        match *k {
            "records" => found[0] = off,
            "dropped" => found[1] = off,
            "stores" => found[2] = off,
            "waits" => found[3] = off,
            _ => {}
        }
        off += v.len() as u64 + 1;
    }
    found
}

fn program_name() -> String {
    std::fs::read("/proc/self/cmdline")
        .ok()
        .and_then(|b| {
            b.split(|&c| c == 0)
                .next()
                .map(|s| String::from_utf8_lossy(s).into_owned())
        })
        .unwrap_or_default()
        .replace(['\n', '='], "_")
}

fn drain_all(w: &mut binary::Writer<File>, sites: &mut [u64]) -> std::io::Result<bool> {
    let mut any = notes::write_global_notes(w)?;
    let n = NEXT_THREAD.load(Ordering::Acquire).min(MAX_THREADS);
    for (t, slot) in SLOTS.iter().enumerate().take(n) {
        let ring = slot.load(Ordering::Acquire);
        if ring.is_null() {
            continue;
        }
        // SAFETY: rings are never unmapped; the writer is the only consumer.
        let r = unsafe { &*ring };
        let mut head = r.head.load(Ordering::Relaxed);
        let tail = r.tail.load(Ordering::Acquire);
        while head != tail {
            // SAFETY: entries between head and tail were published by the
            // producer's release store and are not written again until head
            // moves past them.
            let e = unsafe { r.entries[head % RING_ENTRIES].get().read() };
            head = head.wrapping_add(1);
            any = true;
            if e.op == note_code::DATA {
                let k = (e.size as usize).div_ceil(ENTRY_BYTES);
                let mut bytes = Vec::with_capacity(k * ENTRY_BYTES);
                for _ in 0..k {
                    // SAFETY: as above: the data entries were published
                    // with their DATA entry.
                    let d = unsafe { r.entries[head % RING_ENTRIES].get().read() };
                    head = head.wrapping_add(1);
                    // SAFETY: Entry is plain old data.
                    bytes.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(&d as *const Entry as *const u8, ENTRY_BYTES)
                    });
                }
                bytes.truncate(e.size as usize);
                let note = Note::Data {
                    addr: e.addr,
                    bytes,
                };
                w.write_note(e.time, t as u32, &note)
                    .map_err(std::io::Error::other)?;
                continue;
            }
            if e.op == note_code::TXADD {
                let note = Note::TxAdd {
                    addr: e.addr,
                    len: e.size as u64,
                };
                w.write_note(e.time, t as u32, &note)
                    .map_err(std::io::Error::other)?;
                continue;
            }
            if e.site != 0 && sites[t] != e.site {
                sites[t] = e.site;
                w.write_note(e.time, t as u32, &Note::Site { ip: e.site })
                    .map_err(std::io::Error::other)?;
            }
            let op = Op::from_code(e.op).unwrap_or(Op::Untraced);
            let rec = Record {
                time_ns: e.time,
                thread: t as u32,
                op,
                space: if e.space != 0 { Space::Dram } else { Space::Pm },
                addr: e.addr,
                size: e.size,
            };
            w.write(&rec).map_err(std::io::Error::other)?;
        }
        r.head.store(head, Ordering::Release);
    }
    Ok(any)
}

fn dropped_total() -> u64 {
    let n = NEXT_THREAD.load(Ordering::Acquire).min(MAX_THREADS);
    let mut d = DROPPED_GLOBAL.load(Ordering::Relaxed);
    for slot in SLOTS.iter().take(n) {
        let ring = slot.load(Ordering::Acquire);
        if !ring.is_null() {
            // SAFETY: as in drain_all.
            d += unsafe { &*ring }.dropped.load(Ordering::Relaxed);
        }
    }
    d
}

fn writer_loop(mut w: binary::Writer<File>, offsets: [u64; 4]) {
    let result = (|| -> std::io::Result<()> {
        let mut sites = vec![0u64; MAX_THREADS];
        notes::note_modules();
        loop {
            let stopping = STOP.load(Ordering::Acquire);
            if stopping {
                // Objects loaded since the start (dlopen) get their notes.
                notes::note_modules();
            }
            let any = drain_all(&mut w, &mut sites)?;
            if stopping && !any {
                break;
            }
            if !any {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let records = w.records();
        let mut file = w.finish().map_err(std::io::Error::other)?;
        for (off, value) in [
            (offsets[0], records),
            (offsets[1], dropped_total()),
            (offsets[3], WAITS.load(Ordering::Relaxed)),
        ] {
            file.seek(SeekFrom::Start(off))?;
            file.write_all(format!("{value:020}").as_bytes())?;
        }
        if STORES_SEEN.load(Ordering::Relaxed) {
            file.seek(SeekFrom::Start(offsets[2]))?;
            file.write_all(STORES_INSTRUMENTED.as_bytes())?;
        }
        file.flush()
    })();
    if let Err(e) = result {
        let msg = format!("pmlab: trace: cannot write the trace: {e}\n");
        // SAFETY: plain write(2) of a valid buffer to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
    WRITER_DONE.store(true, Ordering::Release);
}

/// Stop recording, drain every ring and complete the file. Idempotent;
/// does nothing in a forked child.
pub fn finish() {
    if IN_CHILD.load(Ordering::Relaxed) {
        return;
    }
    run_before_finish();
    flush_pending_data();
    ENABLED.store(false, Ordering::Release);
    STOP.store(true, Ordering::Release);
    let handle = WRITER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// For the interposed `_exit`/`_Exit`: stop recording and wait (at most
/// 2 s) until the writer thread has drained the rings and completed the
/// file, as [`finish`] does at `exit`. It does not join the writer (not
/// allowed in a signal handler, where `_exit` may be called) but polls its
/// flag; a writer that cannot finish in time leaves the trace readable up
/// to its last drain. Nothing happens in a forked child, in a `vfork`
/// child (`posix_spawn`: it shares the parent's memory), or when not
/// tracing. Async-signal-safe.
pub fn finish_before_exit() {
    if IN_CHILD.load(Ordering::Relaxed)
        || crate::sys::own_pid() != OWNER_PID.load(Ordering::Relaxed)
        || !(ENABLED.load(Ordering::Acquire) || STOP.load(Ordering::Acquire))
    {
        return;
    }
    // A second thread calling `_exit` meanwhile (recording already off)
    // waits for the same writer.
    if ENABLED.load(Ordering::Acquire) {
        // Counts first: recording stops with ENABLED.
        run_before_finish();
        flush_pending_data();
        ENABLED.store(false, Ordering::Release);
        STOP.store(true, Ordering::Release);
    }
    crate::clock::wait_while(crate::clock::HANDOFF_WAIT_NS, || {
        !WRITER_DONE.load(Ordering::Acquire)
    });
}

/// Record the data of the calling thread's last store (the others' last
/// stores keep no data: their next record never comes).
fn flush_pending_data() {
    if enabled() && notes::data_on() {
        with_ring(emit_pending_data);
    }
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn at_exit() {
    finish();
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn at_fork_child() {
    IN_CHILD.store(true, Ordering::Relaxed);
    ENABLED.store(false, Ordering::Relaxed);
}

/// A trace the environment asks for (`PMLAB_TRACE_FILE`), read by
/// [`request_from_env`] and started by [`start_requested`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// The file to record into (`<file>.<pid>` in an exec'd child).
    pub path: String,
    /// `PMLAB_TRACE_STORES=1`: the program was built with `pmlab cc`, and
    /// its stores are to be recorded by the instrumentation hooks (the
    /// library's start-up turns them on before [`start_requested`]).
    pub stores: bool,
}

/// The trace the environment asks for, if any (from the library's
/// constructor, `startup.rs`): reads `PMLAB_TRACE_FILE`,
/// `PMLAB_TRACE_NESTED` (and sets it for exec'd children),
/// `PMLAB_TRACE_FULL` and `PMLAB_TRACE_STORES`.
#[cfg_attr(test, allow(dead_code))]
pub fn request_from_env() -> Option<TraceRequest> {
    let path = env(ENV_FILE)?;
    if path.is_empty() {
        return None;
    }
    let nested = env(ENV_NESTED).is_some();
    let path = if nested {
        format!("{path}.{}", std::process::id())
    } else {
        path
    };
    if !nested {
        // SAFETY: constructors run before the program starts threads.
        unsafe { libc::setenv(c"PMLAB_TRACE_NESTED".as_ptr(), c"1".as_ptr(), 1) };
    }
    match env("PMLAB_TRACE_FULL").as_deref() {
        None | Some("") | Some("block") => {}
        Some("drop") => BLOCK_WHEN_FULL.store(false, Ordering::Relaxed),
        Some(other) => {
            let msg = format!(
                "pmlab: trace: PMLAB_TRACE_FULL={other} is not 'block' or 'drop'; blocking\n"
            );
            // SAFETY: plain write(2) to stderr.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        }
    }
    notes::init_from_env(env);
    let stores = env("PMLAB_TRACE_STORES").as_deref() == Some("1");
    Some(TraceRequest { path, stores })
}

/// Start the trace `req` asks for, with `meta_extra` in its header, and
/// register the handlers that finish it at exit and stop it in a forked
/// child; on failure say why on stderr. Returns whether it records.
#[cfg_attr(test, allow(dead_code))]
pub fn start_requested(req: &TraceRequest, meta_extra: &[(&str, &str)]) -> bool {
    match start(&req.path, meta_extra) {
        Ok(()) => {
            // SAFETY: registering plain extern "C" handlers.
            unsafe {
                libc::atexit(at_exit);
                libc::pthread_atfork(None, None, Some(at_fork_child));
            }
            true
        }
        Err(e) => {
            let msg = format!(
                "pmlab: trace: cannot record into {}: {e}; check {ENV_FILE} names a writable file\n",
                req.path
            );
            // SAFETY: plain write(2) to stderr.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            false
        }
    }
}

/// Look `name` up in the environment (libc's, without allocating a Rust
/// copy of it).
#[cfg_attr(test, allow(dead_code))]
pub(crate) fn env(name: &str) -> Option<String> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getenv with a valid C string; the result is copied at once.
    let p = unsafe { libc::getenv(c.as_ptr()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: getenv returns a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_from_threads_reach_the_file_with_counters() {
        let dir = std::env::temp_dir().join(format!("pmlab-tracer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pmt");
        start(path.to_str().unwrap(), &[("test", "1")]).unwrap();
        record(Op::TxBegin, Space::Pm, 1, 0);
        let handles: Vec<_> = (0..3)
            .map(|i| {
                std::thread::spawn(move || {
                    for j in 0..1000u64 {
                        record(Op::Write, Space::Pm, 0x1000 * i + j * 8, 8);
                    }
                    record(Op::SFence, Space::Pm, 0, 0);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        record(Op::TxEnd, Space::Pm, 1, 0);
        finish();
        record(Op::Write, Space::Pm, 0, 8); // after finish: ignored
        let f = std::fs::File::open(&path).unwrap();
        let r = binary::Reader::new(std::io::BufReader::new(f)).unwrap();
        assert_eq!(r.meta_value("test"), Some("1"));
        // Other tests of this crate run in parallel in this process and may
        // record too (API calls, instrumentation hooks): check this test's
        // records by their addresses, and the counters for consistency.
        let header_records: usize = r.meta_value("records").unwrap().parse().unwrap();
        assert_eq!(r.meta_value("dropped"), Some("00000000000000000000"));
        assert!(r.meta_value("waits").is_some());
        assert!(matches!(
            r.meta_value("stores"),
            Some("flushes-only") | Some("instrumented")
        ));
        let recs: Vec<Record> = r.collect::<Result<_, _>>().unwrap();
        assert_eq!(recs.len(), header_records);
        let mine: Vec<&Record> = recs
            .iter()
            .filter(|r| r.op == Op::Write && r.addr < 0x4000 && r.size == 8)
            .collect();
        assert_eq!(mine.len(), 3000);
        assert!(recs.iter().any(|r| r.op == Op::TxBegin && r.addr == 1));
        assert!(recs.iter().any(|r| r.op == Op::TxEnd && r.addr == 1));
        let mut threads: Vec<u32> = mine.iter().map(|r| r.thread).collect();
        threads.sort();
        threads.dedup();
        assert_eq!(threads.len(), 3, "one number per recording thread");
        for t in threads {
            let times: Vec<u64> = mine
                .iter()
                .filter(|r| r.thread == t)
                .map(|r| r.time_ns)
                .collect();
            assert_eq!(times.len(), 1000);
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "thread {t} in order"
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
