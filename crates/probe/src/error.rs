use std::fmt;

/// The error type of the probe crate: a kind plus a one-line message that
/// names the probe, parameter or file at fault and what to do instead.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A probe parameter is invalid (sizes, counts, ranges).
    Param,
    /// The host cannot provide what was asked (memory kind, pinning, ISA).
    Host,
    /// The simulator rejected the configuration or a request.
    Sim,
    /// Results are missing, malformed, or insufficient for inference.
    Results,
    /// Reading or writing a file failed.
    Io,
}

impl Error {
    /// Build an error of `kind` with `message`.
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub(crate) fn param(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Param, msg)
}
