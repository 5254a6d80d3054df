//! Tracing unmodified PMDK programs by interposing libpmem's and
//! libpmemobj's exported entry points.
//!
//! When libpmlab is preloaded, the dynamic linker binds a program's (and
//! libpmemobj's) calls to these symbols to the functions below; each one
//! records what it sees with [`crate::tracer::record`] and forwards to the
//! real function, found once with `dlsym(RTLD_NEXT, …)`, with the same
//! arguments and result. Only when tracing is on do the wrappers record.
//!
//! # What is seen
//!
//! `nm -D libpmemobj.so.1` (Debian's PMDK 1.x) imports `pmem_flush`,
//! `pmem_drain`, `pmem_persist`, `pmem_msync`, `pmem_memcpy`,
//! `pmem_memmove`, `pmem_memset`, `pmem_deep_flush` and `pmem_is_pmem`
//! from libpmem, through the PLT, so all of its flushing, draining and
//! bulk copying (undo-log entries, redo logs, allocator metadata) is seen:
//!
//! * `pmem_flush(a, n)` / `pmem_deep_flush`: one flush per 64-byte line,
//!   recorded as the instruction libpmem uses here (`CLWB` where the CPU has
//!   it, else `CLFLUSHOPT`, else `CLFLUSH`, honouring `PMEM_NO_CLWB` and
//!   `PMEM_NO_CLFLUSHOPT`);
//! * `pmem_drain()`: `SFENCE`;
//! * `pmem_persist` / `pmem_msync` / `pmem_deep_persist`: flushes then
//!   `SFENCE`;
//! * `pmem_memcpy`/`memmove`/`memset` (flags) and their `_persist` and
//!   `_nodrain` forms: the stores, one record per line touched, as
//!   non-temporal (`NT`) when the flags ask for it or, without a temporal
//!   flag, when the length is at least 256 bytes (libpmem's default
//!   non-temporal threshold), else `W` followed by `CLWB`s; then `SFENCE`
//!   unless the call does not drain;
//! * `pmemobj_tx_begin` / `pmemobj_tx_end`: `TXBEGIN` / `TXEND` (nested
//!   transactions nest);
//! * `pmemobj_tx_add_range`, `pmemobj_tx_add_range_direct`,
//!   `pmemobj_tx_alloc`, `pmemobj_tx_zalloc`: `USERDATA` for the range the
//!   program declares it will modify or allocates (the basis of write
//!   amplification; it over-counts user data when a program snapshots more
//!   than it changes); and a `TXADD` note (`trace_notes::tx_add`), the
//!   transaction's log coverage for `pmlab check` (also for
//!   `pmemobj_tx_xadd_range`, `_xadd_range_direct` and `pmemobj_tx_xalloc`);
//! * `pmemobj_create`, `pmemobj_open`, `pmem_map_file`: a `PMRANGE` note
//!   for the mapping and its file (with data, `pmemobj_open` and
//!   `pmem_map_file` save the file's contents first, `pmemobj_create` the
//!   pool as created, for `pmlab crash`).
//!
//! # What is not seen
//!
//! * The program's own cacheable stores into the pool and libpmemobj's
//!   inline stores (log headers, object headers): only their flushes are
//!   seen. `pmlab analyze` therefore counts a flushed line as stored in the
//!   epoch of its flush (the trace says `pmdk=interposed`), which is where
//!   PMDK flushes them in practice.
//! * Loads from PM, and DRAM accesses: the PM share of accesses is
//!   unknown for such traces (build with `pmlab cc` to get it).
//! * libpmem's internal calls (e.g. `pmem_persist` calling its own flush
//!   routine) do not go through the PLT; libpmem2 and statically linked
//!   PMDK are not interposed at all.
//! * `pmemobj_tx_begin` is variadic; the wrapper forwards the first four
//!   variadic words, enough for `TX_BEGIN(pop)` and one lock parameter
//!   (`TX_BEGIN_PARAM(pop, TX_PARAM_MUTEX, &m)`); more parameters than
//!   that are not supported under tracing.
//!
//! libpmemobj only uses libpmem's flushes when the pool is on real (or
//! forced) persistent memory; otherwise it calls `pmem_msync`. `pmlab
//! trace` sets `PMEM_IS_PMEM_FORCE=1` unless the user set it.

// Every wrapper is an `unsafe extern "C"` entry point whose safety
// contract is exactly that of the libpmem/libpmemobj function it replaces.
#![allow(clippy::missing_safety_doc)]

