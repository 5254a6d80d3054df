//! The `list` and `wal` engines: versioned records appended to the pool's
//! stream (a singly linked list of pages, records back to back and
//! straddling pages), and a DRAM index rebuilt on open by replaying it.
//!
//! `list` keeps in DRAM only where each value lies in PM, and commits in
//! groups ([`crate::Options::group`]); `wal` keeps every value in DRAM too
//! and commits every write (the thesis' baseline: a map in memory and a log
//! made durable per write).
//!
//! Record: kind u8 (1 set, 2 delete, 3 rollback, 4 base), three zero bytes,
//! key length u32, value length u32, four zero bytes, version u64, key,
//! value. A rollback record drops every version above its own on replay. A
//! compaction or restore writes the retained versions in key order into a
//! fresh chain and ends them with a base record; after it, versions
//! increase in stream order, rollbacks aside.

use crate::error::{Error, ErrorKind, Result};
use crate::index::Index;
use crate::pool::{Pool, PoolConfig, CB};
use crate::{
    check_history, check_sizes, check_version, show, Engine, EngineKind, Options, Snapshot, Usage,
    VersionEntry,
};
use std::path::Path;

const HDR: u64 = 24;
const SET: u8 = 1;
const DEL: u8 = 2;
const ROLLBACK: u8 = 3;
const BASE: u8 = 4;

/// Where a version's value is: in PM (`list`) or in DRAM (`wal`).
#[derive(Clone, Debug)]
enum Val {
    Pm { pos: u64, len: u32 },
    Mem(Vec<u8>),
}

pub(crate) struct LogEngine {
    pool: Pool,
    kind: EngineKind,
    index: Index<Val>,
    group: u32,
    pending: u32,
    /// Record bytes of the retained versions (for the compaction trigger).
    live: u64,
    /// No automatic compaction below this many bytes in use (after one failed).
    retry_at: u64,
    /// A staged restore in progress (see [`Engine::stage_begin`]).
    staged: Option<Staged>,
}

/// A restore written pair by pair into a fresh chain that no root names
/// yet: a crash or an abort leaves the old chain, the commit swings the
/// root to the new one.
struct Staged {
    /// The working root before it began (put back by an abort: the pages
    /// it took return to the free list, which their writes did not touch).
    saved: crate::pool::Meta,
    index: Index<Val>,
    live: u64,
    at: u64,
    last_key: Option<Vec<u8>>,
    /// Bytes written since the last flush.
    unflushed: u64,
}

/// A staged restore flushes what it wrote every this many bytes.
const STAGE_FLUSH: u64 = 1 << 20;

