//! The registry of named software costs: every stretch of the kernel's own code the stack charges
//! through [`super::Hw::sw`], declared once.
//!
//! Kernel counterpart: none as such — each entry stands for a kernel function (or the part of one
//! the model does not count instruction by instruction) whose time on a given CPU a platform
//! profile prices in its `[sw]` table.
//!
//! What it models: which names a profile's `[sw]` table may use ([`SwKey::from_name`]), what each
//! stands for, and which layers of the stack charge it ([`Layer`]), so a scenario can say which
//! costs its run may charge and a profile that leaves one out is reported rather than silently
//! free (`platform::Profile::unpriced_sw`).
//!
//! Invariants: the enum and the table come from one declaration (the `registry!` macro), so
//! `REGISTRY[k as usize].key == k` for every key; names are unique; code asks for a cost only by
//! [`SwKey`], so a name that is not declared here cannot be charged.

/// A layer of the stack that charges named software costs: one Rust module, one kernel file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// The DMA API front (kernel/dma/mapping.c).
    DmaApi,
    /// dma-direct (kernel/dma/direct.c, direct.h).
    DmaDirect,
    /// swiotlb's map/sync/bounce paths, 3.6 and 6.0 rules (kernel/dma/swiotlb.c).
    Swiotlb,
    /// The swiotlb slot allocator and its lock, both releases.
    SwiotlbPool,
    /// The 2012 x86-64 `swiotlb_dma_ops` (lib/swiotlb.c, Linux 3.6/3.8).
    Swiotlb2012,
    /// The DMA-API glue over an IOMMU domain (drivers/iommu/dma-iommu.c).
    IommuDma,
    /// The iommu core's map/unmap splitting (drivers/iommu/iommu.c).
    IommuCore,
    /// Arm LPAE page tables (drivers/iommu/io-pgtable-arm.c).
    IoPgtableArm,
    /// The SMMUv1/v2 (MMU-500) driver's TLB maintenance (drivers/iommu/arm/arm-smmu/arm-smmu.c).
    ArmSmmu,
    /// The SMMUv3 driver's command queue (drivers/iommu/arm/arm-smmu-v3/arm-smmu-v3.c).
    ArmSmmuV3,
    /// The IOVA allocator (drivers/iommu/iova.c).
    Iova,
    /// iommu-dma's flush queue for lazy invalidation (dma-iommu.c; iova.c before 5.17).
    DmaFq,
    /// The routed-packet path of the forwarding workload (net/ipv4, the ixgbe driver).
    IpForward,
    /// x86-64's out-of-line `__phys_addr` (arch/x86/mm/physaddr.c, up to 3.8).
    X86PhysAddr,
    /// 32-bit ARM's outer-cache driver behind `arm_dma_ops` (arch/arm/mm/cache-l2x0.c).
    ArmDma,
    /// A block driver for a DMA engine in programmable logic (seed 002's IIO-style ioctls).
    PlDma,
    /// Pinning user pages and building a scatterlist of them (mm/gup.c, lib/scatterlist.c).
    UserPages,
    /// The kernel's DMA-mapping benchmark module's own loop (kernel/dma/map_benchmark.c).
    MapBenchmark,
}

impl Layer {
    pub const ALL: [Layer; 18] = [
        Layer::DmaApi,
        Layer::DmaDirect,
        Layer::Swiotlb,
        Layer::SwiotlbPool,
        Layer::Swiotlb2012,
        Layer::IommuDma,
        Layer::IommuCore,
        Layer::IoPgtableArm,
        Layer::ArmSmmu,
        Layer::ArmSmmuV3,
        Layer::Iova,
        Layer::DmaFq,
        Layer::IpForward,
        Layer::X86PhysAddr,
        Layer::ArmDma,
        Layer::PlDma,
        Layer::UserPages,
        Layer::MapBenchmark,
    ];

