//! The host target: the probes' request streams on this machine's memory.
//!
//! Loads in closed loop are a real pointer chain (each line holds the
//! address of the next line in visit order) read with non-temporal vector
//! loads (AVX-512 `vmovntdqa` 64 B, else AVX2 32 B, else plain loads), so
//! each load waits for the previous one. Stores are non-temporal (or, with
//! [`StoreKind::Clwb`], ordinary stores followed by a cache-line write-back
//! or flush), fenced with `sfence` after each block or each pass as the
//! pattern says. Timing uses the TSC, calibrated against the monotonic
//! clock. The thread is pinned to one CPU.
//!
//! On ordinary DRAM, non-temporal loads are only a hint: they go through the
//! caches, so the load curve shows the CPU cache levels. That is what the
//! host curves show, and the report says so.

use crate::pattern::{Fence, Issue, Op, Pattern, Timing, LINE};
use crate::{Error, ErrorKind, Target};
use std::path::PathBuf;

/// Where the probed memory comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemKind {
    /// Huge pages when the system has them (as [`MemKind::HugePage`]),
    /// else anonymous memory: the default, since 4 KiB pages add TLB-reach
    /// steps to the curves.
    Auto,
    /// Anonymous private memory (4 KiB pages unless THP applies).
    Anon,
    /// Huge pages: `MAP_HUGETLB` if the pool has pages, else transparent
    /// huge pages requested with `madvise`.
    HugePage,
    /// A shared mapping of a file (for example on a DAX file system).
    File(PathBuf),
    /// A pool file mapped by libpmem's `pmem_map_file` (loaded at run
    /// time), which reports whether the mapping is real persistent memory.
    PmPool(PathBuf),
}

impl MemKind {
    /// Parse `anon`, `hugepage`, `file:PATH`, `pm-pool` or `pm-pool:PATH`.
    /// A bare `pm-pool` uses `$PMLAB_PM_POOL`, else a file in the temporary
    /// directory.
    pub fn parse(s: &str) -> Result<MemKind, Error> {
        match s {
            "auto" => Ok(MemKind::Auto),
            "anon" => Ok(MemKind::Anon),
            "hugepage" => Ok(MemKind::HugePage),
            "pm-pool" => Ok(MemKind::PmPool(match std::env::var_os("PMLAB_PM_POOL") {
                Some(p) => PathBuf::from(p),
                None => default_pool(),
            })),
            _ => {
                if let Some(p) = s.strip_prefix("file:").filter(|p| !p.is_empty()) {
                    return Ok(MemKind::File(PathBuf::from(p)));
                }
                if let Some(p) = s.strip_prefix("pm-pool:").filter(|p| !p.is_empty()) {
                    return Ok(MemKind::PmPool(PathBuf::from(p)));
                }
                Err(Error::new(
                    ErrorKind::Param,
                    format!("unknown memory kind '{s}': use auto, anon, hugepage, file:PATH or pm-pool[:PATH]"),
                ))
            }
        }
    }
}

/// How stores write a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// Non-temporal stores (bypass the caches).
    Nt,
    /// Ordinary stores, then `clwb` (else `clflushopt`, else `clflush`).
    Clwb,
}

/// The vector width used for non-temporal accesses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// 64-byte AVX-512 accesses.
    Avx512,
    /// 32-byte AVX2 accesses (two per line).
    Avx2,
    /// Plain 8-byte accesses (no vector non-temporal instructions).
    Scalar,
}

impl Isa {
    /// The widest available on this CPU.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }
    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Scalar => "scalar",
        }
    }
}

/// The pool file of a bare `pm-pool` (removed when the target is dropped).
fn default_pool() -> PathBuf {
    std::env::temp_dir().join(format!("pmlab-probe-{}.pool", std::process::id()))
}

impl Drop for Host {
    fn drop(&mut self) {
        self.map = None;
        if self.mem == MemKind::PmPool(default_pool()) {
            let _ = std::fs::remove_file(default_pool());
        }
    }
}