/// A record's header and key (its value follows them in the stream).
fn record_head(kind: u8, key: &[u8], value_len: usize, version: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HDR as usize + key.len());
    b.extend_from_slice(&[kind, 0, 0, 0]);
    b.extend_from_slice(&(key.len() as u32).to_le_bytes());
    b.extend_from_slice(&(value_len as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(key);
    b
}

fn rec_size(key: &[u8], val: &Option<Val>) -> u64 {
    HDR + key.len() as u64
        + match val {
            Some(Val::Pm { len, .. }) => *len as u64,
            Some(Val::Mem(v)) => v.len() as u64,
            None => 0,
        }
}

/// What a replay of the chain found.
struct Replayed {
    index: Index<Val>,
    live: u64,
}

impl LogEngine {
    pub fn create(path: &Path, kind: EngineKind, opts: &Options) -> Result<LogEngine> {
        let pool = Pool::create(
            path,
            kind,
            PoolConfig {
                size: opts.size,
                page_size: opts.page_size,
                param: 0,
            },
        )?;
        let mut e = LogEngine::with(pool, kind, opts, Index::new(0, 0), 0);
        e.append(BASE, &[], &[], 0, false)?;
        e.pool.commit();
        Ok(e)
    }

    pub fn open(path: &Path, kind: EngineKind, opts: &Options) -> Result<LogEngine> {
        let pool = Pool::open(path, kind)?;
        let r = replay(&pool, kind == EngineKind::Wal)?;
        Ok(LogEngine::with(pool, kind, opts, r.index, r.live))
    }

    fn with(
        pool: Pool,
        kind: EngineKind,
        opts: &Options,
        index: Index<Val>,
        live: u64,
    ) -> LogEngine {
        let group = if kind == EngineKind::Wal {
            1
        } else {
            opts.group.max(1)
        };
        LogEngine {
            pool,
            kind,
            index,
            group,
            pending: 0,
            live,
            retry_at: 0,
            staged: None,
        }
    }

    fn value(&self, val: &Val) -> Result<Vec<u8>> {
        match val {
            Val::Mem(v) => Ok(v.clone()),
            Val::Pm { pos, len } => {
                let mut buf = vec![0u8; *len as usize];
                self.pool.read(*pos, &mut buf)?;
                Ok(buf)
            }
        }
    }

    fn history_of(&self, index: &Index<Val>) -> Result<Vec<VersionEntry>> {
        let mut out = Vec::with_capacity(index.versions as usize);
        for (k, vs) in &index.keys {
            for (version, val) in vs {
                out.push(VersionEntry {
                    key: k.clone(),
                    version: *version,
                    value: match val {
                        Some(v) => Some(self.value(v)?),
                        None => None,
                    },
                });
            }
        }
        Ok(out)
    }

    /// Append a record; returns the value's handle. With `user`, its key
    /// and value are the caller's new data (not a compaction's copy),
    /// marked so in a `pmlab trace`.
    fn append(
        &mut self,
        kind: u8,
        key: &[u8],
        value: &[u8],
        version: u64,
        user: bool,
    ) -> Result<Option<Val>> {
        // Header and key, then the value straight from the caller's
        // buffer: the same bytes in the stream as one append of the whole
        // record, without copying the value first.
        let saved = self.pool.cur;
        let pos = self
            .pool
            .append(&record_head(kind, key, value.len(), version))?;
        if !value.is_empty() {
            if let Err(e) = self.pool.append(value) {
                self.pool.cur = saved;
                return Err(e);
            }
        }
        if user {
            let at = self.pool.advance(pos, HDR)?;
            self.pool
                .note_user_data(at, (key.len() + value.len()) as u64);
        }
        if kind != SET {
            return Ok(None);
        }
        Ok(Some(if self.kind == EngineKind::Wal {
            Val::Mem(value.to_vec())
        } else {
            Val::Pm {
                pos: self.pool.advance(pos, HDR + key.len() as u64)?,
                len: value.len() as u32,
            }
        }))
    }

    fn commit(&mut self) -> Result<()> {
        self.pool.cur.last = self.index.last;
        self.pool.cur.floor = self.index.floor;
        self.pool.commit();
        self.pending = 0;
        let page = self.pool.page_size();
        if self.pool.used_bytes() > (2 * self.live + 16 * page).max(self.retry_at) {
            let r = self.compact();
            if r.is_err() {
                // Too full to compact now: try again when the pool has grown by half.
                self.retry_at = self.pool.used_bytes() * 3 / 2;
            }
            crate::auto_compact(r)?;
        }
        Ok(())
    }

    /// Write `entries` (key order) into a fresh chain ending with a base
    /// record at `last`, and swing the root to it.
    fn rewrite<'a>(
        &mut self,
        entries: impl Iterator<Item = (&'a [u8], u64, Option<&'a [u8]>)>,
        last: u64,
        floor: u64,
    ) -> Result<()> {
        let saved = self.pool.cur;
        let r = self.rewrite_inner(entries, last, floor);
        if r.is_err() {
            self.pool.cur = saved;
        }
        r
    }

    fn rewrite_inner<'a>(
        &mut self,
        entries: impl Iterator<Item = (&'a [u8], u64, Option<&'a [u8]>)>,
        last: u64,
        floor: u64,
    ) -> Result<()> {
        self.pool.fresh_chain()?;
        let mut index = Index::new(last, floor);
        let mut live = 0;
        for (key, version, value) in entries {
            let kind = if value.is_some() { SET } else { DEL };
            let val = self.append(kind, key, value.unwrap_or(&[]), version, false)?;
            live += rec_size(key, &val);
            index.push(key, version, val)?;
        }
        self.append(BASE, &[], &[], last, false)?;
        self.index = index;
        self.live = live;
        self.pool.cur.last = last;
        self.pool.cur.floor = floor;
        self.pool.commit();
        self.pending = 0;
        self.pool.finish_gc()
    }
}

