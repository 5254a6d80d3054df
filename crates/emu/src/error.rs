use std::fmt;

/// The emulator library's error: a kind plus a one-line message naming the
/// offending file, program, option or facility and, where there is one,
/// what to do instead. Context is prepended as `what: why`.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A setting or argument is invalid.
    Invalid,
    /// Something needed is missing: a program, the runtime, a compiler,
    /// the workloads, a cached calibration.
    NotFound,
    /// A file or process could not be read, written, started or waited for.
    Io,
    /// A program, compiler or the runtime failed or refused.
    Failed,
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

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, e.to_string())
    }
}

impl From<pmlab_model::Error> for Error {
    fn from(e: pmlab_model::Error) -> Error {
        Error::new(ErrorKind::Invalid, e.to_string())
    }
}

impl From<pmlab_probe::Error> for Error {
    fn from(e: pmlab_probe::Error) -> Error {
        Error::new(ErrorKind::Failed, e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        Error::new(ErrorKind::Invalid, e.to_string())
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Prepend what was being done to an error (`what: why`), keeping its
/// kind (I/O for foreign errors).
pub(crate) trait Context<T> {
    /// With a fixed description.
    fn context(self, what: &str) -> Result<T>;
    /// With a description built only on failure.
    fn with_context<S: fmt::Display>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.with_context(|| what)
    }
    fn with_context<S: fmt::Display>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| {
            let e: Error = e.into();
            Error::new(e.kind, format!("{}: {}", what(), e.message))
        })
    }
}

/// Return an error of the given kind with a formatted message.
macro_rules! fail {
    ($kind:ident, $($arg:tt)*) => {
        return Err($crate::Error::new($crate::ErrorKind::$kind, format!($($arg)*)))
    };
}
pub(crate) use fail;
