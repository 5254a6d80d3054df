//! The crate's one error type.

use std::fmt;

/// What went wrong; match on it to decide what to do.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A system call on the pool file failed (open, map, resize).
    Io,
    /// The file is not a pool of this crate, or its header is torn or damaged.
    BadPool,
    /// The pool was written by another layout version of this crate.
    Layout,
    /// The pool holds another engine than the one asked for.
    WrongEngine,
    /// An invariant of the pool or of an engine's structure does not hold.
    Inconsistent,
    /// The pool has no free page left.
    Full,
    /// A write carried a version not above the last one written.
    VersionOrder,
    /// A read or rollback asked for an index below the discard floor.
    Discarded,
    /// A key or value is longer than the engine accepts.
    TooLarge,
    /// An argument is out of range (page size, fan-out, pool size, index).
    InvalidArgument,
    /// The engine was not compiled into this build.
    Unsupported,
}

/// An error of a pool or engine operation: a kind and a one-line message
/// naming the file, parameter or invariant concerned.
#[derive(Clone, Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// A new error of `kind` with a one-line `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn io(what: impl fmt::Display, err: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{what}: {err}"))
    }

    pub(crate) fn inconsistent(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Inconsistent, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
