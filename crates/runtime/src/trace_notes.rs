//! What the tracer records for correctness checking (`pmlab check`,
//! `pmlab crash`) beside the operations: call sites, stored data, loaded
//! objects, PM mappings and transaction log ranges (the annotations of
//! trace format version 2, `pmlab_trace::ext`).
//!
//! * `PMLAB_TRACE_SITES=1` (`pmlab trace --sites`): every PM store and
//!   flush carries the return address of the first frame outside libpmlab
//!   (found with libgcc's `_Unwind_Backtrace`, a few hundred nanoseconds to
//!   microseconds per record: the program's timing changes, so it is off
//!   by default). The writer emits a `SITE` note when a thread's site
//!   changes. The unwinder takes the dynamic loader's lock, so with sites
//!   on a record is no longer async-signal-safe: a signal handler that
//!   stores to PM while its thread is inside `dlopen` could deadlock.
//! * `PMLAB_TRACE_DATA=1` (`pmlab trace --data`): the bytes each PM store
//!   wrote (read at the thread's next record, since the instrumentation
//!   hooks record a store before it happens) and each line a flush wrote
//!   back, as `DATA` notes; bounded by the bytes the program stores plus
//!   64 per flush. Memory is read with `process_vm_readv`, so a region
//!   unmapped in between is skipped rather than faulting.
//! * Loaded objects: `MODULE` notes from `dl_iterate_phdr` when the writer
//!   starts and again when it finishes (objects `dlopen`ed meanwhile).
//! * PM mappings: [`pm_range`] (the pmlab.h pool, `pmemobj_create`/`_open`,
//!   `pmem_map_file`) with the backing file; [`save_initial`] copies an
//!   existing file's contents beside the trace before the program maps it.
//! * Transaction log ranges: [`tx_add`] (`pmemobj_tx_add_range*`,
//!   `pmemobj_tx_*alloc`, pmlab.h's `pm_tx_add`).

use pmlab_trace::binary;
use pmlab_trace::ext::{code, Note};
use std::ffi::{c_int, c_void, CStr};
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

static SITES: AtomicBool = AtomicBool::new(false);
static DATA: AtomicBool = AtomicBool::new(false);
static OWN_LO: AtomicUsize = AtomicUsize::new(0);
static OWN_HI: AtomicUsize = AtomicUsize::new(0);
static TRACE_PATH: OnceLock<String> = OnceLock::new();
static SAVED: AtomicU64 = AtomicU64::new(0);
static RANGES: AtomicU64 = AtomicU64::new(0);

/// A note waiting for the writer thread, with the tracer-relative time.
struct Global {
    time: u64,
    note: Note,
    /// For a `PmRange`: the side file holding the initial contents.
    init: Option<String>,
}

static GLOBAL: Mutex<Vec<Global>> = Mutex::new(Vec::new());
static MODULES_SEEN: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());

/// True when call sites are recorded.
#[inline]
pub fn sites_on() -> bool {
    SITES.load(Ordering::Relaxed)
}

/// True when stored data is recorded.
#[inline]
pub fn data_on() -> bool {
    DATA.load(Ordering::Relaxed)
}

/// Read `PMLAB_TRACE_SITES` and `PMLAB_TRACE_DATA` (from the tracer's
/// start-up).
pub(crate) fn init_from_env(env: fn(&str) -> Option<String>) {
    if env("PMLAB_TRACE_SITES").as_deref() == Some("1") {
        if let Some((lo, hi)) = object_of(call_site as *const () as usize) {
            OWN_LO.store(lo, Ordering::Relaxed);
            OWN_HI.store(hi, Ordering::Relaxed);
        }
        SITES.store(true, Ordering::Relaxed);
    }
    if env("PMLAB_TRACE_DATA").as_deref() == Some("1") {
        DATA.store(true, Ordering::Relaxed);
    }
}

pub(crate) fn set_trace_path(path: &str) {
    let _ = TRACE_PATH.set(path.to_string());
}

// ------------------------------------------------------------ call sites

#[allow(non_camel_case_types)]
type _Unwind_Trace_Fn = extern "C" fn(*mut c_void, *mut c_void) -> c_int;

