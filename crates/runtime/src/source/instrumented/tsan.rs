//! The callbacks that programs built by `pmlab cc` with gcc
//! (`PMLAB_CC=gcc`) call on every load and store of their own code: gcc's
//! ThreadSanitizer instrumentation (`-fsanitize=thread`), linked against
//! libpmlab instead of libtsan. Each callback counts its access through the
//! same path as the clang hooks ([`super::hooks::on_access`]); the atomic
//! ones also perform the operation.
//!
//! # What gcc 12 emits
//!
//! Found by compiling C and C++ files that use every kind of access with
//! `gcc -fsanitize=thread` and listing `nm -u` (and the names built into
//! `cc1`/`cc1plus`):
//!
//! * `__tsan_init()`, from a constructor of each module: nothing to do.
//! * `__tsan_func_entry(pc)` / `__tsan_func_exit()` around every function,
//!   unless `--param=tsan-instrument-func-entry-exit=0`, which `pmlab cc`
//!   passes: defined as no-ops for objects built without it.
//! * `__tsan_readN(addr)` / `__tsan_writeN(addr)`, N = 1, 2, 4, 8, 16, before
//!   an aligned scalar access (a bit-field counts as its containing bytes;
//!   volatile accesses too, unless `--param=tsan-distinguish-volatile=1`
//!   makes them `__tsan_volatile_readN` / `__tsan_volatile_writeN`). Each
//!   counts one access; 8-byte reads pass the address as the loaded-value
//!   pointer, as `__sanitizer_cov_load8` does, so pointer chasing is seen.
//! * `__tsan_read_range(addr, size)` / `__tsan_write_range(addr, size)`:
//!   aggregate copies (`*a = *b` of a struct) and unaligned or odd-sized
//!   accesses (members of packed structs). Counted as one access per cache
//!   line the range touches.
//! * `__tsan_vptr_update(vptr, new)` (C++): the store of an object's vtable
//!   pointer in constructors and destructors; one 8-byte write.
//! * `__tsan_atomicN_OP` for N = 8, 16, 32, 64, 128 bits: every `__atomic_*`
//!   and `__sync_*` builtin, C11 `<stdatomic.h>` and C++ `std::atomic`
//!   operation. `load(a, mo)`, `store(a, v, mo)`; `exchange`, `fetch_add`,
//!   `fetch_sub`, `fetch_and`, `fetch_or`, `fetch_xor`, `fetch_nand`
//!   `(a, v, mo)` return the old value (gcc derives `__atomic_add_fetch`
//!   and the like from it); `compare_exchange_strong` / `_weak(a, expected*,
//!   desired, mo, fail_mo)` return 1 on success, else store the current
//!   value in `*expected` and return 0 (`__sync_val_compare_and_swap` and
//!   `__sync_bool_compare_and_swap` become `compare_exchange_strong` with a
//!   temporary). They are performed with Rust atomics, sequentially
//!   consistent whatever order the program asked for (stronger is correct);
//!   128-bit ones with `lock cmpxchg16b` (libatomic's way, so they agree with
//!   uninstrumented code), or a striped lock on a CPU without it. A load
//!   counts as a read (the 64-bit one with its value pointer), everything
//!   else, a failed compare-exchange included (it takes the line exclusive),
//!   as a write.
//! * `__tsan_atomic_thread_fence(mo)` (also `__sync_synchronize`): a
//!   sequentially consistent fence; `__tsan_atomic_signal_fence(mo)`: a
//!   compiler fence. Not counted.
//!
//! Also defined, though gcc 12 never emits them (libtsan's interface has
//! them and other compilers or versions may): `__tsan_unaligned_readN` /
//! `__tsan_unaligned_writeN` (N = 2, 4, 8, 16), `__tsan_vptr_read` and
//! `__tsan_atomicN_compare_exchange_val` (returns the old value).
//!
//! Calls of `memcpy`, `memset` and other libc functions stay calls: libtsan
//! would intercept them, libpmlab does not (as on the clang path).
//!
//! The symbols themselves are declared in [`crate::exports`]; this module
//! holds what they do.
//!
//! A program built with gcc's real ThreadSanitizer (linked with libtsan)
//! should not run under `pmlab run`: the preloaded libpmlab would take these
//! symbols over from libtsan.

use super::hooks::on_access;
use std::ffi::c_void;
use std::sync::atomic::{
    compiler_fence, fence, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering,
};

const LINE: usize = 64;

/// The pieces of `[addr, addr + size)` on successive cache lines, as
/// (start, bytes).
fn line_pieces(addr: usize, size: usize) -> impl Iterator<Item = (usize, u32)> {
    let end = addr.saturating_add(size);
    let mut at = addr;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let next = (at | (LINE - 1)).saturating_add(1).min(end);
        let piece = (at, (next - at) as u32);
        at = next;
        Some(piece)
    })
}

