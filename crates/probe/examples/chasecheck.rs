//! Sanity check of the host pointer chase: time of a known number of
//! dependent loads over a 1 KiB region, printed in ns per load.
use pmlab_probe::host::{Host, MemKind, StoreKind};
use pmlab_probe::pattern::*;
use pmlab_probe::{Op, Target};
fn main() {
    let mut h = Host::new(MemKind::Anon, None, StoreKind::Nt, None).unwrap();
    for passes in [1u32, 1000, 100_000] {
        let p = Pattern {
            region: 1024,
            block: 64,
            block_stride: 64,
            order: Rng::new(3).permutation(16),
            op: Op::Load,
            warmup: 1,
            passes,
            issue: Issue::Serial,
            fence: Fence::Block,
            timing: Timing::Total,
        };
        let ns = h.run(&p).unwrap()[0];
        println!(
            "passes {passes}: {:.3} ns per load",
            ns / (16.0 * passes as f64)
        );
    }
}