use crate::trace_notes::{self, tx_add};
use crate::tracer::{enabled, record};
use pmlab_trace::{Op, Space};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

const PMEM_F_MEM_NODRAIN: c_uint = 1 << 0;
const PMEM_F_MEM_NONTEMPORAL: c_uint = 1 << 1;
const PMEM_F_MEM_TEMPORAL: c_uint = 1 << 2;
const PMEM_F_MEM_NOFLUSH: c_uint = 1 << 5;
/// libpmem's default length from which copies are non-temporal.
const NT_THRESHOLD: usize = 256;
const LINE: u64 = 64;

/// A real function looked up once with `dlsym(RTLD_NEXT, name)`.
struct Real {
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
}

impl Real {
    const fn new(name: &'static CStr) -> Real {
        Real {
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            return p;
        }
        // SAFETY: dlsym with a valid NUL-terminated name.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        if p.is_null() {
            let msg = format!(
                "pmlab: trace: {} is called but cannot be found in the libraries after libpmlab; aborting\n",
                self.name.to_string_lossy()
            );
            // SAFETY: write(2) of a valid buffer, then abort.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::abort();
            }
        }
        self.ptr.store(p, Ordering::Relaxed);
        p
    }
}

/// True when libpmem is loaded in this process (its entry points will be
/// traced).
pub fn libpmem_present() -> bool {
    // SAFETY: dlsym with a valid name.
    !unsafe { libc::dlsym(libc::RTLD_NEXT, c"pmem_drain".as_ptr()) }.is_null()
}

