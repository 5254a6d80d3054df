//! A functional model of a memory device's buffers, for the emulator
//! (`pmlab run --device`): which level serves each read that misses the
//! CPU caches, and what each write-back costs the media.
//!
//! It follows the simulator's NVRAM DIMM (`pmlab_sim::device::nvram`,
//! after LENS/VANS) component by component, without its event queue: no
//! time, only hits and misses.
//!
//! * **RMW buffer**: XPLine entries (256 B on Optane), exact LRU. A read
//!   hit is served at [`DeviceParams::rmw_ns`]. With
//!   [`DeviceParams::combine_in_buffer`] it is also the write-combining
//!   buffer: a written 64 B line joins its XPLine's entry; the XPLine goes
//!   to the media once all its lines are written, or, partial, when it is
//!   evicted (then its old content is read first: a read-modify-write).
//! * **AIT buffer**: entries of [`DeviceParams::ait_entry`] bytes (4 KiB),
//!   exact LRU, a valid bit per XPLine; a read that misses the RMW buffer
//!   and hits here is served at [`DeviceParams::ait_ns`]. Inclusive: an
//!   evicted entry takes its XPLines out of the RMW buffer. With
//!   [`DeviceParams::fill_entry`] a miss makes the whole entry valid (the
//!   simulator streams it in during the media's idle time).
//! * **media**: everything else, at [`DeviceParams::media_ns`]; each media
//!   write occupies the media for [`DeviceParams::write_ns`], each
//!   read-modify-write's read for [`DeviceParams::read_occ_ns`].
//! * **wear leveling**: a write counter per XPLine, cleared every
//!   [`DeviceParams::wear_window`] media writes; an XPLine reaching
//!   [`DeviceParams::wear_threshold`] writes costs a migration stall of
//!   [`DeviceParams::migration_ns`].
//! * **prefetch**: after [`DeviceParams::prefetch_after`] moves to the next
//!   XPLine, each move brings the next [`DeviceParams::prefetch`] XPLines
//!   (inside the AIT entry with `fill_entry`).
//! * **interleaving**: [`DeviceParams::channels`] DIMMs, each with its own
//!   buffers, interleaved every [`DeviceParams::interleave`] bytes.
//!
//! A device without buffers (DDR4, CXL, slow DRAM) has `rmw_lines = 0`:
//! every read is a media read at `media_ns`, writes cost nothing.
//!
//! The parameters come from the simulator's configuration, converted in
//! one place (`pmlab_sim::functional`), and travel to the runtime as one
//! environment string ([`DeviceParams::to_env`], [`DeviceParams::parse`]).
//! Memory is allocated once, by [`DeviceModel::new`]; reads and writes
//! allocate nothing, so the model may run in a signal handler.
//!
//! ```
//! use pmlab_model::device::{DeviceModel, DeviceParams, Level};
//!
//! let p = DeviceParams::optane_like();
//! let mut d = DeviceModel::new(&p);
//! assert_eq!(d.read(0x1000), Level::Media);
//! assert_eq!(d.read(0x1040), Level::Rmw); // same 256 B XPLine
//! assert_eq!(p.latency(Level::Rmw), p.rmw_ns);
//! ```

use crate::{Error, ErrorKind};

/// The level of the device that served a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The RMW (XPLine) buffer.
    Rmw,
    /// The AIT buffer (on-DIMM DRAM).
    Ait,
    /// The media.
    Media,
}

/// The parameters of the functional model. Latencies are a read's whole
/// latency as a load sees it (core to device and back), in ns.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceParams {
    /// Where the parameters came from (a preset or file name).
    pub name: String,
    /// DIMMs interleaved.
    pub channels: u32,
    /// Interleaving granularity, bytes (a power of two).
    pub interleave: u64,
    /// XPLine (media access unit), bytes: a power of two from 64 to 2048.
    pub xpline: u64,
    /// RMW buffer entries (XPLines); 0: a device without buffers.
    pub rmw_lines: u32,
    /// AIT buffer entry, bytes (a power of two, 1 to 32 XPLines).
    pub ait_entry: u64,
    /// AIT buffer entries.
    pub ait_entries: u32,
    /// An AIT miss makes its whole entry valid.
    pub fill_entry: bool,
    /// Partial XPLines combine in the RMW buffer until complete or evicted
    /// (else every write-back is a media write).
    pub combine_in_buffer: bool,
    /// XPLines the prefetcher brings ahead (0: off).
    pub prefetch: u32,
    /// Sequential moves that confirm a stream.
    pub prefetch_after: u32,
    /// Latency of a read served by the RMW buffer, ns.
    pub rmw_ns: f64,
    /// Latency of a read served by the AIT buffer, ns.
    pub ait_ns: f64,
    /// Latency of a read served by the media, ns.
    pub media_ns: f64,
    /// Media time of one XPLine write, ns.
    pub write_ns: f64,
    /// Media time of one XPLine read (the read of a read-modify-write), ns.
    pub read_occ_ns: f64,
    /// Writes to one XPLine within a window that trigger a migration.
    pub wear_threshold: u32,
    /// Media writes per wear-leveling window.
    pub wear_window: u64,
    /// The stall of one migration, ns.
    pub migration_ns: f64,
}

/// Most DIMMs, and most entries of either buffer, the model accepts.
const MAX_CHANNELS: u32 = 64;
const MAX_ENTRIES: u32 = 1 << 22;
/// Slots of each DIMM's wear table (direct-mapped by XPLine).
const WEAR_SLOTS: usize = 4096;

impl DeviceParams {
    /// Round Optane-like parameters (one DIMM; LENS's sizes and latencies
    /// rounded), for examples and tests. `pmlab run --device` takes its
    /// parameters from the simulator's presets instead.
    pub fn optane_like() -> DeviceParams {
        DeviceParams {
            name: "optane-like".into(),
            channels: 1,
            interleave: 4096,
            xpline: 256,
            rmw_lines: 64,
            ait_entry: 4096,
            ait_entries: 4096,
            fill_entry: true,
            combine_in_buffer: true,
            prefetch: 2,
            prefetch_after: 2,
            rmw_ns: 170.0,
            ait_ns: 310.0,
            media_ns: 345.0,
            write_ns: 111.0,
            read_occ_ns: 39.0,
            wear_threshold: 14_000,
            wear_window: 2_500_000,
            migration_ns: 50_000.0,
        }
    }

    /// The latency of a read served by `level`, ns.
    pub fn latency(&self, level: Level) -> f64 {
        match level {
            Level::Rmw => self.rmw_ns,
            Level::Ait => self.ait_ns,
            Level::Media => self.media_ns,
        }
    }

    /// True when the device has buffers (an Optane-like DIMM).
    pub fn has_buffers(&self) -> bool {
        self.rmw_lines > 0
    }

    /// The slowest read level's latency (the reference the emulator's
    /// delays are expressed in), ns.
    pub fn slowest_ns(&self) -> f64 {
        self.rmw_ns.max(self.ait_ns).max(self.media_ns)
    }

    /// The parameters as one `key=value,...` string that [`parse`](Self::parse)
    /// reads back to the same value (the name's `,` and `=` become `_`).
    pub fn to_env(&self) -> String {
        let name: String = self
            .name
            .chars()
            .map(|c| if c == ',' || c == '=' { '_' } else { c })
            .collect();
        format!(
            "name={name},channels={},interleave={},xpline={},rmw_lines={},ait_entry={},ait_entries={},\
fill_entry={},combine_in_buffer={},prefetch={},prefetch_after={},rmw_ns={},ait_ns={},media_ns={},\
write_ns={},read_occ_ns={},wear_threshold={},wear_window={},migration_ns={}",
            self.channels,
            self.interleave,
            self.xpline,
            self.rmw_lines,
            self.ait_entry,
            self.ait_entries,
            self.fill_entry as u8,
            self.combine_in_buffer as u8,
            self.prefetch,
            self.prefetch_after,
            self.rmw_ns,
            self.ait_ns,
            self.media_ns,
            self.write_ns,
            self.read_occ_ns,
            self.wear_threshold,
            self.wear_window,
            self.migration_ns,
        )
    }