    /// Short stable name, for output.
    pub fn name(self) -> &'static str {
        match self {
            Layer::DmaApi => "dma-api",
            Layer::DmaDirect => "dma-direct",
            Layer::Swiotlb => "swiotlb",
            Layer::SwiotlbPool => "swiotlb-pool",
            Layer::Swiotlb2012 => "swiotlb-2012",
            Layer::IommuDma => "iommu-dma",
            Layer::IommuCore => "iommu-core",
            Layer::IoPgtableArm => "io-pgtable-arm",
            Layer::ArmSmmu => "arm-smmu",
            Layer::ArmSmmuV3 => "arm-smmu-v3",
            Layer::Iova => "iova",
            Layer::DmaFq => "dma-fq",
            Layer::IpForward => "ip-forward",
            Layer::X86PhysAddr => "x86-physaddr",
            Layer::ArmDma => "arm-dma",
            Layer::PlDma => "pl-dma",
            Layer::UserPages => "user-pages",
            Layer::MapBenchmark => "map-benchmark",
        }
    }

    /// The dmasim module that charges this layer's costs.
    pub fn module(self) -> &'static str {
        match self {
            Layer::DmaApi => "dma::mapping",
            Layer::DmaDirect => "dma::direct",
            Layer::Swiotlb => "dma::swiotlb",
            Layer::SwiotlbPool => "dma::swiotlb::pool",
            Layer::Swiotlb2012 => "dma::swiotlb::x86_2012",
            Layer::IommuDma => "iommu::dma_iommu",
            Layer::IommuCore => "iommu::core",
            Layer::IoPgtableArm => "iommu::io_pgtable_arm",
            Layer::ArmSmmu => "iommu::arm_smmu",
            Layer::ArmSmmuV3 => "iommu::arm_smmu_v3",
            Layer::Iova => "iommu::iova",
            Layer::DmaFq => "iommu::dma_fq",
            Layer::IpForward => "drivers::ixgbe",
            Layer::X86PhysAddr => "arch::x86::physaddr",
            Layer::ArmDma => "arch::arm::cache_l2x0",
            Layer::PlDma | Layer::UserPages => "drivers::pl_dma",
            Layer::MapBenchmark => "scenario::map_benchmark",
        }
    }
}

/// One declared software cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwCostDecl {
    pub key: SwKey,
    /// The `[sw]` key in a profile.
    pub name: &'static str,
    /// The kernel function (or functions) whose own instructions it stands for.
    pub function: &'static str,
    /// The layers that charge it.
    pub layers: &'static [Layer],
    /// When it is charged and what it covers, in one line.
    pub description: &'static str,
}

macro_rules! registry {
    ($($variant:ident => $name:literal, $function:literal, [$($layer:ident),+], $desc:literal;)+) => {
        /// A named software cost. The only way to ask a backend for one ([`super::Hw::sw_cost`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum SwKey {
            $($variant,)+
        }

        impl SwKey {
            /// Every key, in declaration order.
            pub const ALL: &'static [SwKey] = &[$(SwKey::$variant,)+];
        }

        /// Every named software cost, in the order of [`SwKey::ALL`].
        pub const REGISTRY: &[SwCostDecl] = &[$(
            SwCostDecl {
                key: SwKey::$variant,
                name: $name,
                function: $function,
                layers: &[$(Layer::$layer),+],
                description: $desc,
            },
        )+];
    };
}

