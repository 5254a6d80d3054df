//! Bandwidth throttle selection: software epoch stretching, or Intel RDT
//! memory-bandwidth allocation (MBA) through resctrl where present.
//!
//! MBA takes a percentage of the peak bandwidth per memory domain; the
//! percentage is `target / PMLAB_PEAK_BANDWIDTH`, rounded up to the
//! granularity in `/sys/fs/resctrl/info/MB/bandwidth_gran`. The process
//! joins a resctrl group `pmlab-<pid>` (threads created later inherit it).
//! Not validated on hardware: our machines have no RDT.

use crate::config::{Config, Throttle};
use pmlab_model::units::Bandwidth;
use std::path::Path;

const RESCTRL: &str = "/sys/fs/resctrl";

/// True when resctrl exposes memory-bandwidth allocation.
pub fn mba_present() -> bool {
    Path::new(RESCTRL).join("info/MB").is_dir()
}

/// Decide the throttle; returns it and a note for the stats, or a one-line
/// error.
pub fn decide(cfg: &Config) -> Result<(Throttle, String), String> {
    match cfg.throttle {
        Throttle::None => Ok((Throttle::None, String::new())),
        Throttle::Software => Ok((
            Throttle::Software,
            if mba_present() {
                "resctrl MBA is present: --bw-throttle mba would use it".into()
            } else {
                "no resctrl MBA on this machine".into()
            },
        )),
        Throttle::Mba => {
            if !mba_present() {
                return Err(format!(
                    "--bw-throttle mba: resctrl memory-bandwidth allocation is not available ({RESCTRL}/info/MB missing: needs an Intel RDT CPU and 'mount -t resctrl resctrl {RESCTRL}'); use --bw-throttle software"
                ));
            }
            let target = cfg.pm_bytes_per_ns.unwrap_or(0.0) * 1e9;
            let peak = std::env::var("PMLAB_PEAK_BANDWIDTH")
                .ok()
                .and_then(|v| Bandwidth::parse(&v).ok())
                .map(|b| b.bytes_per_sec())
                .ok_or("--bw-throttle mba needs the machine's peak bandwidth: set PMLAB_PEAK_BANDWIDTH (e.g. 20GB/s)")?;
            apply(target, peak).map(|pct| (Throttle::Mba, format!("resctrl MBA at {pct}%")))
        }
    }
}

fn apply(target: f64, peak: f64) -> Result<u32, String> {
    let gran: u32 = std::fs::read_to_string(format!("{RESCTRL}/info/MB/bandwidth_gran"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(10);
    let min: u32 = std::fs::read_to_string(format!("{RESCTRL}/info/MB/min_bandwidth"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(10);
    let pct = mba_percent(target, peak, gran, min);
    let schemata = std::fs::read_to_string(format!("{RESCTRL}/schemata"))
        .map_err(|e| format!("cannot read {RESCTRL}/schemata: {e}"))?;
    let line = schemata
        .lines()
        .find_map(|l| l.trim().strip_prefix("MB:"))
        .ok_or_else(|| format!("{RESCTRL}/schemata has no MB line"))?;
    let domains: Vec<String> = line
        .split(';')
        .filter_map(|d| {
            d.split_once('=')
                .map(|(id, _)| format!("{}={pct}", id.trim()))
        })
        .collect();
    let group = format!("{RESCTRL}/pmlab-{}", std::process::id());
    std::fs::create_dir_all(&group)
        .map_err(|e| format!("cannot create resctrl group {group}: {e}"))?;
    std::fs::write(
        format!("{group}/schemata"),
        format!("MB:{}\n", domains.join(";")),
    )
    .map_err(|e| format!("cannot write {group}/schemata: {e}"))?;
    std::fs::write(
        format!("{group}/tasks"),
        format!("{}\n", std::process::id()),
    )
    .map_err(|e| format!("cannot move the program into {group}: {e}"))?;
    Ok(pct)
}

/// The MBA percentage for a target bandwidth: rounded up to the
/// granularity, at least the minimum, at most 100.
pub fn mba_percent(target: f64, peak: f64, gran: u32, min: u32) -> u32 {
    if peak <= 0.0 {
        return 100;
    }
    let raw = (target / peak * 100.0).ceil() as u32;
    let gran = gran.max(1);
    raw.div_ceil(gran).saturating_mul(gran).clamp(min, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_rounds_up_to_granularity() {
        assert_eq!(mba_percent(8e9, 20e9, 10, 10), 40);
        assert_eq!(mba_percent(8.1e9, 20e9, 10, 10), 50);
        assert_eq!(mba_percent(0.1e9, 20e9, 10, 10), 10);
        assert_eq!(mba_percent(50e9, 20e9, 10, 10), 100);
    }
}