    /// Read the string [`to_env`](Self::to_env) writes; every key is
    /// required and checked. Errors name the key.
    pub fn parse(s: &str) -> Result<DeviceParams, Error> {
        let mut kv: Vec<(&str, &str)> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                Error::new(
                    ErrorKind::Parse,
                    format!("device parameters: '{item}' is not key=value"),
                )
            })?;
            kv.push((k.trim(), v.trim()));
        }
        let get = |k: &str| -> Result<&str, Error> {
            kv.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Parse,
                        format!("device parameters: '{k}' is missing"),
                    )
                })
        };
        let bad = |k: &str, v: &str, what: &str| {
            Error::new(
                ErrorKind::OutOfRange,
                format!("device parameter {k}: '{v}' is not {what}"),
            )
        };
        let int = |k: &str, lo: u64, hi: u64| -> Result<u64, Error> {
            let v = get(k)?;
            v.parse::<u64>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| bad(k, v, &format!("a whole number from {lo} to {hi}")))
        };
        let pow2 = |k: &str, lo: u64, hi: u64| -> Result<u64, Error> {
            let n = int(k, lo, hi)?;
            if n.is_power_of_two() {
                Ok(n)
            } else {
                Err(bad(k, get(k)?, "a power of two"))
            }
        };
        let ns = |k: &str| -> Result<f64, Error> {
            let v = get(k)?;
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && *x <= 1e12)
                .ok_or_else(|| bad(k, v, "a duration in ns from 0 to 1e12"))
        };
        let flag = |k: &str| -> Result<bool, Error> { Ok(int(k, 0, 1)? == 1) };
        let xpline = pow2("xpline", 64, 2048)?;
        let ait_entry = pow2("ait_entry", xpline, xpline * 32)?;
        let p = DeviceParams {
            name: get("name")?.to_string(),
            channels: int("channels", 1, MAX_CHANNELS as u64)? as u32,
            interleave: pow2("interleave", 64, 1 << 40)?,
            xpline,
            rmw_lines: int("rmw_lines", 0, MAX_ENTRIES as u64)? as u32,
            ait_entry,
            ait_entries: int("ait_entries", 0, MAX_ENTRIES as u64)? as u32,
            fill_entry: flag("fill_entry")?,
            combine_in_buffer: flag("combine_in_buffer")?,
            prefetch: int("prefetch", 0, 64)? as u32,
            prefetch_after: int("prefetch_after", 1, 64)? as u32,
            rmw_ns: ns("rmw_ns")?,
            ait_ns: ns("ait_ns")?,
            media_ns: ns("media_ns")?,
            write_ns: ns("write_ns")?,
            read_occ_ns: ns("read_occ_ns")?,
            wear_threshold: int("wear_threshold", 1, u32::MAX as u64)? as u32,
            wear_window: int("wear_window", 1, u64::MAX)?,
            migration_ns: ns("migration_ns")?,
        };
        if let Some((k, _)) = kv.iter().find(|(k, _)| !KEYS.contains(k)) {
            return Err(Error::new(
                ErrorKind::Parse,
                format!(
                    "device parameters: unknown key '{k}' (valid: {})",
                    KEYS.join(", ")
                ),
            ));
        }
        Ok(p)
    }
}

const KEYS: &[&str] = &[
    "name",
    "channels",
    "interleave",
    "xpline",
    "rmw_lines",
    "ait_entry",
    "ait_entries",
    "fill_entry",
    "combine_in_buffer",
    "prefetch",
    "prefetch_after",
    "rmw_ns",
    "ait_ns",
    "media_ns",
    "write_ns",
    "read_occ_ns",
    "wear_threshold",
    "wear_window",
    "migration_ns",
];

/// What a PM read that missed the CPU caches was on this machine, for
/// the delay: the emulated program runs on DRAM, so each access already
/// costs its native price, and the emulator adds only the rest. What that
/// price is depends on the access's locality: how much memory the thread
/// has been missing in lately, whether the line follows the previous miss
/// (the CPU's prefetchers have it on its way), and whether the thread
/// flushed it just before (a flushed line's re-read is slow however small
/// the region):
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A miss in a page the thread missed in recently (found in a
    /// direct-mapped table of [`NEAR_PAGES`] 4 KiB pages), with the
    /// thread's recent footprint in 4 KiB pages ([`NativeTracker`]): the
    /// native cost grows with it from the near cost (up to
    /// [`NEAR_FOOTPRINT`]) to the far one (from [`FAR_FOOTPRINT`]).
    Near(u32),
    /// Any other miss: natively a DRAM access with everything else cold,
    /// what the calibration's chase over a large region measures.
    Far,
    /// The line right after the thread's previous miss, in the same 4 KiB
    /// page: natively the CPU's prefetchers have it on its way (the later
    /// lines of a block a chase reads in order), with the footprint of the
    /// run's first line in 4 KiB pages (as [`Near`](Access::Near);
    /// `u32::MAX` when that line was [`Far`](Access::Far)): what the
    /// prefetch leaves of the latency grows with the latency
    /// ([`NativeCosts::follow_at`]; on this VM a following line of a chase
    /// in 256 B blocks costs 8 ns over 256 KiB, 11 over 64-256 MiB, 23
    /// over 1 GiB).
    Follow(u32),
    /// A line the thread flushed fewer than [`FRESH_FLUSHES`] flushes ago,
    /// not following the previous miss: natively slow whatever its
    /// neighbours (on this VM a random chase over 4 to 16 KiB flushed just
    /// before costs 115-155 ns per line).
    Fresh,
    /// A fresh line that follows the previous miss (the later lines of a
    /// block of a small flushed region), with the number of lines the
    /// thread flushed in its last run of flushes (between two misses):
    /// natively as dear as a fresh line when the prefetchers miss the
    /// block, which they do while the flushes are recent, nearly as cheap
    /// as a [`Follow`](Access::Follow) line once the run is long (the
    /// oldest lines' flushes have long completed). On this VM, in a
    /// program built by `pmlab cc`, a chase over 8 KiB in 256 B blocks
    /// pays about 100 ns per following line, over 16 KiB 15-30
    /// ([`NativeCosts::fresh_follow_at`]).
    FreshFollow(u32),
}

/// Flushes after which a flushed line's re-read is no longer
/// [`Access::Fresh`] (a 16 KiB region flushed whole).
pub const FRESH_FLUSHES: u64 = 256;

/// Runs of flushes of up to this many lines leave the following lines of
/// a fresh block at [`NativeCosts::fresh_follow_ns`] (what the start-up
/// chase over 8 KiB measures); from [`FOLLOW_BURST`] lines on they cost
/// [`NativeCosts::follow_ns`].
pub const FRESH_BURST: u32 = 128;

/// Runs of flushes from this many lines on leave a fresh block's
/// following lines at [`NativeCosts::follow_ns`] (16 KiB).
pub const FOLLOW_BURST: u32 = 256;

/// Slots of [`NativeTracker`]'s table of flushed lines (direct-mapped by
/// line: exact for any 64 KiB window).
const FRESH_SLOTS: usize = 1024;

/// Slots of [`NativeTracker`]'s table of pages missed in (direct-mapped
/// by 4 KiB page): a footprint of up to 32 MiB is seen whole; past it a
/// page's slot is mostly taken by another one when the page comes back,
/// and its miss counts as [`Access::Far`].
pub const NEAR_PAGES: usize = 8192;

/// The footprint, in 4 KiB pages, up to which a near miss costs natively
/// what the start-up chase over 256 KiB measured (1 MiB).
pub const NEAR_FOOTPRINT: u32 = 256;

/// The footprint, in 4 KiB pages, from which a near miss costs natively as
/// much as a far one (32 MiB). In between the cost grows with the
/// logarithm of the footprint: on this 2-vCPU KVM guest a random chase
/// flushed before each pass costs 85-100 ns per line over 256 KiB to
/// 1 MiB, 110 over 2 MiB, 115-128 over 4 MiB, 122-144 over 8 MiB, 139-153
/// over 16 MiB and 150-154 over 32 MiB, against 160 for DRAM (huge pages
/// from 2 MiB on).
pub const FAR_FOOTPRINT: u32 = 8192;

/// This machine's native cost of each [`Access`] kind, ns: what the
/// emulated program already pays per access before any delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NativeCosts {
    /// A near miss within [`NEAR_FOOTPRINT`] (measured at start-up: a
    /// random chase over 256 KiB, flushed before each pass).
    pub near_ns: f64,
    /// A far miss (the calibrated DRAM latency: a chase over 256 MiB or
    /// more).
    pub far_ns: f64,
    /// A line that follows the previous miss (measured at start-up: the
    /// same chase in 256 B blocks read in order, less its first lines).
    pub follow_ns: f64,
    /// A line flushed just before (measured at start-up: a random chase
    /// over 8 KiB, flushed before each pass).
    pub fresh_ns: f64,
    /// A line flushed just before that follows the previous miss
    /// (measured at start-up: the chase over 8 KiB in 256 B blocks, less
    /// its first lines).
    pub fresh_follow_ns: f64,
}

impl NativeCosts {
    /// The native cost of `access`, ns.
    pub fn of(&self, access: Access) -> f64 {
        match access {
            Access::Near(pages) => self.near_at(pages),
            Access::Far => self.far_ns,
            Access::Follow(pages) => self.follow_at(pages),
            Access::Fresh => self.fresh_ns,
            Access::FreshFollow(burst) => self.fresh_follow_at(burst),
        }
    }

    /// The native cost of a following line whose run began with a miss of
    /// footprint `pages` (`u32::MAX`: a far one):
    /// [`follow_ns`](Self::follow_ns) (measured within
    /// [`NEAR_FOOTPRINT`]) grown as the first line's native cost grows
    /// over the near cost ([`near_at`](Self::near_at); never below
    /// `follow_ns`).
    pub fn follow_at(&self, pages: u32) -> f64 {
        if pages <= NEAR_FOOTPRINT || self.near_ns <= 0.0 {
            return self.follow_ns;
        }
        self.follow_ns * (self.near_at(pages) / self.near_ns).max(1.0)
    }

    /// The native cost of a fresh following line after a run of `burst`
    /// flushed lines: [`fresh_follow_ns`](Self::fresh_follow_ns) up to
    /// [`FRESH_BURST`] lines, [`follow_ns`](Self::follow_ns) from
    /// [`FOLLOW_BURST`], linear in between.
    pub fn fresh_follow_at(&self, burst: u32) -> f64 {
        if burst <= FRESH_BURST {
            return self.fresh_follow_ns;
        }
        if burst >= FOLLOW_BURST {
            return self.follow_ns;
        }
        let x = (burst - FRESH_BURST) as f64 / (FOLLOW_BURST - FRESH_BURST) as f64;
        self.fresh_follow_ns + (self.follow_ns - self.fresh_follow_ns) * x
    }

