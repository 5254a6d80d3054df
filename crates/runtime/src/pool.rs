//! The emulated PM pool and its allocator (`pmalloc`/`pfree`).
//!
//! The pool is one mapping reserved on first use: anonymous, or shared over
//! `PMLAB_PM_FILE`; bound to NUMA node `PMLAB_PM_NODE` with `mbind` in
//! two-memory mode. Blocks carry a 64-byte header, so every allocation is
//! cache-line aligned. Sizes up to 1 MiB are rounded to a power of two and
//! recycled through per-class free lists; larger blocks go to a first-fit
//! list. One spin lock guards it (reset in a forked child). The file is
//! backing storage only: allocator state is not recovered across runs.

use crate::config::Config;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const HEADER: usize = 64;
const MAGIC: u64 = 0x706d_6c61_625f_626b; // "pmlab_bk"
const CLASSES: usize = 15; // 64 B .. 1 MiB of payload
const MIN_CLASS_SHIFT: u32 = 6;

struct Pool {
    base: *mut u8,
    size: usize,
    bump: usize,
    free: [*mut u8; CLASSES],
    large_free: *mut u8,
}

struct Locked {
    lock: AtomicBool,
    pool: std::cell::UnsafeCell<Pool>,
}

// SAFETY: the pool is only touched with `lock` held.
unsafe impl Sync for Locked {}

static POOL: Locked = Locked {
    lock: AtomicBool::new(false),
    pool: std::cell::UnsafeCell::new(Pool {
        base: null_mut(),
        size: 0,
        bump: 0,
        free: [null_mut(); CLASSES],
        large_free: null_mut(),
    }),
};
static BASE: AtomicUsize = AtomicUsize::new(0);
static SIZE: AtomicUsize = AtomicUsize::new(0);
static FAILED: AtomicBool = AtomicBool::new(false);
static ERROR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

struct Guard;

fn lock() -> Guard {
    let mut spins = 0u32;
    while POOL
        .lock
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins > 100 {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        } else {
            std::hint::spin_loop();
        }
    }
    Guard
}

impl Drop for Guard {
    fn drop(&mut self) {
        POOL.lock.store(false, Ordering::Release);
    }
}

/// Force the lock open in a forked child (the holder no longer exists).
pub fn reset_after_fork() {
    POOL.lock.store(false, Ordering::Release);
}

/// The reason the pool could not be created, if it could not.
pub fn last_error() -> Option<&'static str> {
    ERROR.get().map(|s| s.as_str())
}

/// True when `[addr, addr+len)` lies inside the pool.
pub fn contains(addr: usize, len: usize) -> bool {
    let base = BASE.load(Ordering::Relaxed);
    let size = SIZE.load(Ordering::Relaxed);
    base != 0 && addr >= base && addr.saturating_add(len) <= base + size
}

/// Pool base and size (0, 0 before the first allocation).
pub fn range() -> (usize, usize) {
    (BASE.load(Ordering::Relaxed), SIZE.load(Ordering::Relaxed))
}

