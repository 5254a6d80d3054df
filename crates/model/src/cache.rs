//! A software model of a cache hierarchy, used by the instrumented counter
//! source to decide which of a program's loads and stores reach memory.
//!
//! * [`Cache`]: one set-associative level with 64 B lines (the line size is
//!   a parameter), true LRU replacement and dirty bits, so that evicting a
//!   modified line reports a write-back.
//! * [`CompactCache`]: one level with hashed 30-bit tags in 32-bit slots
//!   (a 16-way set per 64 B line), the fast model used at run time.
//! * [`Hierarchy`]: several levels, non-inclusive: a miss fills every level
//!   above the one that hit; a dirty victim of one level is written into the
//!   next one, and a dirty victim of the last level is a write-back to memory.
//!
//! Addresses are byte addresses; the model works on line numbers
//! (`addr / line_bytes`). It is deterministic and allocation-free after
//! construction.

use crate::error::{Error, ErrorKind};

/// Geometry of one cache level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Capacity in bytes.
    pub size_bytes: u64,
    /// Associativity (ways per set).
    pub ways: u32,
    /// Line size in bytes (a power of two; 64 on every x86-64 part).
    pub line_bytes: u32,
}

impl CacheConfig {
    /// A level of `size_bytes` with `ways` ways and 64 B lines.
    pub fn new(size_bytes: u64, ways: u32) -> CacheConfig {
        CacheConfig {
            size_bytes,
            ways,
            line_bytes: 64,
        }
    }

    /// Number of sets, after checking the geometry.
    pub fn sets(&self) -> Result<u64, Error> {
        if self.line_bytes == 0 || !self.line_bytes.is_power_of_two() {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "cache line size {} B is not a power of two; use 64",
                    self.line_bytes
                ),
            ));
        }
        if self.ways == 0 || self.ways > 64 {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!("cache associativity {} must be 1..=64", self.ways),
            ));
        }
        let per_set = self.ways as u64 * self.line_bytes as u64;
        if self.size_bytes < per_set || !self.size_bytes.is_multiple_of(per_set) {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                format!(
                    "cache size {} B is not a multiple of ways x line size ({} B)",
                    self.size_bytes, per_set
                ),
            ));
        }
        Ok(self.size_bytes / per_set)
    }
}

/// A line pushed out of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    /// Line number (`addr / line_bytes`).
    pub line: u64,
    /// True when the line was modified, i.e. evicting it writes it back.
    pub dirty: bool,
}

/// The result of one access to a single level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// True when the line was present.
    pub hit: bool,
    /// The line evicted to make room (only on a miss in a full set).
    pub victim: Option<Victim>,
}

/// One set-associative cache level with LRU replacement and dirty bits.
///
/// Each set is stored most-recently-used first; a tag slot holds
/// `(line + 1) << 1 | dirty`, and 0 marks an empty way.
#[derive(Debug, Clone)]
pub struct Cache {
    config: CacheConfig,
    sets: u64,
    /// `sets - 1` when the number of sets is a power of two.
    mask: Option<u64>,
    ways: usize,
    slots: Vec<u64>,
}

const EMPTY: u64 = 0;

#[inline]
fn encode(line: u64, dirty: bool) -> u64 {
    ((line + 1) << 1) | dirty as u64
}

#[inline]
fn decode(slot: u64) -> Victim {
    Victim {
        line: (slot >> 1) - 1,
        dirty: slot & 1 == 1,
    }
}

impl Cache {
    /// An empty cache of the given geometry.
    pub fn new(config: CacheConfig) -> Result<Cache, Error> {
        let sets = config.sets()?;
        let ways = config.ways as usize;
        Ok(Cache {
            config,
            sets,
            mask: sets.is_power_of_two().then(|| sets - 1),
            ways,
            slots: vec![EMPTY; sets as usize * ways],
        })
    }

    /// The geometry this cache was built with.
    pub fn config(&self) -> CacheConfig {
        self.config
    }

    /// The line number of a byte address.
    #[inline]
    pub fn line_of(&self, addr: u64) -> u64 {
        addr >> self.config.line_bytes.trailing_zeros()
    }

    #[inline]
    fn set_range(&self, line: u64) -> std::ops::Range<usize> {
        let set = match self.mask {
            Some(m) => line & m,
            None => line % self.sets,
        } as usize;
        set * self.ways..(set + 1) * self.ways
    }

    /// Access `line`; `write` marks it dirty. On a miss the line is
    /// installed as most recently used, evicting the least recently used
    /// line of its set when the set is full.
    #[inline]
    pub fn access(&mut self, line: u64, write: bool) -> Access {
        let range = self.set_range(line);
        let set = &mut self.slots[range];
        let want = encode(line, false);
        for i in 0..set.len() {
            let s = set[i];
            if s & !1 == want {
                // Hit: move to the front, keeping (or setting) the dirty bit.
                let slot = s | write as u64;
                set.copy_within(0..i, 1);
                set[0] = slot;
                return Access {
                    hit: true,
                    victim: None,
                };
            }
            if s == EMPTY {
                set.copy_within(0..i, 1);
                set[0] = encode(line, write);
                return Access {
                    hit: false,
                    victim: None,
                };
            }
        }
        let last = set.len() - 1;
        let victim = decode(set[last]);
        set.copy_within(0..last, 1);
        set[0] = encode(line, write);
        Access {
            hit: false,
            victim: Some(victim),
        }
    }

    /// True when `line` is present (does not change the LRU order).
    pub fn contains(&self, line: u64) -> bool {
        let want = encode(line, false);
        self.slots[self.set_range(line)]
            .iter()
            .any(|&s| s & !1 == want)
    }

    /// True when `line` is present and dirty.
    pub fn is_dirty(&self, line: u64) -> bool {
        self.slots[self.set_range(line)].contains(&encode(line, true))
    }

    /// Write `line` back if it is dirty (as `clwb` does): it stays cached,
    /// clean. Returns true when a write-back happened.
    pub fn clean(&mut self, line: u64) -> bool {
        let want = encode(line, true);
        let range = self.set_range(line);
        for s in &mut self.slots[range] {
            if *s == want {
                *s &= !1;
                return true;
            }
        }
        false
    }

    /// Remove `line` (as `clflush` does). Returns the removed line, whose
    /// `dirty` flag says whether it had to be written back.
    pub fn invalidate(&mut self, line: u64) -> Option<Victim> {
        let want = encode(line, false);
        let range = self.set_range(line);
        let set = &mut self.slots[range];
        let i = set.iter().position(|&s| s & !1 == want)?;
        let victim = decode(set[i]);
        set.copy_within(i + 1.., i);
        let last = set.len() - 1;
        set[last] = EMPTY;
        Some(victim)
    }

    /// Forget every line (without write-backs).
    pub fn clear(&mut self) {
        self.slots.fill(EMPTY);
    }
}

