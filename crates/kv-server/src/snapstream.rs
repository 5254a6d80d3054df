//! Snapshots sent while they are built and installed while they arrive.
//!
//! * **Leader.** A state machine asked for a snapshot for a follower
//!   registers a build ([`spawn_build`]); the snapshot openraft gets
//!   carries no data, only an id that names the build ([`take_build`]).
//!   Once the follower answers, the sender starts it: a thread encodes the
//!   engine's pairs at the snapshot's index into chunks of about [`CHUNK`]
//!   bytes and hands each over as soon as it is full ([`Piece`]); the
//!   sender writes each chunk to the socket while the next one is
//!   encoded, and gives written chunks back to be filled again (no fresh
//!   pages to fault in). Nothing is built while the follower is away.
//! * **Follower.** [`PairFeed`] cuts data that arrives in pieces of any
//!   size back into pairs, so that the state machine can write them into
//!   its engine as they come (a staged restore, committed only when
//!   openraft installs the snapshot).
//!
//! The data is the snapshot encoding of [`crate::store`]: a magic, then
//! `[u32 klen][key][u32 vlen][value]` per pair, in key order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::engine::EngineError;

/// Data bytes per chunk a build hands over (a chunk holds whole pairs; a
/// pair larger than this makes a chunk of its own): with its 4-byte
/// length, one 2 MiB huge page.
pub const CHUNK: usize = (2 << 20) - 4;

const HUGE: usize = 2 << 20;

/// A buffer in its own anonymous mapping, 2 MiB aligned and advised to be
/// backed by transparent huge pages (`MADV_HUGEPAGE`): filling it takes
/// one page fault per 2 MiB instead of one per 4 KiB when THP is
/// `madvise` or `always` (otherwise it faults as any buffer). The kernel
/// hands the pages zeroed, so it is read into without clearing it first.
pub struct PageBuf {
    map: *mut u8,
    map_len: usize,
    data: *mut u8,
    cap: usize,
    len: usize,
}

// SAFETY: the mapping is owned by the buffer alone.
unsafe impl Send for PageBuf {}

impl PageBuf {
    /// A buffer of no bytes and no mapping.
    pub fn none() -> PageBuf {
        PageBuf {
            map: std::ptr::null_mut(),
            map_len: 0,
            data: std::ptr::NonNull::dangling().as_ptr(),
            cap: 0,
            len: 0,
        }
    }

    /// An empty buffer of `cap` bytes.
    pub fn new(cap: usize) -> std::io::Result<PageBuf> {
        let rounded = cap.max(1).div_ceil(HUGE) * HUGE;
        let map_len = rounded + HUGE;
        // SAFETY: a fresh private anonymous mapping; no existing memory
        // is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let data = (p as usize).div_ceil(HUGE) * HUGE;
        // SAFETY: [data, data + rounded) lies inside the mapping; the
        // advice changes no contents.
        unsafe { libc::madvise(data as *mut libc::c_void, rounded, libc::MADV_HUGEPAGE) };
        Ok(PageBuf {
            map: p.cast(),
            map_len,
            data: data as *mut u8,
            cap,
            len: 0,
        })
    }

    /// Bytes it can hold.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Forget the contents.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The unfilled rest (zeroed or old contents, never uninitialised).
    pub fn spare(&mut self) -> &mut [u8] {
        // SAFETY: [len, cap) lies inside the mapping, which is readable
        // and writable, and only this buffer refers to it.
        unsafe { std::slice::from_raw_parts_mut(self.data.add(self.len), self.cap - self.len) }
    }

    /// Count `n` more bytes of [`PageBuf::spare`] as filled.
    pub fn advance(&mut self, n: usize) {
        assert!(self.len + n <= self.cap, "PageBuf overfilled");
        self.len += n;
    }

