//! The integration tests, one crate: each module is one end-to-end area of the product (exact
//! operation counts, reproduction tolerances, CLI errors, documents). One crate links once, where
//! a crate per file linked the library thirty times over.

mod batched_sync;
mod bounce;
mod calibrate_profile;
mod cli;
mod coherent_placement;
mod coherent_scenario;
mod compare;
mod docs_examples;
mod dram_bandwidth;
mod fit;
mod generic_profiles;
mod input_errors;
mod iommu_cpus;
mod iommu_dma;
mod iommu_ops;
mod iommu_props;
mod json_documents;
mod map_benchmark;
mod module_graph;
mod mutation;
mod numa_topology;
mod one_cpu;
mod pernuma_cma;
mod plain_walk;
mod platform_params;
mod plots;
mod priced;
mod progress;
mod release_rules;
mod replay;
mod reproduce_figures;
mod run_tables;
mod sensitivity;
mod shared_inventory;
mod smmu_walk_flush;
mod snapshots;
mod sweep;
mod swiotlb_phys;
mod zynq;
mod zynq_pipeline;
mod zynq_user_access;
