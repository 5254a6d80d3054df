use std::fmt;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The trace could not be read or is malformed.
    Trace,
    /// A file could not be read or written.
    Io,
    /// Bad options or an unusable trace for the job (no PM file, no data).
    Usage,
    /// The program or the check command could not be run.
    Run,
}

/// The one error type of this crate: a kind and a message naming the file,
/// option or command at fault.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    msg: String,
}

impl Error {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Error {
        Error {
            kind,
            msg: msg.into(),
        }
    }

    /// An I/O error on `what`.
    pub fn io(what: impl fmt::Display, e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{what}: {e}"))
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<pmlab_trace::Error> for Error {
    fn from(e: pmlab_trace::Error) -> Error {
        Error::new(ErrorKind::Trace, e.to_string())
    }
}
