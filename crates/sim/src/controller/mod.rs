//! Memory controllers: the first component below the CPU.
//!
//! Contract of [`Controller`]: requests are 64-byte lines at physical
//! addresses, arriving at (nearly) non-decreasing times in ns. A write is
//! complete for persistence when it is accepted into the controller's write
//! pending queue (the ADR domain); [`Controller::write`] returns that time.
//! Implementations, one per file, registered in `registry.rs`: `imc`
//! ([`imc`]).

use crate::stats::Stats;

pub mod imc;

/// A memory controller with its devices.
pub trait Controller {
    /// A 64-byte read arriving at `t`; returns when its data is back at the
    /// controller.
    fn read(&mut self, addr: u64, t: f64) -> f64;
    /// A 64-byte write of `thread` arriving at `t`; returns when it was
    /// accepted into the persistence domain (the write pending queue).
    fn write(&mut self, addr: u64, t: f64, thread: u32) -> f64;
    /// A fence of `thread` at `t`: that thread's pending writes stop
    /// combining with its later ones (other threads' writes still combine).
    fn fence(&mut self, t: f64, thread: u32);
    /// Push every queued write to the media; returns when all are there.
    fn drain(&mut self, t: f64) -> f64;
    /// Append statistics (with one child per device).
    fn stats(&self, into: &mut Stats);
    /// Zero the statistics.
    fn reset_stats(&mut self);
}
