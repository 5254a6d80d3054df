//! Charts for pmlab (work in progress: owned by the profiler work, issue 5).
