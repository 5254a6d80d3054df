//! The PM API of `include/pmlab.h`: what `pmalloc`, `pflush`, `pm_drain`
//! and the rest do (their C symbols are declared in [`crate::exports`],
//! which calls these). Error codes are per thread (`pmlab_errno`); no
//! function here panics.

use crate::emu::{self, State};
use crate::persist::{self, LINE};
use crate::pool;
use crate::source::instrumented::pm;
use crate::tracer::record;
use libc::{c_char, c_int, c_void, size_t};
use pmlab_trace::{Op, Space};
use std::cell::Cell;

/// Error codes of `pmlab.h` (kept equal to its `PMLAB_E_*` block).
pub mod code {
    /// Success.
    pub const OK: i32 = 0;
    /// Unknown flag bits.
    pub const INVALID_FLAGS: i32 = -1;
    /// The pool is full or could not be created.
    pub const NOMEM: i32 = -2;
    /// No pool exists yet.
    pub const NOPOOL: i32 = -3;
    /// The pointer is not a live pool block.
    pub const NOT_OURS: i32 = -4;
    /// A PM range that is empty, starts at NULL or wraps around.
    pub const INVALID_RANGE: i32 = -5;
    /// As many PM ranges as the runtime keeps are registered.
    pub const TOO_MANY_RANGES: i32 = -6;
    /// No registered PM range has that start and length.
    pub const NO_RANGE: i32 = -7;
}

/// Flags of `pmalloc_flags`.
pub const ALLOC_ZERO: u32 = 1;
/// Every valid `pmalloc_flags` flag.
pub const ALLOC_VALID_FLAGS: u32 = ALLOC_ZERO;

thread_local! {
    static LAST: Cell<i32> = const { Cell::new(0) };
}

#[inline]
fn set_err(c: i32) {
    LAST.with(|l| l.set(c));
}

#[inline]
fn ensure_init() {
    if emu::state() == State::Uninit {
        emu::init();
    }
}

fn clamp32(n: usize) -> u32 {
    n.min(u32::MAX as usize) as u32
}

fn record_range(op: Op, addr: usize, len: usize) {
    let mut a = addr;
    let mut left = len;
    while left > 0 {
        let n = left.min(1 << 30);
        record(op, Space::Pm, a as u64, clamp32(n));
        a += n;
        left -= n;
    }
}

// ---------------------------------------------------------------- PM API

/// `pmlab_check_version`: NULL when the library is compatible.
#[inline]
pub fn pmlab_check_version(major: u32, minor: u32) -> *const c_char {
    if major != crate::API_MAJOR {
        return c"pmlab: incompatible major version".as_ptr();
    }
    if minor > crate::API_MINOR {
        return c"pmlab: library older than the header's minor version".as_ptr();
    }
    std::ptr::null()
}

/// `pmlab_errno`: the calling thread's last error code.
#[inline]
pub fn pmlab_errno() -> c_int {
    LAST.with(|l| l.get())
}

/// `pmlab_errormsg`: the text of the calling thread's last error.
#[inline]
pub fn pmlab_errormsg() -> *const c_char {
    match pmlab_errno() {
        code::OK => c"success".as_ptr(),
        code::INVALID_FLAGS => c"unknown flag bits (see PMLAB_ALLOC_VALID_FLAGS)".as_ptr(),
        code::NOMEM => {
            c"the PM pool is full or could not be created (PMLAB_PM_POOL_SIZE, PMLAB_PM_FILE)"
                .as_ptr()
        }
        code::NOPOOL => c"no PM pool exists yet (nothing was allocated)".as_ptr(),
        code::NOT_OURS => c"the pointer is not a live block of the PM pool".as_ptr(),
        code::INVALID_RANGE => {
            c"the PM range is empty, starts at NULL or wraps around the address space".as_ptr()
        }
        code::TOO_MANY_RANGES => {
            c"64 PM ranges are registered already (unregister one first)".as_ptr()
        }
        code::NO_RANGE => {
            c"no registered PM range has this start and length (pass those given to pmlab_pm_register)"
                .as_ptr()
        }
        _ => c"unknown error".as_ptr(),
    }
}

