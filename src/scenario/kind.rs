//! What a workload kind is to the rest of dmasim: one trait for the workload, one for its
//! result, and the one list ([`workloads!`] in the parent module) that turns them into the
//! [`super::Workload`] and [`super::Outcome`] enums, the registry of kinds and every dispatch.
//!
//! Kernel counterpart: none.
//!
//! A new kind is a module that defines its `[workload]` section, its [`WorkloadKind`] and its
//! [`KindResult`], and one line in that list (docs/design.md has the recipe). Everything a kind
//! decides about the machine (which layers it charges, whether its device may sit behind an
//! IOMMU, whether it bounces) is answered here once, and setup reads the answers; no caller
//! tests a kind by name.
//!
//! Invariants: every method has the kind's own answer or the default stated on it; a kind's
//! `check` runs after the shared sections are checked, so it may read them.

use super::{Kind, Progress, RunFailure, RunInfo, Scenario, StackRow};
use crate::hw::sw_costs::Layer;
use crate::input::InputError;

/// A workload kind: how it is read, checked, sized and run.
pub trait WorkloadKind {
    /// What a run produces.
    type Output: KindResult;
    /// The kind's registry entries (one per `kind = "..."` name it answers to).
    const KINDS: &'static [Kind];
    /// The name its `[workload] kind` had.
    fn kind(&self) -> &'static str {
        Self::KINDS[0].name
    }
    /// Run it on the Model; `Err` is the modelled kernel refusing to set the machine up, or a
    /// bug of dmasim's found on the way.
    fn run(&self, s: &Scenario, progress: &Progress) -> Result<Self::Output, RunFailure>;
    /// Checks that need the whole scenario (the platform, the device, the release), made
    /// before anything runs. By default none.
    fn check(&self, _s: &Scenario) -> Result<(), InputError> {
        Ok(())
    }
    /// A rough count of the model's steps the run takes, for `--max-work`.
    fn work(&self, s: &Scenario) -> u128;
    /// The outer steps the run counts on its [`Progress`].
    fn progress_total(&self) -> u64;
    /// Whether it drives a device through the DMA API. By default it does.
    fn uses_dma_api(&self) -> bool {
        true
    }
    /// Whether it names its devices itself instead of the one `[device]`.
    fn own_devices(&self) -> bool {
        false
    }
    /// Whether its device's ops need a swiotlb pool.
    fn uses_swiotlb(&self) -> bool {
        false
    }
    /// Whether its device is a PCI function, whose bus sets its segment boundary.
    fn pci_device(&self) -> bool {
        false
    }
    /// Whether it takes IOVAs from the allocator. By default when it uses the DMA API.
    fn allocates_iovas(&self) -> bool {
        self.uses_dma_api()
    }
    /// Whether its device may sit behind an `[iommu]`. By default it may.
    fn behind_iommu(&self) -> bool {
        true
    }
    /// Whether one of its own devices maps through an iommu-dma domain without an `[iommu]`
    /// section (a replayed device the trace shows behind an IOMMU, or said to be): the
    /// iommu-dma policies then apply as with one. By default none does.
    fn own_iommu_domain(&self) -> bool {
        false
    }
    /// Whether a NUMA platform with an SMMUv3 boots and probes the SMMU for it.
    fn probes_smmu(&self) -> bool {
        false
    }
    /// The layers of its own driver (beyond the DMA API's), whose software costs it charges.
    fn driver_layers(&self, _s: &Scenario) -> Vec<Layer> {
        Vec::new()
    }
}

/// What a kind's run produced, as the commands read it.
pub trait KindResult {
    /// The terminal table.
    fn table(&self) -> String;
    /// The JSON document (docs/output.md).
    fn json(&self) -> serde_json::Value;
    /// The run's modelled time, in ps.
    fn total_ps(&self) -> u64;
    /// Which scenario ran where, under which policies.
    fn info(&self) -> &RunInfo;
    /// Every timed call as (name, calls, total ps), in the order the kind reports them.
    fn call_totals(&self) -> Vec<(String, u64, u64)>;
    /// For a kind whose calls are each a device's (a replay's): each name of
    /// [`KindResult::call_totals`] as (the name, the device, the call). By default none is.
    fn call_devices(&self) -> Vec<(String, String, String)> {
        Vec::new()
    }
    /// The call stacks, for folded output.
    fn stacks(&self) -> &[StackRow];
    /// What a sweep shows of this run beyond its calls' means. By default nothing.
    fn sweep_point(&self) -> Option<SweepPoint> {
        None
    }
}

/// A run's own figures at one point of a sweep: a throughput, and the lines the kernel's own
/// tool prints for the same run (`dma_map_benchmark`'s), to set beside a board's at that point.
#[derive(Clone, Debug)]
pub struct SweepPoint {
    /// What the rate counts each modelled second: `map+unmap pairs`.
    pub rate_of: &'static str,
    /// How many, each modelled second of the run.
    pub rate: f64,
    /// The tool's lines, as it prints them.
    pub lines: String,
    /// The tool's figures and the rate, for the sweep's JSON document.
    pub json: serde_json::Value,
}