/// Count the accesses of `[addr, addr + size)`: one per line touched.
#[inline]
fn on_range(addr: usize, size: usize, write: bool) {
    for (at, n) in line_pieces(addr, size) {
        on_access(at, n, write, None);
    }
}

// ---- plain accesses ----

/// Before a read of `size` bytes at `addr`, its value not read
/// (`__tsan_readN` and the unaligned forms; N = 4 and 8 have [`read4`] and
/// [`read8`]; the volatile forms all come here: reading a device register
/// twice could have effects).
#[inline(always)]
pub(crate) fn read(addr: *const c_void, size: u32) {
    on_access(addr as usize, size, false, None);
}

/// [`read4`] in the shape of [`read`] (for the export table).
#[inline(always)]
pub(crate) fn read4_with_value(addr: *const c_void, _size: u32) {
    read4(addr);
}

/// Before a 4-byte read: the value about to be loaded is read too (4
/// bytes), to detect chases linked by 32-bit indices.
#[inline(always)]
pub(crate) fn read4(addr: *const c_void) {
    on_access(addr as usize, 4, false, Some(addr as *const u64));
}

/// Before an 8-byte read: the value about to be loaded is read too, to
/// detect pointer chasing.
#[inline(always)]
pub(crate) fn read8(addr: *const c_void) {
    on_access(addr as usize, 8, false, Some(addr as *const u64));
}

/// Before a write of `size` bytes at `addr`.
#[inline(always)]
pub(crate) fn write(addr: *mut c_void, size: u32) {
    on_access(addr as usize, size, true, None);
}

/// Before reading `size` bytes at `addr` (struct copies, packed or
/// odd-sized members): one access per line.
#[inline]
pub(crate) fn read_range(addr: *const c_void, size: usize) {
    on_range(addr as usize, size, false);
}

/// Before writing `size` bytes at `addr`: one access per line.
#[inline]
pub(crate) fn write_range(addr: *mut c_void, size: usize) {
    on_range(addr as usize, size, true);
}

/// C++: before an object's vtable pointer at `vptr` is set (constructors,
/// destructors): an 8-byte write.
#[inline(always)]
pub(crate) fn vptr_update(vptr: *mut *mut c_void) {
    on_access(
        vptr as usize,
        std::mem::size_of::<usize>() as u32,
        true,
        None,
    );
}

/// C++: before an object's vtable pointer is read (clang only): an 8-byte
/// read.
#[inline(always)]
pub(crate) fn vptr_read(vptr: *mut *mut c_void) {
    on_access(
        vptr as usize,
        std::mem::size_of::<usize>() as u32,
        false,
        None,
    );
}

// ---- atomics ----

/// A sequentially consistent fence (`atomic_thread_fence`,
/// `__sync_synchronize`), whatever order the program asked for.
#[inline]
pub(crate) fn thread_fence() {
    fence(Ordering::SeqCst);
}

/// A compiler fence (`atomic_signal_fence`).
#[inline]
pub(crate) fn signal_fence() {
    compiler_fence(Ordering::SeqCst);
}

/// The read-modify-write operations of `__tsan_atomicN_OP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rmw {
    /// `exchange`: store the operand.
    Xchg,
    /// `fetch_add` (wrapping).
    Add,
    /// `fetch_sub` (wrapping).
    Sub,
    /// `fetch_and`.
    And,
    /// `fetch_or`.
    Or,
    /// `fetch_xor`.
    Xor,
    /// `fetch_nand`.
    Nand,
}

/// An integer the `__tsan_atomic*` callbacks operate on, with its
/// sequentially consistent operations (stronger than any order the program
/// asks for, hence correct).
pub(crate) trait Atomic: Copy {
    /// Load.
    ///
    /// # Safety
    ///
    /// `a` is valid and aligned for atomic access (writable for 128 bits,
    /// where the load is a compare-exchange, as in libatomic).
    unsafe fn load(a: *const Self) -> Self;
    /// Store.
    ///
    /// # Safety
    ///
    /// As for `load`.
    unsafe fn store(a: *mut Self, v: Self);
    /// Apply `op` with operand `v`; returns the old value.
    ///
    /// # Safety
    ///
    /// As for `load`.
    unsafe fn rmw(a: *mut Self, op: Rmw, v: Self) -> Self;
    /// Store `new` if `*a` is `current`: `Ok(old)` when it stored, else
    /// `Err(value found)`.
    ///
    /// # Safety
    ///
    /// As for `load`.
    unsafe fn cas(a: *mut Self, current: Self, new: Self) -> Result<Self, Self>;
}

