//! The bundled presets: TOML files under `configs/`, embedded in the
//! binary. Every number in them carries its source in a comment.

use crate::{Error, ErrorKind};

/// One preset.
pub struct Preset {
    /// Name (`optane-1dimm`).
    pub name: &'static str,
    /// One line about it.
    pub about: &'static str,
    /// The TOML text.
    pub toml: &'static str,
}

/// Every preset.
pub const ALL: &[Preset] = &[
    Preset {
        name: "ddr4-2666",
        about: "one DDR4-2666 DIMM behind an iMC (the DRAM baseline of LENS and Yang et al.)",
        toml: include_str!("../../../configs/ddr4-2666.toml"),
    },
    Preset {
        name: "optane-1dimm",
        about: "one Optane DC PMM (LENS/VANS microarchitecture), App Direct",
        toml: include_str!("../../../configs/optane-1dimm.toml"),
    },
    Preset {
        name: "optane-6dimm",
        about: "six Optane DC PMMs interleaved at 4 KiB",
        toml: include_str!("../../../configs/optane-6dimm.toml"),
    },
    Preset {
        name: "cxl-type3",
        about: "DDR4 behind a CXL type-3 link (x8, ~+70 ns)",
        toml: include_str!("../../../configs/cxl-type3.toml"),
    },
    Preset {
        name: "slow-dram",
        about: "Quartz's model: DDR4 plus a fixed read latency, no buffers",
        toml: include_str!("../../../configs/slow-dram.toml"),
    },
    Preset {
        name: "hops-paper",
        about:
            "PM timing of the HOPS evaluation (gem5: 80 ns PM reads and writes, two controllers)",
        toml: include_str!("../../../configs/hops-paper.toml"),
    },
];

/// The preset called `name`.
pub fn find(name: &str) -> Result<&'static Preset, Error> {
    ALL.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = ALL.iter().map(|p| p.name).collect();
        Error::new(
            ErrorKind::UnknownName,
            format!(
                "unknown preset '{name}': valid presets are {} (or pass --config FILE)",
                names.join(", ")
            ),
        )
    })
}

/// The source comment of parameter `name` of component `component`
/// (dotted path, e.g. `controller.dimm`) in a configuration's text: the
/// text after `#` on the line `name = ...` inside table `[component]`.
pub fn source_of_in(toml: &str, component: &str, name: &str) -> Option<String> {
    let mut table = String::new();
    for line in toml.lines() {
        let l = line.trim();
        if let Some(h) = l.strip_prefix('[') {
            table = h.split(']').next().unwrap_or("").trim().to_string();
            continue;
        }
        if table == component {
            if let Some(rest) = l.strip_prefix(name) {
                if rest.trim_start().starts_with('=') {
                    return line.split_once('#').map(|(_, c)| c.trim().to_string());
                }
            }
        }
    }
    None
}

/// The source comment of parameter `name` in a preset's text, if any
/// (the text after `#` on the line `name = ...`).
pub fn source_of(toml: &str, name: &str) -> Option<String> {
    for line in toml.lines() {
        let l = line.trim_start();
        if let Some(rest) = l.strip_prefix(name) {
            if rest.trim_start().starts_with('=') {
                return line.split_once('#').map(|(_, c)| c.trim().to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_builds() {
        for p in ALL {
            let s = crate::System::from_toml(p.toml, p.name)
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert_eq!(s.name(), p.name);
        }
    }

    #[test]
    fn hops_paper_preset_has_the_papers_80_ns_pm() {
        // WHISPER Table 3: PM reads and writes take 160 cycles at 2 GHz.
        let mut probe = crate::System::preset("hops-paper").unwrap();
        let media = crate::persistency::media_write_ns(&mut probe);
        assert!((media - 80.0).abs() < 0.5, "media write {media} ns");
        let mut s = crate::System::preset("hops-paper").unwrap();
        let r = s.submit(&crate::Request::new(0.0, crate::Op::Read, 1 << 30, 64));
        // Plus the core-to-controller path (cpu.read_ns = 60 ns).
        assert!((r.done_ns - 140.0).abs() < 0.5, "read {} ns", r.done_ns);
        assert_eq!(
            source_of_in(find("hops-paper").unwrap().toml, "controller", "channels").as_deref(),
            Some("HOPS section 6.4: \"two memory controllers\"")
        );
    }

    #[test]
    fn unknown_preset_lists_valid_ones() {
        let e = find("optane").err().unwrap().to_string();
        assert!(e.contains("optane-1dimm") && e.contains("ddr4-2666"), "{e}");
    }
}
