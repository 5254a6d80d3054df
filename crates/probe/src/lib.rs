//! LENS probes and inference (work in progress: see issue 5).