/// Replay the committed chain into an index, checking every record: a
/// key-ordered prefix, one base record, then versions rising in stream
/// order (a rollback record lowering the mark to its own version).
fn replay(pool: &Pool, wal: bool) -> Result<Replayed> {
    let m = pool.committed();
    let page = pool.page_size();
    let tail_page = pool.page_of_end(m.tail);
    let total = (m.used_pages - 1) * (page - CB) + (m.tail - tail_page - CB);
    let mut index: Index<Val> = Index::new(m.last, 0);
    let mut live = 0u64;
    let mut pos = m.used_head + CB;
    let mut done = 0u64;
    let mut base: Option<u64> = None;
    let mut cur = 0u64;
    let mut prev_key: Option<Vec<u8>> = None;
    while done < total {
        let at = format!("list: record at stream byte {done}");
        if total - done < HDR {
            return Err(Error::inconsistent(format!(
                "{at}: header runs past the tail"
            )));
        }
        let mut h = [0u8; HDR as usize];
        pool.read(pos, &mut h)?;
        let kind = h[0];
        let klen = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as u64;
        let vlen = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as u64;
        let version = u64::from_le_bytes(h[16..24].try_into().unwrap_or([0; 8]));
        if h[1..4] != [0, 0, 0] || h[12..16] != [0; 4] || !(SET..=BASE).contains(&kind) {
            return Err(Error::inconsistent(format!(
                "{at}: bad header (kind {kind})"
            )));
        }
        if klen as usize > crate::MAX_KEY
            || vlen as usize > crate::MAX_VALUE
            || HDR + klen + vlen > total - done
        {
            return Err(Error::inconsistent(format!(
                "{at}: lengths {klen}/{vlen} run past the tail"
            )));
        }
        if (kind != SET && vlen != 0) || (kind >= ROLLBACK && klen != 0) {
            return Err(Error::inconsistent(format!(
                "{at}: kind {kind} with a key or value"
            )));
        }
        let mut key = vec![0u8; klen as usize];
        let kpos = pool.advance(pos, HDR)?;
        pool.read(kpos, &mut key)?;
        match (kind, base) {
            (SET | DEL, _) => {
                match base {
                    None => {
                        if prev_key.as_ref().is_some_and(|p| *p > key) {
                            return Err(Error::inconsistent(format!(
                                "{at}: keys out of order before the base record"
                            )));
                        }
                        prev_key = Some(key.clone());
                        cur = cur.max(version);
                    }
                    Some(_) => {
                        if version <= cur {
                            return Err(Error::inconsistent(format!(
                                "{at}: version {version} after version {cur}"
                            )));
                        }
                        cur = version;
                    }
                }
                let val = if kind == SET {
                    let vpos = pool.advance(kpos, klen)?;
                    Some(if wal {
                        let mut v = vec![0u8; vlen as usize];
                        pool.read(vpos, &mut v)?;
                        Val::Mem(v)
                    } else {
                        Val::Pm {
                            pos: vpos,
                            len: vlen as u32,
                        }
                    })
                } else {
                    None
                };
                live += rec_size(&key, &val);
                index
                    .push(&key, version, val)
                    .map_err(|e| Error::inconsistent(format!("{at}: {e}")))?;
            }
            (ROLLBACK, Some(_)) => {
                if version >= cur {
                    return Err(Error::inconsistent(format!(
                        "{at}: rollback to {version}, versions reach {cur}"
                    )));
                }
                for (k, _, v) in index.rollback(version)? {
                    live -= rec_size(&k, &v);
                }
                cur = version;
            }
            (BASE, None) => {
                if version < cur {
                    return Err(Error::inconsistent(format!(
                        "{at}: base record {version} below version {cur}"
                    )));
                }
                base = Some(version);
                cur = version;
            }
            _ => {
                return Err(Error::inconsistent(format!(
                    "{at}: {} record where the chain allows none",
                    if kind == BASE {
                        "a second base"
                    } else {
                        "a rollback"
                    }
                )));
            }
        }
        let len = HDR + klen + vlen;
        pos = pool.advance(pos, len)?;
        done += len;
    }
    if base.is_none() {
        return Err(Error::inconsistent("list: the chain has no base record"));
    }
    if cur != m.last {
        return Err(Error::inconsistent(format!(
            "list: the chain ends at version {cur}, the root's last version is {}",
            m.last
        )));
    }
    index.last = m.last;
    for (k, _, v) in index.discard(m.floor)? {
        live -= rec_size(&k, &v);
    }
    Ok(Replayed { index, live })
}