/// What one access did to a whole [`Hierarchy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HierarchyAccess {
    /// Index of the level that hit, or `None` when the access went to memory.
    pub hit_level: Option<usize>,
    /// Dirty lines written back to memory by this access (at most one per
    /// level); `writebacks[..n_writebacks]` are valid.
    pub writebacks: [u64; MAX_LEVELS],
    /// Number of valid entries in `writebacks`.
    pub n_writebacks: usize,
    /// Lines that left the last level (clean or dirty), so that a faster
    /// filter in front of the model can drop them; `evicted[..n_evicted]`.
    pub evicted: [u64; MAX_LEVELS],
    /// Number of valid entries in `evicted`.
    pub n_evicted: usize,
}

impl HierarchyAccess {
    /// True when the access was served by memory.
    pub fn is_miss(&self) -> bool {
        self.hit_level.is_none()
    }

    /// The lines written back to memory.
    pub fn writebacks(&self) -> &[u64] {
        &self.writebacks[..self.n_writebacks]
    }

    fn push_writeback(&mut self, line: u64) {
        if self.n_writebacks < MAX_LEVELS {
            self.writebacks[self.n_writebacks] = line;
            self.n_writebacks += 1;
        }
    }

    fn push_evicted(&mut self, line: u64) {
        if self.n_evicted < MAX_LEVELS {
            self.evicted[self.n_evicted] = line;
            self.n_evicted += 1;
        }
    }
}

/// The most levels a [`Hierarchy`] may have.
pub const MAX_LEVELS: usize = 4;

/// A non-inclusive hierarchy of cache levels, nearest to the core first.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    levels: Vec<Cache>,
}

impl Hierarchy {
    /// A hierarchy with the given levels (1 to [`MAX_LEVELS`]), L1 first.
    /// All levels must share one line size.
    pub fn new(configs: &[CacheConfig]) -> Result<Hierarchy, Error> {
        if configs.is_empty() || configs.len() > MAX_LEVELS {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!(
                    "a cache hierarchy needs 1 to {MAX_LEVELS} levels, got {}",
                    configs.len()
                ),
            ));
        }
        if configs
            .iter()
            .any(|c| c.line_bytes != configs[0].line_bytes)
        {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                "all cache levels must have the same line size",
            ));
        }
        let levels = configs
            .iter()
            .map(|c| Cache::new(*c))
            .collect::<Result<_, _>>()?;
        Ok(Hierarchy { levels })
    }

    /// The levels, L1 first.
    pub fn levels(&self) -> &[Cache] {
        &self.levels
    }

    /// The line number of a byte address.
    #[inline]
    pub fn line_of(&self, addr: u64) -> u64 {
        self.levels[0].line_of(addr)
    }

    /// Access `line` (a write when `write`), filling the levels that missed
    /// and propagating dirty victims downwards.
    pub fn access(&mut self, line: u64, write: bool) -> HierarchyAccess {
        let mut out = HierarchyAccess::default();
        let n = self.levels.len();
        // Find the level that holds the line, without disturbing deeper ones.
        let hit_level = (0..n).find(|&i| self.levels[i].contains(line));
        out.hit_level = hit_level;
        let fill_to = hit_level.unwrap_or(n);
        if let Some(h) = hit_level {
            // Refresh LRU there; the dirty bit travels up with the fill.
            let was_dirty = self.levels[h].is_dirty(line);
            if h == 0 {
                self.levels[0].access(line, write);
                return out;
            }
            // Move the line up: non-inclusive levels keep one copy dirty at
            // most, so the lower copy is kept but cleaned.
            self.levels[h].access(line, false);
            self.levels[h].clean(line);
            self.install(0, fill_to, line, write || was_dirty, &mut out);
        } else {
            self.install(0, fill_to, line, write, &mut out);
        }
        out
    }

    /// Install `line` in levels `0..upto`, level 0 carrying `dirty`.
    fn install(
        &mut self,
        from: usize,
        upto: usize,
        line: u64,
        dirty: bool,
        out: &mut HierarchyAccess,
    ) {
        let n = self.levels.len();
        for i in from..upto {
            let a = self.levels[i].access(line, dirty && i == 0);
            if let Some(v) = a.victim {
                self.spill(i + 1, v, out);
                if i == n - 1 {
                    out.push_evicted(v.line);
                }
            }
        }
    }

    /// A victim of level `i - 1` arrives at level `i`.
    fn spill(&mut self, i: usize, v: Victim, out: &mut HierarchyAccess) {
        if !v.dirty {
            return;
        }
        if i >= self.levels.len() {
            out.push_writeback(v.line);
            return;
        }
        let a = self.levels[i].access(v.line, true);
        if let Some(v2) = a.victim {
            if i == self.levels.len() - 1 {
                out.push_evicted(v2.line);
            }
            self.spill(i + 1, v2, out);
        }
    }

    /// Write `line` back from every level where it is dirty (as `clwb`):
    /// returns true when memory received a write-back.
    pub fn clean(&mut self, line: u64) -> bool {
        let mut any = false;
        for l in &mut self.levels {
            any |= l.clean(line);
        }
        any
    }

    /// Remove `line` from every level (as `clflush`): returns true when it
    /// was dirty somewhere, i.e. memory received a write-back.
    pub fn invalidate(&mut self, line: u64) -> bool {
        let mut dirty = false;
        for l in &mut self.levels {
            if let Some(v) = l.invalidate(line) {
                dirty |= v.dirty;
            }
        }
        dirty
    }

    /// True when some level holds `line`.
    pub fn contains(&self, line: u64) -> bool {
        self.levels.iter().any(|l| l.contains(line))
    }
}

/// What a [`CompactCache`] access evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactVictim {
    /// The line was modified: evicting it writes it back.
    pub dirty: bool,
    /// The line was tagged as PM when it was installed.
    pub pm: bool,
}

/// The result of one [`CompactCache`] access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactAccess {
    /// True when the line was present.
    pub hit: bool,
    /// The line evicted to make room (only on a miss in a full set).
    pub victim: Option<CompactVictim>,
    /// A write made the line dirty: it was clean or absent before. Each
    /// such line owes memory one write-back, whenever it is evicted (the
    /// bandwidth model charges it here: a sampled model evicts too late).
    pub dirtied: bool,
}

impl CompactAccess {
    /// [`CompactCache::access_flags`]: the line was present.
    pub const HIT: u32 = 1;
    /// A write made the line dirty (`dirtied`).
    pub const DIRTIED: u32 = 2;
    /// A line was evicted.
    pub const VICTIM: u32 = 4;
    /// The evicted line was dirty.
    pub const VICTIM_DIRTY: u32 = 8;
    /// The evicted line was PM.
    pub const VICTIM_PM: u32 = 16;