    /// Append `b`; `false` (nothing appended) when it does not fit.
    pub fn extend(&mut self, b: &[u8]) -> bool {
        if b.len() > self.cap - self.len {
            return false;
        }
        self.spare()[..b.len()].copy_from_slice(b);
        self.len += b.len();
        true
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: [0, len) lies inside the mapping and was written.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; the buffer is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}

impl AsRef<[u8]> for PageBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if !self.map.is_null() {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
    }
}

/// Builds kept for their senders at most; the oldest one not picked up
/// is dropped (its thread stops at its next chunk).
const BUILDS_KEPT: usize = 8;

/// Largest key or value length accepted in received data.
const MAX_FIELD: usize = 256 << 20;

/// What a build hands its sender.
pub enum Piece {
    /// The next chunk: four bytes left for its length (little-endian,
    /// filled in), then the data.
    Chunk(PageBuf),
    /// The data is complete: `total` bytes.
    End(u64),
    /// The build failed.
    Failed(String),
}

/// A snapshot to be built on its own thread once its follower answers
/// ([`Build::start`]), and sent as it is built.
pub struct Build {
    /// Bytes the data is expected to take (the last build's size and
    /// some), for the receiver's buffer.
    pub hint: u64,
    /// The chunks as they are filled.
    pub rx: tokio::sync::mpsc::UnboundedReceiver<Piece>,
    /// Chunks written to the socket go back here to be filled again.
    pub back: std::sync::mpsc::Sender<PageBuf>,
    start: Option<Box<dyn FnOnce() + Send>>,
}

impl Build {
    /// Start the build (once; later calls do nothing). A build never
    /// started costs nothing but its entry.
    pub fn start(&mut self) {
        if let Some(f) = self.start.take() {
            f();
        }
    }
}

static BUILDS: Mutex<Vec<(String, Build)>> = Mutex::new(Vec::new());
static NEXT_BUILD: AtomicU64 = AtomicU64::new(1);

/// Marks a snapshot id as naming a streamed build.
const BUILD_MARK: &str = "~b";

/// Whether `snapshot_id` names a build (see [`spawn_build`]).
pub fn names_build(snapshot_id: &str) -> bool {
    snapshot_id.contains(BUILD_MARK)
}

/// The build a snapshot id names (taken: only one sender gets it).
pub fn take_build(snapshot_id: &str) -> Option<Build> {
    if !snapshot_id.contains(BUILD_MARK) {
        return None;
    }
    let mut g = BUILDS.lock().unwrap_or_else(|p| p.into_inner());
    let i = g.iter().position(|(id, _)| id == snapshot_id)?;
    Some(g.remove(i).1)
}

/// Where a build writes its pairs.
pub struct ChunkSink {
    tx: tokio::sync::mpsc::UnboundedSender<Piece>,
    back: std::sync::mpsc::Receiver<PageBuf>,
    buf: PageBuf,
    total: u64,
}

impl ChunkSink {
    /// A buffer for the next chunk, with room for `need` data bytes: one
    /// given back if it fits, else a new one.
    fn fresh(&self, need: usize) -> Result<PageBuf, EngineError> {
        let mut b = match self.back.try_recv() {
            Ok(b) if b.capacity() >= need + 4 => b,
            _ => PageBuf::new((CHUNK + 4).max(need + 4))
                .map_err(|e| EngineError(format!("snapshot chunk buffer: {e}")))?,
        };
        b.clear();
        b.extend(&[0; 4]);
        Ok(b)
    }

    /// Add one pair.
    pub fn pair(&mut self, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        let need = 8 + key.len() + value.len();
        if self.buf.capacity() - self.buf.len() < need {
            self.send(Some(need))?;
        }
        let b = &mut self.buf;
        b.extend(&(key.len() as u32).to_le_bytes());
        b.extend(key);
        b.extend(&(value.len() as u32).to_le_bytes());
        b.extend(value);
        self.total += need as u64;
        Ok(())
    }

