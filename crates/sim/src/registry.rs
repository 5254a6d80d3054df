//! The one registry of component implementations: for each component kind,
//! a table of (name, description, constructor); persistency models too. Configurations name an
//! implementation with their `impl` key; an unknown name is an error that
//! lists the valid ones.

use crate::config::{ParamInfo, Params};
use crate::controller::{self, Controller};
use crate::device::{self, Device};
use crate::persistency;
use crate::{Error, ErrorKind};

/// One registered implementation.
pub struct Entry<T: ?Sized> {
    /// Name used in `impl = "..."`.
    pub name: &'static str,
    /// One line about it.
    pub about: &'static str,
    /// Constructor: reads its parameters (and builds its children).
    pub build: fn(&mut Params) -> Result<Box<T>, Error>,
}

/// Memory controllers.
pub const CONTROLLERS: &[Entry<dyn Controller>] = &[Entry {
    name: "imc",
    about: "integrated memory controller: RPQ, WPQ (ADR domain), channel interleaving",
    build: |p| Ok(Box::new(controller::imc::Imc::build(p)?)),
}];

/// Memory devices.
pub const DEVICES: &[Entry<dyn Device>] = &[
    Entry {
        name: "ddr4",
        about: "DDR4 DIMM: banks, row buffers, tCL/tRCD/tRP/tRAS, refresh",
        build: |p| Ok(Box::new(device::ddr4::Ddr4::build(p)?)),
    },
    Entry {
        name: "nvram",
        about:
            "Optane-style NVRAM DIMM: LSQ, RMW buffer, AIT buffer and table, media, wear leveling",
        build: |p| Ok(Box::new(device::nvram::Nvram::build(p)?)),
    },
    Entry {
        name: "cxl",
        about: "CXL type-3 expander: a device behind a link with latency and bandwidth",
        build: |p| Ok(Box::new(device::cxl::Cxl::build(p)?)),
    },
    Entry {
        name: "fixed-latency",
        about: "a device plus a fixed delay (Quartz's slow-memory model)",
        build: |p| Ok(Box::new(device::fixed::Fixed::build(p)?)),
    },
];

fn find<'a, T: ?Sized>(
    table: &'a [Entry<T>],
    kind: &str,
    path: &str,
    name: &str,
) -> Result<&'a Entry<T>, Error> {
    table.iter().find(|e| e.name == name).ok_or_else(|| {
        let names: Vec<&str> = table.iter().map(|e| e.name).collect();
        Error::new(
            ErrorKind::UnknownName,
            format!(
                "unknown {kind} implementation '{name}' at '{path}.impl': valid ones are {}",
                names.join(", ")
            ),
        )
    })
}

/// Build the controller described by `table` (at config path `path`).
pub fn build_controller(
    path: &str,
    table: toml::Table,
) -> Result<(Box<dyn Controller>, Vec<ParamInfo>), Error> {
    let mut p = Params::new(path, table)?;
    let e = find(CONTROLLERS, "controller", path, p.implementation())?;
    let c = (e.build)(&mut p)?;
    Ok((c, p.finish()?))
}

/// Build the device described by `table` (at config path `path`).
pub fn build_device(
    path: &str,
    table: toml::Table,
) -> Result<(Box<dyn Device>, Vec<ParamInfo>), Error> {
    let mut p = Params::new(path, table)?;
    let e = find(DEVICES, "device", path, p.implementation())?;
    let d = (e.build)(&mut p)?;
    Ok((d, p.finish()?))
}

/// One registered persistency model ([`crate::persistency`]).
pub struct PersistencyEntry {
    /// Name used on command lines (`--persistency NAME`).
    pub name: &'static str,
    /// One line about it.
    pub about: &'static str,
    /// It has HOPS's persist buffers (and so takes a drain threshold).
    pub buffered: bool,
    /// Constructor, for a replay with the given parameters.
    pub build: fn(&persistency::Config) -> Box<dyn persistency::Persistency>,
}

/// Persistency models, in the order reports list them.
pub const PERSISTENCY: &[PersistencyEntry] = &[
    PersistencyEntry {
        name: "x86-nvm",
        about: "clwb/clflush + sfence, durable on the media",
        buffered: false,
        build: |c| Box::new(persistency::X86Nvm::new(c)),
    },
    PersistencyEntry {
        name: "x86-adr",
        about: "clwb/clflush + sfence, durable in the controller's write pending queue (ADR)",
        buffered: false,
        build: |c| Box::new(persistency::X86Adr::new(c)),
    },
    PersistencyEntry {
        name: "hops",
        about: "HOPS persist buffers, ofence/dfence, epochs acknowledged on the media",
        buffered: true,
        build: |c| Box::new(persistency::Hops::new(c)),
    },
    PersistencyEntry {
        name: "hops-adr",
        about: "HOPS persist buffers, epochs acknowledged by the controller's write queue",
        buffered: true,
        build: |c| Box::new(persistency::Hops::adr(c)),
    },
    PersistencyEntry {
        name: "ideal",
        about: "no ordering, no durability: flushes and fences cost nothing",
        buffered: false,
        build: |c| Box::new(persistency::Ideal::new(c)),
    },
];
