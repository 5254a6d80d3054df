//! `hw`: hardware performance counters, opened per thread with
//! `perf_event_open` (user-space counting only, so `perf_event_paranoid`
//! up to 2 allows it) and read with `rdpmc` through the perf mmap page,
//! falling back to `read(2)` where the kernel does not allow `rdpmc`. No
//! kernel module.
//!
//! Event sets (raw `perf_event_attr.config` values) come from the vendors'
//! event lists:
//!
//! * Intel Sandy Bridge / Ivy Bridge, Haswell / Broadwell, Skylake and
//!   later cores: the three counters of Quartz's Table 1 (cycles stalled
//!   with an L2 miss pending, retired loads hitting and missing the L3) and
//!   L3 misses served by local and remote DRAM.
//! * AMD Zen 2/3/4 has no "stalled with an L2 miss pending" counter. The
//!   approximation used: stall cycles = cycles with at least one L1D miss
//!   buffer (MAB) allocated (PMCx05F, counter mask 1), L3 hits = demand
//!   fills from the local CCX cache (PMCx043 umask 0x02), L3 misses =
//!   fills from local + remote DRAM (PMCx043 umask 0x48), local/remote
//!   split from the same event. It over-counts stalls that overlap with
//!   execution; the remote split follows Quartz.
//!
//! In every set PM bytes are approximated as L3 misses × 64 B (write-backs
//! are not counted by these events). None of this was validated on real
//! hardware: the development machines have no PMU (see docs/emulator.md).

use super::{EpochReading, Reading, Source, SourceKind, ThreadCounters};
use crate::error::{Error, ErrorKind};

/// What to use instead when the hardware source cannot work.
pub const ALTERNATIVE: &str =
    "use --source instrumented with a program built by 'pmlab cc', or --source synthetic:FILE";

/// CPU identity from `cpuid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuId {
    /// `GenuineIntel`, `AuthenticAMD`, …
    pub vendor: Vendor,
    /// Display family (family + extended family).
    pub family: u32,
    /// Display model (model + extended model).
    pub model: u32,
}

/// CPU vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// Intel.
    Intel,
    /// AMD.
    Amd,
    /// Anything else.
    Other,
}

/// Read the CPU identity.
#[cfg(target_arch = "x86_64")]
pub fn cpu_id() -> CpuId {
    use std::arch::x86_64::__cpuid;
    let (l0, l1) = (__cpuid(0), __cpuid(1));
    let mut v = [0u8; 12];
    v[0..4].copy_from_slice(&l0.ebx.to_le_bytes());
    v[4..8].copy_from_slice(&l0.edx.to_le_bytes());
    v[8..12].copy_from_slice(&l0.ecx.to_le_bytes());
    let vendor = match &v {
        b"GenuineIntel" => Vendor::Intel,
        b"AuthenticAMD" => Vendor::Amd,
        _ => Vendor::Other,
    };
    let base_family = (l1.eax >> 8) & 0xf;
    let ext_family = (l1.eax >> 20) & 0xff;
    let base_model = (l1.eax >> 4) & 0xf;
    let ext_model = (l1.eax >> 16) & 0xf;
    let family = if base_family == 0xf {
        base_family + ext_family
    } else {
        base_family
    };
    let model = if base_family == 0x6 || base_family == 0xf {
        (ext_model << 4) | base_model
    } else {
        base_model
    };
    CpuId {
        vendor,
        family,
        model,
    }
}

/// Read the CPU identity (non-x86: no event tables).
#[cfg(not(target_arch = "x86_64"))]
pub fn cpu_id() -> CpuId {
    CpuId {
        vendor: Vendor::Other,
        family: 0,
        model: 0,
    }
}

/// A micro-architecture's event set: raw configs of the five counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSet {
    /// Name of the micro-architecture family.
    pub name: &'static str,
    /// Stall cycles with a miss pending (or the approximation).
    pub stall: u64,
    /// L3 hits.
    pub l3_hit: u64,
    /// L3 misses.
    pub l3_miss: u64,
    /// Misses served by local DRAM.
    pub local: u64,
    /// Misses served by remote DRAM.
    pub remote: u64,
}

/// Raw x86 event encoding: event select, unit mask, counter mask.
pub const fn raw(event: u64, umask: u64, cmask: u64) -> u64 {
    (event & 0xff) | ((umask & 0xff) << 8) | ((cmask & 0xff) << 24) | (((event >> 8) & 0xf) << 32)
}

