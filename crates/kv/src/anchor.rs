//! The `anchor` engine: PMDK's libpmemobj, used the way PM programmers use
//! it today, so that the other engines are compared with it.
//!
//! The pool is a libpmemobj pool (layout `pmlab-kv-anchor-1`). Its root
//! object holds the head of a singly linked list of records, newest first
//! (next offset, version, key and value lengths, kind, magic, key, value),
//! and the last version and discard floor. Every change is one libpmemobj
//! transaction (undo log, allocation and free inside it), in the C shim
//! `csrc/anchor.c`; a DRAM index of every retained version, rebuilt on open
//! by walking the list, serves reads. Each write is durable on return.
//!
//! The engine needs `libpmemobj.h` at build time; without it this module
//! compiles to stubs that fail with [`ErrorKind::Unsupported`].

#[cfg(not(pmkv_anchor))]
mod imp {
    use crate::{Engine, Error, ErrorKind, Options, Result};
    use std::path::Path;

    pub(crate) const AVAILABLE: bool = false;

    fn missing() -> Error {
        Error::new(
            ErrorKind::Unsupported,
            "engine anchor is not in this build: libpmemobj.h was missing when pmlab-kv was compiled (install libpmemobj-dev and rebuild)",
        )
    }

    pub(crate) fn create(_: &Path, _: &Options) -> Result<Box<dyn Engine>> {
        Err(missing())
    }

    pub(crate) fn open(_: &Path, _: &Options) -> Result<Box<dyn Engine>> {
        Err(missing())
    }
}

#[cfg(pmkv_anchor)]
mod imp {
    use crate::error::{Error, ErrorKind, Result};
    use crate::index::Index;
    use crate::{
        check_history, check_sizes, check_version, show, Engine, EngineKind, Options, Snapshot,
        Usage, VersionEntry,
    };
    use std::collections::HashMap;
    use std::ffi::{c_char, c_void, CStr, CString};
    use std::path::Path;

    pub(crate) const AVAILABLE: bool = true;

    const MAGIC: u32 = 0x4b56_524b;
    const HDR: u64 = 32;
    /// libpmemobj's smallest pool.
    const MIN_POOL: u64 = 8 << 20;

    #[repr(C)]
    struct Root {
        head: u64,
        last: u64,
        floor: u64,
        count: u64,
    }

    extern "C" {
        fn kva_errormsg() -> *const c_char;
        fn kva_open(path: *const c_char, create: i32, size: u64) -> *mut c_void;
        fn kva_close(pop: *mut c_void);
        fn kva_root(pop: *mut c_void) -> *mut Root;
        fn kva_usable(pop: *mut c_void, off: u64) -> u64;
        fn kva_append(
            pop: *mut c_void,
            kind: u32,
            version: u64,
            key: *const u8,
            klen: u32,
            val: *const u8,
            vlen: u32,
            off: *mut u64,
        ) -> i32;
        fn kva_rollback(pop: *mut c_void, idx: u64) -> i32;
        fn kva_unlink(pop: *mut c_void, offs: *const u64, n: usize, floor: u64) -> i32;
        fn kva_restore(
            pop: *mut c_void,
            idx: u64,
            n: usize,
            keys: *const *const u8,
            klens: *const u32,
            vals: *const *const u8,
            vlens: *const u32,
        ) -> i32;
    }

    /// Record offset of each (key, version).
    type Offsets = HashMap<(Vec<u8>, u64), u64>;

    /// A value in the pool: offset of its bytes and length.
    #[derive(Clone, Copy, Debug)]
    struct Val {
        pos: u64,
        len: u32,
    }

    struct Anchor {
        pop: *mut c_void,
        len: u64,
        index: Index<Val>,
        /// Record offset of every retained (key, version).
        recs: Offsets,
    }

    // SAFETY: the pool handle is used only through &self/&mut self.
    unsafe impl Send for Anchor {}

    impl Drop for Anchor {
        fn drop(&mut self) {
            // SAFETY: pop came from kva_open and is closed once.
            unsafe { kva_close(self.pop) };
        }
    }