struct Mapping {
    ptr: *mut u8,
    len: usize,
    huge: &'static str,
}

type PmemMapFile = unsafe extern "C" fn(
    *const libc::c_char,
    libc::size_t,
    libc::c_int,
    libc::mode_t,
    *mut libc::size_t,
    *mut libc::c_int,
) -> *mut libc::c_void;

/// Map `path` (created with `len` bytes if needed) with libpmem's
/// `pmem_map_file`, loaded with dlopen so that pmlab does not link it.
fn pmem_map(path: &std::path::Path, len: usize) -> Result<Mapping, Error> {
    use std::os::unix::ffi::OsStrExt;
    let host = |m: String| Error::new(ErrorKind::Host, m);
    // SAFETY: dlopen/dlsym with NUL-terminated names; the symbol has the
    // documented pmem_map_file signature (libpmem.h).
    unsafe {
        let lib = libc::dlopen(c"libpmem.so.1".as_ptr(), libc::RTLD_NOW);
        if lib.is_null() {
            return Err(host(
                "--mem pm-pool needs libpmem (libpmem.so.1): install libpmem1, or use --mem file:PATH".into(),
            ));
        }
        let sym = libc::dlsym(lib, c"pmem_map_file".as_ptr());
        if sym.is_null() {
            return Err(host(
                "libpmem.so.1 has no pmem_map_file: it is not libpmem".into(),
            ));
        }
        let map: PmemMapFile = std::mem::transmute::<*mut libc::c_void, PmemMapFile>(sym);
        let cpath = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            host(format!(
                "pool path '{}' contains a NUL byte",
                path.display()
            ))
        })?;
        // A stale pool of another size cannot be mapped with CREATE: remove it.
        if std::fs::metadata(path)
            .map(|m| m.len() != len as u64)
            .unwrap_or(false)
        {
            let _ = std::fs::remove_file(path);
        }
        let (mut mapped, mut is_pmem) = (0usize, 0i32);
        let p = map(
            cpath.as_ptr(),
            len,
            1, /* PMEM_FILE_CREATE */
            0o600,
            &mut mapped,
            &mut is_pmem,
        );
        if p.is_null() {
            return Err(host(format!(
                "pmem_map_file('{}', {len}) failed: {}",
                path.display(),
                std::io::Error::last_os_error()
            )));
        }
        Ok(Mapping {
            ptr: p as *mut u8,
            len: mapped,
            huge: if is_pmem != 0 {
                "libpmem pool, real persistent memory"
            } else {
                "libpmem pool, not persistent memory (page cache)"
            },
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped once.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// The host target (see the module documentation).
pub struct Host {
    mem: MemKind,
    isa: Isa,
    store: StoreKind,
    flush: FlushInsn,
    cpu: Option<usize>,
    tsc_per_ns: f64,
    map: Option<Mapping>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlushInsn {
    Clwb,
    ClflushOpt,
    Clflush,
}

impl Host {
    /// A host target on `mem`, using `isa` (at most what the CPU has),
    /// pinned to `cpu` (default: the CPU the thread runs on now).
    pub fn new(
        mem: MemKind,
        isa: Option<Isa>,
        store: StoreKind,
        cpu: Option<usize>,
    ) -> Result<Host, Error> {
        let best = Isa::detect();
        let isa = match isa {
            None => best,
            Some(want) => {
                let ok = match want {
                    Isa::Avx512 => best == Isa::Avx512,
                    Isa::Avx2 => best != Isa::Scalar,
                    Isa::Scalar => true,
                };
                if !ok {
                    return Err(Error::new(
                        ErrorKind::Host,
                        format!(
                            "this CPU has no {} instructions: use --isa {} or leave --isa out",
                            want.name(),
                            best.name()
                        ),
                    ));
                }
                want
            }
        };
        let cpu = pin(cpu)?;
        let flush = detect_flush();
        let tsc_per_ns = calibrate_tsc();
        Ok(Host {
            mem,
            isa,
            store,
            flush,
            cpu,
            tsc_per_ns,
            map: None,
        })
    }

    /// The vector width in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    fn ensure(&mut self, bytes: u64) -> Result<*mut u8, Error> {
        if let Some(m) = &self.map {
            if m.len as u64 >= bytes {
                return Ok(m.ptr);
            }
        }
        self.map = None;
        // Round to 2 MiB so huge pages can back the whole region.
        let len = bytes.max(4096).div_ceil(2 << 20) * (2 << 20);
        let len =
            usize::try_from(len).map_err(|_| Error::new(ErrorKind::Param, "region too large"))?;
        let m = map(&self.mem, len)?;
        // Touch every page so page faults stay out of the measurements.
        // SAFETY: the mapping is len bytes, readable and writable.
        unsafe { std::ptr::write_bytes(m.ptr, 0, len) };
        let ptr = m.ptr;
        self.map = Some(m);
        Ok(ptr)
    }

    fn ns(&self, ticks: u64) -> f64 {
        ticks as f64 / self.tsc_per_ns
    }
}

/// A pointer chain for plain dependent loads: every cache line of an
/// anonymous mapping (huge pages where the system gives them, as
/// [`MemKind::Auto`]) holds the address of the next line of one random
/// cycle through all of them, so each load waits for the one before it.
/// The emulator's calibration (`pmlab-emu`) measures the DRAM latency
/// with it; it shares the mapping and the scalar chase kernel with the
/// host target.
pub struct Chain {
    map: Mapping,
    start: usize,
    at: usize,
}

impl Chain {
    /// Map `len` bytes (optionally bound to NUMA node `node`), and link
    /// their lines into one cycle in an order drawn from `seed`
    /// (Sattolo's shuffle with a xorshift generator).
    pub fn new(len: usize, node: Option<u32>, seed: u64) -> Result<Chain, Error> {
        if len < 64 {
            return Err(Error::new(
                ErrorKind::Param,
                format!("a chain of {len} bytes holds no cache line"),
            ));
        }
        let map = map(&MemKind::Auto, len)?;
        if let Some(n) = node {
            bind(&map, n)?;
        }
        let lines = len / 64;
        let mut order: Vec<u32> = (0..lines as u32).collect();
        let mut x = seed | 1;
        for i in (1..lines).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = (x % i as u64) as usize;
            order.swap(i, j);
        }
        let base = map.ptr as usize;
        for k in 0..lines {
            let from = base + order[k] as usize * 64;
            let to = base + order[(k + 1) % lines] as usize * 64;
            // SAFETY: both addresses are lines inside the mapping.
            unsafe { *(from as *mut usize) = to };
        }
        let start = base + order[0] as usize * 64;
        Ok(Chain {
            map,
            start,
            at: start,
        })
    }

    /// Follow the chain for `steps` loads, from where the last call
    /// stopped.
    pub fn chase(&mut self, steps: u64) {
        // SAFETY: every line of the chain holds the address of another
        // line of it, and `at` is one of them.
        self.at = unsafe { chase_plain(self.at as *const u8, steps) } as usize;
    }

    /// Go back to the chain's first line.
    pub fn rewind(&mut self) {
        self.at = self.start;
    }

    /// The chain's length in bytes.
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// Never: a chain holds at least one line.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The pages backing the chain, in words ("hugetlbfs 2 MiB pages",
    /// "transparent huge pages (madvise)", "4 KiB pages").
    pub fn pages(&self) -> &'static str {
        self.map.huge
    }
}

