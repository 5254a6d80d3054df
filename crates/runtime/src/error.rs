use std::fmt;

/// The runtime's error: a kind plus a one-line message naming the offending
/// option, file or facility and, where there is one, what to do instead.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A `PMLAB_*` setting could not be parsed or is out of range.
    Config,
    /// A counter source cannot work on this machine (no PMU, forbidden by
    /// `perf_event_paranoid`, unknown CPU, program not instrumented…).
    SourceUnavailable,
    /// A file (synthetic script, PM pool file) could not be read or parsed.
    File,
    /// The operating system refused something (mmap, mbind, signals).
    System,
}

impl Error {
    /// Build an error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<pmlab_model::Error> for Error {
    fn from(e: pmlab_model::Error) -> Error {
        Error::new(ErrorKind::Config, e.to_string())
    }
}
