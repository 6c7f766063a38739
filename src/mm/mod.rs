//! Simulated physical memory.
//!
//! Kernel counterpart: the page allocator (mm/page_alloc.c) and memory itself. See [`physmem`].

pub mod cma;
pub mod physmem;