registry! {
    DmaApiCall => "dma_api_call",
        "dma_{map,unmap}_{page,sg}_attrs, dma_sync_*", [DmaApi],
        "per DMA API call: the front's own code before it dispatches to the device's dma_map_ops";
    SgNext => "sg_next", "sg_next", [DmaDirect, IommuDma, Swiotlb2012],
        "per entry of a scatter-gather walk (map, unmap or sync)";

    DmaDirectMapPhys => "dma_direct_map_phys", "dma_direct_map_phys", [DmaDirect],
        "per region mapped: phys_to_dma, dma_capable, attribute checks";
    DmaDirectUnmapPhys => "dma_direct_unmap_phys", "dma_direct_unmap_phys", [DmaDirect],
        "per region unmapped: dma_to_phys, swiotlb check";
    DmaDirectSyncSingle => "dma_direct_sync_single",
        "dma_direct_sync_single_for_{cpu,device}", [DmaDirect],
        "per region synced by a dma_sync_* call";

    SwiotlbMap => "swiotlb_map", "swiotlb_map", [Swiotlb],
        "per bounced map: trace point, phys_to_dma and dma_capable of the slot";
    SwiotlbTblMapSingle => "swiotlb_tbl_map_single", "swiotlb_tbl_map_single",
        [Swiotlb, Swiotlb2012],
        "per bounced map: checks, search set-up, orig_addr stores (the search is charged per step)";
    SwiotlbTblUnmapSingle => "swiotlb_tbl_unmap_single", "swiotlb_tbl_unmap_single",
        [Swiotlb, Swiotlb2012],
        "per bounced unmap: slot lookup and release set-up (list[] writes are charged per slot)";
    SwiotlbSyncSingle => "swiotlb_sync_single", "swiotlb_sync_single_for_{cpu,device}",
        [Swiotlb],
        "per swiotlb_sync_single_for_{cpu,device} call on a bounced buffer (6.0 rules)";
    SwiotlbBounce => "swiotlb_bounce", "swiotlb_bounce", [Swiotlb, Swiotlb2012],
        "per bounce: orig_addr lookup and range checks, excluding the copy itself ([memory.copy])";

    SpinLockIrqsave => "spin_lock_irqsave", "spin_lock_irqsave / spin_unlock_irqrestore",
        [SwiotlbPool],
        "swiotlb pool (3.6) or area (6.0) lock taken and released, uncontended; once per search of a pool or area and once per release";
    SwiotlbSearchStep => "swiotlb_search_step",
        "swiotlb_do_find_slots (3.6: swiotlb_tbl_map_single)", [SwiotlbPool],
        "one candidate slot looked at by the slot search loop";
    SwiotlbSlotUpdate => "swiotlb_slot_update",
        "swiotlb_do_find_slots, swiotlb_release_slots (6.0)", [SwiotlbPool],
        "one io_tlb_list[] / slots[].list entry written when slots are claimed or released";

    SwiotlbMapPage => "swiotlb_map_page", "swiotlb_map_page", [Swiotlb2012],
        "per map: page_to_phys, phys_to_dma, dma_capable, swiotlb_force test (map_single inlined)";
    SwiotlbUnmapPage => "swiotlb_unmap_page", "swiotlb_unmap_page", [Swiotlb2012],
        "per unmap: the call on to unmap_single";
    InsnUnmapSingle => "insn.unmap_single", "unmap_single", [Swiotlb2012],
        "per instruction unmap_single executes (frame, BUG_ON; virt: the saved registers and the is_swiotlb_buffer call; phys: the inlined range check), groups counted in [code.swiotlb_2012]";
    SwiotlbSyncSingleForCpu => "swiotlb_sync_single_for_cpu", "swiotlb_sync_single_for_cpu",
        [Swiotlb2012],
        "per sync_single_for_cpu: the call on to swiotlb_sync_single";
    SwiotlbSyncSingleForDevice => "swiotlb_sync_single_for_device",
        "swiotlb_sync_single_for_device", [Swiotlb2012],
        "per sync_single_for_device: the call on to swiotlb_sync_single";
    InsnSwiotlbSyncSingle => "insn.swiotlb_sync_single", "swiotlb_sync_single", [Swiotlb2012],
        "per instruction swiotlb_sync_single executes (frame, BUG_ON; virt: the saved registers and the is_swiotlb_buffer call; phys: the inlined range check), groups counted in [code.swiotlb_2012]";
    IsSwiotlbBuffer => "is_swiotlb_buffer", "is_swiotlb_buffer", [Swiotlb2012],
        "per out-of-line is_swiotlb_buffer call (virt only): its frame, its two __phys_addr call sites, two compares";
    InsnSwiotlbDmaMappingError => "insn.swiotlb_dma_mapping_error",
        "swiotlb_dma_mapping_error", [Swiotlb2012],
        "per instruction swiotlb_dma_mapping_error executes (frame, compare; virt: the saved register and the __phys_addr call), groups counted in [code.swiotlb_2012]";
    PhysAddr => "__phys_addr", "__phys_addr", [X86PhysAddr],
        "per out-of-line __phys_addr call (x86-64 up to 3.8: the 2012 swiotlb's virt bookkeeping, dma_map_single, skb frees): kernel-text/direct-map test, subtract, return";
    SwiotlbTblSyncSingle => "swiotlb_tbl_sync_single", "swiotlb_tbl_sync_single", [Swiotlb2012],
        "per bounced sync: orig_addr lookup";

    IommuDmaMap => "iommu_dma_map", "iommu_dma_map_page, iommu_dma_map_sg", [IommuDma],
        "per map_page/map_sg call: cookie, prot, IOVA length and limit";
    IommuDmaUnmap => "iommu_dma_unmap", "iommu_dma_unmap_page, iommu_dma_unmap_sg", [IommuDma],
        "per unmap_page/unmap_sg call: gather init, IOVA free bookkeeping";
    IommuDmaSgEntry => "iommu_dma_sg_entry",
        "iommu_dma_map_sg, __finalise_sg, iommu_dma_unmap_sg", [IommuDma],
        "per sg entry in each of map_sg's passes (layout, __finalise_sg) and unmap_sg's end search";

    QueueIova => "queue_iova", "queue_iova", [DmaFq],
        "per queue_iova call: smp_mb, per-CPU queue lock, ring add, timer-armed test";
    FqRingFree => "fq_ring_free", "fq_ring_free", [DmaFq],
        "per fq_ring_free call: finish-count read and ring walk (each free_iova_fast charged apart)";
    FqFlushTimeout => "fq_flush_timeout", "fq_flush_timeout", [DmaFq],
        "per flush-queue timer run: timer softirq dispatch, fq_timer_on reset, per-CPU loop";

    IommuMap => "iommu_map", "__iommu_map", [IommuCore],
        "per __iommu_map call: checks, loop setup, trace";
    IommuUnmap => "iommu_unmap", "__iommu_unmap", [IommuCore],
        "per __iommu_unmap call: checks, loop setup, trace";
    IommuPgsize => "iommu_pgsize", "iommu_pgsize", [IommuCore],
        "per step of the map/unmap loop: page-size and count selection, driver dispatch";
    IommuMapSgEntry => "iommu_map_sg_entry", "iommu_map_sg, loop body", [IommuCore],
        "per scatterlist entry walked by iommu_map_sg";
    IommuMapSg => "iommu_map_sg", "iommu_map_sg", [IommuCore],
        "per iommu_map_sg call: might_sleep, domain ops lookup, loop setup, iotlb_sync_map test";

    ArmLpaeMapPages => "arm_lpae_map_pages", "arm_lpae_map_pages", [IoPgtableArm],
        "per map_pages call: driver op dispatch, argument checks, prot to PTE";
    ArmLpaeUnmapPages => "arm_lpae_unmap_pages", "arm_lpae_unmap_pages", [IoPgtableArm],
        "per unmap_pages call: driver op dispatch, argument checks";
    ArmLpaeWalkLevel => "arm_lpae_walk_level", "__arm_lpae_map / __arm_lpae_unmap, one level",
        [IoPgtableArm],
        "per table level descended by a map or unmap walk (index, load, type test)";
    ArmLpaeInitPte => "arm_lpae_init_pte", "arm_lpae_init_pte", [IoPgtableArm],
        "per PTE installed by a map";
    ArmLpaeClearPte => "arm_lpae_clear_pte", "__arm_lpae_clear_pte", [IoPgtableArm],
        "per PTE cleared by an unmap";
    ArmLpaeAllocTable => "arm_lpae_alloc_table", "__arm_lpae_alloc_pages", [IoPgtableArm],
        "per table allocated: page allocator and zeroing";
    ArmLpaeFreeTable => "arm_lpae_free_table", "__arm_lpae_free_pgtable", [IoPgtableArm],
        "per table freed, including the scan of its entries";
    ArmLpaeIovaToPhys => "arm_lpae_iova_to_phys", "arm_lpae_iova_to_phys", [IoPgtableArm],
        "per iova_to_phys lookup";

    ArmSmmuTlbInvRange => "arm_smmu_tlb_inv_range", "arm_smmu_tlb_inv_range_s1", [ArmSmmu],
        "per arm_smmu_tlb_inv_range_s1 call: cookie, ASID and address setup";
    ArmSmmuTlbInvStep => "arm_smmu_tlb_inv_step", "arm_smmu_tlb_inv_range_s1, loop body",
        [ArmSmmu],
        "per register written by the invalidation loop (address increment, loop test)";
    ArmSmmuTlbSync => "arm_smmu_tlb_sync", "arm_smmu_tlb_sync_context", [ArmSmmu],
        "per arm_smmu_tlb_sync_context: runtime-PM check, cb_lock, loop setup";

    ArmSmmuCmdqBuildCmd => "arm_smmu_cmdq_build_cmd",
        "arm_smmu_cmdq_build_cmd / arm_smmu_cmdq_batch_add", [ArmSmmuV3],
        "per command built and added to a batch";
    ArmSmmuCmdqIssueCmdlist => "arm_smmu_cmdq_issue_cmdlist", "arm_smmu_cmdq_issue_cmdlist",
        [ArmSmmuV3],
        "per batch published: space reservation, prod update, owner handover";
    ArmSmmuCmdqClaimRetry => "arm_smmu_cmdq_claim_retry",
        "arm_smmu_cmdq_issue_cmdlist, the llq cmpxchg loop", [ArmSmmuV3],
        "per failed cmpxchg on llq (from 5.4): the loop's own instructions before the next attempt";
    ArmSmmuCmdqIssueCmd => "arm_smmu_cmdq_issue_cmd",
        "arm_smmu_cmdq_issue_cmd / arm_smmu_cmdq_issue_sync (up to 5.3)", [ArmSmmuV3],
        "per command inserted under cmdq->lock: irqsave, the lock's own atomics, queue_insert_raw, the unlock";

    IovaRcacheHit => "iova_rcache_hit", "alloc_iova_fast / iova_rcache_get", [Iova],
        "alloc_iova_fast served from a per-CPU magazine: lock, pop";
    IovaRcacheMiss => "iova_rcache_miss", "alloc_iova_fast / iova_rcache_get", [Iova],
        "alloc_iova_fast finding every magazine and the depot empty";
    IovaRcacheInsert => "iova_rcache_insert", "free_iova_fast / iova_rcache_insert", [Iova],
        "free_iova_fast into a per-CPU magazine";
    IovaDepotSwap => "iova_depot_swap", "__iova_rcache_{insert,get}, depot path",
        [Iova],
        "a magazine moved between a CPU and the depot (global lock)";
    AllocIova => "alloc_iova", "alloc_iova / __alloc_and_insert_iova_range", [Iova],
        "tree allocation: rbtree lock, kmem_cache_alloc, insert and rebalance";
    IovaRbtreeStep => "iova_rbtree_step", "__alloc_and_insert_iova_range, search loop", [Iova],
        "per node the top-down search visits (rb_prev and the fit test)";
    FreeIova => "free_iova", "free_iova / __free_iova", [Iova],
        "tree free: find_iova, erase and rebalance, kmem_cache_free";

    L2x0Lock => "l2x0_lock",
        "raw_spin_lock_irqsave / raw_spin_unlock_irqrestore of l2x0_lock (cache-l2x0.c, 3.14/3.15)",
        [ArmDma],
        "the PL310 driver's lock taken with interrupts off and released, uncontended: once per l2x0_*_range call and once more per 4 KB block after the first";

    IpForwardPath => "ip_forward_path",
        "ip_rcv, ip_forward, ... (rx to tx, less DMA)",
        [IpForward],
        "per routed packet: everything of the packet path the model does not run itself";

    PlDmaEnqueue => "pl_dma_enqueue", "the driver's ioctl(ENQUEUE_BLOCK)", [PlDma],
        "per block queued: syscall entry and exit, block lookup, the descriptor written to the PL engine (the DMA API calls it makes are charged apart)";
    PlDmaDequeue => "pl_dma_dequeue", "the driver's ioctl(DEQUEUE_BLOCK)", [PlDma],
        "per block taken back: syscall entry and exit, completion check, block hand-back (the DMA API calls it makes are charged apart)";
    GetUserPagesPage => "get_user_pages_page", "get_user_pages (follow_page_mask, get_page)",
        [UserPages],
        "per user page pinned: page-table walk, fault-in check, reference taken";
    PutPage => "put_page", "put_page (set_page_dirty_lock for pages the device wrote)",
        [UserPages],
        "per user page released after its DMA";
    SgInitTableEntry => "sg_init_table_entry", "sg_init_table", [UserPages],
        "per entry of the table: clearing it (memset) and the end mark";
    SgSetPage => "sg_set_page", "sg_set_page", [UserPages],
        "per entry: page link, offset and length stored";

    KtimeGet => "ktime_get", "ktime_get", [MapBenchmark],
        "per clock read around a timed map or unmap: the timekeeper's seqcount, the counter read and its scaling to ns";
}

