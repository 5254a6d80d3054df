//! Symbolising call sites: the trace's module notes say which object holds
//! an address and at what bias; the object's debug information (DWARF,
//! through the `addr2line` crate) gives the function, file and line.

use std::collections::HashMap;
use std::fmt;

/// A loaded object (a `MODULE` note).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Lowest mapped address.
    pub start: u64,
    /// Extent.
    pub len: u64,
    /// Load bias.
    pub bias: u64,
    /// The file.
    pub path: String,
}

/// A source location; fields are None when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The return address.
    pub site: u64,
    /// The object's file name.
    pub object: Option<String>,
    /// The function.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.site == 0 {
            return f.write_str("(no call site recorded: trace with `pmlab trace --sites`)");
        }
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}")?,
            _ => write!(f, "{:#x}", self.site)?,
        }
        if let Some(func) = &self.function {
            write!(f, " in {func}")?;
        }
        if let Some(o) = &self.object {
            write!(f, " ({o})")?;
        }
        Ok(())
    }
}

/// Looks addresses up in the modules' debug information, loading each
/// object once.
pub struct Symbolizer<'a> {
    modules: &'a [Module],
    loaded: HashMap<String, Option<addr2line::Loader>>,
}

impl<'a> Symbolizer<'a> {
    /// A symboliser over `modules`.
    pub fn new(modules: &'a [Module]) -> Symbolizer<'a> {
        Symbolizer {
            modules,
            loaded: HashMap::new(),
        }
    }

    /// Where `site` (a return address) is.
    pub fn locate(&mut self, site: u64) -> Location {
        let mut loc = Location {
            site,
            ..Location::default()
        };
        if site == 0 {
            return loc;
        }
        let Some(m) = self
            .modules
            .iter()
            .find(|m| site >= m.start && site < m.start + m.len)
        else {
            return loc;
        };
        loc.object = Some(m.path.rsplit('/').next().unwrap_or(&m.path).to_string());
        let loader = self
            .loaded
            .entry(m.path.clone())
            .or_insert_with(|| addr2line::Loader::new(&m.path).ok());
        let Some(loader) = loader else {
            return loc;
        };
        // The call instruction is just before the return address.
        let probe = site.wrapping_sub(m.bias).wrapping_sub(1);
        if let Ok(mut frames) = loader.find_frames(probe) {
            // The innermost frame is the store's own line; its function may
            // be inlined: report the innermost function.
            if let Ok(Some(frame)) = frames.next() {
                if let Some(func) = frame.function.as_ref() {
                    if let Ok(name) = func.demangle() {
                        loc.function = Some(name.into_owned());
                    }
                }
                if let Some(l) = frame.location {
                    loc.file = l.file.map(|s| s.to_string());
                    loc.line = l.line;
                }
            }
        }
        if loc.function.is_none() {
            loc.function = loader.find_symbol(probe).map(|s| s.to_string());
        }
        loc
    }
}
