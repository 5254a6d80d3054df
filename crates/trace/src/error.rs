use std::fmt;

/// An error reading or writing a trace. The message names the file and the
/// line (text) or byte offset (binary) where the input went wrong.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The operating system refused a read or write.
    Io,
    /// The input is not a trace of the expected format, or is corrupt.
    Malformed,
    /// The input ends in the middle of a record.
    Truncated,
    /// The file is a pmlab trace of a version this build cannot read.
    Version,
    /// The content is none of the formats this crate reads.
    Unrecognised,
    /// A caller passed an invalid argument (unknown format name…).
    Usage,
}

impl Error {
    /// Build an error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn io(what: impl fmt::Display, err: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{what}: {err}"))
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