/// `pmlab_emulating`: 1 when delays are being injected.
#[inline]
pub fn pmlab_emulating() -> c_int {
    ensure_init();
    emu::active() as c_int
}

/// `pmalloc`.
#[inline]
pub fn pmalloc(size: size_t) -> *mut c_void {
    pmalloc_flags(size, 0)
}

/// `pmalloc_flags`.
#[inline(always)]
pub fn pmalloc_flags(size: size_t, flags: u32) -> *mut c_void {
    ensure_init();
    set_err(code::OK);
    if flags & !ALLOC_VALID_FLAGS != 0 {
        set_err(code::INVALID_FLAGS);
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    let default;
    let cfg = match crate::config::get() {
        Ok(c) => c,
        Err(_) => {
            default = crate::config::Config::default();
            &default
        }
    };
    let p = pool::alloc(size, cfg);
    if p.is_null() {
        set_err(code::NOMEM);
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return std::ptr::null_mut();
    }
    if flags & ALLOC_ZERO != 0 {
        // SAFETY: p is a fresh block of at least `size` bytes.
        unsafe { std::ptr::write_bytes(p, 0, size) };
    }
    p as *mut c_void
}

/// `pfree`.
#[inline]
pub fn pfree(ptr: *mut c_void) {
    set_err(code::OK);
    if !pool::free(ptr as usize) {
        set_err(code::NOT_OURS);
    }
}

/// `pmlab_pool_range`.
///
/// # Safety
/// `base` and `size` must be NULL or valid for writes.
#[inline]
pub unsafe fn pmlab_pool_range(base: *mut *mut c_void, size: *mut size_t) -> c_int {
    let (b, s) = pool::range();
    if b == 0 {
        set_err(code::NOPOOL);
        return code::NOPOOL;
    }
    set_err(code::OK);
    if !base.is_null() {
        *base = b as *mut c_void;
    }
    if !size.is_null() {
        *size = s;
    }
    code::OK
}

/// `pm_is_pmem`: inside the pool or inside one registered range.
#[inline]
pub fn pm_is_pmem(addr: *const c_void, len: size_t) -> c_int {
    (pool::contains(addr as usize, len) || pm::in_registered(addr as usize, len)) as c_int
}

fn range_code(r: Result<(), pm::RangeError>) -> c_int {
    let c = match r {
        Ok(()) => code::OK,
        Err(pm::RangeError::Invalid) => code::INVALID_RANGE,
        Err(pm::RangeError::Full) => code::TOO_MANY_RANGES,
        Err(pm::RangeError::Unknown) => code::NO_RANGE,
    };
    set_err(c);
    c
}

/// `pmlab_pm_register`: `[base, base+len)` is PM from now on (for the
/// instrumented source's model and for traces).
#[inline]
pub fn pmlab_pm_register(base: *mut c_void, len: size_t) -> c_int {
    let c = range_code(pm::register(base as usize, len));
    if c == code::OK && crate::tracer::enabled() {
        // A PMRANGE note: `pmlab check` counts stores there as PM stores,
        // and when a file backs the mapping (`/proc/self/maps`) its path,
        // offset and (with `--data`) current contents let `pmlab crash`
        // build images of it.
        let (path, offset, init) = match crate::trace_notes::mapping_file(base as u64) {
            Some((path, offset)) => {
                let init = std::ffi::CString::new(path.as_str())
                    .ok()
                    .and_then(|c| crate::trace_notes::save_initial(&c));
                (path, offset, init)
            }
            None => (String::new(), 0, None),
        };
        crate::trace_notes::pm_range(base as u64, len as u64, &path, offset, init);
    }
    c
}

/// `pmlab_pm_unregister`: forget a range given to `pmlab_pm_register`.
#[inline]
pub fn pmlab_pm_unregister(base: *mut c_void, len: size_t) -> c_int {
    range_code(pm::unregister(base as usize, len))
}

/// `pflush`.
///
/// # Safety
/// `[addr, addr+len)` must be mapped.
#[inline(always)]
pub unsafe fn pflush(addr: *const c_void, len: size_t) {
    let n = persist::lines(addr as usize, len);
    if n == 0 {
        return;
    }
    // The CPU's best flush in device mode too: a line it leaves cached is
    // re-read from the CPU's caches, and device mode's delays subtract
    // what the program's timed loads measured (forcing an evicting flush
    // made the re-read cost the host's DRAM, above the fastest device
    // level on some hosts).
    let op = persist::flush_op();
    let first = (addr as usize) & !(LINE - 1);
    for i in 0..n {
        let line = first + i * LINE;
        persist::flush_line(line as *const u8, op);
        record(op, Space::Pm, line as u64, LINE as u32);
        crate::source::instrumented::hooks::on_flush(line);
    }
    crate::source::instrumented::pm::fresh::after_flushes(op);
    emu::note_flushes(n);
}

/// `pm_fence`.
#[inline]
pub fn pm_fence() {
    persist::sfence();
    record(Op::SFence, Space::Pm, 0, 0);
}

/// `pm_drain`.
#[inline(always)]
pub fn pm_drain() {
    persist::sfence();
    emu::durability_point();
    crate::source::instrumented::pm::fresh::at_drain();
    record(Op::SFence, Space::Pm, 0, 0);
}

/// `pm_ofence`.
#[inline]
pub fn pm_ofence() {
    persist::sfence();
    record(Op::OFence, Space::Pm, 0, 0);
}

/// `pm_dfence`.
#[inline(always)]
pub fn pm_dfence() {
    persist::sfence();
    emu::durability_point();
    crate::source::instrumented::pm::fresh::at_drain();
    record(Op::DFence, Space::Pm, 0, 0);
}

/// `pm_tx_begin`.
#[inline]
pub fn pm_tx_begin(id: u64) {
    record(Op::TxBegin, Space::Pm, id, 0);
}

/// `pm_tx_end`.
#[inline]
pub fn pm_tx_end(id: u64) {
    record(Op::TxEnd, Space::Pm, id, 0);
}

/// `pm_persist`.
///
/// # Safety
/// `[addr, addr+len)` must be mapped.
#[inline]
pub unsafe fn pm_persist(addr: *const c_void, len: size_t) {
    pflush(addr, len);
    pm_drain();
}

/// `pm_memcpy_persist`.
///
/// # Safety
/// As memcpy.
#[inline]
pub unsafe fn pm_memcpy_persist(dst: *mut c_void, src: *const c_void, len: size_t) -> *mut c_void {
    std::ptr::copy(src as *const u8, dst as *mut u8, len);
    record_range(Op::Write, dst as usize, len);
    pflush(dst, len);
    pm_drain();
    dst
}

/// `pm_memcpy_nt`.
///
/// # Safety
/// As memcpy (no overlap).
#[inline]
pub unsafe fn pm_memcpy_nt(dst: *mut c_void, src: *const c_void, len: size_t) -> *mut c_void {
    persist::copy_nt(dst as *mut u8, src as *const u8, len);
    record_range(Op::NtWrite, dst as usize, len);
    emu::note_flushes(persist::lines(dst as usize, len));
    dst
}

/// `pm_memset_persist`.
///
/// # Safety
/// As memset.
#[inline]
pub unsafe fn pm_memset_persist(dst: *mut c_void, c: c_int, len: size_t) -> *mut c_void {
    std::ptr::write_bytes(dst as *mut u8, c as u8, len);
    record_range(Op::Write, dst as usize, len);
    pflush(dst, len);
    pm_drain();
    dst
}

/// `pm_annotate_user_data`.
#[inline]
pub fn pm_annotate_user_data(addr: *const c_void, len: size_t) {
    record_range(Op::UserData, addr as usize, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of `#define NAME VALUE` in `include/pmlab.h`.
    fn header_define(header: &str, name: &str) -> i64 {
        header
            .lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("#define") && w.next() == Some(name)).then(|| {
                    w.next()
                        .unwrap()
                        .trim_matches(|c| c == '(' || c == ')')
                        .parse()
                        .unwrap()
                })
            })
            .unwrap_or_else(|| panic!("pmlab.h defines no {name}"))
    }

    #[test]
    fn the_header_agrees_with_the_runtime() {
        let header = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/pmlab.h"),
        )
        .unwrap();
        let d = |n| header_define(&header, n);
        assert_eq!(d("PMLAB_MAJOR_VERSION"), crate::API_MAJOR as i64);
        assert_eq!(d("PMLAB_MINOR_VERSION"), crate::API_MINOR as i64);
        assert_eq!(d("PMLAB_MAX_PM_RANGES"), pm::MAX_RANGES as i64);
        for (name, c) in [
            ("PMLAB_OK", code::OK),
            ("PMLAB_E_INVALID_FLAGS", code::INVALID_FLAGS),
            ("PMLAB_E_NOMEM", code::NOMEM),
            ("PMLAB_E_NOPOOL", code::NOPOOL),
            ("PMLAB_E_NOT_OURS", code::NOT_OURS),
            ("PMLAB_E_INVALID_RANGE", code::INVALID_RANGE),
            ("PMLAB_E_TOO_MANY_RANGES", code::TOO_MANY_RANGES),
            ("PMLAB_E_NO_RANGE", code::NO_RANGE),
        ] {
            assert_eq!(d(name), c as i64, "{name}");
        }
    }

    #[test]
    fn registered_ranges_are_pm_until_unregistered() {
        let _g = pm::TEST_TABLE_LOCK
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut buf = vec![0u8; 8192];
        let p = buf.as_mut_ptr() as *mut c_void;
        assert_eq!(pm_is_pmem(p, 8192), 0);
        assert_eq!(pmlab_pm_register(p, 8192), code::OK);
        assert_eq!(pmlab_errno(), code::OK);
        assert_eq!(pm_is_pmem(p, 8192), 1);
        assert_eq!(pm_is_pmem(p, 8193), 0);
        assert_eq!(pmlab_pm_unregister(p, 4096), code::NO_RANGE);
        assert_eq!(pmlab_errno(), code::NO_RANGE);
        assert_eq!(pmlab_pm_unregister(p, 8192), code::OK);
        assert_eq!(pm_is_pmem(p, 8192), 0);
        assert_eq!(
            pmlab_pm_register(std::ptr::null_mut(), 64),
            code::INVALID_RANGE
        );
        assert_eq!(pmlab_pm_register(p, 0), code::INVALID_RANGE);
        assert!(!unsafe { std::ffi::CStr::from_ptr(pmlab_errormsg()) }
            .to_bytes()
            .starts_with(b"unknown"));
    }

    #[test]
    fn api_without_emulation_allocates_and_persists() {
        let p = pmalloc_flags(256, ALLOC_ZERO) as *mut u8;
        assert!(!p.is_null());
        assert_eq!(pm_is_pmem(p as *const c_void, 256), 1);
        // SAFETY: p is a live 256-byte block; src is a local.
        unsafe {
            assert_eq!(*p.add(255), 0);
            let src = [7u8; 100];
            pm_memcpy_persist(p as *mut c_void, src.as_ptr() as *const c_void, 100);
            assert_eq!(*p.add(99), 7);
            pm_memset_persist(p as *mut c_void, 3, 10);
            assert_eq!(*p, 3);
        }
        pfree(p as *mut c_void);
        assert_eq!(pmlab_errno(), code::OK);
        static NOT_A_BLOCK: u64 = 0;
        pfree(&NOT_A_BLOCK as *const u64 as *mut c_void);
        assert_eq!(pmlab_errno(), code::NOT_OURS);
        assert!(pmalloc_flags(16, 0x80).is_null());
        assert_eq!(pmlab_errno(), code::INVALID_FLAGS);
        assert!(pmlab_check_version(crate::API_MAJOR, crate::API_MINOR).is_null());
        assert!(!pmlab_check_version(crate::API_MAJOR, crate::API_MINOR + 1).is_null());
        assert!(!pmlab_check_version(crate::API_MAJOR + 1, 0).is_null());
    }
}