thread_local! {
    /// Set while a wrapper runs, so nested wrapped calls are not recorded
    /// twice.
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` (the real call, with recording) unless already inside a
/// wrapper on this thread, in which case only `real` runs.
#[inline]
fn guarded<T>(rec: impl FnOnce() -> T, plain: impl FnOnce() -> T) -> T {
    if !enabled() {
        return plain();
    }
    let outer = INSIDE.try_with(|c| !c.replace(true)).unwrap_or(false);
    if !outer {
        return plain();
    }
    let r = rec();
    let _ = INSIDE.try_with(|c| c.set(false));
    r
}

fn lines(addr: u64, len: usize, op: Op) {
    if len == 0 {
        return;
    }
    let end = addr.saturating_add(len as u64);
    let mut line = addr & !(LINE - 1);
    while line < end {
        if op.is_flush() {
            record(op, Space::Pm, line, LINE as u32);
        } else {
            let lo = addr.max(line);
            let hi = end.min(line + LINE);
            record(op, Space::Pm, lo, (hi - lo) as u32);
        }
        line += LINE;
    }
}

fn flush(addr: *const c_void, len: usize) {
    lines(addr as u64, len, libpmem_flush_op());
}

/// The flush instruction libpmem uses on this machine, as it chooses it:
/// the best the CPU has (`clwb`, else `clflushopt`, else `clflush`), less
/// what `PMEM_NO_CLWB=1` and `PMEM_NO_CLFLUSHOPT=1` rule out.
fn libpmem_flush_op() -> Op {
    // 0 (a read) is never a flush: not chosen yet.
    static CHOSEN: AtomicU8 = AtomicU8::new(0);
    if let Some(op) = Op::from_code(CHOSEN.load(Ordering::Relaxed)).filter(|o| o.is_flush()) {
        return op;
    }
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| v == "1");
    let op = pick_libpmem_flush(
        crate::persist::cpu_flush_op(),
        set("PMEM_NO_CLWB"),
        set("PMEM_NO_CLFLUSHOPT"),
    );
    CHOSEN.store(op.code(), Ordering::Relaxed);
    op
}

/// libpmem's rule: from the CPU's best flush, step down past the disabled
/// ones (`clflush` is always there).
fn pick_libpmem_flush(cpu_best: Op, no_clwb: bool, no_clflushopt: bool) -> Op {
    match cpu_best {
        Op::Clwb if !no_clwb => Op::Clwb,
        Op::Clwb | Op::ClflushOpt if !no_clflushopt => Op::ClflushOpt,
        _ => Op::Clflush,
    }
}

fn fence() {
    record(Op::SFence, Space::Pm, 0, 0);
}

/// Record the stores (and flushes, fence) of a libpmem copy/set call.
fn stores(dest: *const c_void, len: usize, flags: c_uint, drain: bool) {
    let nt = flags & PMEM_F_MEM_NONTEMPORAL != 0
        || (flags & PMEM_F_MEM_TEMPORAL == 0 && len >= NT_THRESHOLD);
    if nt {
        lines(dest as u64, len, Op::NtWrite);
    } else {
        lines(dest as u64, len, Op::Write);
        if flags & PMEM_F_MEM_NOFLUSH == 0 {
            flush(dest, len);
        }
    }
    if drain && flags & PMEM_F_MEM_NODRAIN == 0 {
        fence();
    }
}

macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static R: Real = Real::new($name);
        // SAFETY: the symbol has the C prototype $ty in libpmem.h /
        // libpmemobj.h.
        unsafe { std::mem::transmute::<*mut c_void, $ty>(R.get()) }
    }};
}

type FlushFn = unsafe extern "C" fn(*const c_void, usize);
type DrainFn = unsafe extern "C" fn();
type MsyncFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type CopyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;
type CopyFlagsFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_uint) -> *mut c_void;
type SetFn = unsafe extern "C" fn(*mut c_void, c_int, usize) -> *mut c_void;
type SetFlagsFn = unsafe extern "C" fn(*mut c_void, c_int, usize, c_uint) -> *mut c_void;
type DeepFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;

/// `pmem_flush` (libpmem): records `CLWB` per line.
#[inline]
pub unsafe fn pmem_flush(addr: *const c_void, len: usize) {
    let real = real!(c"pmem_flush", FlushFn);
    guarded(
        || {
            real(addr, len);
            flush(addr, len);
        },
        || real(addr, len),
    )
}

/// `pmem_deep_flush` (libpmem): records `CLWB` per line.
#[inline]
pub unsafe fn pmem_deep_flush(addr: *const c_void, len: usize) {
    let real = real!(c"pmem_deep_flush", FlushFn);
    guarded(
        || {
            real(addr, len);
            flush(addr, len);
        },
        || real(addr, len),
    )
}

/// `pmem_drain` (libpmem): records `SFENCE`.
#[inline]
pub unsafe fn pmem_drain() {
    let real = real!(c"pmem_drain", DrainFn);
    guarded(
        || {
            real();
            fence();
        },
        || real(),
    )
}

/// `pmem_persist` (libpmem): `CLWB`s then `SFENCE`.
#[inline]
pub unsafe fn pmem_persist(addr: *const c_void, len: usize) {
    let real = real!(c"pmem_persist", FlushFn);
    guarded(
        || {
            real(addr, len);
            flush(addr, len);
            fence();
        },
        || real(addr, len),
    )
}

/// `pmem_msync` (libpmem): `CLWB`s then `SFENCE`.
#[inline]
pub unsafe fn pmem_msync(addr: *const c_void, len: usize) -> c_int {
    let real = real!(c"pmem_msync", MsyncFn);
    guarded(
        || {
            let r = real(addr, len);
            flush(addr, len);
            fence();
            r
        },
        || real(addr, len),
    )
}

/// `pmem_deep_persist` (libpmem): `CLWB`s then `SFENCE`.
#[inline]
pub unsafe fn pmem_deep_persist(addr: *const c_void, len: usize) -> c_int {
    let real = real!(c"pmem_deep_persist", DeepFn);
    guarded(
        || {
            let r = real(addr, len);
            flush(addr, len);
            fence();
            r
        },
        || real(addr, len),
    )
}

macro_rules! copy_wrapper {
    ($(#[$doc:meta])* $name:ident, $cname:literal, $flags:expr, $drain:expr) => {
        $(#[$doc])*
        #[inline]
        pub unsafe fn $name(
            dest: *mut c_void,
            src: *const c_void,
            len: usize,
        ) -> *mut c_void {
            let real = real!($cname, CopyFn);
            guarded(
                || {
                    let r = real(dest, src, len);
                    stores(dest, len, $flags, $drain);
                    r
                },
                || real(dest, src, len),
            )
        }
    };
}

copy_wrapper!(
    /// `pmem_memcpy_persist` (libpmem).
    pmem_memcpy_persist, c"pmem_memcpy_persist", 0, true);
copy_wrapper!(
    /// `pmem_memmove_persist` (libpmem).
    pmem_memmove_persist, c"pmem_memmove_persist", 0, true);
copy_wrapper!(
    /// `pmem_memcpy_nodrain` (libpmem).
    pmem_memcpy_nodrain, c"pmem_memcpy_nodrain", 0, false);
copy_wrapper!(
    /// `pmem_memmove_nodrain` (libpmem).
    pmem_memmove_nodrain, c"pmem_memmove_nodrain", 0, false);

macro_rules! copy_flags_wrapper {
    ($(#[$doc:meta])* $name:ident, $cname:literal) => {
        $(#[$doc])*
        #[inline]
        pub unsafe fn $name(
            dest: *mut c_void,
            src: *const c_void,
            len: usize,
            flags: c_uint,
        ) -> *mut c_void {
            let real = real!($cname, CopyFlagsFn);
            guarded(
                || {
                    let r = real(dest, src, len, flags);
                    stores(dest, len, flags, true);
                    r
                },
                || real(dest, src, len, flags),
            )
        }
    };
}

copy_flags_wrapper!(
    /// `pmem_memcpy` (libpmem, with flags).
    pmem_memcpy, c"pmem_memcpy");
copy_flags_wrapper!(
    /// `pmem_memmove` (libpmem, with flags).
    pmem_memmove, c"pmem_memmove");

macro_rules! set_wrapper {
    ($(#[$doc:meta])* $name:ident, $cname:literal, $drain:expr) => {
        $(#[$doc])*
        #[inline]
        pub unsafe fn $name(dest: *mut c_void, c: c_int, len: usize) -> *mut c_void {
            let real = real!($cname, SetFn);
            guarded(
                || {
                    let r = real(dest, c, len);
                    stores(dest, len, 0, $drain);
                    r
                },
                || real(dest, c, len),
            )
        }
    };
}

set_wrapper!(
    /// `pmem_memset_persist` (libpmem).
    pmem_memset_persist, c"pmem_memset_persist", true);
set_wrapper!(
    /// `pmem_memset_nodrain` (libpmem).
    pmem_memset_nodrain, c"pmem_memset_nodrain", false);

/// `pmem_memset` (libpmem, with flags).
#[inline]
pub unsafe fn pmem_memset(dest: *mut c_void, c: c_int, len: usize, flags: c_uint) -> *mut c_void {
    let real = real!(c"pmem_memset", SetFlagsFn);
    guarded(
        || {
            let r = real(dest, c, len, flags);
            stores(dest, len, flags, true);
            r
        },
        || real(dest, c, len, flags),
    )
}

/// A persistent object id (`PMEMoid`), passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmemOid {
    pool_uuid_lo: u64,
    off: u64,
}

static TX_IDS: AtomicU64 = AtomicU64::new(1);

type TxBeginFn = unsafe extern "C" fn(*mut c_void, *mut c_void, ...) -> c_int;
type TxEndFn = unsafe extern "C" fn() -> c_int;
type AddRangeFn = unsafe extern "C" fn(PmemOid, u64, usize) -> c_int;
type AddRangeDirectFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type TxAllocFn = unsafe extern "C" fn(usize, u64) -> PmemOid;
type DirectFn = unsafe extern "C" fn(PmemOid) -> *mut c_void;
type XAddRangeFn = unsafe extern "C" fn(PmemOid, u64, usize, u64) -> c_int;
type XAddRangeDirectFn = unsafe extern "C" fn(*const c_void, usize, u64) -> c_int;
type TxXAllocFn = unsafe extern "C" fn(usize, u64, u64) -> PmemOid;
type CreateFn =
    unsafe extern "C" fn(*const c_char, *const c_char, usize, libc::mode_t) -> *mut c_void;
type OpenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut c_void;
type MapFileFn = unsafe extern "C" fn(
    *const c_char,
    usize,
    c_int,
    libc::mode_t,
    *mut usize,
    *mut c_int,
) -> *mut c_void;

/// `pmemobj_tx_begin` (libpmemobj): records `TXBEGIN`. Forwards the first
/// four variadic words (see the module documentation).
#[inline]
pub unsafe fn pmemobj_tx_begin(
    pop: *mut c_void,
    env: *mut c_void,
    a: usize,
    b: usize,
    c: usize,
    d: usize,
) -> c_int {
    let real = real!(c"pmemobj_tx_begin", TxBeginFn);
    if enabled() {
        record(
            Op::TxBegin,
            Space::Pm,
            TX_IDS.fetch_add(1, Ordering::Relaxed),
            0,
        );
    }
    real(pop, env, a, b, c, d)
}

/// `pmemobj_tx_end` (libpmemobj): records `TXEND`.
#[inline]
pub unsafe fn pmemobj_tx_end() -> c_int {
    let real = real!(c"pmemobj_tx_end", TxEndFn);
    let r = real();
    if enabled() {
        record(Op::TxEnd, Space::Pm, 0, 0);
    }
    r
}

/// `pmemobj_tx_add_range` (libpmemobj): records `USERDATA` for the range.
#[inline]
pub unsafe fn pmemobj_tx_add_range(oid: PmemOid, hoff: u64, size: usize) -> c_int {
    let real = real!(c"pmemobj_tx_add_range", AddRangeFn);
    let r = real(oid, hoff, size);
    if enabled() && r == 0 {
        let direct = real!(c"pmemobj_direct", DirectFn);
        let base = direct(oid) as u64;
        record(
            Op::UserData,
            Space::Pm,
            base.wrapping_add(hoff),
            size.min(u32::MAX as usize) as u32,
        );
        tx_add(base.wrapping_add(hoff), size as u64);
    }
    r
}

/// `pmemobj_tx_xadd_range` (libpmemobj): records `USERDATA` and `TXADD`.
pub unsafe fn pmemobj_tx_xadd_range(oid: PmemOid, hoff: u64, size: usize, flags: u64) -> c_int {
    let real = real!(c"pmemobj_tx_xadd_range", XAddRangeFn);
    let r = real(oid, hoff, size, flags);
    if enabled() && r == 0 {
        let direct = real!(c"pmemobj_direct", DirectFn);
        let a = (direct(oid) as u64).wrapping_add(hoff);
        record(
            Op::UserData,
            Space::Pm,
            a,
            size.min(u32::MAX as usize) as u32,
        );
        tx_add(a, size as u64);
    }
    r
}

/// `pmemobj_tx_xadd_range_direct` (libpmemobj): records `USERDATA` and
/// `TXADD`.
pub unsafe fn pmemobj_tx_xadd_range_direct(ptr: *const c_void, size: usize, flags: u64) -> c_int {
    let real = real!(c"pmemobj_tx_xadd_range_direct", XAddRangeDirectFn);
    let r = real(ptr, size, flags);
    if enabled() && r == 0 {
        record(
            Op::UserData,
            Space::Pm,
            ptr as u64,
            size.min(u32::MAX as usize) as u32,
        );
        tx_add(ptr as u64, size as u64);
    }
    r
}

/// `pmemobj_tx_xalloc` (libpmemobj): records `USERDATA` and `TXADD` for
/// the new object.
pub unsafe fn pmemobj_tx_xalloc(size: usize, type_num: u64, flags: u64) -> PmemOid {
    let real = real!(c"pmemobj_tx_xalloc", TxXAllocFn);
    let oid = real(size, type_num, flags);
    if enabled() && oid.off != 0 {
        let direct = real!(c"pmemobj_direct", DirectFn);
        let a = direct(oid) as u64;
        record(
            Op::UserData,
            Space::Pm,
            a,
            size.min(u32::MAX as usize) as u32,
        );
        tx_add(a, size as u64);
    }
    oid
}

fn file_len(path: *const c_char) -> u64 {
    if path.is_null() {
        return 0;
    }
    // SAFETY: path is the program's NUL-terminated string.
    let p = unsafe { CStr::from_ptr(path) };
    use std::os::unix::ffi::OsStrExt;
    std::fs::metadata(std::ffi::OsStr::from_bytes(p.to_bytes()))
        .map(|m| m.len())
        .unwrap_or(0)
}

fn path_string(path: *const c_char) -> String {
    if path.is_null() {
        return String::new();
    }
    // SAFETY: as file_len.
    let p = unsafe { CStr::from_ptr(path) };
    let s = p.to_string_lossy().into_owned();
    std::fs::canonicalize(&s)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or(s)
}

fn saved_before(path: *const c_char) -> Option<String> {
    if path.is_null() || !enabled() {
        return None;
    }
    // SAFETY: as file_len.
    trace_notes::save_initial(unsafe { CStr::from_ptr(path) })
}

/// `pmemobj_create` (libpmemobj): a `PMRANGE` note for the pool, with the
/// pool's contents as created when tracing with data.
pub unsafe fn pmemobj_create(
    path: *const c_char,
    layout: *const c_char,
    poolsize: usize,
    mode: libc::mode_t,
) -> *mut c_void {
    let real = real!(c"pmemobj_create", CreateFn);
    let pop = real(path, layout, poolsize, mode);
    if enabled() && !pop.is_null() {
        // The pool as created is the initial image: libpmemobj writes its
        // header through a mapping of its own before this one, and has made
        // everything durable when it returns (crashes inside
        // pmemobj_create are not tested).
        let init = saved_before(path);
        trace_notes::pm_range(pop as u64, file_len(path), &path_string(path), 0, init);
    }
    pop
}

/// `pmemobj_open` (libpmemobj): a `PMRANGE` note for the pool.
pub unsafe fn pmemobj_open(path: *const c_char, layout: *const c_char) -> *mut c_void {
    let real = real!(c"pmemobj_open", OpenFn);
    let init = saved_before(path);
    let pop = real(path, layout);
    if enabled() && !pop.is_null() {
        trace_notes::pm_range(pop as u64, file_len(path), &path_string(path), 0, init);
    }
    pop
}

/// `pmem_map_file` (libpmem): a `PMRANGE` note for the mapping.
pub unsafe fn pmem_map_file(
    path: *const c_char,
    len: usize,
    flags: c_int,
    mode: libc::mode_t,
    mapped_len: *mut usize,
    is_pmem: *mut c_int,
) -> *mut c_void {
    let real = real!(c"pmem_map_file", MapFileFn);
    let init = saved_before(path);
    let mut mlen = 0usize;
    let out = if mapped_len.is_null() {
        &mut mlen as *mut usize
    } else {
        mapped_len
    };
    let p = real(path, len, flags, mode, out, is_pmem);
    if enabled() && !p.is_null() {
        trace_notes::pm_range(p as u64, *out as u64, &path_string(path), 0, init);
    }
    p
}

/// `pmemobj_tx_add_range_direct` (libpmemobj): records `USERDATA`.
#[inline]
pub unsafe fn pmemobj_tx_add_range_direct(ptr: *const c_void, size: usize) -> c_int {
    let real = real!(c"pmemobj_tx_add_range_direct", AddRangeDirectFn);
    let r = real(ptr, size);
    if enabled() && r == 0 {
        record(
            Op::UserData,
            Space::Pm,
            ptr as u64,
            size.min(u32::MAX as usize) as u32,
        );
        tx_add(ptr as u64, size as u64);
    }
    r
}

macro_rules! alloc_wrapper {
    ($(#[$doc:meta])* $name:ident, $cname:literal) => {
        $(#[$doc])*
        #[inline]
        pub unsafe fn $name(size: usize, type_num: u64) -> PmemOid {
            let real = real!($cname, TxAllocFn);
            let oid = real(size, type_num);
            if enabled() && oid.off != 0 {
                let direct = real!(c"pmemobj_direct", DirectFn);
                record(
                    Op::UserData,
                    Space::Pm,
                    direct(oid) as u64,
                    size.min(u32::MAX as usize) as u32,
                );
                tx_add(direct(oid) as u64, size as u64);
            }
            oid
        }
    };
}

alloc_wrapper!(
    /// `pmemobj_tx_alloc` (libpmemobj): records `USERDATA` for the object.
    pmemobj_tx_alloc, c"pmemobj_tx_alloc");
alloc_wrapper!(
    /// `pmemobj_tx_zalloc` (libpmemobj): records `USERDATA` for the object.
    pmemobj_tx_zalloc, c"pmemobj_tx_zalloc");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpmem_flush_follows_the_cpu_and_its_environment() {
        assert_eq!(pick_libpmem_flush(Op::Clwb, false, false), Op::Clwb);
        assert_eq!(pick_libpmem_flush(Op::Clwb, true, false), Op::ClflushOpt);
        assert_eq!(pick_libpmem_flush(Op::Clwb, true, true), Op::Clflush);
        assert_eq!(
            pick_libpmem_flush(Op::ClflushOpt, false, false),
            Op::ClflushOpt
        );
        assert_eq!(pick_libpmem_flush(Op::ClflushOpt, false, true), Op::Clflush);
        assert_eq!(pick_libpmem_flush(Op::Clflush, false, false), Op::Clflush);
        // The CPU's own choice is a flush, so the cache never holds 0.
        assert!(libpmem_flush_op().is_flush());
    }
}