/// Follow a pointer chain with plain loads (the scalar kernel).
///
/// # Safety
/// `p` and every address it leads to within `steps` loads must hold the
/// address of the next.
unsafe fn chase_plain(p: *const u8, steps: u64) -> *const u8 {
    #[cfg(target_arch = "x86_64")]
    {
        kscalar::chase(p, steps)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut p = p;
        for _ in 0..steps {
            p = (p as *const u64).read_volatile() as *const u8;
        }
        p
    }
}

/// Bind a fresh (untouched) mapping to NUMA node `node` (`mbind`,
/// `MPOL_BIND`).
fn bind(m: &Mapping, node: u32) -> Result<(), Error> {
    let mut mask = [0u64; 16];
    let slot = mask.get_mut((node / 64) as usize).ok_or_else(|| {
        Error::new(
            ErrorKind::Param,
            format!("NUMA node {node} is out of range"),
        )
    })?;
    *slot |= 1 << (node % 64);
    // SAFETY: mbind on our own mapping with a mask of 1024 bits.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            m.ptr,
            m.len,
            2, /* MPOL_BIND */
            mask.as_ptr(),
            1024usize,
            0u32,
        )
    };
    if r != 0 {
        return Err(Error::new(
            ErrorKind::Host,
            format!(
                "cannot bind the region to NUMA node {node}: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    Ok(())
}

fn pin(cpu: Option<usize>) -> Result<Option<usize>, Error> {
    // SAFETY: plain libc calls on a zeroed cpu_set_t owned here.
    unsafe {
        let target = match cpu {
            Some(c) => c,
            None => {
                let c = libc::sched_getcpu();
                if c < 0 {
                    return Ok(None);
                }
                c as usize
            }
        };
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if target >= libc::CPU_SETSIZE as usize {
            return Err(Error::new(
                ErrorKind::Param,
                format!("--cpu {target} is out of range"),
            ));
        }
        libc::CPU_SET(target, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            let n = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            return Err(Error::new(
                ErrorKind::Host,
                format!(
                    "cannot pin to CPU {target}: {} (this process may use CPUs 0..{})",
                    std::io::Error::last_os_error(),
                    n - 1
                ),
            ));
        }
        Ok(Some(target))
    }
}

fn detect_flush() -> FlushInsn {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID leaf 7, sub-leaf 0: EBX bit 24 is CLWB, bit 23 CLFLUSHOPT.
        let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
        if ebx & (1 << 24) != 0 {
            return FlushInsn::Clwb;
        }
        if ebx & (1 << 23) != 0 {
            return FlushInsn::ClflushOpt;
        }
    }
    FlushInsn::Clflush
}

fn map(mem: &MemKind, len: usize) -> Result<Mapping, Error> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: mmap with a null hint; results are checked before use.
    unsafe {
        match mem {
            MemKind::Auto | MemKind::Anon | MemKind::HugePage => {
                let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
                let want_huge = *mem != MemKind::Anon;
                if want_huge {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        prot,
                        flags | libc::MAP_HUGETLB,
                        -1,
                        0,
                    );
                    if p != libc::MAP_FAILED {
                        return Ok(Mapping {
                            ptr: p as *mut u8,
                            len,
                            huge: "hugetlbfs 2 MiB pages",
                        });
                    }
                }
                let p = libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0);
                if p == libc::MAP_FAILED {
                    return Err(Error::new(
                        ErrorKind::Host,
                        format!(
                            "cannot map {len} bytes of memory: {}",
                            std::io::Error::last_os_error()
                        ),
                    ));
                }
                let mut huge = "4 KiB pages";
                let thp_never =
                    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                        .map(|s| s.contains("[never]"))
                        .unwrap_or(true);
                if *mem == MemKind::Auto {
                    if !thp_never && libc::madvise(p, len, libc::MADV_HUGEPAGE) == 0 {
                        huge = "transparent huge pages (madvise)";
                    }
                } else if *mem == MemKind::HugePage {
                    if thp_never || libc::madvise(p, len, libc::MADV_HUGEPAGE) != 0 {
                        libc::munmap(p, len);
                        return Err(Error::new(
                            ErrorKind::Host,
                            "no huge pages: the hugetlb pool is empty and transparent huge pages are off or unavailable; set /proc/sys/vm/nr_hugepages or use --mem anon",
                        ));
                    }
                    huge = "transparent huge pages (madvise)";
                }
                Ok(Mapping {
                    ptr: p as *mut u8,
                    len,
                    huge,
                })
            }
            MemKind::PmPool(path) => pmem_map(path, len),
            MemKind::File(path) => {
                use std::os::unix::io::AsRawFd;
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(|e| {
                        Error::new(
                            ErrorKind::Io,
                            format!("cannot open --mem file '{}': {e}", path.display()),
                        )
                    })?;
                let cur = f.metadata().map(|m| m.len()).unwrap_or(0);
                if cur < len as u64 {
                    f.set_len(len as u64).map_err(|e| {
                        Error::new(
                            ErrorKind::Io,
                            format!(
                                "cannot grow --mem file '{}' to {len} bytes: {e}",
                                path.display()
                            ),
                        )
                    })?;
                }
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    0,
                );
                if p == libc::MAP_FAILED {
                    return Err(Error::new(
                        ErrorKind::Host,
                        format!(
                            "cannot map --mem file '{}': {}",
                            path.display(),
                            std::io::Error::last_os_error()
                        ),
                    ));
                }
                Ok(Mapping {
                    ptr: p as *mut u8,
                    len,
                    huge: "file mapping",
                })
            }
        }
    }
}

