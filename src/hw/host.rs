//! The Host backend: runs cache maintenance on this machine's real caches and measures it.
//! (Filled in by the hostbench work; see `crate::hostbench`.)
