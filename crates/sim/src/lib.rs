//! The memory-system simulator of pmlab (work in progress: see issue 4).
#![deny(missing_docs)]
