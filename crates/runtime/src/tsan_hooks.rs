//! The callbacks that programs built by `pmlab cc` with gcc
//! (`PMLAB_CC=gcc`) call on every load and store of their own code: gcc's
//! ThreadSanitizer instrumentation (`-fsanitize=thread`), linked against
//! libpmlab instead of libtsan. Each callback counts its access through the
//! same path as the clang hooks ([`crate::instrument_hooks`]); the atomic
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
//! A program built with gcc's real ThreadSanitizer (linked with libtsan)
//! should not run under `pmlab run`: the preloaded libpmlab would take these
//! symbols over from libtsan.

use crate::instrument_hooks::on_access;
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

macro_rules! read_hook {
    ($($name:ident: $n:expr),* $(,)?) => {$(
        /// Called by gcc-instrumented code before a read of that size.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *const c_void) {
            on_access(addr as usize, $n, false, None);
        }
    )*};
}

macro_rules! read8_hook {
    ($($name:ident),* $(,)?) => {$(
        /// Called by gcc-instrumented code before an 8-byte read; the value
        /// about to be loaded is read too, to detect pointer chasing.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *const c_void) {
            on_access(addr as usize, 8, false, Some(addr as *const u64));
        }
    )*};
}

macro_rules! write_hook {
    ($($name:ident: $n:expr),* $(,)?) => {$(
        /// Called by gcc-instrumented code before a write of that size.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *mut c_void) {
            on_access(addr as usize, $n, true, None);
        }
    )*};
}

read_hook!(
    __tsan_read1: 1,
    __tsan_read2: 2,
    __tsan_read4: 4,
    __tsan_read16: 16,
    __tsan_volatile_read1: 1,
    __tsan_volatile_read2: 2,
    __tsan_volatile_read4: 4,
    __tsan_volatile_read16: 16,
    __tsan_unaligned_read2: 2,
    __tsan_unaligned_read4: 4,
    __tsan_unaligned_read16: 16,
);
read8_hook!(__tsan_read8, __tsan_volatile_read8, __tsan_unaligned_read8);
write_hook!(
    __tsan_write1: 1,
    __tsan_write2: 2,
    __tsan_write4: 4,
    __tsan_write8: 8,
    __tsan_write16: 16,
    __tsan_volatile_write1: 1,
    __tsan_volatile_write2: 2,
    __tsan_volatile_write4: 4,
    __tsan_volatile_write8: 8,
    __tsan_volatile_write16: 16,
    __tsan_unaligned_write2: 2,
    __tsan_unaligned_write4: 4,
    __tsan_unaligned_write8: 8,
    __tsan_unaligned_write16: 16,
);

/// Called by gcc-instrumented code before reading `size` bytes at `addr`
/// (struct copies, packed or odd-sized members).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_read_range(addr: *const c_void, size: usize) {
    on_range(addr as usize, size, false);
}

/// Called by gcc-instrumented code before writing `size` bytes at `addr`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_write_range(addr: *mut c_void, size: usize) {
    on_range(addr as usize, size, true);
}

/// C++: called before an object's vtable pointer at `vptr` is set to
/// `new_val` (constructors, destructors): an 8-byte write.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_vptr_update(vptr: *mut *mut c_void, _new_val: *mut c_void) {
    on_access(
        vptr as usize,
        std::mem::size_of::<usize>() as u32,
        true,
        None,
    );
}

/// C++: called before an object's vtable pointer is read (clang only): an
/// 8-byte read.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_vptr_read(vptr: *mut *mut c_void) {
    on_access(
        vptr as usize,
        std::mem::size_of::<usize>() as u32,
        false,
        None,
    );
}

/// Called once by each instrumented module's constructor. Nothing to do.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_init() {}

/// Function entry (not emitted by `pmlab cc`, which passes
/// `--param=tsan-instrument-func-entry-exit=0`). Nothing to do.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_func_entry(_caller_pc: *mut c_void) {}

/// Function exit (see [`__tsan_func_entry`]). Nothing to do.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_func_exit() {}

// ---- atomics ----

/// A sequentially consistent fence (`atomic_thread_fence`,
/// `__sync_synchronize`), whatever order `_mo` asks for.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_atomic_thread_fence(_mo: i32) {
    fence(Ordering::SeqCst);
}

/// A compiler fence (`atomic_signal_fence`).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_atomic_signal_fence(_mo: i32) {
    compiler_fence(Ordering::SeqCst);
}

/// The value pointer passed for a load of `N` bytes: the 8-byte ones only.
#[inline(always)]
fn value_ptr<T>(a: *const T) -> Option<*const u64> {
    (std::mem::size_of::<T>() == 8).then_some(a as *const u64)
}

