//! The pool: a file mapped shared, divided into pages, with an append
//! stream, group commit and page garbage collection.
//!
//! # Layout (all integers little-endian)
//!
//! ```text
//! offset 0     header: magic "PMLABKV\0", layout version u32, engine u32,
//!              page size u32, engine parameter u32, pool length u64,
//!              first page offset u64, FNV-1a checksum of the above u64
//! offset 1024  root slot A (128 bytes)  \ the valid slot with the higher
//! offset 2048  root slot B (128 bytes)  / sequence number is current
//! first page   pages of `page size` bytes up to the pool length
//! ```
//!
//! A root slot holds sixteen u64: sequence, used-list head, stream tail,
//! free-list head, high water (first never-used page), engine root,
//! last version, discard floor, pending-GC head and tail, pages in use,
//! an engine word (the B+-tree's newest version record), two reserved,
//! checksum. Each page starts with a 16-byte control
//! block: the next page of the used list, the next page of the free list.
//! The two links are separate so that taking a page off the free list for
//! an uncommitted group never breaks the persisted free list.
//!
//! # Allocation and commit
//!
//! Engines append to one stream: the used list of pages, from its head to
//! the tail position. [`Pool::append`] bumps the tail, moving to a fresh page
//! (free list first, then the high water) when the page is full, so a record
//! may straddle pages; [`Pool::alloc`] returns room that does not straddle
//! (B+-tree nodes). Nothing is flushed then: the written ranges are
//! remembered, and [`Pool::commit`] flushes them all, fences once, writes
//! the inactive root slot with the next sequence number, flushes it and
//! fences again (group commit: no per-allocation transaction). A crash
//! before the slot is durable leaves the previous slot current, and every
//! page taken since is still on the persisted free list.
//!
//! # Garbage collection
//!
//! An engine compacts by starting a fresh chain ([`Pool::fresh_chain`]),
//! copying what is live into it, and committing: the committed slot names the
//! new used-list head and, as the persisted marker, the old chain's first
//! and last page. [`Pool::finish_gc`] then links those pages into the free
//! list and commits again; opening a pool whose slot still carries the marker
//! finishes the job (relinking is idempotent: the old pages are on no
//! persisted list).

use crate::error::{Error, ErrorKind, Result};
use crate::pm;
use crate::EngineKind;
use std::collections::HashSet;
use std::ffi::CString;
use std::path::Path;

/// The magic at offset 0 of every pool.
pub const MAGIC: [u8; 8] = *b"PMLABKV\0";
/// The layout version this build reads and writes.
pub const LAYOUT_VERSION: u32 = 2;
/// Bytes of a page's control block.
pub const CB: u64 = 16;
const HEADER_BYTES: u64 = 4096;
const SLOT_OFF: [u64; 2] = [1024, 2048];
const SLOT_WORDS: usize = 16;
/// Smallest and largest page sizes accepted.
pub const PAGE_MIN: u32 = 512;
/// See [`PAGE_MIN`].
pub const PAGE_MAX: u32 = 1 << 20;

/// FNV-1a 64 over `bytes`.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The contents of a root slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Sequence number; the valid slot with the higher one is current.
    pub seq: u64,
    /// First page of the used list.
    pub used_head: u64,
    /// Stream position where the next append goes.
    pub tail: u64,
    /// First page of the free list (0: empty).
    pub free_head: u64,
    /// First page never used.
    pub high_water: u64,
    /// The engine's root (B+-tree root node; 0 for the others).
    pub root: u64,
    /// Highest version written.
    pub last: u64,
    /// Discard floor: no read below it.
    pub floor: u64,
    /// Pending GC: first page of the abandoned chain (0: none).
    pub gc_head: u64,
    /// Pending GC: last page of the abandoned chain.
    pub gc_tail: u64,
    /// Pages on the used list.
    pub used_pages: u64,
    /// A second engine word (the B+-tree's newest version record; 0 for the others).
    pub aux: u64,
}

impl Meta {
    fn words(&self) -> [u64; SLOT_WORDS] {
        let mut w = [0u64; SLOT_WORDS];
        w[..12].copy_from_slice(&[
            self.seq,
            self.used_head,
            self.tail,
            self.free_head,
            self.high_water,
            self.root,
            self.last,
            self.floor,
            self.gc_head,
            self.gc_tail,
            self.used_pages,
            self.aux,
        ]);
        w
    }