const SNB: EventSet = EventSet {
    name: "Intel Sandy Bridge / Ivy Bridge",
    stall: raw(0xA3, 0x05, 5),   // CYCLE_ACTIVITY.STALLS_L2_PENDING
    l3_hit: raw(0xD1, 0x04, 0),  // MEM_LOAD_UOPS_RETIRED.LLC_HIT
    l3_miss: raw(0xD1, 0x20, 0), // MEM_LOAD_UOPS_RETIRED.LLC_MISS
    local: raw(0xD3, 0x01, 0),   // MEM_LOAD_UOPS_LLC_MISS_RETIRED.LOCAL_DRAM
    remote: raw(0xD3, 0x0C, 0),  // ..REMOTE_DRAM (+ remote forwards)
};
const HSW: EventSet = EventSet {
    name: "Intel Haswell / Broadwell",
    stall: raw(0xA3, 0x05, 5),   // CYCLE_ACTIVITY.STALLS_L2_PENDING
    l3_hit: raw(0xD1, 0x04, 0),  // MEM_LOAD_UOPS_RETIRED.L3_HIT
    l3_miss: raw(0xD1, 0x20, 0), // MEM_LOAD_UOPS_RETIRED.L3_MISS
    local: raw(0xD3, 0x01, 0),   // MEM_LOAD_UOPS_L3_MISS_RETIRED.LOCAL_DRAM
    remote: raw(0xD3, 0x04, 0),  // ..REMOTE_DRAM
};
const SKL: EventSet = EventSet {
    name: "Intel Skylake and later cores",
    stall: raw(0xA3, 0x05, 5),   // CYCLE_ACTIVITY.STALLS_L2_MISS
    l3_hit: raw(0xD1, 0x04, 0),  // MEM_LOAD_RETIRED.L3_HIT
    l3_miss: raw(0xD1, 0x20, 0), // MEM_LOAD_RETIRED.L3_MISS
    local: raw(0xD3, 0x01, 0),   // MEM_LOAD_L3_MISS_RETIRED.LOCAL_DRAM
    remote: raw(0xD3, 0x02, 0),  // ..REMOTE_DRAM
};
const ZEN: EventSet = EventSet {
    name: "AMD Zen 2/3/4 (approximation, see docs)",
    stall: raw(0x5F, 0x00, 1),   // Ls_Alloc_Mab_Count >= 1
    l3_hit: raw(0x43, 0x02, 0),  // demand fills from local CCX cache
    l3_miss: raw(0x43, 0x48, 0), // ..from local and remote DRAM
    local: raw(0x43, 0x08, 0),   // ..from local DRAM
    remote: raw(0x43, 0x40, 0),  // ..from remote DRAM
};

/// The event set for a CPU, or `None` when pmlab has none for it.
pub fn event_set(cpu: CpuId) -> Option<EventSet> {
    match (cpu.vendor, cpu.family) {
        (Vendor::Intel, 6) => match cpu.model {
            0x2A | 0x2D | 0x3A | 0x3E => Some(SNB),
            0x3C | 0x3F | 0x45 | 0x46 | 0x3D | 0x47 | 0x4F | 0x56 => Some(HSW),
            0x4E | 0x5E | 0x55 | 0x8E | 0x9E | 0x66 | 0x6A | 0x6C | 0x7D | 0x7E | 0x8C | 0x8D
            | 0x8F | 0x97 | 0x9A | 0xA5 | 0xA6 | 0xA7 | 0xAA | 0xAC | 0xAD | 0xAE | 0xB7 | 0xBA
            | 0xBF | 0xC5 | 0xC6 | 0xCF => Some(SKL),
            _ => None,
        },
        // Zen 2 (family 17h, models 30h+), Zen 3 and Zen 4 (family 19h).
        (Vendor::Amd, 0x17) if cpu.model >= 0x30 => Some(ZEN),
        (Vendor::Amd, 0x19) => Some(ZEN),
        _ => None,
    }
}

/// Sign-extend a raw `rdpmc` value of `width` bits.
pub fn sign_extend(raw: u64, width: u32) -> i64 {
    if width == 0 || width >= 64 {
        return raw as i64;
    }
    let shift = 64 - width;
    ((raw << shift) as i64) >> shift
}

/// Turn counter deltas `[stall, l3_hit, l3_miss, local, remote]` into a
/// reading.
pub fn reading_from_deltas(d: [u64; 5]) -> EpochReading {
    EpochReading {
        reading: Reading::Stalls {
            l2_stall_cycles: d[0] as f64,
            l3_hits: d[1] as f64,
            l3_misses: d[2] as f64,
            local: d[3] as f64,
            remote: d[4] as f64,
        },
        pm_bytes: d[2].saturating_mul(64),
        pm_write_bytes: 0,
    }
}

#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

const PERF_TYPE_RAW: u32 = 4;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;

fn perf_open(config: u64, group: i32) -> Result<i32, i32> {
    perf_open_typed(PERF_TYPE_RAW, config, group)
}