macro_rules! atomics {
    (
        $t:ty, $at:ty,
        $load:ident, $store:ident, $xchg:ident,
        $add:ident, $sub:ident, $and:ident, $or:ident, $xor:ident, $nand:ident,
        $strong:ident, $weak:ident, $val:ident
    ) => {
        /// Atomic load (sequentially consistent); counts a read.
        ///
        /// # Safety
        ///
        /// `a` is valid and aligned for atomic access.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $load(a: *const $t, _mo: i32) -> $t {
            on_access(a as usize, std::mem::size_of::<$t>() as u32, false, value_ptr(a));
            <$at>::from_ptr(a as *mut $t).load(Ordering::SeqCst)
        }

        /// Atomic store (sequentially consistent); counts a write.
        ///
        /// # Safety
        ///
        /// As for the load.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $store(a: *mut $t, v: $t, _mo: i32) {
            on_access(a as usize, std::mem::size_of::<$t>() as u32, true, None);
            <$at>::from_ptr(a).store(v, Ordering::SeqCst)
        }

        atomics!(@rmw $t, $at, $xchg, swap);
        atomics!(@rmw $t, $at, $add, fetch_add);
        atomics!(@rmw $t, $at, $sub, fetch_sub);
        atomics!(@rmw $t, $at, $and, fetch_and);
        atomics!(@rmw $t, $at, $or, fetch_or);
        atomics!(@rmw $t, $at, $xor, fetch_xor);
        atomics!(@rmw $t, $at, $nand, fetch_nand);

        /// Strong compare-exchange: stores `v` and returns 1 when `*a`
        /// equals `*expected`, else copies `*a` into `*expected` and
        /// returns 0; counts a write.
        ///
        /// # Safety
        ///
        /// As for the load; `expected` is valid.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $strong(
            a: *mut $t,
            expected: *mut $t,
            v: $t,
            _mo: i32,
            _fail_mo: i32,
        ) -> i32 {
            on_access(a as usize, std::mem::size_of::<$t>() as u32, true, None);
            match <$at>::from_ptr(a).compare_exchange(
                *expected,
                v,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => 1,
                Err(cur) => {
                    *expected = cur;
                    0
                }
            }
        }

        /// Weak compare-exchange: the strong one (a weak compare-exchange
        /// may fail spuriously, and need not).
        ///
        /// # Safety
        ///
        /// As for the strong one.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $weak(
            a: *mut $t,
            expected: *mut $t,
            v: $t,
            mo: i32,
            fail_mo: i32,
        ) -> i32 {
            // SAFETY: the caller's guarantees are the strong one's.
            unsafe { $strong(a, expected, v, mo, fail_mo) }
        }

        /// Compare-exchange returning the value `*a` had (stored `v` if it
        /// was `c`).
        ///
        /// # Safety
        ///
        /// As for the load.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $val(a: *mut $t, c: $t, v: $t, _mo: i32, _fail_mo: i32) -> $t {
            on_access(a as usize, std::mem::size_of::<$t>() as u32, true, None);
            match <$at>::from_ptr(a).compare_exchange(c, v, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(old) | Err(old) => old,
            }
        }
    };
    (@rmw $t:ty, $at:ty, $name:ident, $op:ident) => {
        /// Atomic read-modify-write (sequentially consistent) returning the
        /// old value; counts a write.
        ///
        /// # Safety
        ///
        /// `a` is valid and aligned for atomic access.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(a: *mut $t, v: $t, _mo: i32) -> $t {
            on_access(a as usize, std::mem::size_of::<$t>() as u32, true, None);
            <$at>::from_ptr(a).$op(v, Ordering::SeqCst)
        }
    };
}