    /// The native cost of a near miss with a footprint of `pages` 4 KiB
    /// pages: [`near_ns`](Self::near_ns) up to [`NEAR_FOOTPRINT`],
    /// [`far_ns`](Self::far_ns) from [`FAR_FOOTPRINT`], in between growing
    /// with the footprint's logarithm (never below the near cost when the
    /// far one is lower).
    pub fn near_at(&self, pages: u32) -> f64 {
        if pages <= NEAR_FOOTPRINT || self.far_ns <= self.near_ns {
            return self.near_ns;
        }
        if pages >= FAR_FOOTPRINT {
            return self.far_ns;
        }
        let span = (FAR_FOOTPRINT as f64 / NEAR_FOOTPRINT as f64).log2();
        let x = (pages as f64 / NEAR_FOOTPRINT as f64).log2() / span;
        self.near_ns + (self.far_ns - self.near_ns) * x
    }

    /// The delay of one serial PM read served by `level` that was natively
    /// an `access`: the level's latency less what the program already paid
    /// on this machine (never below 0: the emulator only slows memory).
    pub fn delay_ns(&self, p: &DeviceParams, level: Level, access: Access) -> f64 {
        (p.latency(level) - self.of(access)).max(0.0)
    }

    /// The native cost of a line that follows the previous miss, from two
    /// chases over the same region: `line_ns` per line with every line
    /// random, `block_ns` per line with blocks of `lines` lines read in
    /// order (each block's first line costs `line_ns`). Never below 0.
    pub fn follow_from(line_ns: f64, block_ns: f64, lines: u32) -> f64 {
        if lines < 2 {
            return line_ns;
        }
        let n = lines as f64;
        ((n * block_ns - line_ns) / (n - 1.0)).max(0.0)
    }
}

/// Buckets of [`LearnedCosts`]: the far miss, the fresh line, three of
/// fresh following lines (by burst), and for near misses and following
/// lines one per power of two of the footprint in 4 KiB pages (up to
/// 2^15) plus one for a following line whose run began far.
const LEARNED_BUCKETS: usize = 2 + 3 + 2 * 16 + 1;

/// Timed samples a bucket of [`LearnedCosts`] needs before its mean is used.
pub const LEARNED_MIN: u32 = 8;

/// Weight of a new sample in a bucket's running mean, once the bucket has
/// [`LEARNED_MIN`] samples (before that, the plain mean).
const LEARNED_WEIGHT: f64 = 1.0 / 64.0;

/// The native cost of each kind of [`Access`] as the program's own timed
/// loads measured it (device mode's timed samples: one load in N of the
/// program's, timed with the TSC where it is read): a running mean per
/// bucket of access kind and footprint. Where a bucket has fewer than
/// [`LEARNED_MIN`] samples the start-up [`NativeCosts`] stand in. The
/// start-up chases and their constants were fitted on one machine (on
/// another CPU a fresh line's re-read and a prefetched following line
/// cost otherwise); the timed samples follow the machine the program
/// runs on, its phase and its load.
#[derive(Debug, Clone)]
pub struct LearnedCosts {
    mean: [f64; LEARNED_BUCKETS],
    count: [u32; LEARNED_BUCKETS],
}

impl Default for LearnedCosts {
    fn default() -> Self {
        LearnedCosts {
            mean: [0.0; LEARNED_BUCKETS],
            count: [0; LEARNED_BUCKETS],
        }
    }
}

impl LearnedCosts {
    /// The bucket of `access`.
    fn bucket(access: Access) -> usize {
        let log = |pages: u32| (32 - pages.max(1).leading_zeros() - 1).min(15) as usize;
        match access {
            Access::Far => 0,
            Access::Fresh => 1,
            Access::FreshFollow(b) if b <= FRESH_BURST => 2,
            Access::FreshFollow(b) if b < FOLLOW_BURST => 3,
            Access::FreshFollow(_) => 4,
            Access::Near(p) => 5 + log(p),
            Access::Follow(u32::MAX) => 5 + 32,
            Access::Follow(p) => 5 + 16 + log(p),
        }
    }

    /// Note a timed access of kind `access` that took `ns` natively.
    /// Samples that are not finite or not positive are dropped.
    pub fn note(&mut self, access: Access, ns: f64) {
        if !(ns.is_finite() && ns >= 0.0) {
            return;
        }
        let b = Self::bucket(access);
        let n = self.count[b];
        let w = if n < LEARNED_MIN {
            1.0 / (n as f64 + 1.0)
        } else {
            LEARNED_WEIGHT
        };
        self.mean[b] += (ns - self.mean[b]) * w;
        self.count[b] = n.saturating_add(1);
    }

    /// The native cost of `access`: its bucket's mean once it has
    /// [`LEARNED_MIN`] samples, else `fallback`'s.
    pub fn of(&self, access: Access, fallback: &NativeCosts) -> f64 {
        let b = Self::bucket(access);
        if self.count[b] >= LEARNED_MIN {
            self.mean[b]
        } else {
            fallback.of(access)
        }
    }

    /// The delay of a read of kind `access` served by `level`: its
    /// latency less the native cost [`of`](Self::of) says (never below
    /// 0), as [`NativeCosts::delay_ns`] with the learnt costs.
    pub fn delay_ns(
        &self,
        p: &DeviceParams,
        level: Level,
        access: Access,
        fallback: &NativeCosts,
    ) -> f64 {
        (p.latency(level) - self.of(access, fallback)).max(0.0)
    }

    /// The timed samples noted so far, over all buckets.
    pub fn samples(&self) -> u64 {
        self.count.iter().map(|&c| c as u64).sum()
    }
}

/// Weight of the latest page distance in the footprint's running mean
/// (1/256).
const FOOTPRINT_SHIFT: u32 = 8;

/// The locality of a thread's PM misses, for [`Access`]: the previous
/// miss's line, a direct-mapped table of the pages missed in (with the
/// count of page changes at each one's last miss), the thread's footprint
/// and a table of the lines flushed lately. Allocated once (144 KiB);
/// [`classify`](Self::classify) and [`flush`](Self::flush) allocate
/// nothing.
///
/// The footprint is a running mean of the distance, in page changes (a
/// miss in another page than the previous miss's), between two misses in
/// the same page: a random chase over R bytes changes page R / 4 KiB times
/// between two visits of a page on average, whatever its block size (64 B
/// blocks visit each page 64 times a pass, 4 KiB blocks once).
#[derive(Debug, Clone)]
pub struct NativeTracker {
    /// (page, page changes at its last miss) by page.
    pages: Vec<(u64, u64)>,
    last_line: u64,
    /// Page changes so far.
    moves: u64,
    /// The footprint's running mean, in pages << [`FOOTPRINT_SHIFT`].
    footprint: u64,
    /// (line, flush count after its flush) by line.
    flushed: Vec<(u64, u64)>,
    flushes: u64,
    /// The flush count when the current run of flushes began; `u64::MAX`
    /// when a miss came after the last flush.
    burst_from: u64,
    /// Lines flushed in the last run of flushes before a miss.
    burst: u64,
    /// The footprint of the last miss that did not follow the one before
    /// (`u32::MAX` when far), for the [`Access::Follow`] lines after it.
    head_pages: u32,
}

impl Default for NativeTracker {
    fn default() -> Self {
        NativeTracker::new()
    }
}

impl NativeTracker {
    /// No page seen yet.
    pub fn new() -> NativeTracker {
        NativeTracker {
            pages: vec![(u64::MAX, 0); NEAR_PAGES],
            last_line: u64::MAX - 1,
            moves: 0,
            footprint: 0,
            flushed: vec![(u64::MAX, 0); FRESH_SLOTS],
            flushes: 0,
            burst_from: u64::MAX,
            burst: 0,
            head_pages: 0,
        }
    }

    /// The thread flushed `line` (an address >> 6).
    #[inline]
    pub fn flush(&mut self, line: u64) {
        if self.burst_from == u64::MAX {
            self.burst_from = self.flushes;
        }
        self.flushes += 1;
        self.flushed[line as usize % FRESH_SLOTS] = (line, self.flushes);
    }

    /// The thread's footprint so far, in 4 KiB pages (the running mean of
    /// the page distances of its near misses).
    pub fn footprint_pages(&self) -> u32 {
        (self.footprint >> FOOTPRINT_SHIFT).min(u32::MAX as u64) as u32
    }

    /// The kind of the miss of `line` (an address >> 6), and note it.
    #[inline]
    pub fn classify(&mut self, line: u64) -> Access {
        if self.burst_from != u64::MAX {
            self.burst = self.flushes - self.burst_from;
            self.burst_from = u64::MAX;
        }
        let page = line >> 6;
        let follow = line == self.last_line.wrapping_add(1) && line & 63 != 0;
        if page != self.last_line >> 6 {
            self.moves += 1;
        }
        self.last_line = line;
        let slot = &mut self.pages[page as usize % NEAR_PAGES];
        let near = slot.0 == page;
        let distance = self.moves - slot.1;
        *slot = (page, self.moves);
        if near && distance > 0 {
            // footprint += (distance - footprint) / 2^SHIFT, with the
            // footprint kept in pages << SHIFT.
            self.footprint =
                self.footprint - (self.footprint >> FOOTPRINT_SHIFT) + distance.min(1 << 40);
        }
        let f = &mut self.flushed[line as usize % FRESH_SLOTS];
        let fresh = f.0 == line && self.flushes - f.1 < FRESH_FLUSHES;
        if f.0 == line {
            f.0 = u64::MAX;
        }
        let kind = match (fresh, follow) {
            (true, true) => Access::FreshFollow(self.burst.min(u32::MAX as u64) as u32),
            (true, false) => Access::Fresh,
            (false, true) => Access::Follow(self.head_pages),
            (false, false) if near => Access::Near(self.footprint_pages()),
            _ => Access::Far,
        };
        match kind {
            Access::Near(p) => self.head_pages = p,
            Access::Far => self.head_pages = u32::MAX,
            Access::Fresh => self.head_pages = 0,
            _ => {}
        }
        kind
    }
}

