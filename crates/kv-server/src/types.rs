//! The Raft type configuration: commands, replies and node addresses.

use std::fmt;
use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// A node's identifier in the cluster (1, 2, 3, ...).
pub type NodeId = u64;

/// Where a node listens: its Raft RPC address and its RESP client address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeAddr {
    /// `host:port` of the Raft RPC listener.
    pub raft: String,
    /// `host:port` of the RESP listener clients use.
    pub client: String,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft {} client {}", self.raft, self.client)
    }
}

/// A replicated write: one Raft log entry, applied at its log index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cmd {
    /// Set `key` to `value`.
    Set {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Delete `key`.
    Del {
        /// The key.
        key: Vec<u8>,
    },
    /// Set `key` to `new` if its value is `expected`.
    Cas {
        /// The key.
        key: Vec<u8>,
        /// The value the key must hold.
        expected: Vec<u8>,
        /// The value to store.
        new: Vec<u8>,
    },
}

/// The state machine's answer to a [`Cmd`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// A blank or membership entry: no answer.
    None,
    /// A set was stored.
    Ok,
    /// Whether a delete found its key, or whether a compare-and-set stored.
    Bool(bool),
}

openraft::declare_raft_types!(
    /// The openraft type configuration of the service.
    pub TypeConfig:
        D = Cmd,
        R = Reply,
        NodeId = NodeId,
        Node = NodeAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft handle of this service.
pub type Raft = openraft::Raft<TypeConfig>;
/// A log id (term, leader, index).
pub type LogId = openraft::LogId<NodeId>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// Storage errors as openraft wants them.
pub type StorageError = openraft::StorageError<NodeId>;
/// The stored membership.
pub type StoredMembership = openraft::StoredMembership<NodeId, NodeAddr>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, NodeAddr>;

/// The compact binary encoding of log entries and Raft messages (the wire
/// format of `net` and the record format of the separate log file).
///
/// Integers are little-endian and fixed-width; byte strings (keys,
/// values, snapshot data) are a `u32` length and the raw bytes; an
/// `Option` is a `0`/`1` byte and the value. Rarely sent structures
/// (membership, snapshot metadata, Raft errors) are embedded as
/// length-prefixed JSON. Every message and record starts with
/// [`codec::VERSION`], so a node of another format is recognised.
pub mod codec {
    use super::{Cmd, Entry, LogId, NodeId};
    use openraft::{CommittedLeaderId, EntryPayload, Vote};
    use serde::{de::DeserializeOwned, Serialize};

    /// The format byte that starts every binary message and log record
    /// (never `{`, which starts the JSON of older versions).
    pub const VERSION: u8 = 0xB1;

    /// A decoding failure: what was malformed.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DecodeError(pub String);

    impl std::fmt::Display for DecodeError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for DecodeError {}

    /// Result of a decode.
    pub type DResult<T> = Result<T, DecodeError>;

    /// An output buffer with the encoders.
    #[derive(Debug, Default)]
    pub struct Enc {
        /// The bytes written so far.
        pub buf: Vec<u8>,
    }

    impl Enc {
        /// An empty buffer with room for `n` bytes.
        pub fn with_capacity(n: usize) -> Enc {
            Enc {
                buf: Vec::with_capacity(n),
            }
        }
        /// One byte.
        pub fn u8(&mut self, x: u8) {
            self.buf.push(x);
        }
        /// A little-endian `u64`.
        pub fn u64(&mut self, x: u64) {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
        /// A `u32` length and the bytes.
        pub fn bytes(&mut self, b: &[u8]) {
            self.buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
            self.buf.extend_from_slice(b);
        }
        /// A value as length-prefixed JSON (for rarely sent structures).
        pub fn json<T: Serialize>(&mut self, x: &T) {
            let b = serde_json::to_vec(x).unwrap_or_default();
            self.bytes(&b);
        }
        /// A log id: term, leader node, index.
        pub fn log_id(&mut self, l: &LogId) {
            self.u64(l.leader_id.term);
            self.u64(l.leader_id.node_id);
            self.u64(l.index);
        }
        /// An optional log id.
        pub fn opt_log_id(&mut self, l: &Option<LogId>) {
            match l {
                None => self.u8(0),
                Some(l) => {
                    self.u8(1);
                    self.log_id(l);
                }
            }
        }
        /// A vote: term, node, committed.
        pub fn vote(&mut self, v: &Vote<NodeId>) {
            self.u64(v.leader_id.term);
            self.u64(v.leader_id.node_id);
            self.u8(v.committed as u8);
        }
        /// A command.
        pub fn cmd(&mut self, c: &Cmd) {
            match c {
                Cmd::Set { key, value } => {
                    self.u8(0);
                    self.bytes(key);
                    self.bytes(value);
                }
                Cmd::Del { key } => {
                    self.u8(1);
                    self.bytes(key);
                }
                Cmd::Cas { key, expected, new } => {
                    self.u8(2);
                    self.bytes(key);
                    self.bytes(expected);
                    self.bytes(new);
                }
            }
        }
        /// A log entry: its log id and payload.
        pub fn entry(&mut self, e: &Entry) {
            self.log_id(&e.log_id);
            match &e.payload {
                EntryPayload::Blank => self.u8(0),
                EntryPayload::Normal(c) => {
                    self.u8(1);
                    self.cmd(c);
                }
                EntryPayload::Membership(m) => {
                    self.u8(2);
                    self.json(m);
                }
            }
        }
    }

    /// A reader over encoded bytes; every read checks the length left.
    #[derive(Debug)]
    pub struct Dec<'a> {
        b: &'a [u8],
    }

    impl<'a> Dec<'a> {
        /// Read `b` from its start.
        pub fn new(b: &'a [u8]) -> Dec<'a> {
            Dec { b }
        }
        /// Bytes not yet read.
        pub fn remaining(&self) -> usize {
            self.b.len()
        }
        fn take(&mut self, n: usize) -> DResult<&'a [u8]> {
            if n > self.b.len() {
                return Err(DecodeError(format!(
                    "truncated: {n} bytes wanted, {} left",
                    self.b.len()
                )));
            }
            let (h, t) = self.b.split_at(n);
            self.b = t;
            Ok(h)
        }
        /// One byte.
        pub fn u8(&mut self) -> DResult<u8> {
            Ok(self.take(1)?[0])
        }
        /// A little-endian `u64`.
        pub fn u64(&mut self) -> DResult<u64> {
            Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
        }
        /// A boolean byte (0 or 1).
        pub fn bool(&mut self) -> DResult<bool> {
            match self.u8()? {
                0 => Ok(false),
                1 => Ok(true),
                t => Err(DecodeError(format!("bad boolean {t}"))),
            }
        }
        /// A length-prefixed byte string, borrowed.
        pub fn slice(&mut self) -> DResult<&'a [u8]> {
            let n = u32::from_le_bytes(self.take(4)?.try_into().unwrap()) as usize;
            self.take(n)
        }
        /// A length-prefixed byte string.
        pub fn bytes(&mut self) -> DResult<Vec<u8>> {
            Ok(self.slice()?.to_vec())
        }
        /// A length-prefixed JSON value.
        pub fn json<T: DeserializeOwned>(&mut self) -> DResult<T> {
            serde_json::from_slice(self.slice()?).map_err(|e| DecodeError(e.to_string()))
        }
        /// A log id.
        pub fn log_id(&mut self) -> DResult<LogId> {
            let term = self.u64()?;
            let node = self.u64()?;
            let index = self.u64()?;
            Ok(LogId::new(CommittedLeaderId::new(term, node), index))
        }
        /// An optional log id.
        pub fn opt_log_id(&mut self) -> DResult<Option<LogId>> {
            Ok(if self.bool()? {
                Some(self.log_id()?)
            } else {
                None
            })
        }
        /// A vote.
        pub fn vote(&mut self) -> DResult<Vote<NodeId>> {
            let term = self.u64()?;
            let node = self.u64()?;
            Ok(if self.bool()? {
                Vote::new_committed(term, node)
            } else {
                Vote::new(term, node)
            })
        }
        /// A command.
        pub fn cmd(&mut self) -> DResult<Cmd> {
            Ok(match self.u8()? {
                0 => Cmd::Set {
                    key: self.bytes()?,
                    value: self.bytes()?,
                },
                1 => Cmd::Del { key: self.bytes()? },
                2 => Cmd::Cas {
                    key: self.bytes()?,
                    expected: self.bytes()?,
                    new: self.bytes()?,
                },
                t => return Err(DecodeError(format!("unknown command tag {t}"))),
            })
        }
        /// A log entry.
        pub fn entry(&mut self) -> DResult<Entry> {
            let log_id = self.log_id()?;
            let payload = match self.u8()? {
                0 => EntryPayload::Blank,
                1 => EntryPayload::Normal(self.cmd()?),
                2 => EntryPayload::Membership(self.json()?),
                t => return Err(DecodeError(format!("unknown entry tag {t}"))),
            };
            Ok(Entry { log_id, payload })
        }
    }

    /// One log entry as a record body: [`VERSION`] and the entry.
    pub fn encode_entry(e: &Entry) -> Vec<u8> {
        let mut w = Enc::with_capacity(64 + entry_size_hint(e));
        w.u8(VERSION);
        w.entry(e);
        w.buf
    }

    /// A record body written by [`encode_entry`]; one that starts with `{`
    /// is the JSON of older versions and is read as such.
    pub fn decode_entry(b: &[u8]) -> DResult<Entry> {
        match b.first() {
            Some(&VERSION) => {
                let mut r = Dec::new(&b[1..]);
                let e = r.entry()?;
                if r.remaining() != 0 {
                    return Err(DecodeError("trailing bytes after a log entry".into()));
                }
                Ok(e)
            }
            Some(b'{') => serde_json::from_slice(b).map_err(|e| DecodeError(e.to_string())),
            Some(t) => Err(DecodeError(format!("unknown record format byte {t:#x}"))),
            None => Err(DecodeError("empty record".into())),
        }
    }

    /// Roughly how many bytes an entry's command takes.
    pub fn entry_size_hint(e: &Entry) -> usize {
        match &e.payload {
            EntryPayload::Normal(Cmd::Set { key, value }) => key.len() + value.len() + 16,
            EntryPayload::Normal(Cmd::Del { key }) => key.len() + 8,
            EntryPayload::Normal(Cmd::Cas { key, expected, new }) => {
                key.len() + expected.len() + new.len() + 24
            }
            _ => 256,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::codec::{decode_entry, encode_entry, Dec, Enc, VERSION};
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload, Membership};
    use std::collections::{BTreeMap, BTreeSet};

    fn lid(term: u64, node: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    fn entries() -> Vec<Entry> {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            1,
            NodeAddr {
                raft: "127.0.0.1:1".into(),
                client: "127.0.0.1:2".into(),
            },
        );
        let m = Membership::new(vec![BTreeSet::from([1u64])], nodes);
        vec![
            Entry {
                log_id: lid(1, 1, 0),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: lid(1, 1, 1),
                payload: EntryPayload::Membership(m),
            },
            Entry {
                log_id: lid(2, 3, 2),
                payload: EntryPayload::Normal(Cmd::Set {
                    key: b"k".to_vec(),
                    value: (0..=255u8).collect(),
                }),
            },
            Entry {
                log_id: lid(2, 3, 3),
                payload: EntryPayload::Normal(Cmd::Del { key: Vec::new() }),
            },
            Entry {
                log_id: lid(u64::MAX, 3, 4),
                payload: EntryPayload::Normal(Cmd::Cas {
                    key: b"k".to_vec(),
                    expected: b"a".to_vec(),
                    new: vec![0; 4096],
                }),
            },
        ]
    }

    #[test]
    fn entries_round_trip_and_values_stay_raw() {
        for e in entries() {
            let b = encode_entry(&e);
            assert_eq!(b[0], VERSION);
            assert_eq!(decode_entry(&b).unwrap(), e);
            // A cut record is an error, never a panic.
            for cut in 0..b.len() {
                assert!(decode_entry(&b[..cut]).is_err(), "cut at {cut}");
            }
        }
        // A 4 KiB value costs its bytes plus a fixed header.
        let big = &entries()[4];
        assert!(encode_entry(big).len() < 4096 + 64);
    }

    #[test]
    fn json_records_of_older_versions_are_still_read() {
        for e in entries() {
            let json = serde_json::to_vec(&e).unwrap();
            assert_eq!(decode_entry(&json).unwrap(), e);
        }
        let err = decode_entry(&[0x42, 1, 2]).unwrap_err();
        assert!(err.0.contains("format byte"), "{err}");
    }

    #[test]
    fn votes_and_log_ids_round_trip() {
        let mut w = Enc::default();
        let v1 = openraft::Vote::new(7, 2);
        let v2 = openraft::Vote::new_committed(9, 3);
        w.vote(&v1);
        w.vote(&v2);
        w.opt_log_id(&None);
        w.opt_log_id(&Some(lid(4, 5, 6)));
        let mut r = Dec::new(&w.buf);
        assert_eq!(r.vote().unwrap(), v1);
        assert_eq!(r.vote().unwrap(), v2);
        assert_eq!(r.opt_log_id().unwrap(), None);
        assert_eq!(r.opt_log_id().unwrap(), Some(lid(4, 5, 6)));
        assert_eq!(r.remaining(), 0);
        // A length beyond the input is refused before anything is copied.
        let mut r = Dec::new(&[0xff, 0xff, 0xff, 0x7f, 1]);
        assert!(r.bytes().is_err());
    }
}