    /// Bytes of data so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Hand the filled chunk over; the next one has room for `need` bytes
    /// (none: it was the last).
    fn send(&mut self, need: Option<usize>) -> Result<(), EngineError> {
        let fresh = match need {
            Some(n) => self.fresh(n)?,
            None => PageBuf::none(),
        };
        let mut b = std::mem::replace(&mut self.buf, fresh);
        let n = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&n.to_le_bytes());
        self.tx
            .send(Piece::Chunk(b))
            .map_err(|_| EngineError("the snapshot's sender is gone".into()))
    }
}

/// Register a snapshot build: once its sender starts it
/// ([`Build::start`]), a new thread runs `build`, which writes the pairs
/// into the sink (the magic is already there). Returns the snapshot id to
/// hand openraft: `base_id` and a mark [`take_build`] finds.
pub fn spawn_build<F>(base_id: &str, hint: u64, build: F) -> String
where
    F: FnOnce(&mut ChunkSink) -> Result<(), EngineError> + Send + 'static,
{
    let id = format!(
        "{base_id}{BUILD_MARK}{}",
        NEXT_BUILD.fetch_add(1, Ordering::Relaxed)
    );
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (back_tx, back_rx) = std::sync::mpsc::channel();
    let start = move || {
        let buf = match PageBuf::new(CHUNK + 4) {
            Ok(b) => b,
            Err(e) => {
                let _ = tx.send(Piece::Failed(format!("snapshot chunk buffer: {e}")));
                return;
            }
        };
        let mut sink = ChunkSink {
            tx,
            back: back_rx,
            buf,
            total: crate::store::SNAPSHOT_MAGIC.len() as u64,
        };
        sink.buf.extend(&[0; 4]);
        sink.buf.extend(crate::store::SNAPSHOT_MAGIC);
        // A thread that cannot start drops the sink: the sender sees the
        // channel closed and fails the send.
        let _ = std::thread::Builder::new()
            .name("pmkv-snapshot".into())
            .spawn(move || {
                let (cpu0, flt0) = crate::catchup::thread_usage();
                let r = build(&mut sink).and_then(|()| {
                    if sink.buf.len() > 4 {
                        sink.send(None)
                    } else {
                        Ok(())
                    }
                });
                let (cpu1, flt1) = crate::catchup::thread_usage();
                crate::catchup::mark(|| {
                    format!(
                        "build thread: cpu {:.1} ms, {} page faults",
                        (cpu1 - cpu0) as f64 / 1e3,
                        flt1 - flt0
                    )
                });
                let piece = match r {
                    Ok(()) => Piece::End(sink.total),
                    Err(e) => Piece::Failed(e.0),
                };
                let _ = sink.tx.send(piece);
            });
    };
    let mut g = BUILDS.lock().unwrap_or_else(|p| p.into_inner());
    if g.len() >= BUILDS_KEPT {
        g.remove(0);
    }
    g.push((
        id.clone(),
        Build {
            hint,
            rx,
            back: back_tx,
            start: Some(Box::new(start)),
        },
    ));
    id
}

/// What [`PairFeed::feed`] hands each pair to.
pub type PairSink<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), String> + 'a;

/// Cuts snapshot data arriving in pieces of any size into pairs: whole
/// pairs are handed out as slices of the piece; a pair cut between two
/// pieces is put together in a small buffer first.
#[derive(Default)]
pub struct PairFeed {
    tail: Vec<u8>,
    magic: bool,
    /// Bytes fed so far.
    pub bytes: u64,
    /// Pairs handed out so far.
    pub pairs: u64,
}

/// The bytes the pair at the start of `b` takes, as far as `b` tells:
/// `Ok((n, true))` when `b` holds all `n`, `Ok((n, false))` when at
/// least `n` are needed to learn more.
fn pair_len(b: &[u8]) -> Result<(usize, bool), String> {
    let field = |at: usize| -> Result<Option<usize>, String> {
        if b.len() < at + 4 {
            return Ok(None);
        }
        let n = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize;
        if n > MAX_FIELD {
            return Err(format!("snapshot data: a field of {n} bytes"));
        }
        Ok(Some(n))
    };
    let Some(k) = field(0)? else {
        return Ok((4, false));
    };
    let Some(v) = field(4 + k)? else {
        return Ok((8 + k, false));
    };
    let n = 8 + k + v;
    Ok((n, b.len() >= n))
}

