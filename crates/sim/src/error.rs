use std::fmt;

/// An error building or driving a simulated system. The message names the
/// offending parameter, component, preset or file.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A configuration is not valid TOML, has an unknown key, a missing or
    /// ill-typed parameter, or a value out of range.
    Config,
    /// A component or preset name is not in the registry.
    UnknownName,
    /// A configuration file could not be read.
    Io,
    /// The trace fed to a driver is malformed.
    Trace,
    /// A caller passed an invalid argument (unknown drive mode…).
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

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, message)
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

impl From<pmlab_trace::Error> for Error {
    fn from(e: pmlab_trace::Error) -> Error {
        Error::new(ErrorKind::Trace, e.to_string())
    }
}