impl Engine for LogEngine {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn get_at(&self, key: &[u8], index: u64) -> Result<Option<Vec<u8>>> {
        match self.index.lookup(key, index)? {
            Some(Some(v)) => Ok(Some(self.value(v)?)),
            _ => Ok(None),
        }
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> Result<()> {
        self.stage_abort();
        check_version(self.index.last, version)?;
        check_sizes(key, value)?;
        let kind = if value.is_some() { SET } else { DEL };
        let val = self.append(kind, key, value.unwrap_or(&[]), version, true)?;
        self.live += rec_size(key, &val);
        self.index.push(key, version, val)?;
        self.index.last = version;
        self.pending += 1;
        if self.pending >= self.group {
            self.commit()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        if self.pending > 0 {
            self.commit()?;
        }
        Ok(())
    }

    fn last_version(&self) -> u64 {
        self.index.last
    }

    fn durable_version(&self) -> u64 {
        self.pool.committed().last
    }

    fn floor(&self) -> u64 {
        self.index.floor
    }

    fn rollback_above(&mut self, index: u64) -> Result<()> {
        self.stage_abort();
        crate::check_read(self.index.floor, index)?;
        if index < self.index.last {
            self.append(ROLLBACK, &[], &[], index, false)?;
            for (k, _, v) in self.index.rollback(index)? {
                self.live -= rec_size(&k, &v);
            }
        }
        self.commit()
    }

    fn discard_below(&mut self, index: u64) -> Result<()> {
        self.stage_abort();
        for (k, _, v) in self.index.discard(index)? {
            self.live -= rec_size(&k, &v);
        }
        self.commit()
    }

    fn snapshot(&self, index: u64) -> Result<Snapshot<'_>> {
        crate::check_read(self.index.floor, index)?;
        let it = self.index.snapshot_at(index, move |v| self.value(v));
        Ok(Snapshot::new(index, Box::new(it)))
    }

    fn restore(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.stage_abort();
        let map = crate::restore_entries(entries)?;
        let entries = map
            .iter()
            .map(|(k, v)| (k.as_slice(), index, Some(v.as_slice())));
        self.rewrite(entries, index, index)
    }

    fn restore_sorted<'a>(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<()> {
        self.stage_abort();
        let pairs: Vec<(&[u8], &[u8])> = entries.collect();
        if !crate::sorted_pairs(&pairs)? {
            let mut owned = pairs.iter().map(|(k, v)| (k.to_vec(), v.to_vec()));
            return self.restore(index, &mut owned);
        }
        let entries = pairs.iter().map(|(k, v)| (*k, index, Some(*v)));
        self.rewrite(entries, index, index)
    }