    /// The access as the bits above.
    #[inline(always)]
    pub fn flags(self) -> u32 {
        let v = self.victim.map_or(0, |v| {
            Self::VICTIM
                | if v.dirty { Self::VICTIM_DIRTY } else { 0 }
                | if v.pm { Self::VICTIM_PM } else { 0 }
        });
        self.hit as u32 | (self.dirtied as u32) << 1 | v
    }

    /// The access the bits `f` (of [`flags`](Self::flags)) describe.
    #[inline(always)]
    pub fn from_flags(f: u32) -> CompactAccess {
        CompactAccess {
            hit: f & Self::HIT != 0,
            victim: (f & Self::VICTIM != 0).then_some(CompactVictim {
                dirty: f & Self::VICTIM_DIRTY != 0,
                pm: f & Self::VICTIM_PM != 0,
            }),
            dirtied: f & Self::DIRTIED != 0,
        }
    }
}

/// A single-level LRU cache that stores 30-bit hashed tags in 32-bit slots
/// (plus a dirty and a PM bit), so that a 16-way set fills one 64 B line
/// and the table is half the size of [`Cache`]'s: the fast model of the
/// instrumented source. Two lines of one set that share a hashed tag are
/// confused (a false hit): about ways / 2^30 of the misses.
///
/// Victims are reported by their dirty and PM bits only (the tag is
/// hashed), which is what counting write-backs per memory needs. The number
/// of sets must be a power of two.
///
/// The tag table is a `Vec` by default; [`with_table`](Self::with_table)
/// takes any other storage (the runtime puts it on huge pages, so that the
/// model does not cost the program TLB entries).
#[derive(Debug, Clone)]
pub struct CompactCache<T = Vec<u32>> {
    set_bits: u32,
    /// The set count less one (`line & set_mask` is the line's set).
    set_mask: u64,
    ways: usize,
    slots: T,
    /// State of the victim choice's xorshift generator; 0: LRU (see
    /// [`set_random_replacement`](Self::set_random_replacement)).
    rng: u64,
    /// State of [`fill_foreign`](Self::fill_foreign)'s generator.
    foreign: u64,
}

/// What [`CompactCache::fill_foreign`] pushed out of the cache: dirty
/// lines, each owing its memory a write-back, by the memory they belong to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForeignFills {
    /// Dirty PM lines evicted.
    pub dirty_pm: u64,
    /// Dirty DRAM lines evicted.
    pub dirty_dram: u64,
}

/// Lines of the foreign address space [`CompactCache::fill_foreign`]
/// draws from: above any line a 57-bit virtual address can name.
const FOREIGN_LINE: u64 = 1 << 52;

/// The rate, in lines per second, at which a shared LLC's other users fill
/// lines, from a measurement: a share `survived` of a set of lines that
/// fits the cache was still cached after `tau_s` seconds untouched.
///
/// The rule, for the random-replacement model of `config`
/// ([`CompactCache::set_random_replacement`]) with foreign fills spread
/// evenly over its `S` sets: a line left untouched while its set takes
/// `f` foreign fills first leaves the [`protected_ways`] `p` (after `p`
/// fills), then each fill evicts it with the probability `1 / (w - p)`,
/// so `survived = exp(-(f - p) / (w - p))`, `f = p - (w - p) ln survived`
/// and the rate is `S f / tau_s`. 0 when nothing was lost (`survived >= 1`:
/// no other user measurable); `None` when the measurement cannot say
/// (nothing survived, or `tau_s` or the geometry unusable).
pub fn foreign_fill_rate(survived: f64, tau_s: f64, config: CacheConfig) -> Option<f64> {
    if !(tau_s.is_finite() && tau_s > 0.0) || survived.is_nan() || survived <= 0.0 {
        return None;
    }
    if survived >= 1.0 {
        return Some(0.0);
    }
    let sets = config.sets().ok()? as f64;
    let w = config.ways.max(1) as usize;
    let p = protected_ways(w) as f64;
    let f = p - (w as f64 - p) * survived.ln();
    Some(sets * f / tau_s)
}

/// Ways of a set, most recently used first, that random replacement
/// never evicts: a quarter of them
/// ([`CompactCache::set_random_replacement`]).
pub const fn protected_ways(ways: usize) -> usize {
    ways / 4
}

/// Under random replacement, the size of a random cycle, in lines of the
/// cache, at which half of its accesses hit. After its use a line leaves
/// the `p` = [`protected_ways`] protected ways within about `p` accesses
/// of its set (hits of older lines push it down too); from there each
/// miss of the set evicts it with the probability `1 / (w - p)`. A cycle
/// over `N` lines brings `N / sets` accesses to a set between two uses of
/// a line, a share `1 - h` of them misses, so
/// `h = exp(-(1 - h)(N / sets - p) / (w - p))`, and `h = 1/2` at
/// `N / C = (p + 2 (w - p) ln 2) / w` (1.29 at 16 ways; 2 ln 2 = 1.39
/// with no way protected).
pub fn half_hit_ratio(ways: usize) -> f64 {
    let p = protected_ways(ways) as f64;
    let w = ways.max(1) as f64;
    (p + 2.0 * (w - p) * std::f64::consts::LN_2) / w
}

/// Under random replacement ([`CompactCache::set_random_replacement`]),
/// the share of a random cycle's accesses that miss in steady state, for
/// a cycle of `ratio` times the cache's lines and `ways` ways: 0 while the
/// cycle fits (`ratio <= 1`), else `1 - h` with `h` the root below 1 of
/// `h = exp(-(1 - h) a)`, `a = (ratio w - p) / (w - p)` (see
/// [`half_hit_ratio`]; one half at that ratio).
pub fn random_cycle_miss(ratio: f64, ways: usize) -> f64 {
    let p = protected_ways(ways) as f64;
    let w = ways.max(1) as f64;
    if !ratio.is_finite() {
        return if ratio > 0.0 { 1.0 } else { 0.0 };
    }
    let a = (ratio * w - p) / (w - p);
    if a <= 1.0 {
        return 0.0;
    }
    // h - exp(-(1 - h) a) is negative at 0 and positive just below 1.
    let (mut lo, mut hi) = (0.0f64, 1.0 - 1e-12);
    for _ in 0..80 {
        let h = 0.5 * (lo + hi);
        if h - (-(1.0 - h) * a).exp() < 0.0 {
            lo = h;
        } else {
            hi = h;
        }
    }
    1.0 - 0.5 * (lo + hi)
}

impl CompactCache {
    /// An empty cache of the given geometry; the set count must be a
    /// power of two.
    pub fn new(config: CacheConfig) -> Result<CompactCache, Error> {
        let n = CompactCache::table_len(config)?;
        CompactCache::with_table(config, vec![0; n])
    }

