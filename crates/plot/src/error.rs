use std::fmt;

/// The error type of the plot crate: a kind plus a message naming the chart,
/// series or file at fault.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// What went wrong while building or writing a chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The chart has nothing to draw (no series, or only empty ones).
    Empty,
    /// A value cannot be drawn: not finite, or not positive on a log axis.
    BadValue,
    /// The output file could not be written, or its extension is unknown.
    Io,
    /// The SVG could not be rendered or encoded as PNG.
    Render,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
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