fn split_pair(b: &[u8]) -> (&[u8], &[u8]) {
    let k = u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as usize;
    let v = u32::from_le_bytes(b[4 + k..8 + k].try_into().expect("4 bytes")) as usize;
    (&b[4..4 + k], &b[8 + k..8 + k + v])
}

impl PairFeed {
    /// A feed expecting the magic first.
    pub fn new() -> PairFeed {
        PairFeed::default()
    }

    /// Hand every pair completed by `piece` to `f`, in order.
    pub fn feed(&mut self, mut piece: &[u8], f: &mut PairSink<'_>) -> Result<(), String> {
        self.bytes += piece.len() as u64;
        // First what the last piece left unfinished (the magic or a pair).
        while !self.magic || !self.tail.is_empty() {
            let (want, whole) = if self.magic {
                pair_len(&self.tail)?
            } else {
                (crate::store::SNAPSHOT_MAGIC.len(), false)
            };
            if whole {
                let (k, v) = split_pair(&self.tail);
                f(k, v)?;
                self.pairs += 1;
                self.tail.clear();
                continue;
            }
            if !self.magic && self.tail.len() >= want {
                if self.tail[..want] != crate::store::SNAPSHOT_MAGIC[..] {
                    return Err("snapshot data: bad magic".into());
                }
                self.magic = true;
                self.tail.clear();
                continue;
            }
            let take = (want - self.tail.len()).min(piece.len());
            if take == 0 {
                return Ok(());
            }
            self.tail.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
        }
        // Then the whole pairs in place; what is left waits for the next.
        loop {
            match pair_len(piece)? {
                (n, true) => {
                    let (k, v) = split_pair(&piece[..n]);
                    f(k, v)?;
                    self.pairs += 1;
                    piece = &piece[n..];
                    if piece.is_empty() {
                        return Ok(());
                    }
                }
                _ => {
                    self.tail.extend_from_slice(piece);
                    return Ok(());
                }
            }
        }
    }

    /// Whether the data fed so far ends on a whole pair.
    pub fn finish(&self) -> Result<(), String> {
        if !self.magic {
            return Err("snapshot data: bad magic".into());
        }
        if !self.tail.is_empty() {
            return Err(format!(
                "snapshot data: {} bytes of a pair cut off at the end",
                self.tail.len()
            ));
        }
        Ok(())
    }
}

