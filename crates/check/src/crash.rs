//! Crash images (to come).
