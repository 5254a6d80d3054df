//! A Raft-replicated key-value service: openraft for consensus, a
//! versioned storage engine as the state machine, RESP for clients (so
//! `redis-cli` and `redis-benchmark` work), a launcher for a local cluster,
//! a userspace fault proxy and a linearizability checker for histories.
//!
//! Main types: [`engine::KvEngine`] (the storage interface the state
//! machine needs, mirroring `pmlab_kv::Engine`; [`engine::MemEngine`] is
//! the in-memory one), [`store::LogStore`] and [`store::StateMachine`]
//! (openraft's storage traits; the Raft log either in the PM engine itself,
//! [`engine_log`], or in a separate file), [`server::Node`] (one node), and
//! [`lincheck::check`]. The crate depends on no other pmlab crate except
//! `pmlab-plot` (for the latency plot of the benchmark client).

pub mod catchup;
pub mod client;
pub mod cluster;
pub mod engine;
pub mod engine_log;
pub mod faults;
pub mod lincheck;
pub mod loadgen;
pub mod net;
pub mod proxy;
pub mod resp;
pub mod server;
pub mod snapstream;
pub mod store;
pub mod types;