macro_rules! small_atomic {
    ($($t:ty => $at:ty),* $(,)?) => {$(
        impl Atomic for $t {
            #[inline(always)]
            unsafe fn load(a: *const $t) -> $t {
                <$at>::from_ptr(a as *mut $t).load(Ordering::SeqCst)
            }
            #[inline(always)]
            unsafe fn store(a: *mut $t, v: $t) {
                <$at>::from_ptr(a).store(v, Ordering::SeqCst)
            }
            #[inline(always)]
            unsafe fn rmw(a: *mut $t, op: Rmw, v: $t) -> $t {
                let at = <$at>::from_ptr(a);
                match op {
                    Rmw::Xchg => at.swap(v, Ordering::SeqCst),
                    Rmw::Add => at.fetch_add(v, Ordering::SeqCst),
                    Rmw::Sub => at.fetch_sub(v, Ordering::SeqCst),
                    Rmw::And => at.fetch_and(v, Ordering::SeqCst),
                    Rmw::Or => at.fetch_or(v, Ordering::SeqCst),
                    Rmw::Xor => at.fetch_xor(v, Ordering::SeqCst),
                    Rmw::Nand => at.fetch_nand(v, Ordering::SeqCst),
                }
            }
            #[inline(always)]
            unsafe fn cas(a: *mut $t, current: $t, new: $t) -> Result<$t, $t> {
                <$at>::from_ptr(a).compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
            }
        }
    )*};
}

small_atomic!(u8 => AtomicU8, u16 => AtomicU16, u32 => AtomicU32, u64 => AtomicU64);

impl Atomic for u128 {
    #[inline(always)]
    unsafe fn load(a: *const u128) -> u128 {
        cas128(a as *mut u128, 0, 0).0
    }
    #[inline(always)]
    unsafe fn store(a: *mut u128, v: u128) {
        rmw128(a, |_| v);
    }
    #[inline(always)]
    unsafe fn rmw(a: *mut u128, op: Rmw, v: u128) -> u128 {
        match op {
            Rmw::Xchg => rmw128(a, |_| v),
            Rmw::Add => rmw128(a, |x| x.wrapping_add(v)),
            Rmw::Sub => rmw128(a, |x| x.wrapping_sub(v)),
            Rmw::And => rmw128(a, |x| x & v),
            Rmw::Or => rmw128(a, |x| x | v),
            Rmw::Xor => rmw128(a, |x| x ^ v),
            Rmw::Nand => rmw128(a, |x| !(x & v)),
        }
    }
    #[inline(always)]
    unsafe fn cas(a: *mut u128, current: u128, new: u128) -> Result<u128, u128> {
        match cas128(a, current, new) {
            (old, true) => Ok(old),
            (seen, false) => Err(seen),
        }
    }
}

/// The value pointer passed for a load of `N` bytes: the 4- and 8-byte
/// ones (the hook reads exactly `N` bytes).
#[inline(always)]
fn value_ptr<T>(a: *const T) -> Option<*const u64> {
    matches!(std::mem::size_of::<T>(), 4 | 8).then_some(a as *const u64)
}

/// `__tsan_atomicN_load`: counts a read (the 64-bit one with its value
/// pointer) and loads.
///
/// # Safety
///
/// As [`Atomic::load`].
#[inline(always)]
pub(crate) unsafe fn atomic_load<T: Atomic>(a: *const T) -> T {
    on_access(
        a as usize,
        std::mem::size_of::<T>() as u32,
        false,
        value_ptr(a),
    );
    T::load(a)
}

/// `__tsan_atomicN_store`: counts a write and stores.
///
/// # Safety
///
/// As [`Atomic::load`].
#[inline(always)]
pub(crate) unsafe fn atomic_store<T: Atomic>(a: *mut T, v: T) {
    on_access(a as usize, std::mem::size_of::<T>() as u32, true, None);
    T::store(a, v)
}

/// `__tsan_atomicN_exchange` and `_fetch_OP`: counts a write and returns
/// the old value.
///
/// # Safety
///
/// As [`Atomic::load`].
#[inline(always)]
pub(crate) unsafe fn atomic_rmw<T: Atomic>(a: *mut T, op: Rmw, v: T) -> T {
    on_access(a as usize, std::mem::size_of::<T>() as u32, true, None);
    T::rmw(a, op, v)
}

/// `__tsan_atomicN_compare_exchange_strong` (and `_weak`, which need not
/// fail spuriously and never does here): stores `v` and returns 1 when `*a`
/// equals `*expected`, else copies `*a` into `*expected` and returns 0;
/// counts a write (a failed one takes the line exclusive too).
///
/// # Safety
///
/// As [`Atomic::load`]; `expected` is valid.
#[inline(always)]
pub(crate) unsafe fn atomic_cas<T: Atomic>(a: *mut T, expected: *mut T, v: T) -> i32 {
    on_access(a as usize, std::mem::size_of::<T>() as u32, true, None);
    match T::cas(a, expected.read_unaligned(), v) {
        Ok(_) => 1,
        Err(cur) => {
            expected.write_unaligned(cur);
            0
        }
    }
}

