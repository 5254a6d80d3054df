//! placeholder
use crate::{Engine, Error, ErrorKind, Options, Result};
use std::path::Path;
pub(crate) const AVAILABLE: bool = false;
pub(crate) fn create(_: &Path, _: &Options) -> Result<Box<dyn Engine>> {
    Err(Error::new(ErrorKind::Unsupported, "anchor"))
}
pub(crate) fn open(_: &Path, _: &Options) -> Result<Box<dyn Engine>> {
    Err(Error::new(ErrorKind::Unsupported, "anchor"))
}