/// The TSC, read between `lfence`s (`pmlab-clock`).
use pmlab_clock::rdtsc_ordered as rdtsc;

/// TSC ticks per nanosecond, measured against the monotonic clock over
/// 30 ms (`pmlab-clock`, shared with the runtime and the calibration).
fn calibrate_tsc() -> f64 {
    pmlab_clock::measure_tsc_ghz(30_000_000)
}

/// The kernels, one copy per instruction set so each is compiled with its
/// target features. `$load` reads the first 8 bytes of a line with the
/// widest non-temporal load; `$store` writes a line holding `v` in its
/// first 8 bytes.
macro_rules! kernels {
    ($name:ident, $feat:literal, $load:expr, $store:expr) => {
        mod $name {
            use super::*;
            #[allow(unused_imports)]
            #[cfg(target_arch = "x86_64")]
            use std::arch::x86_64::*;

            /// Follow the pointer chain for `steps` loads.
            #[target_feature(enable = $feat)]
            pub unsafe fn chase(mut p: *const u8, steps: u64) -> *const u8 {
                for _ in 0..steps {
                    p = $load(p) as *const u8;
                }
                p
            }

            /// Independent loads of every line of the pattern; returns a
            /// checksum so the loads are kept.
            #[target_feature(enable = $feat)]
            pub unsafe fn loads(base: *mut u8, pat: &Pattern) -> u64 {
                let mut acc = 0u64;
                for &b in &pat.order {
                    let blk = base.add(b as usize * pat.block_stride as usize);
                    let mut off = 0;
                    while off < pat.block as usize {
                        acc ^= $load(blk.add(off) as *const u8);
                        off += LINE as usize;
                    }
                }
                acc
            }

            /// Store every line in visit order; each line receives the
            /// address of the next one (so a load pass can chase them).
            /// `fence` says where `sfence` goes: after every block (closed
            /// loop), after the pass, or not at all (`Fence::Run`: the
            /// caller fences once after the run); `clwb` selects ordinary
            /// stores plus write-back instead of non-temporal stores.
            #[target_feature(enable = $feat)]
            pub unsafe fn stores(
                base: *mut u8,
                pat: &Pattern,
                fence: Fence,
                wb: Option<FlushInsn>,
            ) {
                let n = pat.order.len();
                let lpb = (pat.block / LINE) as usize;
                for i in 0..n {
                    let blk = base.add(pat.order[i] as usize * pat.block_stride as usize);
                    let next_blk =
                        base.add(pat.order[(i + 1) % n] as usize * pat.block_stride as usize);
                    for j in 0..lpb {
                        let line = blk.add(j * LINE as usize);
                        let next = if j + 1 < lpb {
                            blk.add((j + 1) * LINE as usize)
                        } else {
                            next_blk
                        };
                        match wb {
                            None => $store(line, next as u64),
                            Some(insn) => {
                                let words = line as *mut u64;
                                words.write_volatile(next as u64);
                                for w in 1..8 {
                                    words.add(w).write_volatile(0);
                                }
                                writeback(line, insn);
                            }
                        }
                    }
                    if fence == Fence::Block {
                        _mm_sfence();
                    }
                }
                if fence != Fence::Run {
                    _mm_sfence();
                }
            }
        }
    };
}