/// `__tsan_atomicN_compare_exchange_val`: stores `v` if `*a` is `c`;
/// returns the value `*a` had; counts a write.
///
/// # Safety
///
/// As [`Atomic::load`].
#[inline(always)]
pub(crate) unsafe fn atomic_cas_val<T: Atomic>(a: *mut T, c: T, v: T) -> T {
    on_access(a as usize, std::mem::size_of::<T>() as u32, true, None);
    match T::cas(a, c, v) {
        Ok(old) | Err(old) => old,
    }
}

// ---- 128-bit atomics ----

/// 128-bit compare-and-swap: if `*a == old`, store `new`; returns the
/// previous value and whether it stored. Sequentially consistent.
///
/// # Safety
///
/// `a` is valid and 16-byte aligned.
#[inline]
unsafe fn cas128(a: *mut u128, old: u128, new: u128) -> (u128, bool) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("cmpxchg16b") {
        return cmpxchg16b(a, old, new);
    }
    locked_cas128(a, old, new)
}

/// `lock cmpxchg16b`: what libatomic uses for 16-byte atomics on x86-64.
///
/// # Safety
///
/// As for [`cas128`]; the CPU has the instruction.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn cmpxchg16b(a: *mut u128, old: u128, new: u128) -> (u128, bool) {
    let mut lo = old as u64;
    let mut hi = (old >> 64) as u64;
    // rbx is reserved by the compiler (which may still hand it out for a
    // `reg` operand): every operand is in a named register, and the low
    // half of `new` is swapped into rbx for the instruction only. The
    // instruction leaves rdx:rax unchanged when it stores and loads the
    // current value when it does not, so success is `prev == old`.
    std::arch::asm!(
        "xchg rsi, rbx",
        "lock cmpxchg16b xmmword ptr [rdi]",
        "mov rbx, rsi",
        in("rdi") a,
        inout("rsi") new as u64 => _,
        inout("rax") lo,
        inout("rdx") hi,
        in("rcx") (new >> 64) as u64,
        options(nostack),
    );
    let prev = ((hi as u128) << 64) | lo as u128;
    (prev, prev == old)
}

/// Striped spin locks for 128-bit atomics where the CPU has no 16-byte
/// compare-and-swap (every access to such an object from instrumented
/// code goes through here, so they agree with each other).
static LOCKS: [AtomicU8; 64] = [const { AtomicU8::new(0) }; 64];

/// [`cas128`] under the lock of `a`'s stripe.
///
/// # Safety
///
/// As for [`cas128`].
unsafe fn locked_cas128(a: *mut u128, old: u128, new: u128) -> (u128, bool) {
    let lock = &LOCKS[(a as usize >> 4) % LOCKS.len()];
    while lock
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    let cur = std::ptr::read_volatile(a);
    let ok = cur == old;
    if ok {
        std::ptr::write_volatile(a, new);
    }
    lock.store(0, Ordering::Release);
    fence(Ordering::SeqCst);
    (cur, ok)
}

/// Apply `f` to `*a` atomically; returns the old value.
///
/// # Safety
///
/// As for [`cas128`].
#[inline]
unsafe fn rmw128(a: *mut u128, f: impl Fn(u128) -> u128) -> u128 {
    // Guess 0 first: a wrong guess costs one failed exchange, which returns
    // the current value.
    let mut cur = 0;
    loop {
        match cas128(a, cur, f(cur)) {
            (_, true) => return cur,
            (seen, false) => cur = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(align(16))]
    struct A16(u128);

    #[test]
    fn the_lock_fallback_agrees_with_the_instruction() {
        let mut x = A16(1 << 127);
        let p = &mut x.0 as *mut u128;
        unsafe {
            assert_eq!(locked_cas128(p, 1 << 127, 9), (1 << 127, true));
            assert_eq!(locked_cas128(p, 1, 2), (9, false));
            assert_eq!(cas128(p, 9, 10), (9, true));
            assert_eq!(cas128(p, 9, 11), (10, false));
        }
        assert_eq!(x.0, 10);
    }

    #[test]
    fn ranges_are_split_at_line_boundaries() {
        let v: Vec<_> = line_pieces(60, 10).collect();
        assert_eq!(v, [(60, 4), (64, 6)]);
        let v: Vec<_> = line_pieces(128, 128).collect();
        assert_eq!(v, [(128, 64), (192, 64)]);
        assert_eq!(line_pieces(5, 0).count(), 0);
        // A range running past the top of memory stops there.
        let top = usize::MAX - 3;
        let v: Vec<_> = line_pieces(top, 100).collect();
        assert_eq!(v, [(top, 3)]);
    }
}