extern "C" {
    fn _Unwind_Backtrace(trace: _Unwind_Trace_Fn, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

const URC_NO_REASON: c_int = 0;
const URC_NORMAL_STOP: c_int = 4;

extern "C" fn each_frame(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: ctx comes from the unwinder; arg is the &mut usize below.
    let ip = unsafe { _Unwind_GetIP(ctx) };
    let out = unsafe { &mut *(arg as *mut usize) };
    let (lo, hi) = (
        OWN_LO.load(Ordering::Relaxed),
        OWN_HI.load(Ordering::Relaxed),
    );
    if ip == 0 || (ip >= lo && ip < hi) {
        return URC_NO_REASON;
    }
    *out = ip;
    URC_NORMAL_STOP
}

/// The return address of the first frame outside libpmlab: the program's
/// (or libpmemobj's) instruction after the call that led here. 0 when the
/// stack cannot be walked.
#[inline(never)]
pub fn call_site() -> u64 {
    let mut ip = 0usize;
    // SAFETY: the callback only reads the context and writes `ip`.
    unsafe { _Unwind_Backtrace(each_frame, &mut ip as *mut usize as *mut c_void) };
    ip as u64
}

// ---------------------------------------------------------------- memory

/// Copy `buf.len()` bytes at `addr` of this process into `buf`; false
/// (nothing copied) when they are not all mapped and readable.
pub fn read_own_memory(addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: reading our own memory into a buffer we own; a bad address
    // gives EFAULT instead of a fault.
    let n = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            libc::getpid(),
            &local as *const libc::iovec,
            1usize,
            &remote as *const libc::iovec,
            1usize,
            0usize,
        )
    };
    n == buf.len() as i64
}

// --------------------------------------------------------------- objects

struct Find {
    inside: usize,
    found: Option<(usize, usize)>,
}

unsafe fn segments(info: *mut libc::dl_phdr_info) -> Option<(u64, u64)> {
    let info = &*info;
    let mut lo = u64::MAX;
    let mut hi = 0u64;
    for i in 0..info.dlpi_phnum as usize {
        let ph = &*info.dlpi_phdr.add(i);
        if ph.p_type == libc::PT_LOAD {
            lo = lo.min(ph.p_vaddr);
            hi = hi.max(ph.p_vaddr + ph.p_memsz);
        }
    }
    (lo < hi).then(|| (info.dlpi_addr + lo, hi - lo))
}

unsafe extern "C" fn find_each(info: *mut libc::dl_phdr_info, _: usize, arg: *mut c_void) -> c_int {
    let f = &mut *(arg as *mut Find);
    if let Some((start, len)) = segments(info) {
        let (s, e) = (start as usize, (start + len) as usize);
        if f.inside >= s && f.inside < e {
            f.found = Some((s, e));
            return 1;
        }
    }
    0
}

/// The mapped extent of the object holding `addr`.
fn object_of(addr: usize) -> Option<(usize, usize)> {
    let mut f = Find {
        inside: addr,
        found: None,
    };
    // SAFETY: the callback only reads the phdr info.
    unsafe { libc::dl_iterate_phdr(Some(find_each), &mut f as *mut Find as *mut c_void) };
    f.found
}

unsafe extern "C" fn module_each(
    info: *mut libc::dl_phdr_info,
    _: usize,
    arg: *mut c_void,
) -> c_int {
    let out = &mut *(arg as *mut Vec<Note>);
    let Some((start, len)) = segments(info) else {
        return 0;
    };
    let name = (*info).dlpi_name;
    let mut path = if name.is_null() {
        String::new()
    } else {
        CStr::from_ptr(name).to_string_lossy().into_owned()
    };
    if path.is_empty() {
        // The main program.
        path = std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    out.push(Note::Module {
        start,
        len,
        bias: (*info).dlpi_addr,
        path,
    });
    0
}

/// Queue `MODULE` notes for the objects loaded now and not noted before.
pub(crate) fn note_modules() {
    let mut found: Vec<Note> = Vec::new();
    // SAFETY: the callback only reads the phdr info and pushes to `found`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(module_each),
            &mut found as *mut Vec<Note> as *mut c_void,
        )
    };
    let mut seen = MODULES_SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    for n in found {
        if let Note::Module { start, path, .. } = &n {
            let key = (*start, path.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
        }
        g.push(Global {
            time: 0,
            note: n,
            init: None,
        });
    }
}

// ----------------------------------------------------------- PM mappings

/// Before the program maps `path`: when tracing with data and the file
/// exists, copy its contents beside the trace (a temporary name, renamed
/// by the writer to `<trace>.init.<k>`) and return that name.
pub fn save_initial(path: &CStr) -> Option<String> {
    if !crate::tracer::enabled() || !data_on() {
        return None;
    }
    use std::os::unix::ffi::OsStrExt;
    let src = std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    let meta = std::fs::metadata(src).ok()?;
    if !meta.is_file() || meta.len() == 0 {
        return None;
    }
    let trace = TRACE_PATH.get()?;
    let k = SAVED.fetch_add(1, Ordering::Relaxed);
    let dst = format!("{trace}.init.tmp{k}");
    copy_sparse(src, std::path::Path::new(&dst)).ok()?;
    Some(dst)
}