impl SwKey {
    /// This key's declaration.
    pub fn decl(self) -> &'static SwCostDecl {
        &REGISTRY[self as usize]
    }

    /// The profile `[sw]` key.
    pub fn name(self) -> &'static str {
        self.decl().name
    }

    /// Whether the cost is per instruction of a function whose instruction groups a profile's
    /// `[code.swiotlb_2012]` counts (the functions the 3.8 swiotlb series changed).
    pub fn per_instruction(self) -> bool {
        matches!(
            self,
            SwKey::InsnUnmapSingle
                | SwKey::InsnSwiotlbSyncSingle
                | SwKey::InsnSwiotlbDmaMappingError
        )
    }

    /// The key a profile spells `name`, if any.
    pub fn from_name(name: &str) -> Option<SwKey> {
        REGISTRY.iter().find(|d| d.name == name).map(|d| d.key)
    }

    /// Every key charged by any of `layers`, in declaration order: what a stack built from those
    /// layers may charge. Some are charged only under some policies (`__phys_addr` only with virt
    /// bookkeeping), so this is what a run *can* charge, not what it will.
    pub fn charged_by(layers: &[Layer]) -> Vec<SwKey> {
        REGISTRY
            .iter()
            .filter(|d| d.layers.iter().any(|l| layers.contains(l)))
            .map(|d| d.key)
            .collect()
    }

    /// The declared name closest to `name` by edit distance, if it is close enough to be a
    /// plausible misspelling (at most a third of the name's length, and at most 3 edits).
    pub fn closest(name: &str) -> Option<SwKey> {
        let limit = (name.chars().count() / 3).clamp(1, 3);
        REGISTRY
            .iter()
            .map(|d| (edit_distance(name, d.name), d.key))
            .filter(|&(dist, _)| dist <= limit)
            .min_by_key(|&(dist, _)| dist)
            .map(|(_, k)| k)
    }
}

