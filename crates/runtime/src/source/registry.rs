//! The registry of counter sources: each configuration name and the
//! implementation it opens. The one place that names every source.

use super::{hw, instrumented, synthetic, Source};
use crate::error::{Error, ErrorKind};

/// Every source name [`open`] accepts (for error messages).
pub const NAMES: &str = "hw, synthetic:FILE, instrumented";

/// Open the source called `name` and check that it can work here: on
/// failure the error says why in one line and what to use instead.
pub fn open(name: &str) -> Result<Box<dyn Source>, Error> {
    if name == "hw" {
        return Ok(Box::new(hw::HwSource::open()?));
    }
    if let Some(path) = name.strip_prefix("synthetic:") {
        return Ok(Box::new(synthetic::SyntheticSource::load(path)?));
    }
    if name == "synthetic" {
        return Err(Error::new(
            ErrorKind::Config,
            "source 'synthetic' needs a script: use synthetic:FILE (format in docs/emulator.md)",
        ));
    }
    if name == "instrumented" {
        return instrumented::open();
    }
    Err(Error::new(
        ErrorKind::Config,
        format!("unknown counter source '{name}': expected one of {NAMES}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_source_lists_the_valid_names() {
        let e = open("magic").err().unwrap();
        assert!(e.message().contains("hw, synthetic:FILE"));
    }
}