atomics!(
    u8,
    AtomicU8,
    __tsan_atomic8_load,
    __tsan_atomic8_store,
    __tsan_atomic8_exchange,
    __tsan_atomic8_fetch_add,
    __tsan_atomic8_fetch_sub,
    __tsan_atomic8_fetch_and,
    __tsan_atomic8_fetch_or,
    __tsan_atomic8_fetch_xor,
    __tsan_atomic8_fetch_nand,
    __tsan_atomic8_compare_exchange_strong,
    __tsan_atomic8_compare_exchange_weak,
    __tsan_atomic8_compare_exchange_val
);
atomics!(
    u16,
    AtomicU16,
    __tsan_atomic16_load,
    __tsan_atomic16_store,
    __tsan_atomic16_exchange,
    __tsan_atomic16_fetch_add,
    __tsan_atomic16_fetch_sub,
    __tsan_atomic16_fetch_and,
    __tsan_atomic16_fetch_or,
    __tsan_atomic16_fetch_xor,
    __tsan_atomic16_fetch_nand,
    __tsan_atomic16_compare_exchange_strong,
    __tsan_atomic16_compare_exchange_weak,
    __tsan_atomic16_compare_exchange_val
);
atomics!(
    u32,
    AtomicU32,
    __tsan_atomic32_load,
    __tsan_atomic32_store,
    __tsan_atomic32_exchange,
    __tsan_atomic32_fetch_add,
    __tsan_atomic32_fetch_sub,
    __tsan_atomic32_fetch_and,
    __tsan_atomic32_fetch_or,
    __tsan_atomic32_fetch_xor,
    __tsan_atomic32_fetch_nand,
    __tsan_atomic32_compare_exchange_strong,
    __tsan_atomic32_compare_exchange_weak,
    __tsan_atomic32_compare_exchange_val
);
atomics!(
    u64,
    AtomicU64,
    __tsan_atomic64_load,
    __tsan_atomic64_store,
    __tsan_atomic64_exchange,
    __tsan_atomic64_fetch_add,
    __tsan_atomic64_fetch_sub,
    __tsan_atomic64_fetch_and,
    __tsan_atomic64_fetch_or,
    __tsan_atomic64_fetch_xor,
    __tsan_atomic64_fetch_nand,
    __tsan_atomic64_compare_exchange_strong,
    __tsan_atomic64_compare_exchange_weak,
    __tsan_atomic64_compare_exchange_val
);

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

/// 128-bit atomic load; counts a read.
///
/// # Safety
///
/// `a` is valid, writable and 16-byte aligned (the load is a
/// compare-exchange, as in libatomic).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __tsan_atomic128_load(a: *const u128, _mo: i32) -> u128 {
    on_access(a as usize, 16, false, None);
    cas128(a as *mut u128, 0, 0).0
}

/// 128-bit atomic store; counts a write.
///
/// # Safety
///
/// `a` is valid and 16-byte aligned.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __tsan_atomic128_store(a: *mut u128, v: u128, _mo: i32) {
    on_access(a as usize, 16, true, None);
    rmw128(a, |_| v);
}

macro_rules! rmw128_hooks {
    ($($name:ident: |$x:ident, $v:ident| $e:expr),* $(,)?) => {$(
        /// 128-bit atomic read-modify-write returning the old value;
        /// counts a write.
        ///
        /// # Safety
        ///
        /// `a` is valid and 16-byte aligned.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(a: *mut u128, $v: u128, _mo: i32) -> u128 {
            on_access(a as usize, 16, true, None);
            rmw128(a, |$x| $e)
        }
    )*};
}

rmw128_hooks!(
    __tsan_atomic128_exchange: |_x, v| v,
    __tsan_atomic128_fetch_add: |x, v| x.wrapping_add(v),
    __tsan_atomic128_fetch_sub: |x, v| x.wrapping_sub(v),
    __tsan_atomic128_fetch_and: |x, v| x & v,
    __tsan_atomic128_fetch_or: |x, v| x | v,
    __tsan_atomic128_fetch_xor: |x, v| x ^ v,
    __tsan_atomic128_fetch_nand: |x, v| !(x & v),
);

/// 128-bit compare-exchange (strong); as the smaller ones.
///
/// # Safety
///
/// `a` is valid and 16-byte aligned; `expected` is valid.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_strong(
    a: *mut u128,
    expected: *mut u128,
    v: u128,
    _mo: i32,
    _fail_mo: i32,
) -> i32 {
    on_access(a as usize, 16, true, None);
    let (cur, ok) = cas128(a, expected.read_unaligned(), v);
    if !ok {
        expected.write_unaligned(cur);
    }
    ok as i32
}

/// 128-bit compare-exchange (weak: this one never fails spuriously).
///
/// # Safety
///
/// As for the strong one.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_weak(
    a: *mut u128,
    expected: *mut u128,
    v: u128,
    mo: i32,
    fail_mo: i32,
) -> i32 {
    __tsan_atomic128_compare_exchange_strong(a, expected, v, mo, fail_mo)
}

