//! libc's `memcpy`, `memmove` and `memset` (and their `_FORTIFY_SOURCE`
//! `__*_chk` forms), seen by the instrumented source.
//!
//! A program built with `pmlab cc` has its own loads and stores
//! instrumented, but the bytes libc copies and fills for it are not: a
//! redo log `memcpy`'d into PM, a buffer cleared with `memset`. These
//! interposers offer every 64-byte line such a call reads (the source) and
//! writes (the destination) to the hooks, as loads and stores of the
//! program, and then call libc. So the cache model, the delays, the
//! write-backs and `pmlab trace`'s PM stores include them.
//!
//! * Only while the hooks count (`pmlab run --source instrumented`, or
//!   `pmlab trace` of such a program); otherwise each call goes straight
//!   to libc (one relaxed load more).
//! * Not for calls from libpmlab itself: Rust code in the runtime copies
//!   and fills too (the model's own tables, the tracer's buffers). Each
//!   interposer is a naked trampoline (in [`crate::exports`]) that passes
//!   its return address to the body here (`memcpy_body`…, which takes it as
//!   an extra last argument), which skips the hooks when that address lies
//!   in libpmlab's own mapping.
//! * libc's internal copies (inside `printf`, `fread`…) call libc's
//!   functions directly, not through these symbols, and stay unseen, as do
//!   other libraries' private copy routines (libpmem's).
//! * Before the runtime's constructor has looked up libc's functions (the
//!   dynamic loader and libc's own start-up may call these first), the
//!   work is done here with `rep movsb`/`rep stosb`, and nothing is
//!   counted: the runtime's own calls cannot be told apart yet. The
//!   constructor (`startup.rs`) runs [`init`] before it starts any thread of
//!   the runtime (once the trace writer, started first, had its name copy
//!   counted as a store into PM).
//!
//! The source lines are offered without the loaded value (no pointer-chase
//! detection for copies); libc's non-temporal stores for very large copies
//! are modelled as ordinary stores.

use super::hooks::{active, on_access};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static REAL_MEMCPY: AtomicUsize = AtomicUsize::new(0);
static REAL_MEMMOVE: AtomicUsize = AtomicUsize::new(0);
static REAL_MEMSET: AtomicUsize = AtomicUsize::new(0);
static CHK_FAIL: AtomicUsize = AtomicUsize::new(0);
/// libpmlab's own mapping, `[lo, hi)`; empty until [`init`].
static OURS_LO: AtomicUsize = AtomicUsize::new(usize::MAX);
static OURS_HI: AtomicUsize = AtomicUsize::new(0);
/// [`init`] has run: until then no call is counted, since a call from
/// libpmlab itself cannot yet be told from the program's.
static READY: AtomicBool = AtomicBool::new(false);

type Copy = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;
type Fill = unsafe extern "C" fn(*mut c_void, c_int, usize) -> *mut c_void;

/// Look up libc's functions and libpmlab's own address range (from the
/// library constructor, before anything else runs in the runtime).
pub fn init() {
    for (slot, name) in [
        (&REAL_MEMCPY, c"memcpy"),
        (&REAL_MEMMOVE, c"memmove"),
        (&REAL_MEMSET, c"memset"),
        (&CHK_FAIL, c"__chk_fail"),
    ] {
        if slot.load(Ordering::Relaxed) == 0 {
            // SAFETY: a NUL-terminated name; dlsym has no other condition.
            let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
            slot.store(f, Ordering::Release);
        }
    }
    if let Some((lo, hi)) = own_range() {
        OURS_LO.store(lo, Ordering::Relaxed);
        OURS_HI.store(hi, Ordering::Release);
    }
    READY.store(true, Ordering::Release);
}

