//! swiotlb (stub)
pub mod pool;