    fn pmdk_error(what: &str, code: i32) -> Error {
        // SAFETY: pmemobj_errormsg returns a NUL-terminated thread-local string.
        let msg = unsafe { CStr::from_ptr(kva_errormsg()) }
            .to_string_lossy()
            .into_owned();
        let os = std::io::Error::from_raw_os_error(code);
        let kind = if code == libc::ENOMEM {
            ErrorKind::Full
        } else {
            ErrorKind::Io
        };
        Error::new(
            kind,
            format!(
                "anchor: {what}: {} ({os})",
                if msg.is_empty() {
                    "libpmemobj failed"
                } else {
                    &msg
                }
            ),
        )
    }

    fn cpath(path: &Path) -> Result<CString> {
        CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{}: path holds a NUL byte", path.display()),
            )
        })
    }

    pub(crate) fn create(path: &Path, opts: &Options) -> Result<Box<dyn Engine>> {
        if path.exists() {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "{}: File exists (remove it or pick another path)",
                    path.display()
                ),
            ));
        }
        if opts.size < MIN_POOL {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "pool size {}: libpmemobj needs at least {MIN_POOL} bytes",
                    opts.size
                ),
            ));
        }
        let c = cpath(path)?;
        // SAFETY: c is a valid C string.
        let pop = unsafe { kva_open(c.as_ptr(), 1, opts.size) };
        if pop.is_null() {
            let code = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            return Err(pmdk_error(&format!("create {}", path.display()), code));
        }
        Ok(Box::new(Anchor::with(pop, path)?))
    }

    pub(crate) fn open(path: &Path, _opts: &Options) -> Result<Box<dyn Engine>> {
        let found = crate::detect(path)?;
        if found != EngineKind::Anchor {
            return Err(Error::new(
                ErrorKind::WrongEngine,
                format!(
                    "{}: the pool holds {}, not anchor (pass --engine {})",
                    path.display(),
                    found.name(),
                    found.name()
                ),
            ));
        }
        let c = cpath(path)?;
        // SAFETY: c is a valid C string.
        let pop = unsafe { kva_open(c.as_ptr(), 0, 0) };
        if pop.is_null() {
            let code = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            return Err(pmdk_error(&format!("open {}", path.display()), code));
        }
        Ok(Box::new(Anchor::with(pop, path)?))
    }

    /// One record as found on the list.
    struct Rec {
        off: u64,
        version: u64,
        kind: u32,
        key: Vec<u8>,
        val: Val,
    }

    impl Anchor {
        /// Replace the contents with `pairs` (in strictly increasing key
        /// order) at version `index`, in one PMDK transaction.
        fn restore_pairs(&mut self, index: u64, pairs: &[(&[u8], &[u8])]) -> Result<()> {
            let keys: Vec<*const u8> = pairs.iter().map(|(k, _)| k.as_ptr()).collect();
            let klens: Vec<u32> = pairs.iter().map(|(k, _)| k.len() as u32).collect();
            let vals: Vec<*const u8> = pairs.iter().map(|(_, v)| v.as_ptr()).collect();
            let vlens: Vec<u32> = pairs.iter().map(|(_, v)| v.len() as u32).collect();
            // SAFETY: the arrays hold pairs.len() pointers to live slices with their lengths.
            let rc = unsafe {
                kva_restore(
                    self.pop,
                    index,
                    pairs.len(),
                    keys.as_ptr(),
                    klens.as_ptr(),
                    vals.as_ptr(),
                    vlens.as_ptr(),
                )
            };
            if rc != 0 {
                return Err(pmdk_error("restore", rc));
            }
            let (i, r) = self.rebuild()?;
            self.index = i;
            self.recs = r;
            Ok(())
        }

        fn with(pop: *mut c_void, path: &Path) -> Result<Anchor> {
            let len = std::fs::metadata(path)
                .map_err(|e| Error::io(path.display(), e))?
                .len();
            crate::pm::register_pm(pop as *const u8, len as usize);
            let mut a = Anchor {
                pop,
                len,
                index: Index::new(0, 0),
                recs: HashMap::new(),
            };
            let (index, recs) = a.rebuild()?;
            a.index = index;
            a.recs = recs;
            Ok(a)
        }

        fn root(&self) -> &Root {
            // SAFETY: the root object lives as long as the pool is open.
            unsafe { &*kva_root(self.pop) }
        }

        fn bytes(&self, off: u64, len: u64) -> Result<&[u8]> {
            if off == 0 || off.checked_add(len).is_none_or(|e| e > self.len) {
                return Err(Error::inconsistent(format!(
                    "anchor: range {off:#x}+{len} leaves the pool"
                )));
            }
            // SAFETY: the pool maps the whole file from pop; the range is inside it.
            Ok(unsafe {
                std::slice::from_raw_parts((self.pop as *const u8).add(off as usize), len as usize)
            })
        }

        /// Walk the list, checking every record.
        fn walk(&self) -> Result<Vec<Rec>> {
            let root = self.root();
            let mut out = Vec::new();
            let mut off = root.head;
            let mut prev = u64::MAX;
            while off != 0 {
                let h = self.bytes(off, HDR)?;
                let word = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or([0; 8]));
                let half = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap_or([0; 4]));
                let (next, version, klen, vlen, kind, magic) =
                    (word(0), word(8), half(16), half(20), half(24), half(28));
                let at = format!("anchor: record {off:#x}");
                if magic != MAGIC || !(1..=2).contains(&kind) || (kind == 2 && vlen != 0) {
                    return Err(Error::inconsistent(format!(
                        "{at}: bad header (kind {kind})"
                    )));
                }
                if version > prev || version > root.last || version == 0 {
                    return Err(Error::inconsistent(format!(
                        "{at}: version {version} after {prev} on a newest-first list (last {})",
                        root.last
                    )));
                }
                let key = self.bytes(off + HDR, klen as u64)?.to_vec();
                self.bytes(off + HDR + klen as u64, vlen as u64)?;
                out.push(Rec {
                    off,
                    version,
                    kind,
                    key,
                    val: Val {
                        pos: off + HDR + klen as u64,
                        len: vlen,
                    },
                });
                if out.len() as u64 > root.count || out.len() as u64 > self.len / HDR {
                    return Err(Error::inconsistent(format!(
                        "anchor: more records than the root's count {}",
                        root.count
                    )));
                }
                prev = version;
                off = next;
            }
            if out.len() as u64 != root.count {
                return Err(Error::inconsistent(format!(
                    "anchor: {} records on the list, the root counts {}",
                    out.len(),
                    root.count
                )));
            }
            Ok(out)
        }

        fn rebuild(&self) -> Result<(Index<Val>, Offsets)> {
            let root = self.root();
            if root.floor > root.last {
                return Err(Error::inconsistent(format!(
                    "anchor: floor {} above last {}",
                    root.floor, root.last
                )));
            }
            let mut index = Index::new(root.last, root.floor);
            let mut recs = HashMap::new();
            for r in self.walk()?.into_iter().rev() {
                index
                    .push(
                        &r.key,
                        r.version,
                        if r.kind == 1 { Some(r.val) } else { None },
                    )
                    .map_err(|e| Error::inconsistent(format!("anchor: {e}")))?;
                recs.insert((r.key, r.version), r.off);
            }
            Ok((index, recs))
        }

        fn value(&self, v: &Val) -> Result<Vec<u8>> {
            Ok(self.bytes(v.pos, v.len as u64)?.to_vec())
        }

        fn history_of(&self, index: &Index<Val>) -> Result<Vec<VersionEntry>> {
            let mut out = Vec::new();
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
    }

    impl Engine for Anchor {
        fn kind(&self) -> EngineKind {
            EngineKind::Anchor
        }

        fn get_at(&self, key: &[u8], index: u64) -> Result<Option<Vec<u8>>> {
            match self.index.lookup(key, index)? {
                Some(Some(v)) => Ok(Some(self.value(v)?)),
                _ => Ok(None),
            }
        }

        fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> Result<()> {
            check_version(self.index.last, version)?;
            check_sizes(key, value)?;
            let v = value.unwrap_or(&[]);
            let mut off = 0u64;
            // SAFETY: pointers and lengths describe live slices; off is written on success.
            let rc = unsafe {
                kva_append(
                    self.pop,
                    if value.is_some() { 1 } else { 2 },
                    version,
                    key.as_ptr(),
                    key.len() as u32,
                    v.as_ptr(),
                    v.len() as u32,
                    &mut off,
                )
            };
            if rc != 0 {
                return Err(pmdk_error("append", rc));
            }
            let val = value.map(|v| Val {
                pos: off + HDR + key.len() as u64,
                len: v.len() as u32,
            });
            self.index.push(key, version, val)?;
            self.index.last = version;
            self.recs.insert((key.to_vec(), version), off);
            Ok(())
        }

        fn sync(&mut self) -> Result<()> {
            Ok(())
        }

        fn last_version(&self) -> u64 {
            self.index.last
        }

        fn floor(&self) -> u64 {
            self.index.floor
        }

        fn rollback_above(&mut self, index: u64) -> Result<()> {
            crate::check_read(self.index.floor, index)?;
            // SAFETY: pop is open.
            let rc = unsafe { kva_rollback(self.pop, index) };
            if rc != 0 {
                return Err(pmdk_error("rollback", rc));
            }
            for (k, v, _) in self.index.rollback(index)? {
                self.recs.remove(&(k, v));
            }
            Ok(())
        }

        fn discard_below(&mut self, index: u64) -> Result<()> {
            if index > self.index.last {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "discard below {index}: above the last version {}",
                        self.index.last
                    ),
                ));
            }
            if index <= self.index.floor {
                return Ok(());
            }
            let mut trial = Index::new(self.index.last, self.index.floor);
            std::mem::swap(&mut trial, &mut self.index);
            let removed = trial.discard(index);
            std::mem::swap(&mut trial, &mut self.index);
            let removed = removed?;
            let mut offs: Vec<u64> = removed
                .iter()
                .filter_map(|(k, v, _)| self.recs.get(&(k.clone(), *v)).copied())
                .collect();
            offs.sort_unstable();
            // SAFETY: offs is a live sorted slice.
            let rc = unsafe { kva_unlink(self.pop, offs.as_ptr(), offs.len(), index) };
            if rc != 0 {
                // The DRAM index already dropped them: rebuild it from the pool.
                let (i, r) = self.rebuild()?;
                self.index = i;
                self.recs = r;
                return Err(pmdk_error("discard", rc));
            }
            for (k, v, _) in removed {
                self.recs.remove(&(k, v));
            }
            Ok(())
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
            let map = crate::restore_entries(entries)?;
            let pairs: Vec<(&[u8], &[u8])> = map
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            self.restore_pairs(index, &pairs)
        }

        fn restore_sorted<'a>(
            &mut self,
            index: u64,
            entries: &mut dyn Iterator<Item = (&'a [u8], &'a [u8])>,
        ) -> Result<()> {
            let pairs: Vec<(&[u8], &[u8])> = entries.collect();
            if !crate::sorted_pairs(&pairs)? {
                let mut owned = pairs.iter().map(|(k, v)| (k.to_vec(), v.to_vec()));
                return self.restore(index, &mut owned);
            }
            self.restore_pairs(index, &pairs)
        }

        fn history(&self) -> Result<Vec<VersionEntry>> {
            self.history_of(&self.index)
        }

        fn written_above(&self, index: u64) -> Result<Vec<(u64, Vec<u8>)>> {
            Ok(self.index.written_above(index))
        }

        fn check(&self) -> Result<()> {
            let (index, _) = self.rebuild()?;
            let h = self.history()?;
            check_history(&h, self.index.last, self.index.floor)?;
            if index.last != self.index.last || index.floor != self.index.floor {
                return Err(Error::inconsistent(
                    "anchor: the root's last version or floor differs from the DRAM index",
                ));
            }
            let h2 = self.history_of(&index)?;
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
                    "anchor: the DRAM index and the list differ at {}",
                    at.unwrap_or_default()
                )));
            }
            Ok(())
        }

        fn compact(&mut self) -> Result<()> {
            Ok(())
        }

        fn usage(&self) -> Usage {
            // libpmemobj keeps a 16-byte header before each allocation.
            // SAFETY: every offset in recs is a live allocation of the open pool.
            let pm: u64 = self
                .recs
                .values()
                .map(|off| 16 + unsafe { kva_usable(self.pop, *off) })
                .sum();
            let data: u64 = self
                .history()
                .unwrap_or_default()
                .iter()
                .map(|e| (e.key.len() + e.value.as_ref().map_or(0, |v| v.len())) as u64)
                .sum();
            Usage {
                pm_bytes: pm,
                data_bytes: data,
                versions: self.index.versions,
                compactions: 0,
            }
        }
    }
}

pub(crate) use imp::{create, open, AVAILABLE};