    fn encode(&self) -> [u8; SLOT_WORDS * 8] {
        let w = self.words();
        let mut b = [0u8; SLOT_WORDS * 8];
        for (i, x) in w.iter().enumerate().take(SLOT_WORDS - 1) {
            b[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        let c = checksum(&b[..(SLOT_WORDS - 1) * 8]);
        b[(SLOT_WORDS - 1) * 8..].copy_from_slice(&c.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Meta> {
        let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        if checksum(&b[..(SLOT_WORDS - 1) * 8]) != word(SLOT_WORDS - 1) || word(0) == 0 {
            return None;
        }
        Some(Meta {
            seq: word(0),
            used_head: word(1),
            tail: word(2),
            free_head: word(3),
            high_water: word(4),
            root: word(5),
            last: word(6),
            floor: word(7),
            gc_head: word(8),
            gc_tail: word(9),
            used_pages: word(10),
            aux: word(11),
        })
    }
}

/// How to create a pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolConfig {
    /// Pool file length in bytes.
    pub size: u64,
    /// Page size in bytes (a power of two, 512 B..1 MiB).
    pub page_size: u32,
    /// An engine parameter stored in the header (the B+-tree's fan-out).
    pub param: u32,
}

/// Bytes populated ahead of the high water at a time (see `Pool::prefault`).
const PREFAULT: u64 = 2 << 20;
/// The smallest page size of the operating system (alignment of `madvise`).
const OS_PAGE: u64 = 4096;

/// An open pool (see the module documentation).
pub struct Pool {
    base: *mut u8,
    len: u64,
    page: u64,
    first: u64,
    engine: EngineKind,
    param: u32,
    active: usize,
    committed: Meta,
    /// The working root: committed by [`Pool::commit`].
    pub cur: Meta,
    dirty: Vec<(u64, u64)>,
    path: String,
    chains: u64,
    /// Pages below this offset were prefaulted (see [`Pool::prefault`]).
    prefaulted: u64,
}

// SAFETY: the mapping is owned by the Pool and only reached through &self/&mut self.
unsafe impl Send for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in map_file.
        unsafe { libc::munmap(self.base.cast(), self.len as usize) };
    }
}

fn map_file(path: &Path, create: Option<u64>) -> Result<(*mut u8, u64)> {
    let shown = path.display();
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("{shown}: path holds a NUL byte"),
        )
    })?;
    let flags = match create {
        Some(_) => libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
        None => libc::O_RDWR | libc::O_CLOEXEC,
    };
    // SAFETY: c is a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let hint = if e.kind() == std::io::ErrorKind::AlreadyExists {
            " (remove it or pick another path)"
        } else {
            ""
        };
        return Err(Error::new(ErrorKind::Io, format!("{shown}: {e}{hint}")));
    }
    let close = |e: Error| {
        // SAFETY: fd is open.
        unsafe { libc::close(fd) };
        e
    };
    let len = if let Some(size) = create {
        // SAFETY: fd is open.
        if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            let e = Error::io(
                format!("{shown}: resize to {size} bytes"),
                std::io::Error::last_os_error(),
            );
            let _ = std::fs::remove_file(path);
            return Err(close(e));
        }
        size
    } else {
        // SAFETY: st is plain data written by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(close(Error::io(shown, std::io::Error::last_os_error())));
        }
        st.st_size as u64
    };
    if len < HEADER_BYTES {
        return Err(close(Error::new(
            ErrorKind::BadPool,
            format!("{shown}: {len} bytes is shorter than a pool header: not a pmkv pool"),
        )));
    }
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // A DAX file accepts MAP_SYNC (stores durable once flushed, no msync);
    // any other file refuses it, and is mapped plainly.
    // SAFETY: fd is open; the kernel picks the address.
    let mut p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            prot,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        // SAFETY: as above.
        p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                prot,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
    }
    // SAFETY: fd is open; the mapping keeps the file.
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(Error::io(
            format!("{shown}: map"),
            std::io::Error::last_os_error(),
        ));
    }
    pm::register_pm(p as *const u8, len as usize);
    Ok((p.cast(), len))
}

