//! Flushes and fences on persistent memory, and the hook that tells the
//! pmlab runtime which mapping is PM.
//!
//! The flush instruction is chosen once, from cpuid: `clwb` (writes the line
//! back and keeps it cached), else `clflushopt`, else `clflush`. `clwb` and
//! `clflushopt` are weakly ordered and need an `sfence` before anything that
//! must follow them; `clflush` is ordered with stores and needs none. The
//! environment variable `PMKV_FLUSH` (`clwb`, `clflushopt`, `clflush`,
//! `none`) overrides the choice, for example to trace with `clflush` as
//! WHISPER's programs did; `none` skips flushing (DRAM-only timing).
//!
//! Under pmlab (`libpmlab.so` loaded, by `pmlab run`, `pmlab trace` or a
//! `pmlab cargo` build), flushes and fences go through the runtime's
//! `pflush` and `pm_drain` instead, found once with `dlsym`: the compiler
//! hooks see loads and stores but not inline assembly, so this is how the
//! emulator charges the engines' flushes and the tracer records them.
//! `pflush` issues the same instruction the CPU offers (its own cpuid
//! choice, `PMLAB_FLUSH` to override), so the flushes stay real;
//! `PMKV_FLUSH` keeps the engines' own instructions even then.

use std::ffi::c_void;
use std::sync::OnceLock;

/// A cache-line flush instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// `clwb`: write back, keep the line cached; needs a fence.
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered; needs a fence.
    Clflushopt,
    /// `clflush`: write back and invalidate, ordered; no fence needed.
    Clflush,
    /// No flush at all (non-x86 targets, or `PMKV_FLUSH=none`).
    None,
}

impl Flush {
    /// The instruction's name.
    pub fn name(self) -> &'static str {
        match self {
            Flush::Clwb => "clwb",
            Flush::Clflushopt => "clflushopt",
            Flush::Clflush => "clflush",
            Flush::None => "none",
        }
    }

    /// Whether stores flushed with it need an `sfence` to be ordered.
    pub fn needs_fence(self) -> bool {
        matches!(self, Flush::Clwb | Flush::Clflushopt)
    }
}

/// Bytes in a cache line, the unit of flushing.
pub const LINE: usize = 64;

static FLUSH: OnceLock<Flush> = OnceLock::new();

/// The flush instruction in use (chosen on first call).
pub fn flush_kind() -> Flush {
    *FLUSH.get_or_init(detect)
}