fn perf_open_typed(type_: u32, config: u64, group: i32) -> Result<i32, i32> {
    let attr = PerfEventAttr {
        type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
        ..Default::default()
    };
    // SAFETY: attr is a valid perf_event_attr for the lifetime of the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            0,
            -1,
            group,
            8u64, // PERF_FLAG_FD_CLOEXEC
        )
    };
    if fd < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(fd as i32)
    }
}

fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The hardware source.
pub struct HwSource {
    events: EventSet,
}

impl HwSource {
    /// Detect the CPU and check that counting works on the calling thread.
    pub fn open() -> Result<HwSource, Error> {
        let unavailable = |why: String| {
            Error::new(
                ErrorKind::SourceUnavailable,
                format!("hardware counters unavailable: {why}; {ALTERNATIVE}"),
            )
        };
        // 1. Is there a PMU at all? (A generic cycles event: works on any
        // CPU with a PMU the kernel drives.)
        const PERF_TYPE_HARDWARE: u32 = 0;
        match perf_open_typed(PERF_TYPE_HARDWARE, 0, -1) {
            Ok(fd) => {
                // SAFETY: fd was just opened by us.
                unsafe { libc::close(fd) };
            }
            Err(e) if e == libc::EACCES || e == libc::EPERM => {
                let p = paranoid().map_or("unknown".to_string(), |p| p.to_string());
                return Err(unavailable(format!(
                    "perf_event_open was refused (kernel.perf_event_paranoid is {p}); as root run 'sysctl kernel.perf_event_paranoid=2' or grant CAP_PERFMON"
                )));
            }
            Err(e) => {
                return Err(unavailable(format!(
                "no hardware PMU is visible (perf_event_open: {}); in a VM, enable the virtual PMU",
                std::io::Error::from_raw_os_error(e)
            )))
            }
        }
        // 2. Do we know this CPU's events?
        let cpu = cpu_id();
        let events = event_set(cpu).ok_or_else(|| {
            unavailable(format!(
                "no event set for this CPU ({:?} family {:#x} model {:#x}; supported: Intel Sandy Bridge and later, AMD Zen 2/3/4)",
                cpu.vendor, cpu.family, cpu.model
            ))
        })?;
        // 3. Does the raw stall event open?
        match perf_open(events.stall, -1) {
            Ok(fd) => {
                // SAFETY: fd was just opened by us.
                unsafe { libc::close(fd) };
                Ok(HwSource { events })
            }
            Err(e) => Err(unavailable(format!(
                "the {} stall event does not open (perf_event_open: {})",
                events.name,
                std::io::Error::from_raw_os_error(e)
            ))),
        }
    }
}

impl Source for HwSource {
    fn name(&self) -> String {
        "hw".into()
    }

    fn kind(&self) -> SourceKind {
        SourceKind::StallCycles
    }

    fn thread_counters(&self) -> Result<Box<dyn ThreadCounters>, Error> {
        Ok(Box::new(HwCounters {
            configs: [
                self.events.stall,
                self.events.l3_hit,
                self.events.l3_miss,
                self.events.local,
                self.events.remote,
            ],
            fds: [-1; 5],
            pages: [std::ptr::null_mut(); 5],
            last: [0; 5],
        }))
    }
}

/// One thread's five counters.
pub struct HwCounters {
    configs: [u64; 5],
    fds: [i32; 5],
    pages: [*mut u8; 5],
    last: [u64; 5],
}

// SAFETY: the mmap pages are only touched by the owning thread.
unsafe impl Send for HwCounters {}

impl HwCounters {
    /// Read counter `i`: rdpmc through the mmap page when allowed, else read(2).
    fn read(&self, i: usize) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if !self.pages[i].is_null() {
            // SAFETY: the page is a live perf mmap page of our own fd; fields
            // are read with volatile loads inside the kernel's seqlock.
            unsafe {
                let p = self.pages[i];
                loop {
                    let seq = std::ptr::read_volatile(p.add(8) as *const u32);
                    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
                    let idx = std::ptr::read_volatile(p.add(12) as *const u32);
                    let offset = std::ptr::read_volatile(p.add(16) as *const i64);
                    let caps = std::ptr::read_volatile(p.add(40) as *const u64);
                    let width = std::ptr::read_volatile(p.add(48) as *const u16) as u32;
                    let mut count = offset;
                    let usable = caps & (1 << 2) != 0 && idx != 0;
                    if usable {
                        let (lo, hi): (u32, u32);
                        std::arch::asm!("rdpmc", in("ecx") idx - 1, out("eax") lo, out("edx") hi,
                            options(nostack, nomem));
                        count =
                            count.wrapping_add(sign_extend(((hi as u64) << 32) | lo as u64, width));
                    }
                    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
                    if std::ptr::read_volatile(p.add(8) as *const u32) == seq {
                        if usable {
                            return count as u64;
                        }
                        break;
                    }
                }
            }
        }
        let mut v = 0u64;
        // SAFETY: read(2) into a local u64 is async-signal-safe.
        let n = unsafe { libc::read(self.fds[i], &mut v as *mut u64 as *mut libc::c_void, 8) };
        if n == 8 {
            v
        } else {
            self.last[i]
        }
    }
}