impl Pool {
    /// Create a new pool file at `path` (which must not exist) for `engine`.
    pub fn create(path: &Path, engine: EngineKind, cfg: PoolConfig) -> Result<Pool> {
        let page = cfg.page_size;
        if !page.is_power_of_two() || !(PAGE_MIN..=PAGE_MAX).contains(&page) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("page size {page}: must be a power of two from {PAGE_MIN} to {PAGE_MAX}"),
            ));
        }
        let page = page as u64;
        let first = HEADER_BYTES.div_ceil(page) * page;
        if cfg.size < first + 4 * page {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "pool size {}: must hold the header and at least 4 pages ({} bytes)",
                    cfg.size,
                    first + 4 * page
                ),
            ));
        }
        let size = cfg.size / page * page;
        let (base, len) = map_file(path, Some(size))?;
        let mut pool = Pool {
            base,
            len,
            page,
            first,
            engine,
            param: cfg.param,
            active: 1,
            committed: Meta::default(),
            cur: Meta::default(),
            dirty: Vec::new(),
            path: path.display().to_string(),
            chains: 0,
            prefaulted: 0,
        };
        let mut h = [0u8; 48];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&engine.code().to_le_bytes());
        h[16..20].copy_from_slice(&(page as u32).to_le_bytes());
        h[20..24].copy_from_slice(&cfg.param.to_le_bytes());
        h[24..32].copy_from_slice(&len.to_le_bytes());
        h[32..40].copy_from_slice(&first.to_le_bytes());
        let c = checksum(&h[..40]);
        h[40..48].copy_from_slice(&c.to_le_bytes());
        pool.write(0, &h);
        pool.cur = Meta {
            seq: 0,
            used_head: first,
            tail: first + CB,
            high_water: first + page,
            used_pages: 1,
            ..Meta::default()
        };
        pool.write(first, &[0u8; CB as usize]);
        pool.commit();
        Ok(pool)
    }

    /// Open the pool at `path`, which must hold `engine`. Fails in one line
    /// on a foreign file, a torn header, another layout or another engine.
    pub fn open(path: &Path, engine: EngineKind) -> Result<Pool> {
        let (base, len) = map_file(path, None)?;
        let shown = path.display();
        // SAFETY: the mapping is at least HEADER_BYTES long (checked in map_file).
        let h = unsafe { std::slice::from_raw_parts(base, 48) };
        let mut pool = Pool {
            base,
            len,
            page: 0,
            first: 0,
            engine,
            param: 0,
            active: 0,
            committed: Meta::default(),
            cur: Meta::default(),
            dirty: Vec::new(),
            path: shown.to_string(),
            chains: 0,
            prefaulted: 0,
        };
        if &h[0..7] == b"PMEMOBJ" {
            return Err(Error::new(
                ErrorKind::WrongEngine,
                format!(
                    "{shown}: the pool holds anchor (libpmemobj), not {} (pass --engine anchor)",
                    engine.name()
                ),
            ));
        }
        if h[0..8] != MAGIC {
            return Err(Error::new(
                ErrorKind::BadPool,
                format!("{shown}: no pmkv magic at offset 0: not a pmkv pool"),
            ));
        }
        let u32at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap_or([0; 4]));
        let u64at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or([0; 8]));
        if checksum(&h[..40]) != u64at(40) {
            return Err(Error::new(
                ErrorKind::BadPool,
                format!("{shown}: pool header checksum mismatch: the header is torn or damaged"),
            ));
        }
        let layout = u32at(8);
        if layout != LAYOUT_VERSION {
            return Err(Error::new(
                ErrorKind::Layout,
                format!("{shown}: pool layout version {layout}, this build reads version {LAYOUT_VERSION}"),
            ));
        }
        let found = EngineKind::from_code(u32at(12));
        if found != Some(engine) {
            let name = found.map(|k| k.name()).unwrap_or("an unknown engine");
            return Err(Error::new(
                ErrorKind::WrongEngine,
                format!(
                    "{shown}: the pool holds {name}, not {} (pass --engine {name})",
                    engine.name()
                ),
            ));
        }
        pool.page = u32at(16) as u64;
        pool.param = u32at(20);
        pool.first = u64at(32);
        if u64at(24) != len
            || !pool.page.is_power_of_two()
            || pool.first < HEADER_BYTES
            || !pool.first.is_multiple_of(pool.page)
        {
            return Err(Error::new(
                ErrorKind::BadPool,
                format!("{shown}: header says {} bytes and page {}, file has {len} bytes: truncated or damaged pool", u64at(24), pool.page),
            ));
        }
        let slots: Vec<Option<Meta>> = SLOT_OFF
            .iter()
            .map(|o| Meta::decode(pool.bytes(*o, SLOT_WORDS as u64 * 8)))
            .collect();
        let pick = match (slots[0], slots[1]) {
            (Some(a), Some(b)) => {
                if a.seq >= b.seq {
                    0
                } else {
                    1
                }
            }
            (Some(_), None) => 0,
            (None, Some(_)) => 1,
            (None, None) => {
                return Err(Error::inconsistent(format!(
                    "{shown}: both root slots fail their checksum"
                )));
            }
        };
        pool.active = pick;
        pool.committed = slots[pick].unwrap_or_default();
        pool.cur = pool.committed;
        pool.check_meta()?;
        if pool.cur.gc_head != 0 {
            pool.finish_gc()?;
        }
        Ok(pool)
    }

    /// The pool file's path, as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Bytes of the mapping.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the pool has no pages (never: a pool has at least four).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> u64 {
        self.page
    }

    /// The engine parameter stored in the header.
    pub fn param(&self) -> u32 {
        self.param
    }

    /// The engine this pool holds.
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// The last committed root.
    pub fn committed(&self) -> Meta {
        self.committed
    }

    /// Total pages in the pool.
    pub fn total_pages(&self) -> u64 {
        (self.len - self.first) / self.page
    }

    fn check_meta(&self) -> Result<()> {
        let m = &self.cur;
        let page_ok =
            |p: u64| p >= self.first && p < self.len && (p - self.first).is_multiple_of(self.page);
        if !page_ok(m.used_head) {
            return Err(Error::inconsistent(format!(
                "root: used-list head {:#x} is not a page",
                m.used_head
            )));
        }
        if m.free_head != 0 && !page_ok(m.free_head) {
            return Err(Error::inconsistent(format!(
                "root: free-list head {:#x} is not a page",
                m.free_head
            )));
        }
        if m.high_water < self.first + self.page
            || m.high_water > self.len
            || !(m.high_water - self.first).is_multiple_of(self.page)
        {
            return Err(Error::inconsistent(format!(
                "root: high water {:#x} is outside the pool",
                m.high_water
            )));
        }
        let tp = self.page_of_end(m.tail);
        if !page_ok(tp) || m.tail < tp + CB || m.tail > tp + self.page {
            return Err(Error::inconsistent(format!(
                "root: tail {:#x} is not inside a page",
                m.tail
            )));
        }
        if m.used_pages == 0 || m.used_pages > self.total_pages() {
            return Err(Error::inconsistent(format!(
                "root: {} pages in use of {}",
                m.used_pages,
                self.total_pages()
            )));
        }
        if m.floor > m.last {
            return Err(Error::inconsistent(format!(
                "root: discard floor {} above last version {}",
                m.floor, m.last
            )));
        }
        if m.gc_head != 0 && (!page_ok(m.gc_head) || !page_ok(m.gc_tail)) {
            return Err(Error::inconsistent(
                "root: pending-GC marker does not name pages",
            ));
        }
        Ok(())
    }

    /// Whether `p` is the offset of a page.
    pub fn is_page(&self, p: u64) -> bool {
        p >= self.first && p < self.len && (p - self.first).is_multiple_of(self.page)
    }

    /// The page holding the byte just before `pos` (so a position at a
    /// page's very end belongs to that page).
    pub fn page_of_end(&self, pos: u64) -> u64 {
        let p = pos.saturating_sub(1).max(self.first);
        self.first + (p - self.first) / self.page * self.page
    }

    fn bytes(&self, off: u64, len: u64) -> &[u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: callers keep off+len within the mapping.
        unsafe { std::slice::from_raw_parts(self.base.add(off as usize), len as usize) }
    }

    /// `len` bytes at `off`, or an error when the range leaves the pool.
    pub fn slice(&self, off: u64, len: u64) -> Result<&[u8]> {
        match off.checked_add(len) {
            Some(end) if end <= self.len && off >= self.first => Ok(self.bytes(off, len)),
            _ => Err(Error::inconsistent(format!(
                "range {off:#x}+{len} leaves the pool's pages"
            ))),
        }
    }

    /// A u64 at `off`.
    pub fn u64_at(&self, off: u64) -> Result<u64> {
        let b = self.slice(off, 8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    /// Write `data` at `off` and remember the range for the next commit.
    pub fn write(&mut self, off: u64, data: &[u8]) {
        debug_assert!(off + data.len() as u64 <= self.len);
        // SAFETY: callers keep the range within the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(off as usize), data.len())
        };
        let end = off + data.len() as u64;
        if let Some(last) = self.dirty.last_mut() {
            if off <= last.1 && end >= last.0 {
                last.0 = last.0.min(off);
                last.1 = last.1.max(end);
                return;
            }
        }
        self.dirty.push((off, end));
    }

    fn set_u64(&mut self, off: u64, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    /// The used-list successor of page `p`.
    pub fn used_next(&self, p: u64) -> Result<u64> {
        self.u64_at(p)
    }

    /// The free-list successor of page `p`.
    pub fn free_next(&self, p: u64) -> Result<u64> {
        self.u64_at(p + 8)
    }

    /// Growth past the high water touches pages never used before: on a
    /// file in tmpfs or the page cache each 4 KiB page then costs a page
    /// fault (most of the time a snapshot restore spends writing). When
    /// `end` passes the prefaulted mark, the next [`PREFAULT`] bytes are
    /// populated for writing with one `madvise` call instead. Natively
    /// only (under the pmlab runtime the emulator owns the mapping's
    /// faults); a kernel without `MADV_POPULATE_WRITE` (before 5.14) just
    /// faults page by page as before.
    fn prefault(&mut self, end: u64) {
        if end <= self.prefaulted || pm::through_pmlab() {
            return;
        }
        let from = self.prefaulted.max(end - self.page) & !(OS_PAGE - 1);
        let to = (end + PREFAULT).min(self.len);
        self.prefaulted = to;
        // SAFETY: [from, to) lies within the mapping; populating changes
        // no contents.
        unsafe {
            libc::madvise(
                self.base.add(from as usize).cast(),
                (to - from) as usize,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }

    /// Take a page (free list first, then the high water) and make it the
    /// new tail page, linked after the current one.
    fn new_page(&mut self, link: bool) -> Result<u64> {
        let p = if self.cur.free_head != 0 {
            let p = self.cur.free_head;
            let next = self.free_next(p)?;
            if next != 0 && !self.is_page(next) {
                return Err(Error::inconsistent(format!(
                    "free list: page {p:#x} links to {next:#x}, not a page"
                )));
            }
            self.cur.free_head = next;
            p
        } else if self.cur.high_water + self.page <= self.len {
            let p = self.cur.high_water;
            self.cur.high_water += self.page;
            self.prefault(p + self.page);
            p
        } else {
            return Err(Error::new(
                ErrorKind::Full,
                format!(
                    "{}: pool full ({} pages of {} bytes): create a larger pool",
                    self.path,
                    self.total_pages(),
                    self.page
                ),
            ));
        };
        self.set_u64(p, 0);
        if link {
            let old = self.page_of_end(self.cur.tail);
            self.set_u64(old, p);
        }
        self.cur.tail = p + CB;
        self.cur.used_pages += 1;
        Ok(p)
    }

    /// Append `data` to the stream (it may straddle pages); returns its
    /// position. On error the working root is unchanged.
    pub fn append(&mut self, data: &[u8]) -> Result<u64> {
        let saved = self.cur;
        let r = self.append_inner(data);
        if r.is_err() {
            self.cur = saved;
        }
        r
    }

    fn append_inner(&mut self, mut data: &[u8]) -> Result<u64> {
        if self.cur.tail == self.page_of_end(self.cur.tail) + self.page {
            self.new_page(true)?;
        }
        let start = self.cur.tail;
        while !data.is_empty() {
            let pg = self.page_of_end(self.cur.tail);
            let room = pg + self.page - self.cur.tail;
            if room == 0 {
                self.new_page(true)?;
                continue;
            }
            let n = (room as usize).min(data.len());
            let at = self.cur.tail;
            self.write(at, &data[..n]);
            self.cur.tail += n as u64;
            data = &data[n..];
        }
        Ok(start)
    }

    /// Room for `len` bytes that do not straddle a page; returns its offset.
    pub fn alloc(&mut self, len: u64) -> Result<u64> {
        if len > self.page - CB {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!("allocation of {len} bytes exceeds a page of {}", self.page),
            ));
        }
        let pg = self.page_of_end(self.cur.tail);
        if self.cur.tail + len > pg + self.page {
            let saved = self.cur;
            if let Err(e) = self.new_page(true) {
                self.cur = saved;
                return Err(e);
            }
        }
        let at = self.cur.tail;
        self.cur.tail += len;
        Ok(at)
    }

    /// Position `skip` stream bytes after `pos` (following page links; a
    /// result at a page's very end is not moved to the next page).
    pub fn advance(&self, pos: u64, skip: u64) -> Result<u64> {
        let mut p = pos;
        let mut left = skip;
        let mut hops = 0u64;
        while left > 0 {
            let pg = self.page_of_end(p);
            let end = pg + self.page;
            if p == end {
                p = self.hop(pg, &mut hops)?;
                continue;
            }
            let n = left.min(end - p);
            p += n;
            left -= n;
        }
        Ok(p)
    }

    fn hop(&self, pg: u64, hops: &mut u64) -> Result<u64> {
        let next = self.used_next(pg)?;
        if !self.is_page(next) {
            return Err(Error::inconsistent(format!(
                "stream: page {pg:#x} ends but links to {next:#x}"
            )));
        }
        *hops += 1;
        if *hops > self.total_pages() {
            return Err(Error::inconsistent("stream: the used list has a cycle"));
        }
        Ok(next + CB)
    }

    /// Read `buf.len()` stream bytes from `pos` (following page links).
    pub fn read(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let mut p = pos;
        let mut done = 0usize;
        let mut hops = 0u64;
        if p < self.first || p > self.len {
            return Err(Error::inconsistent(format!(
                "stream position {p:#x} outside the pool"
            )));
        }
        while done < buf.len() {
            let pg = self.page_of_end(p);
            let end = pg + self.page;
            if p == end {
                p = self.hop(pg, &mut hops)?;
                continue;
            }
            let n = ((end - p) as usize).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(self.bytes(p, n as u64));
            done += n;
            p += n as u64;
        }
        Ok(())
    }

    /// Mark `len` stream bytes from `pos` (following page links) as user
    /// data in a `pmlab trace` (see [`pm::annotate_user_data`]).
    pub fn note_user_data(&self, pos: u64, len: u64) {
        if !pm::annotating() {
            return;
        }
        let (mut p, mut left, mut hops) = (pos, len, 0u64);
        while left > 0 {
            let pg = self.page_of_end(p);
            let end = pg + self.page;
            if p == end {
                match self.hop(pg, &mut hops) {
                    Ok(next) => p = next,
                    Err(_) => return,
                }
                continue;
            }
            let n = left.min(end - p);
            if let Ok(b) = self.slice(p, n) {
                pm::annotate_user_data(b.as_ptr(), n as usize);
            }
            p += n;
            left -= n;
        }
    }

    /// Bytes written since the last commit (not yet durable).
    pub fn pending_bytes(&self) -> u64 {
        self.dirty.iter().map(|(a, b)| b - a).sum()
    }

    /// Group commit: flush every range written since the last commit, fence
    /// once, write the working root into the inactive slot, flush and fence.
    pub fn commit(&mut self) {
        self.flush_dirty();
        pm::drain();
        self.cur.seq = self.committed.seq + 1;
        let slot = 1 - self.active;
        let bytes = self.cur.encode();
        let off = SLOT_OFF[slot];
        // SAFETY: the slot lies within the header.
        unsafe {
            // Word by word, as plain stores: a fixed-size copy is lowered
            // to moves that compiler instrumentation (`pmlab cargo`) does
            // not see, so traces would miss the slot's stores.
            let dst = self.base.add(off as usize) as *mut u64;
            for (i, w) in bytes.chunks_exact(8).enumerate() {
                let v = u64::from_ne_bytes(w.try_into().expect("8-byte chunk"));
                std::ptr::write_volatile(dst.add(i), v);
            }
            pm::persist(self.base.add(off as usize), bytes.len());
        }
        self.active = slot;
        self.committed = self.cur;
    }

    /// Flush every range written since the last flush (no fence: the
    /// next [`Pool::commit`] orders them). A long write (a staged
    /// restore) flushes as it goes, so its commit has little left to do.
    pub fn flush_dirty(&mut self) {
        // Each dirty line once: ranges written apart can share a line, and
        // flushing it twice costs a second write-back for nothing (`pmlab
        // check` reports it as a redundant flush). The ranges are sorted
        // (not their lines: a rebuild writes a few long ranges), widened
        // to whole lines, and each run of overlapping or touching ranges
        // is flushed with one call.
        let line = pm::LINE as u64;
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        let mut run: Option<(u64, u64)> = None;
        let flush = |(a, b): (u64, u64)| {
            // SAFETY: dirty lines lie within the mapping (its length is a
            // whole number of pages).
            unsafe { pm::flush(self.base.add(a as usize), (b - a) as usize) };
        };
        for (a, b) in dirty.drain(..) {
            let (a, b) = (a & !(line - 1), (b + line - 1) & !(line - 1));
            match run {
                Some((ra, rb)) if a <= rb => run = Some((ra, rb.max(b))),
                Some(r) => {
                    flush(r);
                    run = Some((a, b));
                }
                None => run = Some((a, b)),
            }
        }
        if let Some(r) = run {
            flush(r);
        }
        self.dirty = dirty;
    }

    /// Start a new, empty chain for a compaction or restore: the current
    /// chain becomes the pending-GC range once committed.
    pub fn fresh_chain(&mut self) -> Result<()> {
        if self.cur.gc_head != 0 {
            self.finish_gc()?;
        }
        let saved = self.cur;
        let old_head = self.cur.used_head;
        let old_tail = self.page_of_end(self.cur.tail);
        let p = match self.new_page(false) {
            Ok(p) => p,
            Err(e) => {
                self.cur = saved;
                return Err(e);
            }
        };
        self.cur.used_head = p;
        self.cur.used_pages = 1;
        self.cur.gc_head = old_head;
        self.cur.gc_tail = old_tail;
        self.chains += 1;
        Ok(())
    }

    /// Move the pending-GC range to the free list and commit (also run at
    /// open when a crash interrupted it).
    pub fn finish_gc(&mut self) -> Result<()> {
        let mut p = self.cur.gc_head;
        let stop = self.cur.gc_tail;
        let mut free = self.cur.free_head;
        let mut n = 0u64;
        while p != 0 {
            if !self.is_page(p) {
                return Err(Error::inconsistent(format!(
                    "pending GC: link to {p:#x}, not a page"
                )));
            }
            let next = self.used_next(p)?;
            self.set_u64(p + 8, free);
            free = p;
            n += 1;
            if p == stop {
                break;
            }
            if n > self.total_pages() {
                return Err(Error::inconsistent(
                    "pending GC: the abandoned chain has a cycle",
                ));
            }
            p = next;
        }
        self.cur.free_head = free;
        self.cur.gc_head = 0;
        self.cur.gc_tail = 0;
        self.commit();
        Ok(())
    }

    /// Check the page lists: the used list reaches the tail page in
    /// `used_pages` steps, the free list and pending-GC chain are
    /// acyclic, the three are disjoint, and together with the pages above
    /// the high water they account for every page. Returns the used pages.
    pub fn check_pages(&self) -> Result<HashSet<u64>> {
        self.check_meta()?;
        let m = &self.committed;
        let total = self.total_pages();
        let mut used = HashSet::new();
        let tail_page = self.page_of_end(m.tail);
        let mut p = m.used_head;
        loop {
            if !self.is_page(p) || p >= m.high_water {
                return Err(Error::inconsistent(format!(
                    "used list: link to {p:#x}, not an allocated page"
                )));
            }
            if !used.insert(p) {
                return Err(Error::inconsistent(format!(
                    "used list: page {p:#x} appears twice"
                )));
            }
            if p == tail_page {
                break;
            }
            p = self.used_next(p)?;
        }
        if used.len() as u64 != m.used_pages {
            return Err(Error::inconsistent(format!(
                "used list: {} pages from head to tail, root says {}",
                used.len(),
                m.used_pages
            )));
        }
        let mut seen: HashSet<u64> = used.clone();
        let mut p = m.free_head;
        while p != 0 {
            if !self.is_page(p) || p >= m.high_water {
                return Err(Error::inconsistent(format!(
                    "free list: link to {p:#x}, not an allocated page"
                )));
            }
            if !seen.insert(p) {
                return Err(Error::inconsistent(format!(
                    "free list: page {p:#x} is also used or listed twice"
                )));
            }
            p = self.free_next(p)?;
        }
        if m.gc_head != 0 {
            let mut p = m.gc_head;
            loop {
                if !self.is_page(p) || !seen.insert(p) {
                    return Err(Error::inconsistent(format!(
                        "pending GC: page {p:#x} is also used or free"
                    )));
                }
                if p == m.gc_tail {
                    break;
                }
                p = self.used_next(p)?;
            }
        }
        let below = (m.high_water - self.first) / self.page;
        if seen.len() as u64 != below || below > total {
            return Err(Error::inconsistent(format!(
                "pages: {} below the high water, {} on the used, free and GC lists: pages leaked",
                below,
                seen.len()
            )));
        }
        Ok(used)
    }

    /// Where page `p` is, for messages: "used", "free", "pending GC",
    /// "above the high water" or "on no list".
    pub fn page_state(&self, p: u64) -> &'static str {
        let m = &self.committed;
        if p >= m.high_water {
            return "above the high water";
        }
        let walk = |mut q: u64, next: &dyn Fn(u64) -> Result<u64>, stop: u64| {
            let mut n = 0;
            while q != 0 && n <= self.total_pages() {
                if q == p {
                    return true;
                }
                if q == stop {
                    return false;
                }
                q = next(q).unwrap_or(0);
                n += 1;
            }
            false
        };
        if walk(
            m.used_head,
            &|q| self.used_next(q),
            self.page_of_end(m.tail),
        ) {
            "used"
        } else if walk(m.free_head, &|q| self.free_next(q), u64::MAX) {
            "free"
        } else if m.gc_head != 0 && walk(m.gc_head, &|q| self.used_next(q), m.gc_tail) {
            "pending GC"
        } else {
            "on no list"
        }
    }

    /// Fresh chains started (compactions, restores) since the pool was opened.
    pub fn chains(&self) -> u64 {
        self.chains
    }

    /// Bytes of pages in use (the PM footprint of the stored data).
    pub fn used_bytes(&self) -> u64 {
        self.cur.used_pages * self.page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("pmkv-pool-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        d
    }

    fn cfg() -> PoolConfig {
        PoolConfig {
            size: 1 << 20,
            page_size: 1024,
            param: 0,
        }
    }

    #[test]
    fn append_straddles_pages_and_reads_back_after_reopen() {
        let path = tmp("straddle");
        let mut pool = Pool::create(&path, EngineKind::List, cfg()).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let pos = pool.append(&data).unwrap();
        pool.commit();
        drop(pool);
        let pool = Pool::open(&path, EngineKind::List).unwrap();
        let mut back = vec![0u8; data.len()];
        pool.read(pos, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(pool.check_pages().unwrap().len(), 5); // 5000 bytes in pages of 1008
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn uncommitted_pages_return_to_the_free_list_and_gc_frees_old_chains() {
        let path = tmp("gc");
        let mut pool = Pool::create(&path, EngineKind::List, cfg()).unwrap();
        pool.append(&[1u8; 3000]).unwrap();
        pool.commit();
        pool.fresh_chain().unwrap();
        pool.append(&[2u8; 100]).unwrap();
        pool.commit();
        pool.finish_gc().unwrap();
        pool.check_pages().unwrap();
        assert_eq!(pool.committed().used_pages, 1);
        let free_before = pool.committed().free_head;
        assert_ne!(free_before, 0);
        pool.append(&[3u8; 3000]).unwrap();
        drop(pool); // crash: not committed
        let pool = Pool::open(&path, EngineKind::List).unwrap();
        assert_eq!(pool.committed().free_head, free_before);
        pool.check_pages().unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_gc_interrupted_after_the_swing_is_finished_at_open() {
        let path = tmp("gc-crash");
        let mut pool = Pool::create(&path, EngineKind::List, cfg()).unwrap();
        pool.append(&[1u8; 5000]).unwrap();
        pool.commit();
        let old_pages = pool.committed().used_pages;
        pool.fresh_chain().unwrap();
        pool.append(&[2u8; 10]).unwrap();
        pool.commit(); // the swing, with the marker; finish_gc never runs
        assert_ne!(pool.committed().gc_head, 0);
        pool.check_pages().unwrap();
        drop(pool);
        let pool = Pool::open(&path, EngineKind::List).unwrap();
        let m = pool.committed();
        assert_eq!((m.gc_head, m.gc_tail, m.used_pages), (0, 0, 1));
        let mut free = 0;
        let mut p = m.free_head;
        while p != 0 {
            free += 1;
            p = pool.free_next(p).unwrap();
        }
        assert_eq!(free, old_pages, "every page of the abandoned chain is free");
        pool.check_pages().unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn opening_another_engine_or_a_torn_header_fails_in_one_line() {
        let path = tmp("hdr");
        drop(Pool::create(&path, EngineKind::List, cfg()).unwrap());
        let e = Pool::open(&path, EngineKind::BTree).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::WrongEngine);
        assert!(
            e.to_string().contains("holds list") && !e.to_string().contains('\n'),
            "{e}"
        );
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[17] ^= 1; // page size
        std::fs::write(&path, &bytes).unwrap();
        let e = Pool::open(&path, EngineKind::List).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::BadPool);
        assert!(e.to_string().contains("torn"), "{e}");
        bytes[17] ^= 1;
        bytes[8] = 9; // layout version, with a matching checksum
        let c = checksum(&bytes[..40]);
        bytes[40..48].copy_from_slice(&c.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let e = Pool::open(&path, EngineKind::List).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Layout);
        bytes[0] = b'X';
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            Pool::open(&path, EngineKind::List).err().unwrap().kind(),
            ErrorKind::BadPool
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_torn_root_slot_falls_back_to_the_other() {
        let path = tmp("slot");
        let mut pool = Pool::create(&path, EngineKind::Wal, cfg()).unwrap();
        pool.cur.last = 5;
        pool.commit();
        pool.cur.last = 6;
        pool.commit();
        let active = pool.active;
        drop(pool);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[SLOT_OFF[active] as usize + 50] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let pool = Pool::open(&path, EngineKind::Wal).unwrap();
        assert_eq!(pool.committed().last, 5);
        std::fs::remove_file(&path).unwrap();
    }
}