/// `sfence` (a no-op where the ISA has none).
#[inline(always)]
fn store_fence() {
    // SAFETY: sfence only orders stores.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn writeback(p: *mut u8, insn: FlushInsn) {
    match insn {
        FlushInsn::Clwb => {
            std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
        }
        FlushInsn::ClflushOpt => {
            std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
        }
        FlushInsn::Clflush => std::arch::x86_64::_mm_clflush(p),
    }
}

#[cfg(target_arch = "x86_64")]
kernels!(
    k512,
    "avx512f",
    |p: *const u8| _mm_cvtsi128_si64(_mm512_castsi512_si128(_mm512_stream_load_si512(
        p as *const __m512i
    ))) as u64,
    |p: *mut u8, v: u64| _mm512_stream_si512(
        p as *mut __m512i,
        _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, v as i64)
    )
);
#[cfg(target_arch = "x86_64")]
kernels!(
    k256,
    "avx2",
    |p: *const u8| {
        let a = _mm256_stream_load_si256(p as *const __m256i);
        let b = _mm256_stream_load_si256(p.add(32) as *const __m256i);
        // Both halves are read; the second is kept alive with black_box.
        std::hint::black_box(b);
        _mm256_extract_epi64::<0>(a) as u64
    },
    |p: *mut u8, v: u64| {
        _mm256_stream_si256(p as *mut __m256i, _mm256_set_epi64x(0, 0, 0, v as i64));
        _mm256_stream_si256(p.add(32) as *mut __m256i, _mm256_setzero_si256());
    }
);
#[cfg(target_arch = "x86_64")]
kernels!(
    kscalar,
    "sse2",
    |p: *const u8| (p as *const u64).read_volatile(),
    |p: *mut u8, v: u64| {
        let w = p as *mut i64;
        _mm_stream_si64(w, v as i64);
        for k in 1..8 {
            _mm_stream_si64(w.add(k), 0);
        }
    }
);

