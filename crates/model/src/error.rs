use std::fmt;

/// The error type of the model crate: a kind plus a message that names the
/// offending value and what would be accepted instead.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A quantity (duration, size, bandwidth) could not be parsed.
    Parse,
    /// A value parsed but is outside the range the model accepts.
    OutOfRange,
    /// Two values are each valid but contradict each other.
    Inconsistent,
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
