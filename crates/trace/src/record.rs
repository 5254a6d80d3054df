/// The operation of a trace record.
///
/// Codes are part of the binary format (`docs/trace-format.md`) and never
/// change meaning; new operations take new codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Op {
    /// A load of `size` bytes.
    Read = 0,
    /// A cacheable store of `size` bytes.
    Write = 1,
    /// A non-temporal (streaming, cache-bypassing) store.
    NtWrite = 2,
    /// `clwb`: write a line back, keep it cached.
    Clwb = 3,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    ClflushOpt = 4,
    /// `clflush`: write back and invalidate, strongly ordered.
    Clflush = 5,
    /// `sfence` (or any full fence): orders and, on x86, completes earlier flushes.
    SFence = 6,
    /// HOPS `ofence`: ends an epoch, ordering only.
    OFence = 7,
    /// HOPS `dfence`: waits until earlier writes are durable.
    DFence = 8,
    /// Start of a failure-atomic transaction (`addr` may carry an id).
    TxBegin = 9,
    /// End (commit) of a transaction.
    TxEnd = 10,
    /// Annotation: `size` bytes at `addr` are user data written by the
    /// program (as opposed to logs or allocator metadata); used to compute
    /// write amplification.
    UserData = 11,
    /// Annotation: the thread did `addr` (a count) accesses that the trace
    /// does not list one by one (e.g. DRAM accesses when only PM is traced).
    Untraced = 12,
}

impl Op {
    /// Every operation, in code order.
    pub const ALL: [Op; 13] = [
        Op::Read,
        Op::Write,
        Op::NtWrite,
        Op::Clwb,
        Op::ClflushOpt,
        Op::Clflush,
        Op::SFence,
        Op::OFence,
        Op::DFence,
        Op::TxBegin,
        Op::TxEnd,
        Op::UserData,
        Op::Untraced,
    ];

    /// The operation with binary code `code`.
    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.get(code as usize).copied()
    }

    /// The binary code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The short name used by the text format.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "R",
            Op::Write => "W",
            Op::NtWrite => "NT",
            Op::Clwb => "CLWB",
            Op::ClflushOpt => "CLFLUSHOPT",
            Op::Clflush => "CLFLUSH",
            Op::SFence => "SFENCE",
            Op::OFence => "OFENCE",
            Op::DFence => "DFENCE",
            Op::TxBegin => "TXBEGIN",
            Op::TxEnd => "TXEND",
            Op::UserData => "USERDATA",
            Op::Untraced => "UNTRACED",
        }
    }

    /// Parse a text-format name (case-insensitive; a few aliases accepted).
    pub fn from_name(name: &str) -> Option<Op> {
        let up = name.to_ascii_uppercase();
        Some(match up.as_str() {
            "R" | "READ" | "LOAD" | "L" => Op::Read,
            "W" | "WRITE" | "STORE" | "S" => Op::Write,
            "NT" | "NTWRITE" | "NTSTORE" | "MOVNT" => Op::NtWrite,
            "CLWB" => Op::Clwb,
            "CLFLUSHOPT" => Op::ClflushOpt,
            "CLFLUSH" | "FLUSH" => Op::Clflush,
            "SFENCE" | "FENCE" | "MFENCE" => Op::SFence,
            "OFENCE" => Op::OFence,
            "DFENCE" => Op::DFence,
            "TXBEGIN" => Op::TxBegin,
            "TXEND" => Op::TxEnd,
            "USERDATA" => Op::UserData,
            "UNTRACED" => Op::Untraced,
            _ => return None,
        })
    }

    /// True for operations that move data to memory (stores of any kind).
    pub fn is_store(self) -> bool {
        matches!(self, Op::Write | Op::NtWrite)
    }

    /// True for cache-line flush instructions.
    pub fn is_flush(self) -> bool {
        matches!(self, Op::Clwb | Op::ClflushOpt | Op::Clflush)
    }

    /// True for ordering or durability points.
    pub fn is_fence(self) -> bool {
        matches!(self, Op::SFence | Op::OFence | Op::DFence)
    }

    /// True for data accesses (loads and stores).
    pub fn is_access(self) -> bool {
        matches!(self, Op::Read | Op::Write | Op::NtWrite)
    }
}

/// Which memory an access went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Space {
    /// Persistent (or emulated slow) memory. The default.
    #[default]
    Pm,
    /// Ordinary volatile DRAM.
    Dram,
}

/// One trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record {
    /// Time since the start of the trace, in nanoseconds. Records of one
    /// thread are in time order; records of different threads may interleave
    /// slightly out of order.
    pub time_ns: u64,
    /// The thread, numbered from 0 by the recorder.
    pub thread: u32,
    /// What happened.
    pub op: Op,
    /// Which memory.
    pub space: Space,
    /// The address (virtual, or physical where the producer had it); for
    /// markers, an identifier or count.
    pub addr: u64,
    /// Bytes accessed (0 for fences and markers).
    pub size: u32,
}

impl Record {
    /// A PM record.
    pub fn new(time_ns: u64, thread: u32, op: Op, addr: u64, size: u32) -> Record {
        Record {
            time_ns,
            thread,
            op,
            space: Space::Pm,
            addr,
            size,
        }
    }

    /// The same record, marked as a DRAM access.
    pub fn dram(mut self) -> Record {
        self.space = Space::Dram;
        self
    }
}