impl ThreadCounters for HwCounters {
    fn start(&mut self) -> Result<(), Error> {
        self.stop();
        for i in 0..5 {
            let fd = perf_open(self.configs[i], -1).map_err(|e| {
                Error::new(
                    ErrorKind::SourceUnavailable,
                    format!("perf_event_open failed for counter {i} (errno {e}); {ALTERNATIVE}"),
                )
            })?;
            self.fds[i] = fd;
            // SAFETY: mapping one page of a perf fd read-only.
            let page = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            self.pages[i] = if page == libc::MAP_FAILED {
                std::ptr::null_mut()
            } else {
                page as *mut u8
            };
        }
        for i in 0..5 {
            self.last[i] = self.read(i);
        }
        Ok(())
    }

    fn epoch_end(&mut self, _epoch_ns: f64) -> EpochReading {
        let mut d = [0u64; 5];
        for (i, slot) in d.iter_mut().enumerate() {
            let now = self.read(i);
            *slot = now.wrapping_sub(self.last[i]);
            self.last[i] = now;
        }
        reading_from_deltas(d)
    }

    fn stop(&mut self) {
        for i in 0..5 {
            if !self.pages[i].is_null() {
                // SAFETY: unmapping the page we mapped.
                unsafe { libc::munmap(self.pages[i] as *mut libc::c_void, 4096) };
                self.pages[i] = std::ptr::null_mut();
            }
            if self.fds[i] >= 0 {
                // SAFETY: closing our own fd.
                unsafe { libc::close(self.fds[i]) };
                self.fds[i] = -1;
            }
        }
    }
}

impl Drop for HwCounters {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intel(model: u32) -> CpuId {
        CpuId {
            vendor: Vendor::Intel,
            family: 6,
            model,
        }
    }

    #[test]
    fn event_selection_by_model() {
        assert_eq!(event_set(intel(0x2D)).unwrap().name, SNB.name);
        assert_eq!(event_set(intel(0x3F)).unwrap().name, HSW.name);
        assert_eq!(event_set(intel(0x55)).unwrap().name, SKL.name);
        assert_eq!(event_set(intel(0x8F)).unwrap().name, SKL.name);
        assert!(event_set(intel(0x1A)).is_none()); // Nehalem: unsupported
        let amd = |family, model| CpuId {
            vendor: Vendor::Amd,
            family,
            model,
        };
        assert_eq!(event_set(amd(0x17, 0x31)).unwrap().name, ZEN.name);
        assert_eq!(event_set(amd(0x19, 0x01)).unwrap().name, ZEN.name);
        assert!(event_set(amd(0x17, 0x01)).is_none()); // Zen 1
        assert!(event_set(amd(0x15, 0x01)).is_none());
    }

    #[test]
    fn raw_encoding_places_fields() {
        assert_eq!(raw(0xA3, 0x05, 5), 0x0500_05A3);
        // AMD extended event bits 8..11 go to config bits 32..35.
        assert_eq!(raw(0x1C0, 0x01, 0), 0x1_0000_01C0);
    }

    #[test]
    fn counter_arithmetic() {
        assert_eq!(sign_extend(0xFFFF_FFFF_FFFF, 48), -1);
        assert_eq!(sign_extend(0x7FFF_FFFF_FFFF, 48), 0x7FFF_FFFF_FFFF);
        // A recorded epoch: 30,000 stall cycles, 50 hits, 100 misses.
        let r = reading_from_deltas([30_000, 50, 100, 100, 0]);
        assert_eq!(r.pm_bytes, 6400);
        let p = super::super::ModelParams {
            cpu_ghz: 3.0,
            dram_latency_ns: 100.0,
            pm_latency_ns: 400.0,
            remote_latency_ns: None,
            w: 4.0,
        };
        // Equation 3: 30000 * 400 / (50 + 400) = 26,666.7 memory stall
        // cycles; equation 2: at 300 cycles a DRAM access (3 GHz x 100 ns)
        // that is 88.89 serial accesses, each 300 ns slower on PM:
        // 26,666.7 ns.
        assert!(
            (r.delay_ns(&p) - 26_666.667).abs() < 1e-3,
            "{}",
            r.delay_ns(&p)
        );
    }

    #[test]
    fn attr_has_the_kernel_size() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 112);
    }
}