/// The span of libpmlab's loaded segments.
fn own_range() -> Option<(usize, usize)> {
    struct Find {
        inside: usize,
        found: Option<(usize, usize)>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info; `data` is our `Find`.
        unsafe {
            let f = &mut *(data as *mut Find);
            let i = &*info;
            let (mut lo, mut hi) = (usize::MAX, 0usize);
            for k in 0..i.dlpi_phnum as usize {
                let ph = &*i.dlpi_phdr.add(k);
                if ph.p_type == libc::PT_LOAD {
                    let start = i.dlpi_addr as usize + ph.p_vaddr as usize;
                    lo = lo.min(start);
                    hi = hi.max(start + ph.p_memsz as usize);
                }
            }
            if lo <= f.inside && f.inside < hi {
                f.found = Some((lo, hi));
                return 1;
            }
        }
        0
    }
    let mut f = Find {
        inside: own_range as *const () as usize,
        found: None,
    };
    // SAFETY: the callback only reads the loader's data and writes `f`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut f as *mut Find as *mut c_void) };
    f.found
}

/// True when a call returns into libpmlab itself.
#[inline]
fn from_us(ret: usize) -> bool {
    ret >= OURS_LO.load(Ordering::Relaxed) && ret < OURS_HI.load(Ordering::Relaxed)
}

/// Offer the lines of `[addr, addr + len)` to the hooks as accesses.
#[inline]
fn offer(addr: usize, len: usize, write: bool) {
    if len == 0 {
        return;
    }
    let end = addr.saturating_add(len);
    let mut at = addr;
    while at < end {
        let next = ((at >> 6) + 1) << 6;
        let upto = next.min(end);
        on_access(at, (upto - at) as u32, write, None);
        at = upto;
    }
}

#[inline]
fn counting(ret: usize) -> bool {
    active() && READY.load(Ordering::Acquire) && !from_us(ret)
}

/// Copy forward with `rep movsb` (no call that could come back here).
///
/// # Safety
/// As `memcpy`.
unsafe fn movsb(d: *mut c_void, s: *const c_void, n: usize) {
    // SAFETY: the caller's ranges are valid for `n` bytes.
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rdi") d => _,
            inout("rsi") s => _,
            inout("rcx") n => _,
            options(nostack, preserves_flags)
        );
    }
}

/// `memmove` without libc: forward, or backward when `d` overlaps the end
/// of `s`.
///
/// # Safety
/// As `memmove`.
unsafe fn move_bytes(d: *mut c_void, s: *const c_void, n: usize) {
    if (d as usize) <= (s as usize) || (d as usize) >= (s as usize).wrapping_add(n) {
        // SAFETY: forward copy is correct when d does not start inside s.
        unsafe { movsb(d, s, n) };
    } else {
        // SAFETY: backward copy with the direction flag, restored after.
        unsafe {
            core::arch::asm!(
                "std",
                "rep movsb",
                "cld",
                inout("rdi") (d as usize + n - 1) => _,
                inout("rsi") (s as usize + n - 1) => _,
                inout("rcx") n => _,
                options(nostack)
            );
        }
    }
}

/// A copy of `n` bytes from `s` to `d` for the caller at `ret`: offered to
/// the hooks, then done by libc's function in `real`, or by `fallback`
/// before it is known.
///
/// # Safety
/// As `memcpy`/`memmove`.
#[inline(always)]
unsafe fn copy(
    d: *mut c_void,
    s: *const c_void,
    n: usize,
    ret: usize,
    real: &AtomicUsize,
    fallback: unsafe fn(*mut c_void, *const c_void, usize),
) -> *mut c_void {
    if counting(ret) {
        offer(s as usize, n, false);
        offer(d as usize, n, true);
    }
    match real.load(Ordering::Acquire) {
        0 => {
            // SAFETY: as the caller's function.
            unsafe { fallback(d, s, n) };
            d
        }
        // SAFETY: libc's function, as dlsym found it.
        f => unsafe { std::mem::transmute::<usize, Copy>(f)(d, s, n) },
    }
}

pub(crate) unsafe extern "C" fn memcpy_body(
    d: *mut c_void,
    s: *const c_void,
    n: usize,
    ret: usize,
) -> *mut c_void {
    // SAFETY: as memcpy.
    unsafe { copy(d, s, n, ret, &REAL_MEMCPY, movsb) }
}

pub(crate) unsafe extern "C" fn memmove_body(
    d: *mut c_void,
    s: *const c_void,
    n: usize,
    ret: usize,
) -> *mut c_void {
    // SAFETY: as memmove.
    unsafe { copy(d, s, n, ret, &REAL_MEMMOVE, move_bytes) }
}