    fn stage_begin(&mut self, index: u64) -> Result<bool> {
        self.stage_abort();
        self.sync()?;
        // A pending GC is finished (and committed) first, so that an
        // abort puts back a root whose GC range is still its own.
        if self.pool.cur.gc_head != 0 {
            self.pool.finish_gc()?;
        }
        let saved = self.pool.cur;
        if let Err(e) = self.pool.fresh_chain() {
            self.pool.cur = saved;
            return Err(e);
        }
        self.staged = Some(Staged {
            saved,
            index: Index::new(index, index),
            live: 0,
            at: index,
            last_key: None,
            unflushed: 0,
        });
        Ok(true)
    }

    fn stage_push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let Some(mut st) = self.staged.take() else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "list: no staged restore in progress",
            ));
        };
        let r = (|| {
            check_sizes(key, Some(value))?;
            if st.last_key.as_deref().is_some_and(|k| k >= key) {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "list: staged restore: key {} not above the one before",
                        show(key)
                    ),
                ));
            }
            let val = self.append(SET, key, value, st.at, false)?;
            st.live += rec_size(key, &val);
            st.index.push(key, st.at, val)?;
            st.last_key = Some(key.to_vec());
            st.unflushed += HDR + (key.len() + value.len()) as u64;
            if st.unflushed >= STAGE_FLUSH {
                self.pool.flush_dirty();
                st.unflushed = 0;
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                self.staged = Some(st);
                Ok(())
            }
            Err(e) => {
                self.pool.cur = st.saved;
                Err(e)
            }
        }
    }

    fn stage_active(&self) -> bool {
        self.staged.is_some()
    }

    fn stage_commit(&mut self) -> Result<()> {
        let Some(st) = self.staged.take() else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "list: no staged restore in progress",
            ));
        };
        if let Err(e) = self.append(BASE, &[], &[], st.at, false) {
            self.pool.cur = st.saved;
            return Err(e);
        }
        self.index = st.index;
        self.live = st.live;
        self.pool.cur.last = st.at;
        self.pool.cur.floor = st.at;
        self.pool.commit();
        self.pending = 0;
        self.pool.finish_gc()
    }

    fn stage_abort(&mut self) {
        if let Some(st) = self.staged.take() {
            self.pool.cur = st.saved;
        }
    }

    fn history(&self) -> Result<Vec<VersionEntry>> {
        self.history_of(&self.index)
    }

    fn written_above(&self, index: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        Ok(self.index.written_above(index))
    }

    fn check(&self) -> Result<()> {
        self.pool.check_pages()?;
        let h = self.history()?;
        check_history(&h, self.index.last, self.index.floor)?;
        if self.pool.pending_bytes() == 0 {
            let r = replay(&self.pool, self.kind == EngineKind::Wal)?;
            let h2 = self.history_of(&r.index)?;
            if h2 != h {
                let i = h
                    .iter()
                    .zip(&h2)
                    .position(|(a, b)| a != b)
                    .unwrap_or(h.len().min(h2.len()));
                let at = h
                    .get(i)
                    .or(h2.get(i))
                    .map(|e| format!("key {} version {}", show(&e.key), e.version));
                return Err(Error::inconsistent(format!(
                    "list: the DRAM index and a replay of the chain differ at {}",
                    at.unwrap_or_default()
                )));
            }
        }
        Ok(())
    }

    fn compact(&mut self) -> Result<()> {
        self.stage_abort();
        self.sync()?;
        let history = self.history()?;
        let entries = history
            .iter()
            .map(|e| (e.key.as_slice(), e.version, e.value.as_deref()));
        let (last, floor) = (self.index.last, self.index.floor);
        self.rewrite(entries, last, floor)
    }

    fn usage(&self) -> Usage {
        Usage {
            pm_bytes: self.pool.used_bytes(),
            data_bytes: self.live.saturating_sub(self.index.versions * HDR),
            versions: self.index.versions,
            compactions: self.pool.chains(),
        }
    }
}