/// 128-bit compare-exchange returning the old value.
///
/// # Safety
///
/// `a` is valid and 16-byte aligned.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_val(
    a: *mut u128,
    c: u128,
    v: u128,
    _mo: i32,
    _fail_mo: i32,
) -> u128 {
    on_access(a as usize, 16, true, None);
    cas128(a, c, v).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_atomics_perform_their_operation() {
        let mut x: u32 = 5;
        let p = &mut x as *mut u32;
        unsafe {
            assert_eq!(__tsan_atomic32_fetch_add(p, 3, 0), 5);
            assert_eq!(__tsan_atomic32_fetch_sub(p, 1, 0), 8);
            assert_eq!(__tsan_atomic32_fetch_and(p, 6, 0), 7);
            assert_eq!(__tsan_atomic32_fetch_or(p, 1, 0), 6);
            assert_eq!(__tsan_atomic32_fetch_xor(p, 2, 0), 7);
            assert_eq!(__tsan_atomic32_fetch_nand(p, 3, 0), 5);
            assert_eq!(__tsan_atomic32_load(p, 5), !1u32);
            __tsan_atomic32_store(p, 9, 5);
            assert_eq!(__tsan_atomic32_exchange(p, 10, 5), 9);
            let mut e = 3;
            assert_eq!(
                __tsan_atomic32_compare_exchange_strong(p, &mut e, 4, 5, 5),
                0
            );
            assert_eq!(e, 10);
            assert_eq!(
                __tsan_atomic32_compare_exchange_strong(p, &mut e, 4, 5, 5),
                1
            );
            assert_eq!(__tsan_atomic32_compare_exchange_val(p, 4, 11, 5, 5), 4);
            assert_eq!(__tsan_atomic32_compare_exchange_val(p, 4, 12, 5, 5), 11);
            let mut e = 11;
            while __tsan_atomic32_compare_exchange_weak(p, &mut e, 13, 5, 5) == 0 {
                assert_eq!(e, 11);
            }
        }
        assert_eq!(x, 13);
        let mut b: u8 = 0xff;
        unsafe {
            assert_eq!(__tsan_atomic8_fetch_add(&mut b, 1, 0), 0xff);
            assert_eq!(__tsan_atomic8_load(&b, 0), 0);
        }
        let mut w: u64 = 1 << 40;
        unsafe {
            assert_eq!(__tsan_atomic64_fetch_add(&mut w, 1, 0), 1 << 40);
            assert_eq!(__tsan_atomic64_load(&w, 0), (1 << 40) + 1);
        }
    }

    #[repr(align(16))]
    struct A16(u128);

    #[test]
    fn wide_atomics_perform_their_operation() {
        let mut x = A16(u128::MAX);
        let p = &mut x.0 as *mut u128;
        unsafe {
            assert_eq!(__tsan_atomic128_fetch_add(p, 2, 0), u128::MAX);
            assert_eq!(__tsan_atomic128_load(p, 0), 1);
            __tsan_atomic128_store(p, 1 << 100, 0);
            assert_eq!(__tsan_atomic128_fetch_sub(p, 1, 0), 1 << 100);
            assert_eq!(__tsan_atomic128_load(p, 0), (1 << 100) - 1);
            assert_eq!(__tsan_atomic128_exchange(p, 7, 0), (1 << 100) - 1);
            assert_eq!(__tsan_atomic128_fetch_nand(p, 5, 0), 7);
            assert_eq!(__tsan_atomic128_load(p, 0), !5u128);
            let mut e = 0u128;
            assert_eq!(
                __tsan_atomic128_compare_exchange_strong(p, &mut e, 1, 5, 5),
                0
            );
            assert_eq!(e, !5u128);
            assert_eq!(
                __tsan_atomic128_compare_exchange_weak(p, &mut e, 1 << 127, 5, 5),
                1
            );
            assert_eq!(
                __tsan_atomic128_compare_exchange_val(p, 3, 4, 5, 5),
                1 << 127
            );
        }
        assert_eq!(x.0, 1 << 127);
        // The lock fallback gives the same results.
        unsafe {
            assert_eq!(locked_cas128(p, 1 << 127, 9), (1 << 127, true));
            assert_eq!(locked_cas128(p, 1, 2), (9, false));
        }
    }

    #[test]
    fn contended_increments_are_exact() {
        let x = std::sync::Arc::new(A16(0));
        let y = std::sync::Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (x, y) = (x.clone(), y.clone());
                std::thread::spawn(move || {
                    let p = &x.0 as *const u128 as *mut u128;
                    for _ in 0..10_000 {
                        unsafe {
                            __tsan_atomic128_fetch_add(p, 1 << 64, 0);
                            __tsan_atomic32_fetch_add(y.as_ptr(), 1, 0);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(x.0 >> 64, 40_000);
        assert_eq!(y.load(Ordering::SeqCst), 40_000);
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