/// A snapshot written into an engine as its data arrives: a staged
/// restore, begun by the state machine's `stage_begin` and committed (or,
/// if a write dropped the engine's stage on the way, restored from the
/// kept data) by its `install`. Shared by the file-log and engine-log state
/// machines; the engine-log one also leaves out its reserved keys and puts
/// its membership record among the pairs in key order.
pub struct StagedRestore {
    /// The snapshot's id.
    pub id: String,
    /// The snapshot's last log id.
    pub at: crate::types::LogId,
    /// The pairs received so far.
    pub feed: PairFeed,
    /// A record (key, value) to write in its key order among the pairs.
    pending: Option<(&'static [u8], Vec<u8>)>,
    /// Keys of the data not written into the engine.
    skip: fn(&[u8]) -> bool,
    /// The data as received.
    chunks: Vec<Box<dyn AsRef<[u8]> + Send>>,
    /// Every pair arrived and was written.
    pub complete: bool,
}

impl StagedRestore {
    /// A staged restore of snapshot `id` (last log id `at`) that writes
    /// `pending` in its key order and leaves out the keys `skip` names.
    pub fn new(
        id: String,
        at: crate::types::LogId,
        pending: Option<(&'static [u8], Vec<u8>)>,
        skip: fn(&[u8]) -> bool,
    ) -> StagedRestore {
        StagedRestore {
            id,
            at,
            feed: PairFeed::new(),
            pending,
            skip,
            chunks: Vec::new(),
            complete: false,
        }
    }

    /// The staged restore in `slot` if it is snapshot `id`'s, taken out.
    pub fn take_named(slot: &mut Option<StagedRestore>, id: &str) -> Option<StagedRestore> {
        slot.take_if(|st| st.id == id)
    }

    /// The next `piece` of snapshot `id`'s data: its pairs are written into
    /// `engine`'s stage now and the piece is kept until the install. A
    /// write the engine refuses ends the stage (the kept data is restored
    /// by the install instead). `Err` when `id` is not being staged, or on
    /// data that is not a snapshot (the staging is then dropped).
    pub fn data<B: AsRef<[u8]> + Send + 'static>(
        slot: &mut Option<StagedRestore>,
        engine: &mut dyn crate::engine::KvEngine,
        id: &str,
        piece: B,
    ) -> Result<(), String> {
        let Some(st) = slot.as_mut().filter(|st| st.id == id) else {
            return Err("no snapshot being staged".into());
        };
        let mut live = engine.stage_active();
        let (pending, skip) = (&mut st.pending, st.skip);
        let r = st.feed.feed(piece.as_ref(), &mut |k, v| {
            if skip(k) || !live {
                return Ok(());
            }
            if pending.as_ref().is_some_and(|(pk, _)| k > *pk) {
                let (pk, rec) = pending.take().expect("checked");
                live = engine.stage_push(pk, &rec).is_ok();
            }
            live = live && engine.stage_push(k, v).is_ok();
            Ok(())
        });
        st.chunks.push(Box::new(piece));
        if let Err(e) = r {
            *slot = None;
            engine.stage_abort();
            return Err(e);
        }
        Ok(())
    }

    /// All of snapshot `id`'s data arrived: `Err` when `id` is not being
    /// staged or the data ends inside a pair (the staging is then dropped).
    pub fn end(
        slot: &mut Option<StagedRestore>,
        engine: &mut dyn crate::engine::KvEngine,
        id: &str,
    ) -> Result<(), String> {
        let Some(st) = slot.as_mut().filter(|st| st.id == id) else {
            return Err("no snapshot being staged".into());
        };
        if let Err(e) = st.feed.finish() {
            *slot = None;
            engine.stage_abort();
            return Err(e);
        }
        if let Some((pk, rec)) = st.pending.take() {
            if engine.stage_active() && engine.stage_push(pk, &rec).is_err() {
                engine.stage_abort();
            }
        }
        st.complete = true;
        crate::catchup::mark(|| format!("install staged {} bytes", st.feed.bytes));
        Ok(())
    }

    /// Drop the staging in `slot` if it is snapshot `id`'s (its install did
    /// not happen); the engine's stage is aborted.
    pub fn drop_named(
        slot: &mut Option<StagedRestore>,
        engine: &mut dyn crate::engine::KvEngine,
        id: &str,
    ) {
        if Self::take_named(slot, id).is_some() {
            engine.stage_abort();
        }
    }

    /// The data as received, in one buffer (for a restore from it).
    pub fn kept_data(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(self.feed.bytes as usize);
        for c in &self.chunks {
            data.extend_from_slice((**c).as_ref());
        }
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        crate::store::encode_snapshot(pairs.iter().cloned().map(Ok), 0).unwrap()
    }

    #[test]
    fn a_page_buffer_fills_up_to_its_capacity_and_no_further() {
        for cap in [0, 1, 4096, HUGE - 4, HUGE + 1] {
            let mut b = PageBuf::new(cap).unwrap();
            assert_eq!((b.len(), b.capacity()), (0, cap));
            assert!(b.spare().iter().all(|x| *x == 0), "zeroed");
            let half = vec![7u8; cap / 2];
            assert!(b.extend(&half));
            let rest = cap - cap / 2;
            b.spare()[..rest].fill(9);
            b.advance(rest);
            assert_eq!(b.len(), cap);
            assert!(!b.extend(&[1]) || cap == usize::MAX, "full");
            assert!(b[..cap / 2].iter().all(|x| *x == 7));
            assert!(b[cap / 2..].iter().all(|x| *x == 9));
            b.clear();
            assert!(b.is_empty());
        }
        assert!(PageBuf::none().is_empty());
    }

