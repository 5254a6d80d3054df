//! Cache-line flush and fence instructions, chosen once by `cpuid`:
//! `clwb` where present, else `clflushopt`, else `clflush`; the environment
//! variable `PMLAB_FLUSH=clflushopt|clflush` picks an older one (e.g. to
//! run as on the processors of the WHISPER study, which flushed with
//! `clflush`). An instruction the CPU lacks is never chosen.

use pmlab_trace::Op;
use std::sync::atomic::{AtomicU8, Ordering};

/// Cache line size assumed everywhere.
pub const LINE: usize = 64;

static FLUSH: AtomicU8 = AtomicU8::new(0); // 0 unknown, else Op code

/// The flush instruction `pflush` and the PM API use (as a trace op): the
/// CPU's best ([`cpu_flush_op`]), or the older one `PMLAB_FLUSH` names.
pub fn flush_op() -> Op {
    match FLUSH.load(Ordering::Relaxed) {
        0 => {
            let asked = std::env::var("PMLAB_FLUSH").ok();
            let op = choose(cpu_flush_op(), asked.as_deref());
            FLUSH.store(op.code(), Ordering::Relaxed);
            op
        }
        c => Op::from_code(c).unwrap_or(Op::Clflush),
    }
}

/// The best flush instruction this CPU offers.
pub fn cpu_flush_op() -> Op {
    detect()
}

/// `best`, or the instruction `asked` names if the CPU has it (anything
/// not older than `best`: clwb > clflushopt > clflush). Unknown names keep
/// `best` (the runtime must not fail inside a program over a typo; `pmlab
/// run` checks the variable first).
pub fn choose(best: Op, asked: Option<&str>) -> Op {
    let rank = |op: Op| match op {
        Op::Clwb => 3,
        Op::ClflushOpt => 2,
        _ => 1,
    };
    let want = match asked.map(|s| s.trim().to_ascii_lowercase()) {
        Some(s) if s == "clwb" => Op::Clwb,
        Some(s) if s == "clflushopt" => Op::ClflushOpt,
        Some(s) if s == "clflush" => Op::Clflush,
        _ => return best,
    };
    if rank(want) <= rank(best) {
        want
    } else {
        best
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Op {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    if __cpuid(0).eax < 7 {
        return Op::Clflush;
    }
    let ebx = __cpuid_count(7, 0).ebx;
    if ebx & (1 << 24) != 0 {
        Op::Clwb
    } else if ebx & (1 << 23) != 0 {
        Op::ClflushOpt
    } else {
        Op::Clflush
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Op {
    Op::Clflush
}

/// Flush the line containing `addr` with `op`.
///
/// # Safety
/// `addr` must be a mapped address.
#[inline]
pub unsafe fn flush_line(addr: *const u8, op: Op) {
    #[cfg(target_arch = "x86_64")]
    match op {
        Op::Clwb => std::arch::asm!("clwb [{0}]", in(reg) addr, options(nostack, preserves_flags)),
        Op::ClflushOpt => {
            std::arch::asm!("clflushopt [{0}]", in(reg) addr, options(nostack, preserves_flags))
        }
        _ => std::arch::asm!("clflush [{0}]", in(reg) addr, options(nostack, preserves_flags)),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (addr, op);
}

/// Store fence.
#[inline]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Number of cache lines covering `[addr, addr+len)`.
pub fn lines(addr: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let first = addr & !(LINE - 1);
    let last = (addr + len - 1) & !(LINE - 1);
    (last - first) / LINE + 1
}

/// Copy with non-temporal stores where aligned (movnti), plain copies for
/// the unaligned head and tail, which are then flushed.
///
/// # Safety
/// `dst` and `src` must be valid for `len` bytes and not overlap.
pub unsafe fn copy_nt(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut d = dst;
        let mut s = src;
        let mut n = len;
        let head = (8 - (d as usize & 7)) & 7;
        let head = head.min(n);
        if head > 0 {
            std::ptr::copy_nonoverlapping(s, d, head);
            flush_line(d, flush_op());
            d = d.add(head);
            s = s.add(head);
            n -= head;
        }
        while n >= 8 {
            let v = std::ptr::read_unaligned(s as *const i64);
            std::arch::x86_64::_mm_stream_si64(d as *mut i64, v);
            d = d.add(8);
            s = s.add(8);
            n -= 8;
        }
        if n > 0 {
            std::ptr::copy_nonoverlapping(s, d, n);
            flush_line(d, flush_op());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::ptr::copy_nonoverlapping(src, dst, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_counting() {
        assert_eq!(lines(0, 0), 0);
        assert_eq!(lines(0, 64), 1);
        assert_eq!(lines(63, 2), 2);
        assert_eq!(lines(64, 128), 2);
    }

    #[test]
    fn flush_and_nt_copy_work_here() {
        let src: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut dst = vec![0u8; 1003];
        // SAFETY: both buffers are valid for 1000 bytes at offset 3.
        unsafe {
            copy_nt(dst.as_mut_ptr().add(3), src.as_ptr(), 1000);
            flush_line(dst.as_ptr(), flush_op());
        }
        sfence();
        assert_eq!(&dst[3..], &src[..]);
    }
}