fn detect() -> Flush {
    if let Ok(v) = std::env::var("PMKV_FLUSH") {
        let asked = match v.as_str() {
            "clwb" => Some(Flush::Clwb),
            "clflushopt" => Some(Flush::Clflushopt),
            "clflush" => Some(Flush::Clflush),
            "none" => Some(Flush::None),
            _ => None,
        };
        if let Some(f) = asked {
            if f == Flush::None || cpu_has(f) {
                return f;
            }
        }
    }
    [Flush::Clwb, Flush::Clflushopt, Flush::Clflush]
        .into_iter()
        .find(|f| cpu_has(*f))
        .unwrap_or(Flush::None)
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // __cpuid_count is safe from Rust 1.87 on, unsafe before
fn cpu_has(f: Flush) -> bool {
    use core::arch::x86_64::__cpuid_count;
    // SAFETY: cpuid exists on every x86_64 CPU.
    let leaf0 = unsafe { __cpuid_count(0, 0) };
    match f {
        Flush::Clwb | Flush::Clflushopt => {
            if leaf0.eax < 7 {
                return false;
            }
            // SAFETY: leaf 7 exists (checked above).
            let l7 = unsafe { __cpuid_count(7, 0) };
            let bit = if f == Flush::Clwb { 24 } else { 23 };
            l7.ebx & (1 << bit) != 0
        }
        // SAFETY: leaf 1 exists on every x86_64 CPU.
        Flush::Clflush => unsafe { __cpuid_count(1, 0) }.edx & (1 << 19) != 0,
        Flush::None => true,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has(f: Flush) -> bool {
    f == Flush::None
}

/// Flush the cache line holding `p` with instruction `f`.
///
/// # Safety
/// `p` must point into mapped memory.
#[inline]
unsafe fn flush_line(f: Flush, p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    match f {
        Flush::Clwb => core::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)),
        Flush::Clflushopt => {
            core::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
        }
        Flush::Clflush => {
            core::arch::asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
        }
        Flush::None => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (f, p);
}

/// A store fence: flushes issued before it complete before stores after it.
#[inline]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no operands and no memory-safety preconditions.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// The runtime's `pflush` and `pm_drain` when libpmlab is loaded.
#[derive(Clone, Copy)]
struct Runtime {
    pflush: unsafe extern "C" fn(*const c_void, usize),
    drain: unsafe extern "C" fn(),
}

/// libpmlab's flush and drain, looked up once (`None` in a plain run, or
/// when `PMKV_FLUSH` asks for the engines' own instructions).
fn runtime() -> Option<Runtime> {
    static RT: OnceLock<Option<Runtime>> = OnceLock::new();
    *RT.get_or_init(|| {
        if std::env::var_os("PMKV_FLUSH").is_some() {
            return None;
        }
        // SAFETY: NUL-terminated names; RTLD_DEFAULT searches the global
        // scope. `pflush` alone could be another library's: the register
        // hook marks libpmlab, whose functions have the C signatures of
        // include/pmlab.h.
        unsafe {
            let f = libc::dlsym(libc::RTLD_DEFAULT, c"pflush".as_ptr());
            let d = libc::dlsym(libc::RTLD_DEFAULT, c"pm_drain".as_ptr());
            let own = libc::dlsym(libc::RTLD_DEFAULT, c"pmlab_pm_register".as_ptr());
            if f.is_null() || d.is_null() || own.is_null() {
                return None;
            }
            Some(Runtime {
                pflush: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*const c_void, usize),
                >(f),
                drain: std::mem::transmute::<*mut c_void, unsafe extern "C" fn()>(d),
            })
        }
    })
}

/// Whether flushes and fences go through the pmlab runtime (see the
/// module docs).
pub fn through_pmlab() -> bool {
    runtime().is_some()
}

/// Flush every cache line overlapping `[p, p + len)`, without a fence.
///
/// # Safety
/// The range must be mapped.
pub unsafe fn flush(p: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(rt) = runtime() {
        (rt.pflush)(p.cast(), len);
        return;
    }
    let f = flush_kind();
    if f == Flush::None {
        return;
    }
    let start = p as usize & !(LINE - 1);
    let end = p as usize + len;
    let mut line = start;
    while line < end {
        flush_line(f, line as *const u8);
        line += LINE;
    }
}

/// Make `[p, p + len)` durable: flush its lines, then fence if the flush
/// instruction needs one.
///
/// # Safety
/// The range must be mapped.
pub unsafe fn persist(p: *const u8, len: usize) {
    flush(p, len);
    drain();
}

/// The fence that orders the flushes issued so far (none for `clflush`).
pub fn drain() {
    if let Some(rt) = runtime() {
        // SAFETY: pm_drain takes no arguments; it fences (and, under the
        // emulator, waits for the write model).
        unsafe { (rt.drain)() };
        return;
    }
    if flush_kind().needs_fence() {
        sfence();
    }
}

/// libpmlab's `pm_annotate_user_data`, looked up once (0: not loaded).
fn user_data_hook() -> usize {
    static HOOK: OnceLock<usize> = OnceLock::new();
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    *HOOK.get_or_init(|| unsafe {
        libc::dlsym(libc::RTLD_DEFAULT, c"pm_annotate_user_data".as_ptr()) as usize
    })
}

/// Whether [`annotate_user_data`] reaches a runtime (libpmlab is loaded).
pub fn annotating() -> bool {
    user_data_hook() != 0
}

/// Mark `[p, p + len)` as user data (keys and values, as opposed to the
/// engines' records, nodes and headers) in a `pmlab trace`, so that
/// `pmlab analyze` reports write amplification; a no-op without libpmlab.
pub fn annotate_user_data(p: *const u8, len: usize) {
    let f = user_data_hook();
    if f == 0 || len == 0 {
        return;
    }
    // SAFETY: the symbol is libpmlab's `void pm_annotate_user_data(const
    // void *, size_t)` (include/pmlab.h), which only records the range.
    unsafe {
        let f = std::mem::transmute::<usize, unsafe extern "C" fn(*const c_void, usize)>(f);
        f(p.cast(), len);
    }
}

/// The name of the runtime hook looked up by [`register_pm`].
pub const REGISTER_SYMBOL: &str = "pmlab_pm_register";

/// Tell the pmlab runtime, when `libpmlab.so` is loaded into this process,
/// that `[base, base + len)` is persistent memory, so that `pmlab run`
/// slows its accesses and `pmlab trace` records its stores.
///
/// The runtime's entry point is `void pmlab_pm_register(void *base, size_t
/// len)`, looked up once with `dlsym(RTLD_DEFAULT, ...)`, at the first
/// pool opened; when no loaded object defines it (a plain run, or a runtime
/// without the hook) this does nothing and returns false. Returns whether
/// the hook was called. Every pool calls it when it maps its file.
pub fn register_pm(base: *const u8, len: usize) -> bool {
    static HOOK: OnceLock<usize> = OnceLock::new();
    let addr = *HOOK.get_or_init(|| {
        let name = b"pmlab_pm_register\0";
        // SAFETY: name is NUL-terminated; RTLD_DEFAULT searches the global scope.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) as usize }
    });
    if addr == 0 {
        return false;
    }
    // SAFETY: the symbol is documented with exactly this C signature.
    let hook: extern "C" fn(*mut c_void, usize) = unsafe { std::mem::transmute(addr) };
    hook(base as *mut c_void, len);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_is_chosen_and_persist_runs_on_this_cpu() {
        let f = flush_kind();
        let buf = vec![7u8; 300];
        // SAFETY: buf is mapped for its whole length.
        unsafe { persist(buf.as_ptr().add(3), 290) };
        assert_eq!(buf[299], 7);
        if cfg!(target_arch = "x86_64") && std::env::var("PMKV_FLUSH").is_err() {
            assert_ne!(f, Flush::None, "every x86_64 CPU has clflush");
        }
    }

    #[test]
    fn register_pm_is_a_no_op_without_the_runtime() {
        let buf = [0u8; 64];
        assert!(!register_pm(buf.as_ptr(), buf.len()));
    }
}
