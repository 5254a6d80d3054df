//! Typed access to a component's configuration table.
//!
//! A configuration mirrors the component tree: every component is a TOML
//! table with an `impl` key naming its implementation in the registry, its
//! parameters, and nested tables for its children. Each implementation reads
//! its parameters through [`Params`], which supplies explicit defaults,
//! checks types and ranges, rejects unknown keys, and records every value
//! (with unit and meaning) so that `pmlab sim show` can list them.

use crate::{Error, ErrorKind};
use pmlab_model::{Bandwidth, Bytes, Nanos};

/// The largest size any parameter may take (1 PiB): far above any real
/// buffer or capacity, low enough that sizes and their products stay exact.
pub const MAX_BYTES: u64 = 1 << 50;

/// The longest duration any parameter may take, in ns (1000 s), so that
/// completion times stay finite.
pub const MAX_NS: f64 = 1e12;

/// The bandwidth range accepted, in GB/s: slow enough that a 64 KiB move
/// still takes under [`MAX_NS`], fast enough to cover any link.
pub const BANDWIDTH_GBS: std::ops::RangeInclusive<f64> = 1e-6..=1e9;

/// One resolved parameter, for listings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParamInfo {
    /// Dotted path of the component (`controller.dimm`).
    pub component: String,
    /// Parameter name.
    pub name: String,
    /// Value as printed (with unit).
    pub value: String,
    /// What it means and, for defaults, where the default comes from.
    pub doc: String,
    /// True when the configuration gave the value; false for a default.
    pub given: bool,
}

/// The parameters of one component, read once by its constructor.
pub struct Params {
    path: String,
    implementation: String,
    table: toml::Table,
    used: Vec<&'static str>,
    children: Vec<&'static str>,
    info: Vec<ParamInfo>,
}

impl Params {
    /// The parameters of component `path` from its table.
    pub fn new(path: &str, table: toml::Table) -> Result<Params, Error> {
        let implementation = match table.get("impl") {
            Some(toml::Value::String(s)) => s.clone(),
            Some(_) => return Err(Error::config(format!("'{path}.impl' must be a string naming an implementation"))),
            None => return Err(Error::config(format!("component '{path}' has no 'impl' key: add impl = \"NAME\" (see 'pmlab sim presets' and docs/simulator.md)"))),
        };
        Ok(Params {
            path: path.to_string(),
            implementation,
            table,
            used: vec!["impl"],
            children: Vec::new(),
            info: Vec::new(),
        })
    }

    /// The implementation name (`impl` key).
    pub fn implementation(&self) -> &str {
        &self.implementation
    }