    /// Number of 32-bit slots the table of this geometry needs; an error
    /// when the set count is not a power of two.
    pub fn table_len(config: CacheConfig) -> Result<usize, Error> {
        let sets = config.sets()?;
        if !sets.is_power_of_two() {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!("the compact cache model needs a power-of-two set count, not {sets}"),
            ));
        }
        Ok(sets as usize * config.ways as usize)
    }
}

impl<T: AsRef<[u32]> + AsMut<[u32]>> CompactCache<T> {
    /// An empty cache of the given geometry on the storage `table`, which
    /// must hold [`table_len`](Self::table_len) slots (it is cleared).
    pub fn with_table(config: CacheConfig, mut table: T) -> Result<CompactCache<T>, Error> {
        let n = CompactCache::table_len(config)?;
        let have = table.as_ref().len();
        if have != n {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                format!("the compact cache model needs a table of {n} slots, not {have}"),
            ));
        }
        table.as_mut().fill(0);
        Ok(CompactCache {
            set_bits: (config.sets()?).trailing_zeros(),
            set_mask: config.sets()? - 1,
            ways: config.ways as usize,
            slots: table,
            rng: 0,
            foreign: 0x6A09_E667_F3BC_C909,
        })
    }

    /// Evict a random way of a full set (seeded by `seed`, any non-zero
    /// value) instead of the least recently used one, or go back to LRU
    /// (`None`). [`access`](Self::access) only; `access_tracked` stays LRU.
    ///
    /// A cyclic walk over more lines than an LRU cache holds misses on
    /// every access (each line is evicted just before its turn); real
    /// last-level caches show a ramp instead. The victim is a random way
    /// among the older ones: the [`protected_ways`] most recently used
    /// ways of a set are never chosen (the lines a loop is working on,
    /// which the core's own L1/L2 would hold: three streams through one
    /// set lose no line while they use it). A random cycle over `N` lines
    /// of a `C`-line cache then hits every access while `N <= C`, and
    /// half of them at `N = `[`half_hit_ratio`]` x C` (about 1.29 C at 16
    /// ways; 2 ln 2 C = 1.39 C with no way protected).
    pub fn set_random_replacement(&mut self, seed: Option<u64>) {
        self.rng = seed.map_or(0, |s| s.max(1));
    }

    /// Number of sets.
    pub fn sets(&self) -> u64 {
        1 << self.set_bits
    }

    /// Fill `n` lines of other programs, each in a random set, as the other
    /// users of a shared LLC do while this program runs: each takes a way
    /// as a miss of this cache would (the victim chosen as
    /// [`access`](Self::access) chooses it) and stays until evicted in
    /// turn. [`foreign_fill_rate`] turns a measured survival into fills a
    /// second. Returns the dirty lines it evicted (their write-backs).
    /// Not for a cache used through [`access_tracked`](Self::access_tracked):
    /// its table of names is not updated.
    pub fn fill_foreign(&mut self, n: u64) -> ForeignFills {
        let mut out = ForeignFills::default();
        for _ in 0..n {
            self.foreign ^= self.foreign << 13;
            self.foreign ^= self.foreign >> 7;
            self.foreign ^= self.foreign << 17;
            let line = FOREIGN_LINE | (self.foreign >> 12);
            if let Some(v) = self.access(line, false, false).victim {
                if v.dirty {
                    if v.pm {
                        out.dirty_pm += 1;
                    } else {
                        out.dirty_dram += 1;
                    }
                }
            }
        }
        out
    }

    /// Empty the cache (every slot invalid).
    pub fn clear(&mut self) {
        self.slots.as_mut().fill(0);
    }

    #[inline]
    fn tag(&self, line: u64) -> u32 {
        let h = (line >> self.set_bits).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let t = (h >> 34) as u32 & 0x3FFF_FFFF;
        (t.max(1)) << 2
    }

    /// Address of the set that holds `line`, so that a caller can prefetch
    /// it before [`access`](Self::access).
    #[inline]
    pub fn set_addr(&self, line: u64) -> *const u32 {
        let set = (line & self.set_mask) as usize;
        // Inside the table (the set is below the set count): no bounds
        // check needed.
        self.slots.as_ref().as_ptr().wrapping_add(set * self.ways)
    }

    /// Access `line`: a write marks it dirty; `pm` tags a newly installed
    /// line as PM (for its eventual write-back).
    #[inline]
    pub fn access(&mut self, line: u64, write: bool, pm: bool) -> CompactAccess {
        CompactAccess::from_flags(self.access_with::<true>(line, write, pm))
    }

    /// [`access`](Self::access), the result as [`CompactAccess::flags`]
    /// (a hot loop tests the bits without unpacking a struct).
    #[inline]
    pub fn access_flags(&mut self, line: u64, write: bool, pm: bool) -> u32 {
        self.access_with::<true>(line, write, pm)
    }

    /// [`access`](Self::access) through the portable scan only (the tests
    /// compare it with the SIMD one).
    #[cfg(test)]
    fn access_portable(&mut self, line: u64, write: bool, pm: bool) -> CompactAccess {
        CompactAccess::from_flags(self.access_with::<false>(line, write, pm))
    }

    /// [`access`](Self::access); `SIMD`: the 16- and 8-way sets are
    /// scanned and shifted with SSE2 on x86-64 (baseline there).
    #[inline(always)]
    fn access_with<const SIMD: bool>(&mut self, line: u64, write: bool, pm: bool) -> u32 {
        let idx = (line & self.set_mask) as usize;
        let tag = self.tag(line);
        let ways = self.ways;
        // The way a miss in a full set evicts, in recency order: the last
        // (LRU) or a random one.
        let victim = if self.rng == 0 {
            ways - 1
        } else {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let p = protected_ways(ways);
            p + (((self.rng >> 32) * (ways - p) as u64) >> 32) as usize
        };
        let slots = self.slots.as_mut();
        debug_assert!((idx + 1) * ways <= slots.len());
        // SAFETY: `idx` is below the set count (masked) and the table holds
        // `ways` slots per set (checked when the cache was made).
        let set = unsafe { slots.get_unchecked_mut(idx * ways..(idx + 1) * ways) };
        // The common geometries pass a fixed-size array: once inlined, the
        // set length is a constant, the scan unrolls and the LRU shift is
        // an inline move (7.3-8.0 ns instead of 11.7 per access on a 32 MiB
        // model, `bench/model-speed.sh`); on x86-64 the scan compares four
        // tags per instruction and the shift moves four slots (268 -> 126
        // instructions per miss of a full 16-way set, the replay's loop
        // included, `bench/batch-cost.sh`).
        match ways {
            16 => {
                let set = <&mut [u32; 16]>::try_from(set).unwrap();
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    return sse2::access_set(set, tag, write, pm, victim);
                }
                Self::access_set(set, tag, write, pm, victim).flags()
            }
            8 => {
                let set = <&mut [u32; 8]>::try_from(set).unwrap();
                #[cfg(target_arch = "x86_64")]
                if SIMD {
                    return sse2::access_set(set, tag, write, pm, victim);
                }
                Self::access_set(set, tag, write, pm, victim).flags()
            }
            _ => Self::access_set(set, tag, write, pm, victim).flags(),
        }
    }

    /// [`access`](Self::access) on one set, most recently used way first;
    /// a miss in a full set evicts way `victim`.
    #[inline(always)]
    fn access_set(
        set: &mut [u32],
        tag: u32,
        write: bool,
        pm: bool,
        victim: usize,
    ) -> CompactAccess {
        let w = set.len();
        let mut at = w;
        let mut empty = w;
        for (i, &s) in set.iter().enumerate() {
            if s & !3 == tag {
                at = i;
                break;
            }
            if s == 0 {
                empty = i;
                break;
            }
        }
        if at < w {
            let s = set[at];
            set.copy_within(0..at, 1);
            set[0] = s | write as u32;
            return CompactAccess {
                hit: true,
                victim: None,
                dirtied: write && s & 1 == 0,
            };
        }
        let fresh = tag | (pm as u32) << 1 | write as u32;
        if empty < w {
            set.copy_within(0..empty, 1);
            set[0] = fresh;
            return CompactAccess {
                hit: false,
                victim: None,
                dirtied: write,
            };
        }
        let v = victim.min(w - 1);
        let last = set[v];
        set.copy_within(0..v, 1);
        set[0] = fresh;
        CompactAccess {
            hit: false,
            victim: Some(CompactVictim {
                dirty: last & 1 == 1,
                pm: last & 2 == 2,
            }),
            dirtied: write,
        }
    }

    /// [`access`](Self::access), keeping in `lines` (one `u64` per slot:
    /// [`table_len`](CompactCache::table_len) of them) the full line number
    /// of each slot, so that a victim's address is known: returns the access
    /// and, with a victim, its line. For models that need the addresses of
    /// write-backs (`pmlab run --device`); the plain `access` stays as fast
    /// as it was.
    pub fn access_tracked(
        &mut self,
        line: u64,
        write: bool,
        pm: bool,
        lines: &mut [u64],
    ) -> (CompactAccess, u64) {
        let idx = (line & self.set_mask) as usize;
        let tag = self.tag(line);
        let ways = self.ways;
        let range = idx * ways..(idx + 1) * ways;
        let set = &mut self.slots.as_mut()[range.clone()];
        let names = &mut lines[range];
        // Fixed-size sets for the common geometries, as in `access`.
        match ways {
            16 => Self::tracked_set::<16>(
                set.try_into().unwrap(),
                names.try_into().unwrap(),
                line,
                tag,
                write,
                pm,
            ),
            8 => Self::tracked_set::<8>(
                set.try_into().unwrap(),
                names.try_into().unwrap(),
                line,
                tag,
                write,
                pm,
            ),
            _ => Self::tracked_slices(set, names, line, tag, write, pm),
        }
    }

    #[inline(always)]
    fn tracked_set<const W: usize>(
        set: &mut [u32; W],
        names: &mut [u64; W],
        line: u64,
        tag: u32,
        write: bool,
        pm: bool,
    ) -> (CompactAccess, u64) {
        Self::tracked_slices(set, names, line, tag, write, pm)
    }

    #[inline(always)]
    fn tracked_slices(
        set: &mut [u32],
        names: &mut [u64],
        line: u64,
        tag: u32,
        write: bool,
        pm: bool,
    ) -> (CompactAccess, u64) {
        let w = set.len();
        let mut at = w;
        for (i, &s) in set.iter().enumerate() {
            if s & !3 == tag || s == 0 {
                at = i;
                break;
            }
        }
        if at < w && set[at] != 0 {
            let (s, n) = (set[at], names[at]);
            set.copy_within(0..at, 1);
            names.copy_within(0..at, 1);
            set[0] = s | write as u32;
            names[0] = n;
            let a = CompactAccess {
                hit: true,
                victim: None,
                dirtied: write && s & 1 == 0,
            };
            return (a, 0);
        }
        let fresh = tag | (pm as u32) << 1 | write as u32;
        let end = at.min(w - 1);
        let (last, last_line) = (set[end], names[end]);
        set.copy_within(0..end, 1);
        names.copy_within(0..end, 1);
        set[0] = fresh;
        names[0] = line;
        let victim = (at == w).then_some(CompactVictim {
            dirty: last & 1 == 1,
            pm: last & 2 == 2,
        });
        let a = CompactAccess {
            hit: false,
            victim,
            dirtied: write,
        };
        (a, last_line)
    }

    /// Remove `line` (a flush), with the slot names of
    /// [`access_tracked`](Self::access_tracked): returns the removed line's
    /// dirty and PM bits when it was present.
    pub fn invalidate_tracked(&mut self, line: u64, lines: &mut [u64]) -> Option<CompactVictim> {
        let idx = (line & self.set_mask) as usize;
        let tag = self.tag(line);
        let ways = self.ways;
        let range = idx * ways..(idx + 1) * ways;
        let set = &mut self.slots.as_mut()[range.clone()];
        let names = &mut lines[range];
        let i = set.iter().position(|&s| s != 0 && s & !3 == tag)?;
        let s = set[i];
        set.copy_within(i + 1.., i);
        names.copy_within(i + 1.., i);
        let w = set.len();
        set[w - 1] = 0;
        Some(CompactVictim {
            dirty: s & 1 == 1,
            pm: s & 2 == 2,
        })
    }
}

