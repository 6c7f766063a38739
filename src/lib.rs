//! dmasim: an executable model of the Linux DMA-mapping stack.
//!
//! The crate runs the stack's algorithms over real data structures and charges every hardware
//! operation they perform through one interface ([`hw::Hw`]) to a calibrated platform model
//! ([`hw::model::Model`]) or to this machine's real hardware ([`hw::host`]). The module tree
//! follows the kernel's: [`dma`] (kernel/dma, with swiotlb), [`iommu`] (drivers/iommu), [`arch`]
//! (arch/*/mm), [`mm`], [`drivers`]; [`setup`] builds a machine from a checked
//! [`scenario::Scenario`] the way the kernel's boot and probe paths do.
//!
//! Running a scenario from code:
//!
//! ```
//! use dmasim::hw::Counter;
//! use dmasim::scenario::{Outcome, Scenario, execute};
//!
//! let text = r#"
//! [scenario]
//! name = "example"
//! platform = "dimensity9500"
//! kernel = "7.0"
//! [device]
//! name = "dev"
//! coherent = false
//! dma_mask_bits = 64
//! [workload]
//! kind = "streaming"
//! buffer = "64K"
//! entry = "4K"
//! direction = "from_device"
//! calls = "map_sg+unmap_sg"
//! iterations = 1
//! "#;
//! let s = Scenario::parse("example.toml", text, std::path::Path::new(".")).unwrap();
//! let Ok(Outcome::Streaming(r)) = execute(&s) else { panic!("a streaming result") };
//! // 16 entries of 64 lines: cleaned for the device, invalidated for the CPU, a DSB after each.
//! assert_eq!(r.count(Counter::CacheCleanLine), 1024);
//! assert_eq!(r.count(Counter::CacheInvalLine), 1024);
//! assert_eq!(r.count(Counter::Barrier), 32);
//! ```

pub mod arch;
pub mod calibrate;
pub mod compare;
pub mod device;
pub mod dma;
pub mod drivers;
pub mod fit;
pub mod hostbench;
pub mod hw;
pub mod input;
pub mod iommu;
pub mod mm;
pub mod platform;
pub mod plot;
pub mod policy;
pub mod published;
pub mod report;
pub mod reproduce;
pub mod scatterlist;
pub mod scenario;
pub mod sensitivity;
pub mod setup;
pub mod smp;
pub mod stats;
pub mod sweep;
pub mod trace;
pub mod types;