impl<T: KindResult> KindResult for Box<T> {
    fn table(&self) -> String {
        (**self).table()
    }
    fn json(&self) -> serde_json::Value {
        (**self).json()
    }
    fn total_ps(&self) -> u64 {
        (**self).total_ps()
    }
    fn info(&self) -> &RunInfo {
        (**self).info()
    }
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        (**self).call_totals()
    }
    fn call_devices(&self) -> Vec<(String, String, String)> {
        (**self).call_devices()
    }
    fn stacks(&self) -> &[StackRow] {
        (**self).stacks()
    }
    fn sweep_point(&self) -> Option<SweepPoint> {
        (**self).sweep_point()
    }
}

/// The [`KindResult`] methods every result has the same way: its module's `table` and `json`,
/// and its `total_ps`, `info` and `stacks` fields.
macro_rules! result_fields {
    () => {
        fn table(&self) -> String {
            table(self)
        }
        fn json(&self) -> serde_json::Value {
            json(self)
        }
        fn total_ps(&self) -> u64 {
            self.total_ps
        }
        fn info(&self) -> &crate::report::RunInfo {
            &self.info
        }
        fn stacks(&self) -> &[crate::hw::calls::StackRow] {
            &self.stacks
        }
    };
}
pub(super) use result_fields;

/// [`KindResult::call_totals`] of a run timed per DMA API call.
pub(super) fn call_stat_totals(calls: &[crate::hw::calls::CallStat]) -> Vec<(String, u64, u64)> {
    calls
        .iter()
        .map(|c| (c.call.to_string(), c.count, c.total_ps))
        .collect()
}

/// The workload kinds: from `Variant(module::Workload)` entries, the [`super::Workload`] and
/// [`super::Outcome`] enums, [`super::KINDS`], and the dispatch of both traits.
macro_rules! workloads {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// What a scenario does.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Workload {
            $($variant($ty),)*
        }

        /// What running a scenario produced, by workload kind.
        #[derive(Clone, Debug)]
        pub enum Outcome {
            $($variant(<$ty as kind::WorkloadKind>::Output),)*
        }

        /// Every workload kind.
        pub static KINDS: &[&[Kind]] = &[$(<$ty as kind::WorkloadKind>::KINDS,)*];

        impl Workload {
            /// The kind's trait object, for the questions every kind answers.
            fn as_kind(&self) -> &dyn kind::DynWorkloadKind {
                match self {
                    $(Workload::$variant(w) => w,)*
                }
            }

            fn run_kind(&self, s: &Scenario, p: &Progress) -> Result<Outcome, RunFailure> {
                match self {
                    $(Workload::$variant(w) => kind::WorkloadKind::run(w, s, p).map(Outcome::$variant),)*
                }
            }
        }

        impl Outcome {
            fn as_result(&self) -> &dyn kind::KindResult {
                match self {
                    $(Outcome::$variant(r) => r,)*
                }
            }
        }
    };
}
pub(super) use workloads;

/// [`WorkloadKind`] without its result type, for dispatch through `dyn`.
pub trait DynWorkloadKind {
    fn kind(&self) -> &'static str;
    fn check(&self, s: &Scenario) -> Result<(), InputError>;
    fn work(&self, s: &Scenario) -> u128;
    fn progress_total(&self) -> u64;
    fn uses_dma_api(&self) -> bool;
    fn own_devices(&self) -> bool;
    fn uses_swiotlb(&self) -> bool;
    fn pci_device(&self) -> bool;
    fn allocates_iovas(&self) -> bool;
    fn behind_iommu(&self) -> bool;
    fn own_iommu_domain(&self) -> bool;
    fn probes_smmu(&self) -> bool;
    fn driver_layers(&self, s: &Scenario) -> Vec<Layer>;
}

impl<T: WorkloadKind> DynWorkloadKind for T {
    fn kind(&self) -> &'static str {
        WorkloadKind::kind(self)
    }
    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        WorkloadKind::check(self, s)
    }
    fn work(&self, s: &Scenario) -> u128 {
        WorkloadKind::work(self, s)
    }
    fn progress_total(&self) -> u64 {
        WorkloadKind::progress_total(self)
    }
    fn uses_dma_api(&self) -> bool {
        WorkloadKind::uses_dma_api(self)
    }
    fn own_devices(&self) -> bool {
        WorkloadKind::own_devices(self)
    }
    fn uses_swiotlb(&self) -> bool {
        WorkloadKind::uses_swiotlb(self)
    }
    fn pci_device(&self) -> bool {
        WorkloadKind::pci_device(self)
    }
    fn allocates_iovas(&self) -> bool {
        WorkloadKind::allocates_iovas(self)
    }
    fn behind_iommu(&self) -> bool {
        WorkloadKind::behind_iommu(self)
    }
    fn own_iommu_domain(&self) -> bool {
        WorkloadKind::own_iommu_domain(self)
    }
    fn probes_smmu(&self) -> bool {
        WorkloadKind::probes_smmu(self)
    }
    fn driver_layers(&self, s: &Scenario) -> Vec<Layer> {
        WorkloadKind::driver_layers(self, s)
    }
}