pub(crate) unsafe extern "C" fn memset_body(
    d: *mut c_void,
    c: c_int,
    n: usize,
    ret: usize,
) -> *mut c_void {
    if counting(ret) {
        offer(d as usize, n, true);
    }
    match REAL_MEMSET.load(Ordering::Acquire) {
        0 => {
            // SAFETY: as memset: `n` writable bytes at `d`.
            unsafe {
                core::arch::asm!(
                    "rep stosb",
                    inout("rdi") d => _,
                    inout("rcx") n => _,
                    in("al") c as u8,
                    options(nostack, preserves_flags)
                );
            }
            d
        }
        // SAFETY: libc's memset, as dlsym found it.
        f => unsafe { std::mem::transmute::<usize, Fill>(f)(d, c, n) },
    }
}

/// A fortified call whose length exceeds the destination: libc's
/// `__chk_fail` (which aborts), or abort.
#[cold]
fn overflow() -> ! {
    let f = CHK_FAIL.load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: libc's __chk_fail takes nothing and does not return.
        unsafe { std::mem::transmute::<usize, extern "C" fn() -> !>(f)() }
    }
    std::process::abort()
}

pub(crate) unsafe extern "C" fn memcpy_chk_body(
    d: *mut c_void,
    s: *const c_void,
    n: usize,
    dlen: usize,
    ret: usize,
) -> *mut c_void {
    if n > dlen {
        overflow();
    }
    // SAFETY: as memcpy, the length checked.
    unsafe { memcpy_body(d, s, n, ret) }
}

pub(crate) unsafe extern "C" fn memmove_chk_body(
    d: *mut c_void,
    s: *const c_void,
    n: usize,
    dlen: usize,
    ret: usize,
) -> *mut c_void {
    if n > dlen {
        overflow();
    }
    // SAFETY: as memmove, the length checked.
    unsafe { memmove_body(d, s, n, ret) }
}

pub(crate) unsafe extern "C" fn memset_chk_body(
    d: *mut c_void,
    c: c_int,
    n: usize,
    dlen: usize,
    ret: usize,
) -> *mut c_void {
    if n > dlen {
        overflow();
    }
    // SAFETY: as memset, the length checked.
    unsafe { memset_body(d, c, n, ret) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallbacks_copy_move_and_fill_like_libc() {
        let mut a: Vec<u8> = (0..200u8).collect();
        let src: Vec<u8> = (0..100u8).map(|x| x ^ 0x5a).collect();
        // SAFETY: in-bounds buffers.
        unsafe {
            movsb(
                a.as_mut_ptr() as *mut c_void,
                src.as_ptr() as *const c_void,
                100,
            )
        };
        assert_eq!(&a[..100], &src[..]);
        // Overlapping moves both ways.
        let mut b: Vec<u8> = (0..100u8).collect();
        let p = b.as_mut_ptr();
        // SAFETY: both ranges inside `b`.
        unsafe { move_bytes(p.add(10) as *mut c_void, p as *const c_void, 50) };
        assert_eq!(&b[10..60], &(0..50u8).collect::<Vec<_>>()[..]);
        let mut c: Vec<u8> = (0..100u8).collect();
        let q = c.as_mut_ptr();
        // SAFETY: both ranges inside `c`.
        unsafe { move_bytes(q as *mut c_void, q.add(10) as *const c_void, 50) };
        assert_eq!(&c[..50], &(10..60u8).collect::<Vec<_>>()[..]);
        // The direction flag is clear again: a forward copy still works.
        unsafe {
            movsb(
                a.as_mut_ptr() as *mut c_void,
                src.as_ptr() as *const c_void,
                10,
            )
        };
        assert_eq!(&a[..10], &src[..10]);
    }

    #[test]
    fn the_runtime_finds_its_own_range() {
        let (lo, hi) = own_range().expect("this test binary is loaded");
        let here = the_runtime_finds_its_own_range as *const () as usize;
        assert!(lo <= here && here < hi);
        assert!(
            !(lo..hi).contains(&(libc::malloc as *const () as usize)),
            "libc is another object"
        );
    }
}