/// What the model has counted (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceCounts {
    /// Reads served by the RMW buffer.
    pub rmw_hits: u64,
    /// Reads served by the AIT buffer.
    pub ait_hits: u64,
    /// Reads served by the media.
    pub media_reads: u64,
    /// 64 B write-backs received.
    pub writes: u64,
    /// XPLine media writes.
    pub media_writes: u64,
    /// Reads of old content for partial XPLine writes.
    pub modify_reads: u64,
    /// XPLines the prefetcher brought in.
    pub prefetches: u64,
    /// Wear-leveling migrations.
    pub migrations: u64,
    /// Media time of the writes and their modify reads, ns.
    pub media_write_ns: f64,
    /// Migration stalls, ns.
    pub stall_ns: f64,
}

impl DeviceCounts {
    /// Media bytes written per byte written back (1 when every XPLine is
    /// written whole; 0 before any write).
    pub fn write_amplification(&self, xpline: u64) -> f64 {
        if self.writes == 0 {
            0.0
        } else {
            (self.media_writes * xpline) as f64 / (self.writes * 64) as f64
        }
    }
}

const NIL: u32 = u32::MAX;

/// One entry of an [`Lru`]: its fields side by side (one cache line
/// holds two entries).
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u64,
    mask: u32,
    /// A second mask (the AIT buffer's: which of its XPLines are in the
    /// RMW buffer; the RMW buffer's: its AIT entry's slot plus one).
    aux: u32,
    prev: u32,
    next: u32,
    /// Position of the entry's slot in the index.
    pos: u32,
    flag: bool,
}

/// An exact LRU set of `u64` keys with a 32-bit mask and a flag each, of
/// fixed capacity: arrays and an open-addressing index allocated once.
#[derive(Debug, Clone)]
struct Lru {
    /// The entries, by slot (the first `len` in use).
    e: Vec<Entry>,
    /// Slot of each key, by hash (linear probing, at most a quarter
    /// full: short probes and short clusters to shift on removal); NIL
    /// when empty.
    index: Vec<u32>,
    head: u32,
    tail: u32,
    len: u32,
}

