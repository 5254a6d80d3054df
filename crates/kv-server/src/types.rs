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