impl std::fmt::Display for SwKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn registry_is_indexed_by_key_and_names_are_unique() {
        assert_eq!(REGISTRY.len(), SwKey::ALL.len());
        for (i, d) in REGISTRY.iter().enumerate() {
            assert_eq!(d.key as usize, i, "{}", d.name);
            assert_eq!(SwKey::from_name(d.name), Some(d.key));
            assert!(!d.function.is_empty() && !d.description.is_empty());
            assert!(!d.layers.is_empty());
        }
        let names: BTreeSet<_> = REGISTRY.iter().map(|d| d.name).collect();
        assert_eq!(names.len(), REGISTRY.len(), "duplicate names");
        assert_eq!(SwKey::from_name("no_such_cost"), None);
    }

    #[test]
    fn every_layer_charges_something() {
        for l in Layer::ALL {
            assert!(!SwKey::charged_by(&[l]).is_empty(), "{}", l.name());
        }
    }

    /// Every source file that asks for a named cost, and the names it may ask for: the code can
    /// only name a [`SwKey`], so this checks that no file still spells a cost as a string and
    /// that each key is charged somewhere (a declared but never charged key would be a profile
    /// entry with no effect).
    #[test]
    fn every_key_is_charged_by_some_module_and_none_by_string() {
        let sources: &[(&str, &str)] = &[
            ("dma/mapping.rs", include_str!("../dma/mapping.rs")),
            ("dma/direct.rs", include_str!("../dma/direct.rs")),
            ("dma/swiotlb/mod.rs", include_str!("../dma/swiotlb/mod.rs")),
            (
                "dma/swiotlb/pool.rs",
                include_str!("../dma/swiotlb/pool.rs"),
            ),
            (
                "dma/swiotlb/x86_2012.rs",
                include_str!("../dma/swiotlb/x86_2012.rs"),
            ),
            ("iommu/dma_iommu.rs", include_str!("../iommu/dma_iommu.rs")),
            ("iommu/dma_fq.rs", include_str!("../iommu/dma_fq.rs")),
            ("iommu/core.rs", include_str!("../iommu/core.rs")),
            (
                "iommu/io_pgtable_arm.rs",
                include_str!("../iommu/io_pgtable_arm.rs"),
            ),
            ("iommu/arm_smmu.rs", include_str!("../iommu/arm_smmu.rs")),
            (
                "iommu/arm_smmu_v3.rs",
                include_str!("../iommu/arm_smmu_v3.rs"),
            ),
            ("iommu/iova.rs", include_str!("../iommu/iova.rs")),
            ("drivers/ixgbe.rs", include_str!("../drivers/ixgbe.rs")),
            ("drivers/pl_dma.rs", include_str!("../drivers/pl_dma.rs")),
            (
                "arch/x86/physaddr.rs",
                include_str!("../arch/x86/physaddr.rs"),
            ),
            (
                "arch/arm/cache_l2x0.rs",
                include_str!("../arch/arm/cache_l2x0.rs"),
            ),
            (
                "scenario/map_benchmark.rs",
                include_str!("../scenario/map_benchmark.rs"),
            ),
        ];
        for (file, text) in sources {
            assert!(
                !text.contains("sw_cost(\""),
                "{file} asks for a software cost by string"
            );
        }
        for d in REGISTRY {
            let variant = format!("SwKey::{:?}", d.key);
            for l in d.layers {
                let file = format!("{}.rs", l.module().replace("::", "/"));
                let (_, text) = sources
                    .iter()
                    .find(|(f, _)| *f == file || *f == file.replace(".rs", "/mod.rs"))
                    .unwrap_or_else(|| panic!("no source listed for {file}"));
                assert!(
                    text.contains(&variant),
                    "{} is declared as charged by {file}, which does not use {variant}",
                    d.name
                );
            }
        }
    }

    #[test]
    fn closest_name_catches_misspellings_only() {
        assert_eq!(SwKey::closest("dma_api_cal"), Some(SwKey::DmaApiCall));
        assert_eq!(SwKey::closest("iommu_mapp"), Some(SwKey::IommuMap));
        assert_eq!(SwKey::closest("completely_different"), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