/// Copy a file, skipping its holes and zero blocks (a 1 GiB pool file that
/// holds a few KiB costs a few KiB).
fn copy_sparse(src: &std::path::Path, dst: &std::path::Path) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut i = File::open(src)?;
    let len = i.metadata()?.len();
    let mut o = File::create(dst)?;
    o.set_len(len)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut off = 0u64;
    use std::os::unix::io::AsRawFd;
    while off < len {
        // SAFETY: lseek on our own descriptor.
        let data = unsafe { libc::lseek(i.as_raw_fd(), off as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            break; // no data after off
        }
        off = data as u64 & !0xfff;
        i.seek(SeekFrom::Start(off))?;
        let n = i.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|&b| b != 0) {
            o.seek(SeekFrom::Start(off))?;
            o.write_all(&buf[..n])?;
        }
        off += n as u64;
    }
    Ok(())
}

/// The regular file mapped at `addr` and the file offset of `addr`, from
/// `/proc/self/maps` (`None` for anonymous memory, special mappings and
/// deleted files).
pub fn mapping_file(addr: u64) -> Option<(String, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| parse_maps_line(line, addr))
}

/// One `/proc/self/maps` line (`start-end perms offset dev inode path`):
/// the file and the offset of `addr` when the line maps `addr` from a file.
fn parse_maps_line(line: &str, addr: u64) -> Option<(String, u64)> {
    let mut f = line.splitn(6, ' ');
    let (range, _perms, offset, _dev, inode) =
        (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let path = f.next()?.trim_start();
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if addr < start || addr >= end || inode == "0" || !path.starts_with('/') {
        return None;
    }
    if path.ends_with(" (deleted)") {
        return None;
    }
    let offset = u64::from_str_radix(offset, 16).ok()?;
    Some((path.to_string(), offset + (addr - start)))
}

/// A PM mapping `[base, base+len)` backed by `path` from `file_offset`
/// (empty path: anonymous), with the initial contents saved by
/// [`save_initial`] if any.
pub fn pm_range(base: u64, len: u64, path: &str, file_offset: u64, init: Option<String>) {
    if !crate::tracer::enabled() {
        return;
    }
    let time = crate::clock::monotonic_ns();
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    g.push(Global {
        time,
        note: Note::PmRange {
            base,
            len,
            file_offset,
            path: path.to_string(),
            init: init.is_some(),
        },
        init,
    });
}

/// The open transaction of the calling thread logged `[addr, addr+len)`.
pub fn tx_add(addr: u64, len: u64) {
    let mut a = addr;
    let mut left = len;
    while left > 0 {
        let n = left.min(1 << 31);
        crate::tracer::record_code(code::TXADD, a, n as u32);
        a += n;
        left -= n;
    }
}

/// Write the queued global notes (writer thread). True if any.
pub(crate) fn write_global_notes(w: &mut binary::Writer<File>) -> std::io::Result<bool> {
    let pending: Vec<Global> =
        std::mem::take(&mut *GLOBAL.lock().unwrap_or_else(|e| e.into_inner()));
    let any = !pending.is_empty();
    let start = crate::tracer::start_ns();
    for g in pending {
        if let Note::PmRange { .. } = g.note {
            let k = RANGES.fetch_add(1, Ordering::Relaxed);
            if let (Some(tmp), Some(trace)) = (&g.init, TRACE_PATH.get()) {
                std::fs::rename(tmp, format!("{trace}.init.{k}"))?;
            }
        }
        let t = g.time.saturating_sub(start);
        w.write_note(t, 0, &g.note).map_err(std::io::Error::other)?;
    }
    Ok(any)
}

/// `pm_tx_add` (pmlab.h, exported by `exports.rs`): the calling thread's
/// open transaction (between `pm_tx_begin` and `pm_tx_end`) logs `[addr,
/// addr+len)`: recorded as a `TXADD` note for `pmlab check`. No effect on
/// the memory or on emulation.
pub fn pm_tx_add(addr: *const c_void, len: libc::size_t) {
    tx_add(addr as u64, len as u64);
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_maps_line_gives_the_file_and_the_offset_of_an_address() {
        let l =
            "7f0000000000-7f0000400000 rw-s 00001000 fd:01 123456                     /tmp/p.pool";
        assert_eq!(
            super::parse_maps_line(l, 0x7f0000002000),
            Some(("/tmp/p.pool".to_string(), 0x3000))
        );
        assert_eq!(super::parse_maps_line(l, 0x7f0000400000), None);
        let anon = "7f0000000000-7f0000400000 rw-p 00000000 00:00 0 ";
        assert_eq!(super::parse_maps_line(anon, 0x7f0000000000), None);
        let heap =
            "55d000000000-55d000100000 rw-p 00000000 00:00 0                          [heap]";
        assert_eq!(super::parse_maps_line(heap, 0x55d000000010), None);
        let gone = "7f0000000000-7f0000400000 rw-s 00000000 fd:01 12 /tmp/x (deleted)";
        assert_eq!(super::parse_maps_line(gone, 0x7f0000000000), None);
    }
}