impl Lru {
    fn new(cap: u32) -> Lru {
        let c = cap as usize;
        let ix = (c * 4).next_power_of_two().max(2);
        Lru {
            e: vec![
                Entry {
                    key: 0,
                    mask: 0,
                    aux: 0,
                    prev: NIL,
                    next: NIL,
                    pos: 0,
                    flag: false,
                };
                c
            ],
            index: vec![NIL; ix],
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    fn cap(&self) -> u32 {
        self.e.len() as u32
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize & (self.index.len() - 1)
    }

    /// Position in `index` of `key`, or of the empty slot where it would go.
    #[inline(always)]
    fn probe(&self, key: u64) -> (usize, Option<u32>) {
        let m = self.index.len() - 1;
        let mut i = self.home(key);
        loop {
            let s = self.index[i];
            if s == NIL {
                return (i, None);
            }
            if self.e[s as usize].key == key {
                return (i, Some(s));
            }
            i = (i + 1) & m;
        }
    }

    #[inline]
    fn find(&self, key: u64) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        self.probe(key).1
    }

    #[inline]
    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.e[s as usize].prev, self.e[s as usize].next);
        if p != NIL {
            self.e[p as usize].next = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.e[n as usize].prev = p;
        } else {
            self.tail = p;
        }
    }

    #[inline]
    fn push_front(&mut self, s: u32) {
        self.e[s as usize].prev = NIL;
        self.e[s as usize].next = self.head;
        if self.head != NIL {
            self.e[self.head as usize].prev = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    /// Make `s` the most recent.
    #[inline]
    fn touch(&mut self, s: u32) {
        if self.head != s {
            self.unlink(s);
            self.push_front(s);
        }
    }

    /// Remove slot `s`'s index entry (backward-shift deletion).
    #[inline(always)]
    fn unindex(&mut self, s: u32) {
        let m = self.index.len() - 1;
        let mut i = self.e[s as usize].pos as usize;
        let mut j = i;
        loop {
            j = (j + 1) & m;
            let t = self.index[j];
            if t == NIL {
                break;
            }
            let h = self.home(self.e[t as usize].key);
            // Move the entry at j back to i unless its home lies in (i, j].
            let between = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !between {
                self.index[i] = t;
                self.e[t as usize].pos = i as u32;
                i = j;
            }
        }
        self.index[i] = NIL;
    }

    /// Insert `key` (absent) as the most recent with `mask` and `flag` (and
    /// no `aux` bits); returns the evicted (key, mask, flag, aux) when full.
    #[cfg(test)]
    fn insert(&mut self, key: u64, mask: u32, flag: bool) -> Option<(u64, u32, bool, u32)> {
        self.insert_at(key, mask, flag).1
    }

    /// [`insert`](Self::insert), and the slot `key` now has (NIL with no
    /// capacity).
    #[inline(always)]
    fn insert_at(
        &mut self,
        key: u64,
        mask: u32,
        flag: bool,
    ) -> (u32, Option<(u64, u32, bool, u32)>) {
        if self.cap() == 0 {
            return (NIL, None);
        }
        let mut evicted = None;
        let s = if self.len < self.cap() {
            self.len += 1;
            self.len - 1
        } else {
            let s = self.tail;
            let old = self.e[s as usize].key;
            evicted = Some((
                old,
                self.e[s as usize].mask,
                self.e[s as usize].flag,
                self.e[s as usize].aux,
            ));
            self.unindex(s);
            self.unlink(s);
            s
        };
        self.e[s as usize].key = key;
        self.e[s as usize].mask = mask;
        self.e[s as usize].flag = flag;
        self.e[s as usize].aux = 0;
        let (i, _) = self.probe(key);
        self.index[i] = s;
        self.e[s as usize].pos = i as u32;
        self.push_front(s);
        (s, evicted)
    }

    /// Remove `key`; returns its mask and flag.
    fn remove(&mut self, key: u64) -> Option<(u32, bool)> {
        let s = self.find(key)?;
        let out = (self.e[s as usize].mask, self.e[s as usize].flag);
        self.unindex(s);
        self.unlink(s);
        // Keep the slots dense: move the last slot into the hole.
        let last = self.len - 1;
        if s != last {
            let k = self.e[last as usize].key;
            let i = self.e[last as usize].pos;
            self.index[i as usize] = s;
            self.e[s as usize].pos = i;
            self.e[s as usize].key = k;
            self.e[s as usize].mask = self.e[last as usize].mask;
            self.e[s as usize].flag = self.e[last as usize].flag;
            self.e[s as usize].aux = self.e[last as usize].aux;
            let (p, n) = (self.e[last as usize].prev, self.e[last as usize].next);
            self.e[s as usize].prev = p;
            self.e[s as usize].next = n;
            if p != NIL {
                self.e[p as usize].next = s;
            } else {
                self.head = s;
            }
            if n != NIL {
                self.e[n as usize].prev = s;
            } else {
                self.tail = s;
            }
        }
        self.len -= 1;
        Some(out)
    }
}

/// One DIMM's state.
#[derive(Debug, Clone)]
struct Dimm {
    /// XPLines: mask of written (dirty) 64 B lines; flag: old content not read.
    rmw: Lru,
    /// AIT entries: mask of valid XPLines.
    ait: Lru,
    last_blk: u64,
    run: u32,
    wear: Vec<(u64, u32)>,
    wear_epoch: u64,
    media_writes: u64,
    /// The AIT entry last looked up or filled: (entry, slot). AIT slots
    /// are never removed, only reused by eviction, so the slot holds the
    /// entry while its key says so (saves a second lookup of the entry a
    /// read just fetched).
    ait_memo: (u64, u32),
}

/// The functional model: the buffers of one DIMM per channel.
#[derive(Debug, Clone)]
pub struct DeviceModel {
    p: DeviceParams,
    /// XPLines per AIT entry (a power of two), and its log2.
    per: u64,
    per_shift: u32,
    /// log2 of the XPLine size.
    xp_shift: u32,
    full: u32,
    dimms: Vec<Dimm>,
    counts: DeviceCounts,
}

impl DeviceModel {
    /// A cold model of `p` (allocates every buffer now).
    pub fn new(p: &DeviceParams) -> DeviceModel {
        let lines = (p.xpline / 64) as u32;
        let per = (p.ait_entry / p.xpline).max(1);
        let (rmw, ait) = if p.has_buffers() {
            (p.rmw_lines, p.ait_entries)
        } else {
            (0, 0)
        };
        DeviceModel {
            p: p.clone(),
            per,
            per_shift: per.trailing_zeros(),
            xp_shift: p.xpline.trailing_zeros(),
            full: if lines >= 32 {
                u32::MAX
            } else {
                (1 << lines) - 1
            },
            dimms: (0..p.channels.max(1))
                .map(|_| Dimm {
                    rmw: Lru::new(rmw),
                    ait: Lru::new(ait),
                    last_blk: u64::MAX - 1,
                    run: 0,
                    wear: if p.has_buffers() {
                        vec![(u64::MAX, 0); WEAR_SLOTS]
                    } else {
                        Vec::new()
                    },
                    wear_epoch: 0,
                    media_writes: 0,
                    ait_memo: (u64::MAX, NIL),
                })
                .collect(),
            counts: DeviceCounts::default(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &DeviceParams {
        &self.p
    }

    /// What has been counted so far.
    pub fn counts(&self) -> DeviceCounts {
        self.counts
    }

    /// The DIMM and device-local address of `addr` (the simulator's
    /// controller routing: chunk `addr / interleave` goes to DIMM
    /// `chunk % channels`).
    #[inline]
    fn route(&self, addr: u64) -> (usize, u64) {
        let n = self.dimms.len() as u64;
        if n == 1 {
            return (0, addr);
        }
        let g = self.p.interleave;
        let chunk = addr / g;
        ((chunk % n) as usize, (chunk / n) * g + addr % g)
    }

    /// A 64 B read that missed the CPU caches: the level that served it.
    pub fn read(&mut self, addr: u64) -> Level {
        if !self.p.has_buffers() {
            self.counts.media_reads += 1;
            return Level::Media;
        }
        let (d, local) = self.route(addr);
        let blk = local >> self.xp_shift;
        let bit = 1u32 << ((local & (self.p.xpline - 1)) >> 6);
        let dimm = &mut self.dimms[d];
        let new_xpline = blk != dimm.last_blk;
        if new_xpline {
            dimm.run = if blk == dimm.last_blk.wrapping_add(1) {
                dimm.run + 1
            } else {
                0
            };
            dimm.last_blk = blk;
        }
        let held = dimm.rmw.find(blk);
        let level = match held {
            // A partial line written without its old content serves only
            // the lines written.
            Some(s)
                if dimm.rmw.e[s as usize].mask & bit != 0
                    || dimm.rmw.e[s as usize].mask == 0
                    || !dimm.rmw.e[s as usize].flag =>
            {
                dimm.rmw.touch(s);
                self.counts.rmw_hits += 1;
                Level::Rmw
            }
            _ => {
                let l = self.fetch(d, blk, held.is_some());
                match l {
                    Level::Ait => self.counts.ait_hits += 1,
                    _ => self.counts.media_reads += 1,
                }
                if held.is_some() {
                    // A partial line whose old content is now read (the
                    // fetch may have moved its slot: look it up again).
                    let dimm = &mut self.dimms[d];
                    if let Some(s) = dimm.rmw.find(blk) {
                        dimm.rmw.e[s as usize].flag = false;
                    }
                    self.rmw_insert(d, blk, 0, false);
                } else {
                    self.rmw_insert_absent(d, blk, 0, false);
                }
                l
            }
        };
        let dimm = &self.dimms[d];
        if new_xpline && dimm.run >= self.p.prefetch_after {
            for k in 1..=self.p.prefetch as u64 {
                let b = blk + k;
                if self.p.fill_entry && b >> self.per_shift != blk >> self.per_shift {
                    break;
                }
                if self.dimms[d].rmw.find(b).is_none() {
                    self.counts.prefetches += 1;
                    self.fetch(d, b, false);
                    // The fetch only takes XPLines out of the buffer.
                    self.rmw_insert_absent(d, b, 0, false);
                }
            }
        }
        level
    }

    /// A dirty 64 B line written back to the device. Returns the wear-leveling
    /// stall it caused, ns (0 almost always); the media time it took is
    /// added to [`DeviceCounts::media_write_ns`].
    pub fn write_back(&mut self, addr: u64) -> f64 {
        self.counts.writes += 1;
        if !self.p.has_buffers() {
            return 0.0;
        }
        let stall0 = self.counts.stall_ns;
        let (d, local) = self.route(addr);
        let blk = local >> self.xp_shift;
        let bit = 1u32 << ((local & (self.p.xpline - 1)) >> 6);
        let held = self.dimms[d].rmw.find(blk);
        if let Some(s) = held {
            self.dimms[d].rmw.touch(s);
        }
        let old = held.map_or(0, |s| self.dimms[d].rmw.e[s as usize].mask);
        let dirty = old | bit;
        if self.p.combine_in_buffer && dirty != self.full {
            // Partial: it waits in the buffer for the rest of its XPLine.
            match held {
                Some(s) => self.dimms[d].rmw.e[s as usize].mask = dirty,
                None => self.rmw_insert(d, blk, bit, true),
            }
            return self.counts.stall_ns - stall0;
        }
        if bit != self.full && held.is_none() {
            self.counts.modify_reads += 1;
            self.counts.media_write_ns += self.p.read_occ_ns;
            self.fetch(d, blk, false);
        }
        self.media_write(d, blk);
        self.ait_fill(d, blk);
        match self.dimms[d].rmw.find(blk) {
            Some(s) => {
                self.dimms[d].rmw.e[s as usize].mask = 0;
                self.dimms[d].rmw.e[s as usize].flag = false;
            }
            None => self.rmw_insert(d, blk, 0, false),
        }
        self.counts.stall_ns - stall0
    }

    /// Bring XPLine `blk` of DIMM `d` to its RMW buffer's door: an AIT
    /// hit, or a media read (which fills the AIT buffer). `in_rmw`: the
    /// XPLine is in the RMW buffer now.
    #[inline(always)]
    fn fetch(&mut self, d: usize, blk: u64, in_rmw: bool) -> Level {
        let page = blk >> self.per_shift;
        let bit = 1u32 << (blk & (self.per - 1));
        let dimm = &mut self.dimms[d];
        let found = dimm.ait.find(page);
        if let Some(s) = found {
            dimm.ait.touch(s);
            dimm.ait_memo = (page, s);
            if dimm.ait.e[s as usize].mask & bit != 0 {
                return Level::Ait;
            }
        }
        self.ait_fill_at(d, blk, found, if in_rmw { bit } else { 0 });
        Level::Media
    }

    /// Make XPLine `blk` valid in the AIT buffer (the whole entry when it
    /// was absent and `fill_entry`), keeping the RMW buffer inclusive.
    fn ait_fill(&mut self, d: usize, blk: u64) {
        let page = blk >> self.per_shift;
        let bit = 1u32 << (blk & (self.per - 1));
        let in_rmw = if self.dimms[d].rmw.find(blk).is_some() {
            bit
        } else {
            0
        };
        let found = self.dimms[d].ait.find(page);
        self.ait_fill_at(d, blk, found, in_rmw);
    }

    /// [`ait_fill`](Self::ait_fill) with the AIT entry's slot (`found`)
    /// and the XPLine's bit if it is in the RMW buffer (`in_rmw`) known.
    #[inline(always)]
    fn ait_fill_at(&mut self, d: usize, blk: u64, found: Option<u32>, in_rmw: u32) {
        let page = blk >> self.per_shift;
        let bit = 1u32 << (blk & (self.per - 1));
        let dimm = &mut self.dimms[d];
        let ait = &mut dimm.ait;
        if let Some(s) = found {
            ait.e[s as usize].mask |= bit;
            ait.e[s as usize].aux |= in_rmw;
            ait.touch(s);
            dimm.ait_memo = (page, s);
            return;
        }
        let all = if self.per >= 32 {
            u32::MAX
        } else {
            (1u32 << self.per) - 1
        };
        let mask = if self.p.fill_entry { all } else { bit };
        let (s, evicted) = ait.insert_at(page, mask, false);
        if s != NIL {
            ait.e[s as usize].aux = in_rmw;
            dimm.ait_memo = (page, s);
        }
        if let Some((victim, valid, _, in_rmw)) = evicted {
            // Only the entry's valid XPLines that are in the RMW buffer
            // leave it.
            let mut m = valid & in_rmw;
            while m != 0 {
                let b = (victim << self.per_shift) + m.trailing_zeros() as u64;
                m &= m - 1;
                if let Some((dirty, unread)) = self.dimms[d].rmw.remove(b) {
                    if dirty != 0 {
                        self.evict_dirty(d, b, unread);
                    }
                }
            }
        }
    }

    /// Insert XPLine `blk` into DIMM `d`'s RMW buffer (OR-ing `dirty`
    /// into a present entry); a dirty victim goes to the media.
    fn rmw_insert(&mut self, d: usize, blk: u64, dirty: u32, unread: bool) {
        let rmw = &mut self.dimms[d].rmw;
        if let Some(s) = rmw.find(blk) {
            rmw.e[s as usize].mask |= dirty;
            rmw.touch(s);
            return;
        }
        self.rmw_insert_absent(d, blk, dirty, unread);
    }

    /// [`rmw_insert`](Self::rmw_insert) of an XPLine known to be absent.
    #[inline(always)]
    fn rmw_insert_absent(&mut self, d: usize, blk: u64, dirty: u32, unread: bool) {
        let (s, evicted) = self.dimms[d].rmw.insert_at(blk, dirty, unread);
        let hint = self.mark_in_rmw(d, blk, true, 0);
        if s != NIL {
            // The RMW entry remembers its AIT entry's slot (plus one).
            self.dimms[d].rmw.e[s as usize].aux = hint;
        }
        if let Some((victim, mask, unread, hint)) = evicted {
            self.mark_in_rmw(d, victim, false, hint);
            if mask != 0 {
                self.evict_dirty(d, victim, unread);
            }
        }
    }

    /// Note in XPLine `blk`'s AIT entry, if present, whether it is in the
    /// RMW buffer (so that evicting the entry visits only those XPLines).
    /// `hint` is the entry's slot plus one as the XPLine's RMW entry
    /// remembered it (0: none); returns the slot plus one (0: absent).
    /// AIT slots are never removed, only reused by eviction: a slot holds
    /// the entry while its key says so.
    #[inline(always)]
    fn mark_in_rmw(&mut self, d: usize, blk: u64, on: bool, hint: u32) -> u32 {
        let page = blk >> self.per_shift;
        let dimm = &mut self.dimms[d];
        #[cfg(test)]
        let hint = if tests::LOOKUP_ONLY.with(|c| c.get()) {
            dimm.ait_memo = (u64::MAX, NIL);
            0
        } else {
            hint
        };
        let (memo_page, memo) = dimm.ait_memo;
        let ait = &mut dimm.ait;
        let holds = |s: u32| s < ait.len && ait.e[s as usize].key == page;
        let slot = if hint != 0 && holds(hint - 1) {
            Some(hint - 1)
        } else if memo_page == page && holds(memo) {
            Some(memo)
        } else {
            ait.find(page)
        };
        let Some(s) = slot else {
            return 0;
        };
        let bit = 1u32 << (blk & (self.per - 1));
        if on {
            ait.e[s as usize].aux |= bit;
        } else {
            ait.e[s as usize].aux &= !bit;
        }
        s + 1
    }

    /// A partial XPLine leaves the RMW buffer: read its old content if it
    /// was never read, then write it.
    fn evict_dirty(&mut self, d: usize, blk: u64, unread: bool) {
        if unread {
            self.counts.modify_reads += 1;
            self.counts.media_write_ns += self.p.read_occ_ns;
        }
        self.media_write(d, blk);
    }

    /// One XPLine media write and its wear count.
    fn media_write(&mut self, d: usize, blk: u64) {
        self.counts.media_writes += 1;
        self.counts.media_write_ns += self.p.write_ns;
        let dimm = &mut self.dimms[d];
        let epoch = dimm.media_writes / self.p.wear_window;
        dimm.media_writes += 1;
        if epoch != dimm.wear_epoch {
            dimm.wear.fill((u64::MAX, 0));
            dimm.wear_epoch = epoch;
        }
        let slot = &mut dimm.wear[(blk as usize) % WEAR_SLOTS];
        if slot.0 != blk {
            *slot = (blk, 0);
        }
        slot.1 += 1;
        if slot.1 >= self.p.wear_threshold {
            slot.1 = 0;
            self.counts.migrations += 1;
            self.counts.stall_ns += self.p.migration_ns;
        }
    }
}

#[cfg(test)]
mod reference;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_agrees_with_its_reference() {
        // Random, sequential and mixed streams of reads and write-backs
        // over 8 KiB, 4 MiB and 1 GiB, on one DIMM and six, with Optane's
        // sizes and with a wear threshold low enough to migrate: the same
        // level for every read, the same stall for every write-back, the
        // same counts (so the same amplification) as the model kept as
        // the reference; also with buffers small enough that AIT entries
        // leave while their XPLines are in the RMW buffer, and without
        // whole-entry fills or write combining.
        let base = DeviceParams::optane_like();
        let wearing = DeviceParams {
            wear_threshold: 40,
            wear_window: 20_000,
            ..base.clone()
        };
        let tiny = DeviceParams {
            rmw_lines: 16,
            ait_entries: 8,
            ait_entry: 1024,
            ..wearing.clone()
        };
        let plain = DeviceParams {
            fill_entry: false,
            combine_in_buffer: false,
            ..tiny.clone()
        };
        let mut migrated = false;
        for p0 in [&base, &wearing, &tiny, &plain] {
            for channels in [1u32, 6] {
                let p = DeviceParams {
                    channels,
                    ..p0.clone()
                };
                for span in [8u64 << 10, 4 << 20, 1 << 30] {
                    for kind in ["random", "sequential", "mixed"] {
                        let mut new = DeviceModel::new(&p);
                        let mut old = reference::DeviceModel::new(&p);
                        let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ span ^ channels as u64;
                        let mut seq = 0u64;
                        for i in 0..60_000u64 {
                            s ^= s << 13;
                            s ^= s >> 7;
                            s ^= s << 17;
                            let random = (s % span) & !63;
                            seq = (seq + 64) % span;
                            let a = match kind {
                                "random" => random,
                                "sequential" => seq,
                                // Runs of sequential lines, random lines
                                // and a hot 4 KiB.
                                _ => match (s >> 40) % 4 {
                                    0 | 1 => seq,
                                    2 => random,
                                    _ => ((s >> 20) % 64) * 64 % span,
                                },
                            };
                            let write = match kind {
                                "sequential" => i % 4 == 3,
                                _ => s & 4 == 0,
                            };
                            let what = format!("{kind} {span} B on {channels} DIMMs, access {i}");
                            if write {
                                assert_eq!(new.write_back(a), old.write_back(a), "{what}");
                            } else {
                                assert_eq!(new.read(a), old.read(a), "{what}");
                            }
                        }
                        let (cn, co) = (new.counts(), old.counts());
                        assert_eq!(cn, co, "{kind} {span} B on {channels} DIMMs");
                        assert_eq!(
                            cn.write_amplification(p.xpline),
                            co.write_amplification(p.xpline)
                        );
                        assert!(cn.writes > 0 && cn.rmw_hits + cn.ait_hits + cn.media_reads > 0);
                        migrated |= cn.migrations > 0;
                    }
                }
            }
        }
        assert!(migrated, "no stream reached a wear-leveling migration");
    }

    std::thread_local! {
        /// The AIT entries' slots are always looked up (the remembered
        /// ones ignored): the reference the shortcuts must agree with.
        pub(super) static LOOKUP_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    #[test]
    fn remembered_ait_slots_change_no_result() {
        // Mixed reads and write-backs over regions around the buffers'
        // sizes, on one DIMM and two: the same levels, counts and
        // migrations with and without the remembered slots.
        for (channels, span) in [(1u32, 64u64 << 10), (1, 8 << 20), (2, 32 << 20)] {
            let p = DeviceParams {
                channels,
                ait_entries: 512,
                wear_threshold: 50,
                wear_window: 10_000,
                ..DeviceParams::optane_like()
            };
            let run = |lookup_only: bool| {
                LOOKUP_ONLY.with(|c| c.set(lookup_only));
                let mut d = DeviceModel::new(&p);
                let mut s = 0x2545_F491_4F6C_DD1Du64 ^ span;
                let mut levels = Vec::new();
                for i in 0..200_000u64 {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    // Random lines, and lines of a hot 4 KiB.
                    let a = if i % 3 == 0 {
                        (s % span) & !63
                    } else {
                        ((s >> 20) % 64) * 64
                    };
                    if s & 4 == 0 {
                        d.write_back(a);
                    } else {
                        levels.push(d.read(a));
                    }
                }
                LOOKUP_ONLY.with(|c| c.set(false));
                (levels, d.counts())
            };
            let (la, ca) = run(false);
            let (lb, cb) = run(true);
            assert_eq!(ca, cb, "{channels} DIMMs over {span} B");
            assert!(la == lb, "{channels} DIMMs over {span} B: levels differ");
            assert!(
                ca.media_writes > 0 && ca.rmw_hits > 0 && ca.ait_hits > 0,
                "{ca:?}"
            );
        }
    }

    fn small() -> DeviceParams {
        DeviceParams {
            rmw_lines: 4,
            ait_entries: 2,
            prefetch: 0,
            ..DeviceParams::optane_like()
        }
    }

    #[test]
    fn the_parameters_round_trip_through_the_environment() {
        let mut p = DeviceParams::optane_like();
        p.name = "my,odd=name".into();
        p.media_ns = 344.25;
        let back = DeviceParams::parse(&p.to_env()).unwrap();
        assert_eq!(back.name, "my_odd_name");
        p.name = back.name.clone();
        assert_eq!(back, p);
    }

    #[test]
    fn bad_parameters_name_the_key() {
        let p = DeviceParams::optane_like().to_env();
        let e = DeviceParams::parse(&p.replace("xpline=256", "xpline=300")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device parameter xpline: '300' is not a power of two"
        );
        let e = DeviceParams::parse(&p.replace("rmw_ns=170", "rmw_ns=-1")).unwrap_err();
        assert!(
            e.to_string().starts_with("device parameter rmw_ns: '-1'"),
            "{e}"
        );
        let e = DeviceParams::parse("name=x").unwrap_err();
        assert_eq!(e.to_string(), "device parameters: 'xpline' is missing");
        let e = DeviceParams::parse(&format!("{p},color=red")).unwrap_err();
        assert!(e.to_string().contains("unknown key 'color'"), "{e}");
        let e = DeviceParams::parse("oops").unwrap_err();
        assert!(e.to_string().contains("not key=value"), "{e}");
    }

    #[test]
    fn the_lru_is_exact_and_survives_removal() {
        let mut l = Lru::new(3);
        for k in [10, 20, 30] {
            assert_eq!(l.insert(k, k as u32, false), None);
        }
        l.touch(l.find(10).unwrap());
        // 20 is the least recent.
        assert_eq!(l.insert(40, 0, true), Some((20, 20, false, 0)));
        assert_eq!(l.remove(30), Some((30, false)));
        assert!(l.find(30).is_none());
        assert_eq!(l.insert(50, 5, false), None);
        // Order now (most recent first): 50, 40, 10.
        assert_eq!(l.insert(60, 0, false), Some((10, 10, false, 0)));
        assert_eq!(l.insert(70, 0, false), Some((40, 0, true, 0)));
        assert!(l.find(50).is_some() && l.find(60).is_some() && l.find(70).is_some());
        // Many keys colliding in a small index stay findable.
        let mut big = Lru::new(64);
        for k in 0..1000u64 {
            big.insert(k * 4096, 0, false);
            if k % 3 == 0 {
                big.remove(k * 4096);
            }
        }
        let live = (936..1000u64)
            .filter(|k| big.find(k * 4096).is_some())
            .count();
        assert!(live >= 40, "{live}");
        assert!(big.len <= 64);
    }

    #[test]
    fn a_read_is_served_by_the_rmw_buffer_the_ait_buffer_or_the_media() {
        let p = small();
        let mut d = DeviceModel::new(&p);
        assert_eq!(d.read(0), Level::Media);
        assert_eq!(d.read(64), Level::Rmw, "same XPLine");
        // The rest of the 4 KiB entry was filled: an AIT hit.
        assert_eq!(d.read(256), Level::Ait);
        // Four more XPLines evict XPLine 0 from the 4-entry RMW buffer.
        for k in 2..6 {
            d.read(k * 256);
        }
        assert_eq!(d.read(0), Level::Ait);
        // Two more AIT entries evict entry 0.
        d.read(4096);
        d.read(8192);
        assert_eq!(d.read(512), Level::Media);
        let c = d.counts();
        assert_eq!((c.rmw_hits, c.media_reads), (1, 4));
    }

    #[test]
    fn an_evicted_ait_entry_takes_its_xplines_out_of_the_rmw_buffer() {
        let p = DeviceParams {
            ait_entries: 1,
            ..small()
        };
        let mut d = DeviceModel::new(&p);
        d.read(0);
        d.read(4096);
        assert_eq!(d.read(0), Level::Media);
    }

    #[test]
    fn writes_combine_while_the_region_fits_the_buffer() {
        // Halves of each XPLine of a region, first halves then second halves
        // (Yang et al.'s XPBuffer experiment): one media write per XPLine
        // while the region fits the 4-XPLine buffer, two beyond.
        for (xplines, per_xpline) in [(4u64, 1.0), (64, 2.0)] {
            let mut d = DeviceModel::new(&small());
            for round in 0..2 {
                let before = d.counts().media_writes;
                for half in 0..2 {
                    for x in 0..xplines {
                        for k in 0..2 {
                            d.write_back(x * 256 + half * 128 + k * 64);
                        }
                    }
                }
                if round == 1 {
                    let n = d.counts().media_writes - before;
                    assert_eq!(n as f64, per_xpline * xplines as f64, "{xplines}");
                }
            }
        }
        // Whole XPLines written in order: amplification 1.
        let mut d = DeviceModel::new(&small());
        for l in 0..1024u64 {
            d.write_back(l * 64);
        }
        let c = d.counts();
        assert_eq!(c.write_amplification(256), 1.0);
        assert_eq!(c.modify_reads, 0);
        // Scattered 64 B writes: each a partial XPLine, read then written.
        let mut d = DeviceModel::new(&small());
        for k in 0..100u64 {
            d.write_back(k * 4096);
        }
        let c = d.counts();
        assert_eq!(c.media_writes, 96, "4 still in the buffer");
        assert_eq!(c.write_amplification(256), 96.0 * 4.0 / 100.0);
        assert_eq!(c.modify_reads, 96);
    }

    #[test]
    fn a_hot_xpline_migrates_every_threshold_writes_within_a_window() {
        let p = DeviceParams {
            wear_threshold: 10,
            wear_window: 1000,
            migration_ns: 5000.0,
            ..small()
        };
        let mut d = DeviceModel::new(&p);
        let mut stalls = Vec::new();
        for i in 0..100u64 {
            // A whole XPLine each time: one media write.
            let mut s = 0.0;
            for k in 0..4 {
                s += d.write_back(k * 64);
            }
            if s > 0.0 {
                stalls.push(i);
            }
        }
        assert_eq!(stalls, vec![9, 19, 29, 39, 49, 59, 69, 79, 89, 99]);
        assert_eq!(d.counts().stall_ns, 10.0 * 5000.0);
        // Writes spread so that no XPLine reaches the threshold in a window.
        let p = DeviceParams {
            wear_threshold: 6,
            wear_window: 20,
            ..small()
        };
        let mut d = DeviceModel::new(&p);
        for i in 0..800u64 {
            d.write_back((i % 16) * 64);
        }
        assert_eq!(d.counts().migrations, 0);
    }

    #[test]
    fn interleaved_dimms_keep_their_own_buffers() {
        let p = DeviceParams {
            channels: 2,
            ..small()
        };
        let mut d = DeviceModel::new(&p);
        // 4 KiB chunks alternate between the DIMMs: chunks 0 and 1 land at
        // local address 0 of DIMMs 0 and 1, each a media read.
        assert_eq!(d.route(4096), (1, 0));
        assert_eq!(d.route(8192 + 64), (0, 4096 + 64));
        assert_eq!(d.read(0), Level::Media);
        assert_eq!(d.read(4096), Level::Media);
        assert_eq!(d.read(64), Level::Rmw);
        assert_eq!(d.read(4096 + 64), Level::Rmw);
        // Five XPLines on DIMM 0 evict its first; DIMM 1's stays.
        for k in 1..5 {
            d.read(k * 256);
        }
        assert_eq!(d.read(4096 + 128), Level::Rmw);
        assert_eq!(d.read(0), Level::Ait);
    }

    #[test]
    fn a_device_without_buffers_serves_every_read_from_the_media() {
        let p = DeviceParams {
            rmw_lines: 0,
            ..DeviceParams::optane_like()
        };
        let mut d = DeviceModel::new(&p);
        assert_eq!(d.read(0), Level::Media);
        assert_eq!(d.read(0), Level::Media);
        assert_eq!(d.write_back(0), 0.0);
        assert_eq!(d.counts().media_writes, 0);
    }

    /// The read stream of `bench/device-cost.sh` (random lines in 4 MiB),
    /// untimed: every read is served by exactly one level and injects a
    /// finite delay, and a stream that overflows the RMW buffer reaches
    /// the levels below it. The model's cost per read against the delay
    /// it injects is a timing target: `bench/device-cost.sh` measures it.
    #[test]
    fn a_random_read_stream_is_served_by_every_level_with_finite_delays() {
        let p = DeviceParams::optane_like();
        let mut d = DeviceModel::new(&p);
        let mut s = 0x9E37_79B9u64;
        let n = 100_000u64;
        for _ in 0..n {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let lat = p.latency(d.read((s % (4 << 20)) & !63));
            assert!(lat.is_finite() && lat > 0.0, "{lat}");
        }
        let c = d.counts();
        assert_eq!(c.rmw_hits + c.ait_hits + c.media_reads, n, "{c:?}");
        assert!(c.ait_hits + c.media_reads > 0, "{c:?}");
    }

    #[test]
    fn the_delay_is_the_level_less_the_native_cost_of_that_kind_of_access() {
        let p = DeviceParams::optane_like();
        let n = NativeCosts {
            near_ns: 100.0,
            far_ns: 150.0,
            follow_ns: 40.0,
            fresh_ns: 130.0,
            fresh_follow_ns: 60.0,
        };
        // A near miss natively costs 100 ns: the RMW buffer's 170 adds 70;
        // a far one (150 natively) adds 20; a line the prefetchers had on
        // its way (40) adds 130.
        assert_eq!(n.delay_ns(&p, Level::Rmw, Access::Near(16)), 70.0);
        assert_eq!(n.delay_ns(&p, Level::Rmw, Access::Far), 20.0);
        assert_eq!(n.delay_ns(&p, Level::Rmw, Access::Follow(16)), 130.0);
        // After a far first line (150 natively, 1.5 times the near cost):
        // 1.5 times the following cost (60), adding 110.
        assert_eq!(n.delay_ns(&p, Level::Rmw, Access::Follow(u32::MAX)), 110.0);
        assert_eq!(n.delay_ns(&p, Level::Ait, Access::Near(0)), 210.0);
        assert_eq!(n.delay_ns(&p, Level::Media, Access::Far), 195.0);
        // A fresh line following the previous miss: its own cost (60).
        assert_eq!(n.delay_ns(&p, Level::Rmw, Access::FreshFollow(64)), 110.0);
        // After a long run of flushes: a following line's cost (40).
        assert_eq!(
            n.delay_ns(&p, Level::Rmw, Access::FreshFollow(FOLLOW_BURST)),
            130.0
        );
        // Never negative: a level faster than this machine adds nothing.
        assert_eq!(n.delay_ns(&p, Level::Rmw, Access::Fresh), 40.0);
        let slow = NativeCosts {
            near_ns: 400.0,
            far_ns: 400.0,
            follow_ns: 400.0,
            fresh_ns: 400.0,
            fresh_follow_ns: 400.0,
        };
        assert_eq!(slow.delay_ns(&p, Level::Media, Access::Far), 0.0);
        // A 4-line block chase at 55 ns per line, its first line at 100:
        // the other three cost 40 each.
        assert_eq!(NativeCosts::follow_from(100.0, 55.0, 4), 40.0);
        assert_eq!(NativeCosts::follow_from(100.0, 10.0, 4), 0.0);
        assert_eq!(NativeCosts::follow_from(100.0, 55.0, 1), 100.0);
    }

    #[test]
    fn a_fresh_following_line_is_cheap_after_a_long_run_of_flushes() {
        let n = NativeCosts {
            near_ns: 90.0,
            far_ns: 180.0,
            follow_ns: 8.0,
            fresh_ns: 140.0,
            fresh_follow_ns: 100.0,
        };
        // Up to FRESH_BURST flushed lines: the fresh following cost; from
        // FOLLOW_BURST the following cost; linear in between.
        assert_eq!(n.fresh_follow_at(4), 100.0);
        assert_eq!(n.fresh_follow_at(FRESH_BURST), 100.0);
        let mid = (FRESH_BURST + FOLLOW_BURST) / 2;
        assert!((n.fresh_follow_at(mid) - 54.0).abs() < 1e-9);
        assert_eq!(n.fresh_follow_at(FOLLOW_BURST), 8.0);
        assert_eq!(n.of(Access::FreshFollow(u32::MAX)), 8.0);
        // A following line grows with its run's first line: twice the
        // near cost (a far first line), twice the following cost.
        assert_eq!(n.follow_at(NEAR_FOOTPRINT), 8.0);
        assert_eq!(n.follow_at(u32::MAX), 16.0);
        assert_eq!(n.of(Access::Follow(FAR_FOOTPRINT)), 16.0);
        // The tracker counts the run of flushes before a miss.
        let mut t = NativeTracker::new();
        for l in 0..300 {
            t.flush(l);
        }
        assert_eq!(t.classify(290), Access::Fresh);
        assert_eq!(t.classify(291), Access::FreshFollow(300));
        t.flush(64);
        t.flush(65);
        assert_eq!(t.classify(64), Access::Fresh);
        assert_eq!(t.classify(65), Access::FreshFollow(2));
    }

    #[test]
    fn a_near_miss_costs_more_natively_as_the_footprint_grows() {
        let n = NativeCosts {
            near_ns: 90.0,
            far_ns: 160.0,
            follow_ns: 7.0,
            fresh_ns: 140.0,
            fresh_follow_ns: 60.0,
        };
        // The near cost up to 1 MiB, the far one from 32 MiB, and the
        // logarithm of the footprint in between: 5 doublings of 14 ns.
        assert_eq!(n.near_at(0), 90.0);
        assert_eq!(n.near_at(NEAR_FOOTPRINT), 90.0);
        assert!((n.near_at(2 * NEAR_FOOTPRINT) - 104.0).abs() < 1e-9);
        assert!((n.near_at(8 * NEAR_FOOTPRINT) - 132.0).abs() < 1e-9);
        assert_eq!(n.near_at(FAR_FOOTPRINT), 160.0);
        assert_eq!(n.near_at(u32::MAX), 160.0);
        assert_eq!(n.of(Access::Near(8 * NEAR_FOOTPRINT)), n.near_at(2048));
        // A far cost below the near one (a DRAM latency given low): the
        // near cost throughout.
        let low = NativeCosts { far_ns: 50.0, ..n };
        assert_eq!(low.near_at(4096), 90.0);
    }

    #[test]
    fn the_footprint_is_the_region_a_chase_covers_whatever_its_blocks() {
        // A random chase over `pages` pages in blocks of `block` lines,
        // read in order: its footprint after two passes.
        let footprint = |pages: u64, block: u64| {
            let mut t = NativeTracker::new();
            let blocks = pages * 64 / block;
            let mut order: Vec<u64> = (0..blocks).collect();
            let mut s = 0x2545_F491u64;
            for i in (1..order.len()).rev() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                order.swap(i, (s % (i as u64 + 1)) as usize);
            }
            for _ in 0..3 {
                for &b in &order {
                    for l in 0..block {
                        t.classify((1 << 30) + b * block + l);
                    }
                }
            }
            t.footprint_pages() as f64
        };
        for (pages, block) in [(256u64, 1u64), (1024, 1), (1024, 4), (2048, 4), (512, 64)] {
            let f = footprint(pages, block);
            assert!(
                (f / pages as f64 - 1.0).abs() < 0.3,
                "{pages} pages in {block}-line blocks: footprint {f}"
            );
        }
    }

    #[test]
    fn a_miss_is_near_far_or_following_the_one_before() {
        let mut t = NativeTracker::new();
        let near = |a: Access| matches!(a, Access::Near(_));
        // A page's first miss is far, the next one in it near; the line
        // right after the previous miss follows it.
        assert_eq!(t.classify(640), Access::Far);
        assert!(near(t.classify(650)));
        let after_near = t.footprint_pages();
        assert_eq!(t.classify(651), Access::Follow(after_near));
        assert_eq!(t.classify(652), Access::Follow(after_near));
        assert!(near(t.classify(645)));
        // Not across a 4 KiB page (64 lines): line 704 starts page 11.
        assert!(near(t.classify(703)));
        assert_eq!(t.classify(704), Access::Far);
        // The lines that follow a far one: far-following.
        assert_eq!(t.classify(705), Access::Follow(u32::MAX));
        // A page NEAR_PAGES pages away takes page 10's slot.
        let other = (10 + NEAR_PAGES as u64) << 6;
        assert_eq!(t.classify(other), Access::Far);
        assert_eq!(t.classify(650), Access::Far);
        // A random chase over a region within the table's reach: after the
        // first pass every miss is near; over 8x the reach, few are.
        let share_near = |pages: u64| {
            let mut t = NativeTracker::new();
            let mut s = 0x2545_F491u64;
            let mut hits = 0;
            let n = 200_000;
            for i in 0..2 * n {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let a = t.classify((s % (pages * 64)) | 1);
                if i >= n && near(a) {
                    hits += 1;
                }
            }
            hits as f64 / n as f64
        };
        assert!(share_near(1024) > 0.99);
        assert!(share_near(8 * NEAR_PAGES as u64) < 0.2);
    }

    #[test]
    fn a_line_flushed_lately_is_fresh_once_whatever_its_neighbours() {
        let mut t = NativeTracker::new();
        t.classify(640);
        for l in 640..644 {
            t.flush(l);
        }
        // Flushed just before: fresh, and fresh-following when it follows
        // the previous miss.
        assert_eq!(t.classify(642), Access::Fresh);
        assert_eq!(t.classify(643), Access::FreshFollow(4));
        // Once: the next miss of the line is no longer fresh.
        assert!(matches!(t.classify(642), Access::Near(_)));
        // FRESH_FLUSHES flushes later a flushed line is not fresh (here
        // it follows the previous miss).
        for l in 10_000..10_000 + FRESH_FLUSHES {
            t.flush(l);
        }
        assert!(matches!(t.classify(640), Access::Near(_)));
        assert!(matches!(t.classify(641), Access::Follow(_)));
        // A region of 16 KiB flushed whole, then chased: every line fresh;
        // one of 64 KiB: the lines flushed first are not.
        let fresh_share = |lines: u64| {
            let mut t = NativeTracker::new();
            for l in 0..lines {
                t.flush(l);
            }
            (0..lines)
                .filter(|&l| t.classify(l * 7 % lines) == Access::Fresh)
                .count() as f64
                / lines as f64
        };
        assert_eq!(fresh_share(256), 1.0);
        assert!((fresh_share(1024) - 0.25).abs() < 0.01);
        // A flushed 16 KiB region chased in 256 B blocks: a quarter of
        // the lines fresh, the rest fresh-following.
        let mut t = NativeTracker::new();
        for l in 0..256 {
            t.flush(l);
        }
        let kinds: Vec<Access> = (0..64u64)
            .flat_map(|b| (0..4).map(move |l| (b * 37 % 64) * 4 + l))
            .map(|l| t.classify(l))
            .collect();
        let count = |k: Access| kinds.iter().filter(|&&a| a == k).count();
        assert_eq!(count(Access::Fresh), 64);
        assert_eq!(count(Access::FreshFollow(256)), 192);
    }

    #[test]
    fn a_sequential_stream_is_prefetched() {
        let p = DeviceParams {
            prefetch: 2,
            prefetch_after: 2,
            ..DeviceParams::optane_like()
        };
        let mut d = DeviceModel::new(&p);
        // A new AIT entry per XPLine would hide the prefetch: use sector
        // fills.
        let mut d2 = DeviceModel::new(&DeviceParams {
            fill_entry: false,
            ..p.clone()
        });
        let mut media = 0;
        for x in 0..16u64 {
            d.read(x * 256);
            if d2.read(x * 256) == Level::Media {
                media += 1;
            }
        }
        assert!(d2.counts().prefetches > 0);
        assert!(media < 16, "{media}");
        assert_eq!(d.counts().media_reads, 1);
    }

    #[test]
    fn learned_costs_replace_the_start_up_ones_once_a_bucket_has_samples() {
        let start = NativeCosts {
            near_ns: 90.0,
            far_ns: 150.0,
            follow_ns: 10.0,
            fresh_ns: 120.0,
            fresh_follow_ns: 60.0,
        };
        let mut l = LearnedCosts::default();
        for _ in 0..LEARNED_MIN - 1 {
            l.note(Access::Fresh, 5.0);
        }
        // Too few samples: the start-up cost.
        assert_eq!(l.of(Access::Fresh, &start), 120.0);
        l.note(Access::Fresh, 5.0);
        assert!((l.of(Access::Fresh, &start) - 5.0).abs() < 1e-9);
        // Other kinds keep theirs; near misses are learnt per footprint.
        assert_eq!(l.of(Access::Far, &start), 150.0);
        for _ in 0..LEARNED_MIN {
            l.note(Access::Near(4), 20.0);
            l.note(Access::Near(4096), 140.0);
        }
        assert!((l.of(Access::Near(5), &start) - 20.0).abs() < 1e-9);
        assert!((l.of(Access::Near(4097), &start) - 140.0).abs() < 1e-9);
        assert_eq!(l.of(Access::Near(64), &start), start.of(Access::Near(64)));
        // A following line after a far head is not one after a near head.
        for _ in 0..LEARNED_MIN {
            l.note(Access::Follow(u32::MAX), 30.0);
        }
        assert!((l.of(Access::Follow(u32::MAX), &start) - 30.0).abs() < 1e-9);
        assert_eq!(l.of(Access::Follow(2), &start), 10.0);
        // Bad samples are dropped; the mean then follows new ones.
        l.note(Access::Fresh, f64::NAN);
        l.note(Access::Fresh, -1.0);
        assert!((l.of(Access::Fresh, &start) - 5.0).abs() < 1e-9);
        for _ in 0..2000 {
            l.note(Access::Fresh, 50.0);
        }
        assert!((l.of(Access::Fresh, &start) - 50.0).abs() < 0.1);
        assert_eq!(
            l.samples(),
            2000 + 3 * LEARNED_MIN as u64 + LEARNED_MIN as u64
        );
    }
}
