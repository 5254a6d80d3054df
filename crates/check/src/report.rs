//! Findings, grouped by kind and source location, and how they print.

use crate::symbols::{Location, Module, Symbolizer};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Where a durability obligation fell due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum When {
    /// At the commit (`TXEND`) of the transaction that made the store.
    Commit,
    /// At the end of the program.
    Exit,
}

/// What is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A store never flushed before the durability point.
    NotFlushed(When),
    /// A store flushed but not fenced before the durability point.
    NotFenced(When),
    /// A store to a line between its flush and the fence.
    StoreAfterFlush,
    /// A store inside a transaction outside the ranges it logged.
    TxUnlogged,
    /// A flush of a line not modified since its last flush.
    RedundantFlush,
    /// A flush of memory outside every PM mapping.
    FlushNotPm,
}

impl Kind {
    /// A short stable name (JSON `kind`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::NotFlushed(When::Commit) => "not-flushed-at-commit",
            Kind::NotFlushed(When::Exit) => "not-flushed-at-exit",
            Kind::NotFenced(When::Commit) => "not-fenced-at-commit",
            Kind::NotFenced(When::Exit) => "not-fenced-at-exit",
            Kind::StoreAfterFlush => "store-after-flush",
            Kind::TxUnlogged => "store-not-in-tx-log",
            Kind::RedundantFlush => "redundant-flush",
            Kind::FlushNotPm => "flush-of-non-pm",
        }
    }

    /// One sentence for people.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::NotFlushed(When::Commit) => "store not flushed before its transaction committed",
            Kind::NotFlushed(When::Exit) => "store never flushed (not durable at exit)",
            Kind::NotFenced(When::Commit) => {
                "store flushed but not fenced before its transaction committed"
            }
            Kind::NotFenced(When::Exit) => "store flushed but never fenced (not durable at exit)",
            Kind::StoreAfterFlush => {
                "store to a line between its flush and the fence (the flush may not cover it)"
            }
            Kind::TxUnlogged => "store inside a transaction to PM its log does not cover",
            Kind::RedundantFlush => "flush of a line not modified since its last flush",
            Kind::FlushNotPm => "flush of memory that is not persistent memory",
        }
    }

    /// True for the findings that lose data on a crash (the others cost
    /// time or are suspicious).
    pub fn is_correctness(self) -> bool {
        !matches!(self, Kind::RedundantFlush | Kind::FlushNotPm)
    }
}

/// One finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    /// What.
    pub kind: Kind,
    /// The thread of the store or flush.
    pub thread: u32,
    /// Call site (return address) of the store or flush; 0 if unknown.
    pub site: u64,
    /// PM address.
    pub addr: u64,
    /// Bytes.
    pub size: u32,
    /// When (trace time; `u64::MAX` for the end of the trace).
    pub time_ns: u64,
}

/// The findings of a group: one kind at one source location.
#[derive(Debug, Clone)]
pub struct Group {
    /// How many.
    pub count: u64,
    /// The first one.
    pub first: Finding,
}

/// All findings of a check.
#[derive(Debug, Default)]
pub struct Report {
    groups: HashMap<(Kind, u64), Group>,
    /// Operations read.
    pub records: u64,
    /// PM mappings the trace declared.
    pub pm_ranges: u64,
    /// Whether every store was recorded (redundant flushes judged).
    pub complete_stores: bool,
    /// Loaded objects, for symbolising.
    pub modules: Vec<Module>,
}

impl Report {
    pub(crate) fn add(&mut self, f: Finding) {
        self.groups
            .entry((f.kind, f.site))
            .and_modify(|g| g.count += 1)
            .or_insert(Group { count: 1, first: f });
    }

    /// Total findings.
    pub fn total(&self) -> u64 {
        self.groups.values().map(|g| g.count).sum()
    }

    /// Findings of `kind`.
    pub fn count(&self, kind: Kind) -> u64 {
        self.groups
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, g)| g.count)
            .sum()
    }

    /// Groups, most important kinds first, then by count.
    pub fn groups(&self) -> Vec<&Group> {
        let mut v: Vec<&Group> = self.groups.values().collect();
        v.sort_by(|a, b| {
            (a.first.kind, std::cmp::Reverse(a.count), a.first.site).cmp(&(
                b.first.kind,
                std::cmp::Reverse(b.count),
                b.first.site,
            ))
        });
        v
    }

    fn locations(&self) -> HashMap<u64, Location> {
        let mut sym = Symbolizer::new(&self.modules);
        self.groups
            .keys()
            .map(|(_, site)| (*site, sym.locate(*site)))
            .collect()
    }

    /// The report as text, one group per line, most important first.
    pub fn to_text(&self) -> String {
        let locs = self.locations();
        let mut out = String::new();
        for g in self.groups() {
            let f = &g.first;
            let loc = &locs[&f.site];
            out.push_str(&format!(
                "{}: {} x{} (first: {:#x}, {} bytes, thread {})\n    at {}\n",
                f.kind.name(),
                f.kind.describe(),
                g.count,
                f.addr,
                f.size,
                f.thread,
                loc
            ));
        }
        out.push_str(&format!(
            "pmlab check: {} findings in {} groups ({} records",
            self.total(),
            self.groups.len(),
            self.records
        ));
        if !self.complete_stores {
            out.push_str("; the program's own stores were not recorded (build it with `pmlab cc`): only flushed lines, fences and library copies were checked");
        }
        out.push_str(")\n");
        out
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        let locs = self.locations();
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .map(|g| {
                let f = &g.first;
                let loc = &locs[&f.site];
                json!({
                    "kind": f.kind.name(),
                    "description": f.kind.describe(),
                    "count": g.count,
                    "addr": format!("{:#x}", f.addr),
                    "size": f.size,
                    "thread": f.thread,
                    "site": format!("{:#x}", f.site),
                    "function": loc.function,
                    "file": loc.file,
                    "line": loc.line,
                    "object": loc.object,
                })
            })
            .collect();
        json!({
            "findings": self.total(),
            "groups": groups,
            "records": self.records,
            "stores_recorded": self.complete_stores,
        })
    }
}