impl Host {
    unsafe fn chase(&self, p: *const u8, steps: u64) -> *const u8 {
        match self.isa {
            Isa::Avx512 => k512::chase(p, steps),
            Isa::Avx2 => k256::chase(p, steps),
            Isa::Scalar => kscalar::chase(p, steps),
        }
    }
    unsafe fn loads(&self, base: *mut u8, pat: &Pattern) -> u64 {
        match self.isa {
            Isa::Avx512 => k512::loads(base, pat),
            Isa::Avx2 => k256::loads(base, pat),
            Isa::Scalar => kscalar::loads(base, pat),
        }
    }
    unsafe fn stores(&self, base: *mut u8, pat: &Pattern, fence: Fence) {
        let wb = match self.store {
            StoreKind::Nt => None,
            StoreKind::Clwb => Some(self.flush),
        };
        match self.isa {
            Isa::Avx512 => k512::stores(base, pat, fence, wb),
            Isa::Avx2 => k256::stores(base, pat, fence, wb),
            Isa::Scalar => kscalar::stores(base, pat, fence, wb),
        }
    }

    /// One pass of `pat` (untimed here). A chase starts at `cur` and the
    /// line it ends on is returned, so consecutive passes form one
    /// dependency chain (independent passes would overlap out of order).
    unsafe fn pass(&self, base: *mut u8, pat: &Pattern, cur: *const u8) -> *const u8 {
        let serial = pat.issue == Issue::Serial;
        match pat.op {
            Op::Load if serial => self.chase(cur, pat.lines_per_pass()),
            Op::Load => {
                std::hint::black_box(self.loads(base, pat));
                cur
            }
            Op::Store => {
                self.stores(base, pat, pat.fence);
                cur
            }
            Op::Raw => {
                // The loads must see the stores: a fenced-per-run RaW pass
                // fences its stores before loading them.
                let f = if pat.fence == Fence::Run {
                    Fence::Pass
                } else {
                    pat.fence
                };
                self.stores(base, pat, f);
                if serial {
                    self.chase(cur, pat.lines_per_pass())
                } else {
                    std::hint::black_box(self.loads(base, pat));
                    cur
                }
            }
        }
    }
}