    #[test]
    fn pair_feed_cuts_pieces_of_any_size_into_the_pairs() {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..40u32)
            .map(|i| {
                (
                    format!("k{i:03}").into_bytes(),
                    vec![i as u8; (i * 37) as usize],
                )
            })
            .collect();
        let d = data(&pairs);
        for step in [1, 2, 3, 7, 8, 9, 100, 1000, d.len()] {
            let mut feed = PairFeed::new();
            let mut got = Vec::new();
            for piece in d.chunks(step) {
                feed.feed(piece, &mut |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    Ok(())
                })
                .unwrap();
            }
            feed.finish().unwrap();
            assert_eq!(got, pairs, "pieces of {step}");
            assert_eq!((feed.bytes, feed.pairs), (d.len() as u64, 40));
        }
        // Cut short, bad magic, a bogus length: refused.
        let mut feed = PairFeed::new();
        feed.feed(&d[..d.len() - 3], &mut |_, _| Ok(())).unwrap();
        assert!(feed.finish().is_err());
        let mut bad = d.clone();
        bad[0] ^= 1;
        assert!(PairFeed::new().feed(&bad, &mut |_, _| Ok(())).is_err());
        let mut huge = d.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(PairFeed::new().feed(&huge, &mut |_, _| Ok(())).is_err());
    }

    #[test]
    fn a_build_streams_its_pairs_in_chunks_to_whoever_takes_it() {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..50u32)
            .map(|i| (format!("b{i:03}").into_bytes(), vec![7; 100_000]))
            .collect();
        let p2 = pairs.clone();
        let id = spawn_build("9-1", 0, move |sink| {
            for (k, v) in &p2 {
                sink.pair(k, v)?;
            }
            Ok(())
        });
        assert!(id.starts_with("9-1"));
        assert!(take_build("9-1").is_none(), "the plain id names no build");
        let mut b = take_build(&id).expect("the build is registered");
        assert!(take_build(&id).is_none(), "taken once");
        b.start();
        b.start();
        let mut feed = PairFeed::new();
        let mut got = Vec::new();
        let mut chunks = 0;
        loop {
            match b.rx.blocking_recv() {
                Some(Piece::Chunk(c)) => {
                    let n = u32::from_le_bytes(c[..4].try_into().unwrap()) as usize;
                    assert_eq!(n, c.len() - 4);
                    assert!(n <= CHUNK, "chunk of {n}");
                    chunks += 1;
                    feed.feed(&c[4..], &mut |k, v| {
                        got.push((k.to_vec(), v.to_vec()));
                        Ok(())
                    })
                    .unwrap();
                    let _ = b.back.send(c);
                }
                Some(Piece::End(total)) => {
                    assert_eq!(total, feed.bytes);
                    break;
                }
                Some(Piece::Failed(e)) => panic!("{e}"),
                None => panic!("the build stopped without an end"),
            }
        }
        feed.finish().unwrap();
        assert_eq!(got, pairs);
        assert!(chunks as u64 > feed.bytes / CHUNK as u64, "{chunks} chunks");
        // A failing build says so.
        let id = spawn_build("9-2", 0, |_| Err(EngineError("no engine".into())));
        let mut b = take_build(&id).unwrap();
        b.start();
        loop {
            match b.rx.blocking_recv() {
                Some(Piece::Failed(e)) => {
                    assert!(e.contains("no engine"));
                    break;
                }
                Some(_) => {}
                None => panic!("no failure reported"),
            }
        }
    }
}
