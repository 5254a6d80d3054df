//! Print the raw curves of a few probes against a simulator preset (or
//! `host`), with the wall time of each: a quick look while tuning sweeps.
//! Usage: explore [PRESET|host] [MAX_REGION_LOG2]

use pmlab_probe::probes::{self, Settings};
use pmlab_probe::{Op, Target};
use std::time::Instant;

fn main() {
    let which = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "optane-1dimm".into());
    let max: u32 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(26);
    let mut t: Box<dyn Target> = if which == "host" {
        Box::new(
            pmlab_probe::host::Host::new(
                pmlab_probe::host::MemKind::Anon,
                None,
                pmlab_probe::host::StoreKind::Nt,
                None,
            )
            .unwrap(),
        )
    } else {
        Box::new(pmlab_probe::sim::Sim::preset(&which).unwrap())
    };
    let fence = if std::env::var("FENCE").as_deref() == Ok("pass") {
        pmlab_probe::pattern::Fence::Pass
    } else {
        pmlab_probe::pattern::Fence::Block
    };
    let s = Settings {
        repeats: 3,
        min_lines: 1 << 14,
        fence,
        ..Settings::default()
    };
    let regions = probes::pow2_sweep(64, 1u64 << max);
    let mut quiet = |_: &str, _: usize, _: usize| {};
    let ops: Vec<Op> = match std::env::var("OPS").as_deref() {
        Ok("store") => vec![Op::Store],
        _ => vec![Op::Load, Op::Store, Op::Raw],
    };
    for op in ops {
        let t0 = Instant::now();
        let c = probes::ptrchase_region(t.as_mut(), &s, op, 64, &regions, &mut quiet).unwrap();
        println!("# {} ({:.2}s)", c.id, t0.elapsed().as_secs_f64());
        for p in &c.points {
            println!("{:>12} {:>9.1}", p.x, p.y);
        }
    }
}