fn map_pool(cfg: &Config) -> Result<(*mut u8, usize), String> {
    let size = cfg.pool_size as usize;
    // SAFETY: plain mmap/open/ftruncate calls on values we own.
    unsafe {
        let mut file_init = None;
        let addr = if let Some(path) = &cfg.pm_file {
            let c = std::ffi::CString::new(path.as_str())
                .map_err(|_| format!("PMLAB_PM_FILE '{path}' contains a NUL byte"))?;
            file_init = Some(crate::trace_notes::save_initial(&c));
            let fd = libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                0o644,
            );
            if fd < 0 {
                return Err(format!(
                    "cannot open PM pool file '{path}': {}",
                    std::io::Error::last_os_error()
                ));
            }
            if libc::ftruncate(fd, size as libc::off_t) != 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(format!(
                    "cannot size PM pool file '{path}' to {size} bytes: {e}"
                ));
            }
            let a = libc::mmap(
                null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            libc::close(fd);
            a
        } else {
            map_anonymous_huge(size)
        };
        if addr == libc::MAP_FAILED {
            return Err(format!(
                "cannot map a PM pool of {size} bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        if let Some(node) = cfg.pm_node {
            if node >= 1024 {
                return Err(format!("PMLAB_PM_NODE {node} is out of range"));
            }
            let mut mask = [0u64; 16];
            mask[(node / 64) as usize] |= 1 << (node % 64);
            const MPOL_BIND: i32 = 2;
            let r = libc::syscall(
                libc::SYS_mbind,
                addr,
                size,
                MPOL_BIND,
                mask.as_ptr(),
                1024usize,
                0u32,
            );
            if r != 0 {
                return Err(format!(
                    "cannot bind the PM pool to NUMA node {node}: {} (see 'numactl --hardware')",
                    std::io::Error::last_os_error()
                ));
            }
        }
        let path = cfg.pm_file.as_deref().map(|p| {
            std::fs::canonicalize(p)
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_else(|_| p.to_string())
        });
        crate::trace_notes::pm_range(
            addr as u64,
            size as u64,
            path.as_deref().unwrap_or(""),
            0,
            file_init.flatten(),
        );
        Ok((addr as *mut u8, size))
    }
}

/// Huge-page size the anonymous pool is aligned to.
const HUGE: usize = 2 << 20;

/// An anonymous mapping of `size` bytes whose start is 2 MiB-aligned and
/// which asks for transparent huge pages: the calibrated DRAM latency is
/// measured on huge pages and real PM is mapped with them (device DAX), so
/// the emulated PM must not add 4 KiB-page TLB misses of its own (an
/// unaligned pool made multilat's PM accesses ~13 ns slower natively).
/// Returns `MAP_FAILED` like mmap.
///
/// # Safety
///
/// Plain mmap/munmap/madvise calls.
pub(crate) unsafe fn map_anonymous_huge(size: usize) -> *mut libc::c_void {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let Some(over) = size.checked_add(HUGE) else {
        return libc::mmap(null_mut(), size, prot, flags, -1, 0);
    };
    let raw = libc::mmap(null_mut(), over, prot, flags, -1, 0);
    if raw == libc::MAP_FAILED {
        // No room for the slack: take an unaligned mapping.
        return libc::mmap(null_mut(), size, prot, flags, -1, 0);
    }
    let start = raw as usize;
    let aligned = (start + HUGE - 1) & !(HUGE - 1);
    let head = aligned - start;
    let tail = over - head - size;
    if head > 0 {
        libc::munmap(raw, head);
    }
    if tail > 0 {
        libc::munmap((aligned + size) as *mut libc::c_void, tail);
    }
    let addr = aligned as *mut libc::c_void;
    // Advice only: where THP is off, the pool still works.
    libc::madvise(addr, size, libc::MADV_HUGEPAGE);
    addr
}

fn class_of(size: usize) -> Option<usize> {
    let need = size.max(1).next_power_of_two().max(1 << MIN_CLASS_SHIFT);
    let c = need.trailing_zeros() - MIN_CLASS_SHIFT;
    (c < CLASSES as u32).then_some(c as usize)
}

/// Header words: [0] block size (header included), [1] magic, [2] next free.
unsafe fn header(block: *mut u8) -> *mut u64 {
    block as *mut u64
}

/// Allocate `size` bytes of PM; null (errno ENOMEM) when the pool is full
/// or cannot be created.
pub fn alloc(size: usize, cfg: &Config) -> *mut u8 {
    if size > (cfg.pool_size as usize) {
        return null_mut();
    }
    let _g = lock();
    // SAFETY: the pool is only touched under the lock.
    let p = unsafe { &mut *POOL.pool.get() };
    if p.base.is_null() {
        if FAILED.load(Ordering::Relaxed) {
            return null_mut();
        }
        match map_pool(cfg) {
            Ok((b, s)) => {
                p.base = b;
                p.size = s;
                BASE.store(b as usize, Ordering::Relaxed);
                SIZE.store(s, Ordering::Relaxed);
            }
            Err(e) => {
                FAILED.store(true, Ordering::Relaxed);
                // Say why once: the program only sees NULL and ENOMEM.
                let line = format!("pmlab: runtime: warning: pmalloc fails: {e}\n");
                // SAFETY: write(2) to stderr.
                unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
                let _ = ERROR.set(e);
                return null_mut();
            }
        }
    }
    // SAFETY: every pointer below stays inside the pool mapping.
    unsafe {
        let (block, total) = match class_of(size) {
            Some(c) => {
                let total = HEADER + (1usize << (c as u32 + MIN_CLASS_SHIFT));
                if !p.free[c].is_null() {
                    let b = p.free[c];
                    p.free[c] = *header(b).add(2) as *mut u8;
                    (b, total)
                } else {
                    (bump(p, total), total)
                }
            }
            None => {
                let total = (HEADER + size).next_multiple_of(4096);
                let mut prev: *mut u64 = null_mut();
                let mut cur = p.large_free;
                let mut found = null_mut();
                while !cur.is_null() {
                    let h = header(cur);
                    let next = *h.add(2) as *mut u8;
                    if *h as usize >= total {
                        if prev.is_null() {
                            p.large_free = next;
                        } else {
                            *prev.add(2) = next as u64;
                        }
                        found = cur;
                        break;
                    }
                    prev = h;
                    cur = next;
                }
                if found.is_null() {
                    (bump(p, total), total)
                } else {
                    let t = *header(found) as usize;
                    (found, t)
                }
            }
        };
        if block.is_null() {
            return null_mut();
        }
        let h = header(block);
        *h = total as u64;
        *h.add(1) = MAGIC;
        *h.add(2) = 0;
        block.add(HEADER)
    }
}

unsafe fn bump(p: &mut Pool, total: usize) -> *mut u8 {
    if p.bump + total > p.size {
        return null_mut();
    }
    let b = p.base.add(p.bump);
    p.bump += total;
    b
}

/// Return a block to the pool. Returns false (nothing done) when `ptr` is
/// not a live block of the pool.
pub fn free(addr: usize) -> bool {
    let ptr = addr as *mut u8;
    if ptr.is_null() {
        return true;
    }
    if !contains(ptr as usize, 1) || (ptr as usize) < BASE.load(Ordering::Relaxed) + HEADER {
        return false;
    }
    let _g = lock();
    // SAFETY: ptr is inside the pool; its header precedes it.
    unsafe {
        let p = &mut *POOL.pool.get();
        let block = ptr.sub(HEADER);
        let h = header(block);
        if *h.add(1) != MAGIC {
            return false;
        }
        *h.add(1) = 0;
        let total = *h as usize;
        let payload = total - HEADER;
        if payload.is_power_of_two() && payload <= (1 << (CLASSES as u32 - 1 + MIN_CLASS_SHIFT)) {
            let c = class_of(payload).unwrap_or(0);
            *h.add(2) = p.free[c] as u64;
            p.free[c] = block;
        } else {
            *h.add(2) = p.large_free as u64;
            p.large_free = block;
        }
    }
    true
}

/// Usable size of a live block (0 if not a block).
pub fn usable_size(addr: usize) -> usize {
    let ptr = addr as *mut u8;
    if ptr.is_null() || !contains(ptr as usize, 1) {
        return 0;
    }
    // SAFETY: inside the pool; header checked by magic.
    unsafe {
        let h = header(ptr.sub(HEADER));
        if *h.add(1) != MAGIC {
            return 0;
        }
        *h as usize - HEADER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up() {
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(64), Some(0));
        assert_eq!(class_of(65), Some(1));
        assert_eq!(class_of(1 << 20), Some(14));
        assert_eq!(class_of((1 << 20) + 1), None);
    }

    #[test]
    fn alloc_free_reuse_and_alignment() {
        let cfg = Config {
            pool_size: 64 << 20,
            ..Config::default()
        };
        let a = alloc(100, &cfg);
        assert!(!a.is_null());
        assert_eq!(a as usize % 64, 0);
        assert_eq!(usable_size(a as usize), 128);
        assert!(contains(a as usize, 100));
        assert!(free(a as usize));
        let b = alloc(120, &cfg);
        assert_eq!(a, b, "freed block of the same class is reused");
        let big = alloc(3 << 20, &cfg);
        assert!(!big.is_null());
        assert!(free(big as usize));
        let big2 = alloc(2 << 20, &cfg);
        assert_eq!(big, big2, "large free block is reused first-fit");
        assert!(!free(8), "foreign pointers are refused");
        assert!(alloc(1 << 40, &cfg).is_null());
        // The pool is process-wide: another test may have created it.
        let (base, size) = range();
        assert_eq!(base % HUGE, 0, "the anonymous pool starts on a huge page");
        assert!(size >= 64 << 20);
    }

    #[test]
    fn huge_aligned_mapping_is_exactly_the_size_asked() {
        // SAFETY: map, check, unmap our own mapping.
        unsafe {
            let size = 6 << 20;
            let p = map_anonymous_huge(size);
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(p as usize % HUGE, 0);
            // Every byte is ours, and the slack around it was returned.
            std::ptr::write_bytes(p as *mut u8, 1, size);
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            let lo = format!("{:x}-{:x} ", p as usize, p as usize + size);
            assert!(maps.contains(&lo), "no mapping {lo} in\n{maps}");
            assert_eq!(libc::munmap(p, size), 0);
        }
    }
}