/// The compact model's set scan and LRU shift with SSE2 (part of the
/// x86-64 baseline): four tags compared per instruction, the hit (or
/// empty slot) found from the compare masks, and the slots before the
/// used one moved down one way four at a time, with no branch per way and
/// no call to `memmove`. The same results as
/// [`CompactCache::access_set`](super::CompactCache) (a test compares them).
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::CompactAccess;
    use core::arch::x86_64::*;

    /// One access of `set` (`W` a multiple of 4, at most 16), as
    /// [`CompactAccess::flags`].
    #[inline(always)]
    pub(super) fn access_set<const W: usize>(
        set: &mut [u32; W],
        tag: u32,
        write: bool,
        pm: bool,
        victim: usize,
    ) -> u32 {
        const { assert!(W.is_multiple_of(4) && W >= 4 && W <= 16) };
        let regs = W / 4;
        // SAFETY: SSE2 is part of x86-64; the unaligned loads and stores
        // cover the `W` slots of `set` exactly.
        unsafe {
            let p = set.as_mut_ptr() as *mut __m128i;
            let want = _mm_set1_epi32(tag as i32);
            let keep = _mm_set1_epi32(!3);
            let zero = _mm_setzero_si128();
            let mut v = [zero; 4];
            // Per slot: all ones where the tag matches.
            let mut hits = [zero; 4];
            for k in 0..regs {
                v[k] = _mm_loadu_si128(p.add(k));
                hits[k] = _mm_cmpeq_epi32(_mm_and_si128(v[k], keep), want);
            }
            // One bit per slot (the signed packs keep all-ones lanes).
            let mask = match regs {
                4 => {
                    let lo = _mm_packs_epi32(hits[0], hits[1]);
                    let hi = _mm_packs_epi32(hits[2], hits[3]);
                    _mm_movemask_epi8(_mm_packs_epi16(lo, hi)) as u32
                }
                2 => {
                    let lo = _mm_packs_epi32(hits[0], hits[1]);
                    _mm_movemask_epi8(_mm_packs_epi16(lo, zero)) as u32
                }
                _ => _mm_movemask_ps(_mm_castsi128_ps(hits[0])) as u32,
            };
            // A set's empty slots (0) are always its last ones: a miss
            // fills the first empty slot after moving the ones before it
            // down, and a removal moves the later ones up. So the scan's
            // first match or empty slot is the match if there is one (a
            // tag is never 0), else the first empty slot, else none (a
            // full set, when the last slot is taken).
            let (at, first, out) = if mask != 0 {
                let at = mask.trailing_zeros() as usize;
                let s = set[at];
                let dirtied = (write as u32 & !s & 1) << 1;
                (at, s | write as u32, CompactAccess::HIT | dirtied)
            } else {
                let fresh = tag | (pm as u32) << 1 | write as u32;
                if set[W - 1] == 0 {
                    // Filling (rare once the cache is warm).
                    let empty = set.iter().position(|&s| s == 0).unwrap_or(W - 1);
                    (empty, fresh, (write as u32) << 1)
                } else {
                    let at = victim.min(W - 1);
                    // The victim's dirty and PM bits are the slot's two low
                    // bits.
                    let last = set[at];
                    let out = CompactAccess::VICTIM | (last & 3) << 3 | (write as u32) << 1;
                    (at, fresh, out)
                }
            };
            // Slots 1..=at take the slot before them, slot 0 takes
            // `first`, the others keep theirs.
            let upto = _mm_set1_epi32(at as i32);
            let mut carry = _mm_cvtsi32_si128(first as i32);
            for (k, r) in v.iter().enumerate().take(regs) {
                let b = 4 * k as i32;
                let lanes = _mm_setr_epi32(b, b + 1, b + 2, b + 3);
                let moved = _mm_or_si128(_mm_slli_si128::<4>(*r), carry);
                carry = _mm_srli_si128::<12>(*r);
                let stays = _mm_cmpgt_epi32(lanes, upto);
                let new = _mm_or_si128(_mm_and_si128(stays, *r), _mm_andnot_si128(stays, moved));
                _mm_storeu_si128(p.add(k), new);
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_fills_at_the_calibrated_rate_evict_what_was_measured() {
        // 1 MiB, 16 ways, random replacement: 1024 sets, full of other
        // lines as a shared LLC is. One line of ours a set is touched, then
        // left while the fills that a rate calibrated on a survival of 1/2
        // after 10 ms brings: in 10 ms about half survive; in 20 ms a set
        // takes f = 2 (p + 12 ln 2) fills, p = 4, and a line survives
        // exp(-(f - p) / 12) = exp(-1/3) / 4.
        let cfg = CacheConfig::new(1 << 20, 16);
        let rate = foreign_fill_rate(0.5, 0.010, cfg).unwrap();
        for (tau, want) in [(0.010, 0.5), (0.020, (-1.0f64 / 3.0).exp() / 4.0)] {
            let (mut kept, mut all) = (0usize, 0usize);
            for round in 0..4u64 {
                let mut c = CompactCache::new(cfg).unwrap();
                c.set_random_replacement(Some(7 + round));
                c.fill_foreign(20 * 16384);
                let ours: Vec<u64> = (0..1024u64).map(|i| (round + 1) * 4096 + i).collect();
                for &l in &ours {
                    c.access(l, false, true);
                }
                c.fill_foreign((rate * tau).round() as u64);
                kept += ours
                    .iter()
                    .filter(|&&l| c.access(l, false, true).hit)
                    .count();
                all += ours.len();
            }
            let share = kept as f64 / all as f64;
            assert!(
                (share - want).abs() < 0.04,
                "tau {tau}: {share} kept, want {want}"
            );
        }
    }

    #[test]
    fn foreign_fills_write_back_the_dirty_lines_they_evict() {
        let cfg = CacheConfig::new(64 << 10, 16);
        let mut c = CompactCache::new(cfg).unwrap();
        c.set_random_replacement(Some(3));
        // 300 dirty PM lines, 200 dirty DRAM lines, 100 clean ones.
        for l in 0..600u64 {
            c.access(l, l < 500, l < 300);
        }
        let out = c.fill_foreign(200 * 1024);
        assert_eq!(
            out,
            ForeignFills {
                dirty_pm: 300,
                dirty_dram: 200
            }
        );
        assert!((500..600u64).all(|l| !c.access(l, false, false).hit));
    }

    #[test]
    fn the_fill_rate_rule_handles_its_edges() {
        let cfg = CacheConfig::new(1 << 20, 16);
        assert_eq!(foreign_fill_rate(1.0, 0.01, cfg), Some(0.0));
        assert_eq!(foreign_fill_rate(0.0, 0.01, cfg), None);
        assert_eq!(foreign_fill_rate(0.5, 0.0, cfg), None);
        // p = 4 fills to leave the protected ways, 12 ln 2 more for a half:
        // per set, over 1024 sets, per 10 ms.
        let r = foreign_fill_rate(0.5, 0.01, cfg).unwrap();
        let want = 1024.0 * (4.0 + 12.0 * 2f64.ln()) / 0.01;
        assert!((r - want).abs() < 1e-6 * want, "{r} vs {want}");
    }

    #[test]
    fn tracked_access_names_its_victims_and_flushes() {
        // 2 sets of 2 ways.
        let cfg = CacheConfig::new(4 * 64, 2);
        let mut c = CompactCache::new(cfg).unwrap();
        let mut plain = CompactCache::new(cfg).unwrap();
        let mut names = vec![0u64; CompactCache::table_len(cfg).unwrap()];
        for (line, write) in [
            (2, true),
            (4, false),
            (2, false),
            (6, false),
            (8, true),
            (3, true),
        ] {
            let (a, _) = c.access_tracked(line, write, true, &mut names);
            assert_eq!(a, plain.access(line, write, true), "line {line}");
        }
        // Set 0 holds 8 (dirty) and 6; line 10 evicts 6, then 12 evicts 8.
        let (a, v) = c.access_tracked(10, false, true, &mut names);
        assert_eq!((a.victim.map(|v| v.dirty), v), (Some(false), 6));
        let (a, v) = c.access_tracked(12, false, true, &mut names);
        assert_eq!((a.victim.map(|v| v.dirty), v), (Some(true), 8));
        // A flush removes a line and says whether it was dirty.
        assert_eq!(
            c.invalidate_tracked(3, &mut names).map(|v| v.dirty),
            Some(true)
        );
        assert_eq!(c.invalidate_tracked(3, &mut names), None);
        assert!(!c.access_tracked(3, false, true, &mut names).0.hit);
    }

    #[test]
    fn compact_cache_takes_outside_storage_of_the_right_size() {
        let cfg = CacheConfig::new(64 * 16 * 64, 16);
        assert_eq!(CompactCache::table_len(cfg).unwrap(), 64 * 16);
        let mut table = vec![7u32; 64 * 16];
        let mut c = CompactCache::with_table(cfg, &mut table[..]).unwrap();
        assert!(!c.access(5, false, false).hit, "the table was cleared");
        assert!(c.access(5, false, false).hit);
        let e = CompactCache::with_table(cfg, vec![0u32; 10]).unwrap_err();
        assert!(e.to_string().contains("1024 slots"), "{e}");
    }

    #[test]
    fn a_compact_access_says_when_a_write_dirtied_its_line() {
        let cfg = CacheConfig::new(64 * 2 * 4, 2);
        let mut c = CompactCache::new(cfg).unwrap();
        let mut names = vec![0u64; CompactCache::table_len(cfg).unwrap()];
        // A store miss dirties its line (write-allocate: read, then owed
        // back); a load does not; a store to a clean line does, to a dirty
        // one no more.
        assert!(c.access(8, true, true).dirtied);
        assert!(!c.access(8, true, true).dirtied);
        assert!(!c.access(16, false, true).dirtied);
        assert!(c.access(16, true, true).dirtied);
        // The tracked access agrees.
        let mut t = CompactCache::new(cfg).unwrap();
        assert!(!t.access_tracked(3, false, true, &mut names).0.dirtied);
        assert!(t.access_tracked(3, true, true, &mut names).0.dirtied);
        assert!(!t.access_tracked(3, true, true, &mut names).0.dirtied);
        assert!(t.access_tracked(7, true, true, &mut names).0.dirtied);
    }

    fn small(sets: u64, ways: u32) -> Cache {
        Cache::new(CacheConfig::new(sets * ways as u64 * 64, ways)).unwrap()
    }

    #[test]
    fn geometry_errors_name_the_problem() {
        let e = Cache::new(CacheConfig::new(1000, 8)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inconsistent);
        assert!(e.to_string().contains("multiple"));
        let e = Cache::new(CacheConfig::new(4096, 0)).unwrap_err();
        assert!(e.to_string().contains("associativity"));
        let mut c = CacheConfig::new(4096, 4);
        c.line_bytes = 48;
        assert!(Cache::new(c)
            .unwrap_err()
            .to_string()
            .contains("power of two"));
        // Non-power-of-two set counts are allowed (e.g. 12-way, 30 MiB).
        assert_eq!(CacheConfig::new(3 * 64 * 4, 4).sets().unwrap(), 3);
    }

    #[test]
    fn first_touch_misses_second_hits() {
        let mut c = small(4, 2);
        assert!(!c.access(10, false).hit);
        assert!(c.access(10, false).hit);
        assert!(c.contains(10));
        assert!(!c.contains(11));
    }

    #[test]
    fn lru_evicts_least_recently_used_way() {
        // One set, two ways: lines 0, 1; touch 0; inserting 2 evicts 1.
        let mut c = small(1, 2);
        c.access(0, false);
        c.access(1, false);
        c.access(0, false);
        let a = c.access(2, false);
        assert_eq!(
            a.victim,
            Some(Victim {
                line: 1,
                dirty: false
            })
        );
        assert!(c.contains(0) && c.contains(2) && !c.contains(1));
    }

    #[test]
    fn dirty_victim_reports_write_back() {
        let mut c = small(1, 1);
        c.access(5, true);
        assert!(c.is_dirty(5));
        let a = c.access(6, false);
        assert_eq!(
            a.victim,
            Some(Victim {
                line: 5,
                dirty: true
            })
        );
        // A read hit keeps a dirty line dirty; a clean never becomes dirty.
        let mut c = small(1, 2);
        c.access(1, true);
        c.access(1, false);
        assert!(c.is_dirty(1));
        c.access(2, false);
        assert!(!c.is_dirty(2));
    }

    #[test]
    fn sets_are_independent() {
        // 2 sets x 1 way: even lines never evict odd lines.
        let mut c = small(2, 1);
        c.access(0, false);
        c.access(1, false);
        c.access(2, false);
        assert!(c.contains(1) && c.contains(2) && !c.contains(0));
    }

    #[test]
    fn clean_and_invalidate_model_clwb_and_clflush() {
        let mut c = small(2, 2);
        c.access(3, true);
        assert!(c.clean(3));
        assert!(!c.clean(3), "already clean");
        assert!(c.contains(3));
        c.access(3, true);
        assert_eq!(
            c.invalidate(3),
            Some(Victim {
                line: 3,
                dirty: true
            })
        );
        assert!(!c.contains(3));
        assert_eq!(c.invalidate(3), None);
    }

    #[test]
    fn working_set_within_capacity_stops_missing() {
        // 32 KiB, 8 ways: a 16 KiB loop misses only on the first pass.
        let mut c = Cache::new(CacheConfig::new(32 * 1024, 8)).unwrap();
        let mut misses = 0;
        for pass in 0..3 {
            for line in 0..256u64 {
                if !c.access(line, false).hit {
                    misses += 1;
                    assert_eq!(pass, 0);
                }
            }
        }
        assert_eq!(misses, 256);
        // A 64 KiB loop (twice the capacity) misses on every access under LRU.
        let mut c = Cache::new(CacheConfig::new(32 * 1024, 8)).unwrap();
        let mut misses = 0;
        for _ in 0..3 {
            for line in 0..1024u64 {
                misses += !c.access(line, false).hit as u32;
            }
        }
        assert_eq!(misses, 3 * 1024);
    }

    #[test]
    fn hierarchy_writes_back_only_from_the_last_level() {
        // L1: 1 set x 1 way; L2: 1 set x 2 ways.
        let mut h = Hierarchy::new(&[CacheConfig::new(64, 1), CacheConfig::new(128, 2)]).unwrap();
        assert!(h.access(1, true).is_miss());
        // 2 evicts dirty 1 from L1 into L2 (no memory write-back yet).
        let a = h.access(2, false);
        assert!(a.is_miss());
        assert_eq!(a.writebacks(), &[] as &[u64]);
        // 1 is now an L2 hit.
        assert_eq!(h.access(1, false).hit_level, Some(1));
        // Stream new lines until 1 leaves the hierarchy: exactly one
        // write-back of line 1 must be reported on the way.
        let mut wbs = Vec::new();
        for line in 10..20 {
            wbs.extend_from_slice(h.access(line, false).writebacks());
        }
        assert_eq!(wbs, vec![1]);
        assert!(!h.contains(1));
    }

    #[test]
    fn hierarchy_clean_lines_leave_silently() {
        let mut h = Hierarchy::new(&[CacheConfig::new(64, 1), CacheConfig::new(128, 2)]).unwrap();
        let mut wbs = 0;
        let mut evicted = 0;
        for line in 0..100 {
            let a = h.access(line, false);
            wbs += a.n_writebacks;
            evicted += a.n_evicted;
        }
        assert_eq!(wbs, 0);
        assert!(evicted > 90, "lines leave the last level: {evicted}");
    }

    #[test]
    fn hierarchy_flush_writes_back_once() {
        let mut h = Hierarchy::new(&[CacheConfig::new(128, 2), CacheConfig::new(256, 4)]).unwrap();
        h.access(7, true);
        assert!(h.clean(7));
        assert!(!h.clean(7));
        h.access(7, true);
        assert!(h.invalidate(7));
        assert!(!h.contains(7));
        assert!(Hierarchy::new(&[]).is_err());
    }

    /// Hit share of the second and later passes of a random cycle over
    /// `n` lines through a compact cache of `c` lines (16 ways).
    fn cycle_hits(n: u64, c: u64, random: bool) -> f64 {
        let mut cache = CompactCache::new(CacheConfig::new(c * 64, 16)).unwrap();
        if random {
            cache.set_random_replacement(Some(0x1234_5678));
        }
        // A fixed random order of the lines 0..n (every set gets n / sets).
        let mut order: Vec<u64> = (0..n).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let (mut hits, mut total) = (0u64, 0u64);
        for pass in 0..6 {
            for &l in &order {
                let a = cache.access(l, false, false);
                if pass > 0 {
                    hits += u64::from(a.hit);
                    total += 1;
                }
            }
        }
        hits as f64 / total as f64
    }

    #[test]
    fn random_replacement_ramps_where_lru_steps() {
        let c = 4096;
        // LRU: a cycle that fits always hits, one that does not never does.
        assert_eq!(cycle_hits(c / 2, c, false), 1.0);
        assert_eq!(cycle_hits(2 * c, c, false), 0.0);
        // Random among the 12 older ways: 1 when it fits, a half at
        // half_hit_ratio(16) = 1.29 C, less at 2 C, nearly none at 4 C.
        assert_eq!(cycle_hits(c / 2, c, true), 1.0);
        let r = half_hit_ratio(16);
        assert!((r - 1.29).abs() < 0.01, "{r}");
        let h = cycle_hits((c as f64 * r) as u64, c, true);
        assert!((h - 0.5).abs() < 0.08, "{h}");
        let h2 = cycle_hits(2 * c, c, true);
        assert!(h2 < h - 0.1 && h2 > 0.1, "{h2}");
        let h = cycle_hits(4 * c, c, true);
        assert!(h < 0.05, "{h}");
    }

    #[test]
    fn the_random_cycle_miss_curve_matches_the_simulated_cache() {
        let c = 4096;
        assert_eq!(random_cycle_miss(0.5, 16), 0.0);
        assert_eq!(random_cycle_miss(1.0, 16), 0.0);
        assert!((random_cycle_miss(half_hit_ratio(16), 16) - 0.5).abs() < 1e-9);
        assert_eq!(random_cycle_miss(f64::INFINITY, 16), 1.0);
        let mut last = 0.0;
        for r in [1.1, 1.29, 1.5, 2.0, 3.0] {
            let m = random_cycle_miss(r, 16);
            assert!(m > last, "{r}: {m} not above {last}");
            last = m;
            let sim = 1.0 - cycle_hits((c as f64 * r) as u64, c, true);
            assert!(
                (m - sim).abs() < 0.08,
                "ratio {r}: formula {m}, simulated {sim}"
            );
        }
    }

    #[test]
    fn compact_cache_agrees_with_the_full_model() {
        // The same random stream through both: identical hits and
        // write-backs (a hashed-tag collision is improbable here). 8 and 16
        // ways take the fixed-size paths, 4 the general one.
        for ways in [4u32, 8, 16] {
            compact_agrees(CacheConfig::new(64 * 1024, ways));
        }
        let e = CompactCache::new(CacheConfig::new(3 * 64 * 4, 4)).unwrap_err();
        assert!(e.to_string().contains("power-of-two"));
    }

    #[test]
    fn the_simd_scan_matches_the_portable_one() {
        // One stream through `access` (SSE2 on x86-64 for 8 and 16 ways)
        // and through the portable scan: the same result at every access
        // and the same slots at the end, under LRU and random replacement,
        // with sets that fill and evict, hit at every way and hold empty
        // slots.
        for ways in [4u32, 8, 16] {
            for random in [None, Some(7)] {
                let cfg = CacheConfig::new(64 * 64 * ways as u64, ways);
                let mut simd = CompactCache::new(cfg).unwrap();
                let mut portable = CompactCache::new(cfg).unwrap();
                simd.set_random_replacement(random);
                portable.set_random_replacement(random);
                let mut x = 0x2545_F491_4F6C_DD1Du64;
                let (mut hits, mut victims) = (0u32, 0u32);
                for i in 0..200_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // The range widens: first empty slots, then full sets.
                    let line = x % (64 + i / 64).min(64 * ways as u64 * 2);
                    let (write, pm) = (x & 0x100 != 0, x & 0x200 != 0);
                    let a = simd.access(line, write, pm);
                    assert_eq!(a, portable.access_portable(line, write, pm), "access {i}");
                    hits += a.hit as u32;
                    victims += a.victim.is_some() as u32;
                }
                assert_eq!(simd.slots, portable.slots, "{ways} ways, {random:?}");
                assert!(hits > 10_000 && victims > 10_000, "{hits} {victims}");
            }
        }
    }

    fn compact_agrees(cfg: CacheConfig) {
        let mut full = Cache::new(cfg).unwrap();
        let mut compact = CompactCache::new(cfg).unwrap();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let (mut hits, mut wbs) = (0, 0);
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let line = x % 3000;
            let write = x & 0x100 != 0;
            let a = full.access(line, write);
            let b = compact.access(line, write, line.is_multiple_of(2));
            assert_eq!(a.hit, b.hit);
            assert_eq!(a.victim.map(|v| v.dirty), b.victim.map(|v| v.dirty));
            if let (Some(v), Some(w)) = (a.victim, b.victim) {
                assert_eq!(v.line % 2 == 0, w.pm, "PM bit travels with the line");
            }
            hits += a.hit as u32;
            wbs += a.victim.is_some_and(|v| v.dirty) as u32;
        }
        assert!(hits > 10_000 && wbs > 1000, "{hits} {wbs}");
    }
}