impl Target for Host {
    fn describe(&self) -> String {
        let pages = self
            .map
            .as_ref()
            .map(|m| m.huge)
            .unwrap_or("not mapped yet");
        format!(
            "host: {} memory ({pages}), {} non-temporal accesses, {} stores, pinned to CPU {}, TSC {:.3} GHz",
            match &self.mem {
                MemKind::Auto | MemKind::Anon => "anonymous".to_string(),
                MemKind::HugePage => "huge-page".to_string(),
                MemKind::File(p) => format!("file {}", p.display()),
                MemKind::PmPool(p) => format!("pool {}", p.display()),
            },
            self.isa.name(),
            match self.store {
                StoreKind::Nt => "non-temporal",
                StoreKind::Clwb => "write-back (clwb/clflush)",
            },
            self.cpu.map(|c| c.to_string()).unwrap_or_else(|| "?".into()),
            self.tsc_per_ns
        )
    }

    fn noisy(&self) -> bool {
        true
    }

    fn run(&mut self, pat: &Pattern) -> Result<Vec<f64>, Error> {
        pat.validate()?;
        let base = self.ensure(pat.region)?;
        let first =
            unsafe { base.add(pat.order[0] as usize * pat.block_stride as usize) } as *const u8;
        // SAFETY: validate() guarantees every access lies in the region,
        // which ensure() mapped; the chain is written before it is chased.
        unsafe {
            if matches!(pat.op, Op::Load) && pat.issue == Issue::Serial {
                // Lay the chain with one store pass (not timed).
                self.stores(base, pat, Fence::Pass);
            }
            let mut cur = first;
            for _ in 0..pat.warmup {
                cur = self.pass(base, pat, cur);
            }
            // Fence::Run: one sfence after the warm-up and one at the end
            // of the timed run (or of each timed pass, when timed per pass).
            let run_fence = pat.fence == Fence::Run;
            if run_fence {
                store_fence();
            }
            let out = match pat.timing {
                Timing::Total => {
                    let t0 = rdtsc();
                    for _ in 0..pat.passes {
                        cur = self.pass(base, pat, cur);
                    }
                    if run_fence {
                        store_fence();
                    }
                    vec![self.ns(rdtsc() - t0)]
                }
                Timing::PerPass => {
                    let mut out = Vec::with_capacity(pat.passes as usize);
                    for _ in 0..pat.passes {
                        let t0 = rdtsc();
                        cur = self.pass(base, pat, cur);
                        if run_fence {
                            store_fence();
                        }
                        out.push(self.ns(rdtsc() - t0));
                    }
                    out
                }
            };
            std::hint::black_box(cur);
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::Rng;

    fn pattern(op: Op, issue: Issue) -> Pattern {
        Pattern {
            region: 1 << 16,
            block: 128,
            block_stride: 128,
            order: Rng::new(1).permutation(512),
            op,
            warmup: 1,
            passes: 2,
            issue,
            fence: Fence::Block,
            timing: Timing::Total,
        }
    }

    #[test]
    fn chain_visits_lines_in_pattern_order() {
        let mut h = Host::new(MemKind::Anon, None, StoreKind::Nt, None).unwrap();
        let p = pattern(Op::Load, Issue::Serial);
        h.run(&p).unwrap();
        let base = h.map.as_ref().unwrap().ptr;
        // Walk the chain by hand: it must follow the visit order.
        let mut cur = unsafe { base.add(p.order[0] as usize * 128) } as *const u8;
        for i in 0..p.order.len() {
            let blk = unsafe { base.add(p.order[i] as usize * 128) } as *const u8;
            assert_eq!(cur, blk, "block {i}");
            cur = unsafe { (cur as *const u64).read() } as *const u8; // second line
            assert_eq!(cur, unsafe { blk.add(64) });
            cur = unsafe { (cur as *const u64).read() } as *const u8;
        }
    }

    #[test]
    fn every_op_and_isa_runs_and_takes_time() {
        let best = Isa::detect();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            if (isa == Isa::Avx512 && best != Isa::Avx512)
                || (isa == Isa::Avx2 && best == Isa::Scalar)
            {
                continue;
            }
            for store in [StoreKind::Nt, StoreKind::Clwb] {
                let mut h = Host::new(MemKind::Anon, Some(isa), store, None).unwrap();
                for op in [Op::Load, Op::Store, Op::Raw] {
                    for issue in [Issue::Serial, Issue::Outstanding(8)] {
                        let t = h.run(&pattern(op, issue)).unwrap();
                        assert_eq!(t.len(), 1);
                        assert!(t[0] > 0.0, "{isa:?} {op:?} {issue:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn chain_is_one_cycle_through_every_line() {
        let mut c = Chain::new(1 << 20, None, 42).unwrap();
        let lines = (1 << 20) / 64;
        // Every step lands on a line not seen before, until the last one
        // returns to the start.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..lines {
            assert!(seen.insert(c.at), "line visited twice");
            c.chase(1);
        }
        assert_eq!(c.at, c.start);
        assert_eq!(seen.len(), lines);
        c.chase(5);
        c.rewind();
        assert_eq!(c.at, c.start);
        assert!(Chain::new(32, None, 1).is_err());
    }

    #[test]
    fn per_pass_timing_gives_one_figure_per_pass() {
        let mut h = Host::new(MemKind::Anon, None, StoreKind::Nt, None).unwrap();
        let mut p = pattern(Op::Store, Issue::Serial);
        p.timing = Timing::PerPass;
        p.passes = 10;
        assert_eq!(h.run(&p).unwrap().len(), 10);
    }

    #[test]
    fn file_memory_maps_and_bad_kinds_are_refused() {
        let path = std::env::temp_dir().join(format!("pmlab-probe-host-{}", std::process::id()));
        let mut h = Host::new(MemKind::File(path.clone()), None, StoreKind::Nt, None).unwrap();
        h.run(&pattern(Op::Store, Issue::Serial)).unwrap();
        assert!(h.describe().contains("file"));
        drop(h);
        std::fs::remove_file(&path).unwrap();
        assert!(MemKind::parse("weird")
            .unwrap_err()
            .to_string()
            .contains("anon, hugepage"));
        let pool = std::env::temp_dir().join(format!("pmlab-probe-pool-{}", std::process::id()));
        let mut h = Host::new(MemKind::PmPool(pool.clone()), None, StoreKind::Clwb, None).unwrap();
        h.run(&pattern(Op::Raw, Issue::Serial)).unwrap();
        assert!(h.describe().contains("libpmem pool"), "{}", h.describe());
        drop(h);
        std::fs::remove_file(&pool).unwrap();
        assert_eq!(
            MemKind::parse("file:/x").unwrap(),
            MemKind::File("/x".into())
        );
    }
}