    /// The dotted path of the component.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn err(&self, name: &str, what: String) -> Error {
        Error::config(format!(
            "parameter '{}.{name}' of component '{}': {what}",
            self.path, self.implementation
        ))
    }

    fn record(&mut self, name: &'static str, value: String, doc: &str, given: bool) {
        self.used.push(name);
        self.info.push(ParamInfo {
            component: self.path.clone(),
            name: name.to_string(),
            value,
            doc: doc.to_string(),
            given,
        });
    }

    fn number(v: &toml::Value) -> Option<f64> {
        match v {
            toml::Value::Integer(i) => Some(*i as f64),
            toml::Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// A duration in nanoseconds (a number, or a string such as `"14.25ns"`).
    pub fn ns(&mut self, name: &'static str, default: f64, doc: &str) -> Result<f64, Error> {
        let (v, given) = match self.table.get(name) {
            None => (default, false),
            Some(toml::Value::String(s)) => (
                Nanos::parse(s)
                    .map_err(|e| self.err(name, e.to_string()))?
                    .get(),
                true,
            ),
            Some(x) => match Self::number(x) {
                Some(f) if f.is_finite() && f >= 0.0 => (f, true),
                _ => {
                    return Err(self.err(
                        name,
                        format!("expected a non-negative duration in ns, found {x}"),
                    ))
                }
            },
        };
        if v > MAX_NS {
            return Err(self.err(
                name,
                format!("{v} ns is above the maximum of {MAX_NS} ns (1000 s)"),
            ));
        }
        self.record(name, format!("{v} ns"), doc, given);
        Ok(v)
    }

    /// A duration as [`Params::ns`] that must also be above zero (a clock
    /// period: zero would make every timing derived from it vanish).
    pub fn positive_ns(
        &mut self,
        name: &'static str,
        default: f64,
        doc: &str,
    ) -> Result<f64, Error> {
        let v = self.ns(name, default, doc)?;
        if v <= 0.0 {
            return Err(self.err(name, "must be above 0 ns (a clock period)".to_string()));
        }
        Ok(v)
    }

    /// A size in bytes (a number, or a string such as `"16KiB"`); must be at
    /// least `min`.
    pub fn bytes(
        &mut self,
        name: &'static str,
        default: u64,
        min: u64,
        doc: &str,
    ) -> Result<u64, Error> {
        let (v, given) = match self.table.get(name) {
            None => (default, false),
            Some(toml::Value::String(s)) => (
                Bytes::parse(s)
                    .map_err(|e| self.err(name, e.to_string()))?
                    .get(),
                true,
            ),
            Some(toml::Value::Integer(i)) if *i >= 0 => (*i as u64, true),
            Some(x) => {
                return Err(self.err(
                    name,
                    format!("expected a size such as \"16KiB\", found {x}"),
                ))
            }
        };
        if v < min {
            return Err(self.err(name, format!("{v} bytes is below the minimum of {min}")));
        }
        if v > MAX_BYTES {
            return Err(self.err(
                name,
                format!("{v} bytes is above the maximum of {}", Bytes(MAX_BYTES)),
            ));
        }
        self.record(name, Bytes(v).to_string(), doc, given);
        Ok(v)
    }

    /// A whole number in `min..=max`.
    pub fn count(
        &mut self,
        name: &'static str,
        default: u64,
        min: u64,
        max: u64,
        doc: &str,
    ) -> Result<u64, Error> {
        let (v, given) = match self.table.get(name) {
            None => (default, false),
            Some(toml::Value::Integer(i)) if *i >= 0 => (*i as u64, true),
            Some(x) => return Err(self.err(name, format!("expected a whole number, found {x}"))),
        };
        if v < min || v > max {
            return Err(self.err(
                name,
                format!("{v} is outside the valid range {min}..={max}"),
            ));
        }
        self.record(name, v.to_string(), doc, given);
        Ok(v)
    }

    /// A bandwidth, returned in bytes per nanosecond (a number is GB/s, or a
    /// string such as `"2.2GB/s"`).
    pub fn bandwidth(
        &mut self,
        name: &'static str,
        default_gbs: f64,
        doc: &str,
    ) -> Result<f64, Error> {
        let (v, given) = match self.table.get(name) {
            None => (default_gbs, false),
            Some(toml::Value::String(s)) => (
                Bandwidth::parse(s)
                    .map_err(|e| self.err(name, e.to_string()))?
                    .bytes_per_ns(),
                true,
            ),
            Some(x) => match Self::number(x) {
                Some(f) if f.is_finite() && f > 0.0 => (f, true),
                _ => {
                    return Err(self.err(
                        name,
                        format!("expected a positive bandwidth in GB/s, found {x}"),
                    ))
                }
            },
        };
        if !BANDWIDTH_GBS.contains(&v) {
            return Err(self.err(
                name,
                format!(
                    "{v} GB/s is outside the valid range {:e}..={:e} GB/s",
                    BANDWIDTH_GBS.start(),
                    BANDWIDTH_GBS.end()
                ),
            ));
        }
        self.record(name, format!("{v} GB/s"), doc, given);
        Ok(v)
    }

    /// One of `choices`.
    pub fn choice(
        &mut self,
        name: &'static str,
        default: &'static str,
        choices: &[&'static str],
        doc: &str,
    ) -> Result<&'static str, Error> {
        let (v, given) = match self.table.get(name) {
            None => (default, false),
            Some(toml::Value::String(s)) => match choices.iter().find(|c| **c == s.as_str()) {
                Some(c) => (*c, true),
                None => {
                    return Err(
                        self.err(name, format!("'{s}' is not one of {}", choices.join(", ")))
                    )
                }
            },
            Some(x) => {
                return Err(self.err(
                    name,
                    format!("expected one of {}, found {x}", choices.join(", ")),
                ))
            }
        };
        self.record(name, v.to_string(), doc, given);
        Ok(v)
    }

    /// The table of child component `name` (required).
    pub fn child(&mut self, name: &'static str) -> Result<(String, toml::Table), Error> {
        self.children.push(name);
        match self.table.get(name) {
            Some(toml::Value::Table(t)) => Ok((format!("{}.{name}", self.path), t.clone())),
            Some(_) => Err(Error::config(format!(
                "'{}.{name}' must be a table (a child component with its own impl key)",
                self.path
            ))),
            None => Err(Error::config(format!(
                "component '{}' ({}) needs a child table [{}.{name}]",
                self.path, self.implementation, self.path
            ))),
        }
    }

    /// Build child device `name` (a required table) through the registry.
    pub fn device(&mut self, name: &'static str) -> Result<Box<dyn crate::device::Device>, Error> {
        let (path, table) = self.child(name)?;
        let (dev, info) = crate::registry::build_device(&path, table)?;
        self.info.extend(info);
        Ok(dev)
    }

    /// Check that every key was read (unknown keys are errors) and return
    /// the resolved parameters of this component and its children.
    pub fn finish(self) -> Result<Vec<ParamInfo>, Error> {
        for key in self.table.keys() {
            if !self.used.contains(&key.as_str()) && !self.children.contains(&key.as_str()) {
                let mut valid: Vec<&str> = self
                    .used
                    .iter()
                    .chain(self.children.iter())
                    .copied()
                    .collect();
                valid.sort();
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "unknown parameter '{}.{key}' for component '{}': valid keys are {}",
                        self.path,
                        self.implementation,
                        valid.join(", ")
                    ),
                ));
            }
        }
        Ok(self.info)
    }
}
