//! Arm SMMUv3 TLB maintenance through the command queue.
//!
//! Kernel counterpart: drivers/iommu/arm/arm-smmu-v3/arm-smmu-v3.c — `arm_smmu_flush_ops`
//! (`arm_smmu_tlb_inv_context`, `arm_smmu_tlb_inv_walk`, `arm_smmu_tlb_inv_page_nosync`),
//! `arm_smmu_iotlb_sync`, `arm_smmu_tlb_inv_range_domain` / `__arm_smmu_tlb_inv_range` (≤ 7.0) and
//! `arm_smmu_domain_inv_range` / `arm_smmu_inv_size_too_big` (7.1), `arm_smmu_tlb_inv_asid`,
//! `arm_smmu_cmdq_build_cmd`, `arm_smmu_cmdq_batch_add` / `arm_smmu_cmdq_batch_submit` and
//! `arm_smmu_cmdq_issue_cmdlist`; at probe `arm_smmu_init_structures()` (`arm_smmu_init_queues`
//! → `arm_smmu_init_one_queue`, `arm_smmu_init_strtab_2lvl`) and the `CMDQ_BASE` write of
//! `arm_smmu_device_reset()`.
//!
//! What it models: commands are built as 16-byte entries (opcode, ASID, address, and on SMMUv3.2
//! the range fields TG/TTL/NUM/SCALE) and written into a ring in batches of
//! `CMDQ_BATCH_ENTRIES`; a full batch is published without a sync, the last one with a
//! `CMD_SYNC`, whose completion the CPU waits for. Leaf invalidations are gathered
//! (`iommu_iotlb_gather_add_page`) and issued at `iotlb_sync` as one range; walk flushes are
//! issued at once. What each release does differs ([`SmmuV3Rules`], the `smmuv3_inv` policy):
//!
//! - a range is one `CMD_TLBI_NH_VA` per granule, except on SMMUv3.2 hardware from 5.7, where the
//!   driver uses range commands (a few per range);
//! - ≤ 5.14 `arm_smmu_tlb_inv_asid()` publishes `CMD_TLBI_NH_ASID` and then `CMD_SYNC` as two
//!   command lists; 5.15 (`arm_smmu_cmdq_issue_cmd_with_sync`) publishes them as one;
//! - ≤ 6.5 a range command carries the TTL of its granule even for a walk; from 6.6 only leaves
//!   do, and a walk whose page count has NUM = 1 in its low five bits gets one more page;
//! - from 7.1 (`arm_smmu_domain_inv_range`), without range invalidation, a range of
//!   `1 << (log2(granule) - 3)` granules or more becomes one `CMD_TLBI_NH_ASID` (2 MB of 4K,
//!   32 MB of 16K, 512 MB of 64K). Before 7.1 the kernel does this only on its SVA path (6.6,
//!   commit d5afb4b47e13), which the model does not run: the io-pgtable path issues every
//!   granule (512 commands for a 2 MB walk flush, 8192 for 32 MB).
//!
//! How CPUs share the queue ([`CmdqProtocol`], from the same policy): up to 5.3 each command is
//! inserted under `cmdq->lock` and published by its own producer-index write, leaves go out as
//! io-pgtable clears them, and a `CMD_SYNC` right after another is not inserted again (the CPU
//! waits for the one already there); from 5.4 a CPU claims its slots with a `cmpxchg` on
//! `llq`, and the first CPU to claim after the owner flag was cleared becomes the owner: it
//! waits for the previous owner, stops gathering, waits until every gathered entry is valid and
//! publishes them all with one write, while each CPU polls its own sync's slot. Every shared
//! word is a line the CPUs write in turn ([`crate::smp::SharedLine`]), priced by the topology
//! when it moves; waiting is what the other CPUs' work produces ([`crate::smp`]).
//!
//! Not modelled: ATS (`arm_smmu_atc_inv_domain`), stage 2, the E2H `CMD_TLBI_EL2_*` opcodes, SVA,
//! `CMD_SYNC` completion without MSI polling (an SMMU that is not coherent or has no MSIs: CS=SEV
//! and the CPU polling `CMDQ_CONS` by MMIO — every run uses the MSI protocol, and `dmasim
//! policies` lists this), and waiting for queue space (5.4's exclusive lock and `CMDQ_CONS`
//! read, 5.3's `CONS` poll when the shadow index says full): the ring's consumer index catches
//! up at every completed sync, and a list that would overrun it is counted in
//! [`CmdqStats::overruns`]. 5.3's `sync_count` word is priced as a line of the queue's node;
//! its `prev_cmd_opcode` and `sync_nr`, which the lock's holder reads and writes, are a line of
//! their own that follows the lock from CPU to CPU.
//! 5.4's claim is one `READ_ONCE` and a `cmpxchg` loop, as the kernel's. An attempt fails when
//! another CPU wrote `llq` between the claim's read and the line's arrival here; the loop then
//! spends its own instructions (`sw.arm_smmu_cmdq_claim_retry`) and tries again, and fails again
//! if another CPU's request took the line away and wrote it meanwhile (a CPU keeps a line it
//! received for `cache.line_hold` before the next request takes it). The attempts are the
//! engine's arbitration of the line ([`crate::hw::Hw::cmpxchg`]), not a count: a claim fails as
//! often as it loses, and [`CmdqStats`] counts claims and failed attempts.
//!
//! Probe (5.10): the command queue, the event queue and the stream table's level-1 table come
//! from `dmam_alloc_coherent()` for the SMMU's own device ([`arm_smmu_init_structures`]), so
//! their nodes follow dma-direct's rules and the boot's CMA areas; a queue is sized from the
//! hardware's IDR1 field capped at `Q_MAX_SZ_SHIFT`, halved while the allocation fails and the
//! queue is at least a page. The PRI queue (SMMUs with PRI) and the level-2 stream tables
//! (allocated when a master is added) are not modelled.
//!
//! Invariants: every command written is published (the doorbell is rung for every batch); after
//! `iotlb_sync`, `tlb_flush_walk` or `tlb_flush_all` returns, a `CMD_SYNC` issued after every
//! command of that operation has completed.

use super::{IommuError, IommuFlushOps, IommuIotlbGather, iommu_iotlb_gather_add_page};
use crate::device::Device;
use crate::dma::coherent::{Allocation, CoherentError, DmaCoherent};
use crate::dma::contiguous::Gfp;
use crate::hw::SmpHw;
use crate::hw::{DeviceHw, Hw, MmioReg, SmmuCmdKind, SwCost, SwKey};
use crate::mm::physmem::PhysMem;
use crate::smp::{Shared, SpinLock, WaitQueue};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

pub const CMDQ_ENT_DWORDS: usize = 2;
pub const CMDQ_BATCH_ENTRIES: usize = 64;
pub const CMDQ_TLBI_RANGE_NUM_MAX: u64 = 31;

pub const CMDQ_OP_TLBI_NH_ASID: u64 = 0x11;
pub const CMDQ_OP_TLBI_NH_VA: u64 = 0x12;
pub const CMDQ_OP_CMD_SYNC: u64 = 0x46;
const CMDQ_SYNC_0_CS_SEV: u64 = 2;
const ARM_SMMU_SH_ISH: u64 = 3;
const ARM_SMMU_MEMATTR_OIWB: u64 = 0xf;

/// `Q_MAX_SZ_SHIFT` (5.10), the largest queue `dmam_alloc_coherent()` is asked for: with CMA
/// configured it is `PAGE_SHIFT + CONFIG_CMA_ALIGNMENT` (12 + 8 with 4 KB pages and the default
/// alignment: 1 MiB), so a queue fits the alignment CMA can give; only a kernel without CMA
/// uses `PAGE_SHIFT + MAX_ORDER - 1` (4 MiB). Every machine modelled here has CMA.
pub const Q_MAX_SZ_SHIFT: u32 = 12 + 8;
/// `CMDQ_ENT_SZ_SHIFT`, `EVTQ_ENT_SZ_SHIFT`: 16-byte commands, 32-byte events.
pub const CMDQ_ENT_SZ_SHIFT: u32 = 4;
pub const EVTQ_ENT_SZ_SHIFT: u32 = 5;
/// `CMDQ_MAX_SZ_SHIFT`, `EVTQ_MAX_SZ_SHIFT`: log2 of the most entries a queue may have.
pub const CMDQ_MAX_SZ_SHIFT: u32 = Q_MAX_SZ_SHIFT - CMDQ_ENT_SZ_SHIFT;
pub const EVTQ_MAX_SZ_SHIFT: u32 = Q_MAX_SZ_SHIFT - EVTQ_ENT_SZ_SHIFT;
/// `STRTAB_L1_SZ_SHIFT`, `STRTAB_SPLIT`, `STRTAB_L1_DESC_DWORDS`: the 2-level stream table's
/// level-1 table is at most 1 MiB of 8-byte descriptors, each covering `1 << STRTAB_SPLIT` SIDs.
pub const STRTAB_L1_SZ_SHIFT: u32 = 20;
pub const STRTAB_SPLIT: u32 = 8;
pub const STRTAB_L1_DESC_DWORDS: u32 = 1;
/// `Q_BASE_LOG2SIZE` (bits 4:0) and `Q_BASE_ADDR_MASK` (bits 51:5) of a queue base register.
const Q_BASE_ADDR_MASK: u64 = 0x000f_ffff_ffff_ffe0;

/// What the driver reads from IDR1 at probe (`arm_smmu_device_hw_probe`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmmuV3Idr1 {
    /// IDR1.CMDQS: log2 of the most command-queue entries the SMMU supports.
    pub cmdqs: u32,
    /// IDR1.EVTQS.
    pub evtqs: u32,
    /// IDR1.SIDSIZE: stream ID bits.
    pub sidsize: u32,
}

/// One queue's memory after probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMem {
    pub alloc: Allocation,
    /// log2 of its entries (`llq.max_n_shift` after any halving).
    pub max_n_shift: u32,
}

impl QueueMem {
    /// The value `arm_smmu_device_reset()` writes to the queue's base register: RWA, address,
    /// LOG2SIZE.
    pub fn q_base(&self) -> u64 {
        const Q_BASE_RWA: u64 = 1 << 62;
        Q_BASE_RWA | (self.alloc.phys.0 & Q_BASE_ADDR_MASK) | u64::from(self.max_n_shift & 0x1f)
    }
}

/// What `arm_smmu_init_structures()` allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmmuV3Structures {
    pub cmdq: QueueMem,
    pub evtq: QueueMem,
    /// The 2-level stream table's level-1 table.
    pub strtab_l1: Allocation,
}

/// `arm_smmu_init_one_queue()`: `dmam_alloc_coherent()` of `(1 << max_n_shift) * ent` bytes,
/// halving the queue while the allocation fails and it is at least a page.
fn init_one_queue(
    coh: &mut DmaCoherent,
    mem: &mut PhysMem,
    smmu: &Device,
    mut max_n_shift: u32,
    ent_sz_shift: u32,
) -> Result<QueueMem, CoherentError> {
    loop {
        let qsz = 1u64 << (max_n_shift + ent_sz_shift);
        match coh.alloc(mem, smmu, qsz, Gfp::KERNEL, true) {
            Ok(alloc) => return Ok(QueueMem { alloc, max_n_shift }),
            Err(e) if qsz < 4096 || max_n_shift == 0 => return Err(e),
            Err(_) => max_n_shift -= 1,
        }
    }
}

/// `arm_smmu_init_structures()` for an SMMU without PRI, then the `CMDQ_BASE` write of
/// `arm_smmu_device_reset()` that tells the SMMU where its commands live.
pub fn arm_smmu_init_structures(
    hw: &mut dyn DeviceHw,
    coh: &mut DmaCoherent,
    mem: &mut PhysMem,
    smmu: &Device,
    idr1: SmmuV3Idr1,
) -> Result<SmmuV3Structures, CoherentError> {
    let back = hw.enter(crate::frame_id!("arm_smmu_init_structures"));
    let r = (|| {
        let cmdq = init_one_queue(
            coh,
            mem,
            smmu,
            idr1.cmdqs.min(CMDQ_MAX_SZ_SHIFT),
            CMDQ_ENT_SZ_SHIFT,
        )?;
        let evtq = init_one_queue(
            coh,
            mem,
            smmu,
            idr1.evtqs.min(EVTQ_MAX_SZ_SHIFT),
            EVTQ_ENT_SZ_SHIFT,
        )?;
        // arm_smmu_init_strtab_2lvl(): as many L1 descriptors as the SIDs need, capped.
        let size = (STRTAB_L1_SZ_SHIFT - (STRTAB_L1_DESC_DWORDS.ilog2() + 3))
            .min(idr1.sidsize.saturating_sub(STRTAB_SPLIT));
        let l1size = (1u64 << size) * u64::from(STRTAB_L1_DESC_DWORDS) * 8;
        let strtab_l1 = coh.alloc(mem, smmu, l1size, Gfp::KERNEL, true)?;
        Ok(SmmuV3Structures {
            cmdq,
            evtq,
            strtab_l1,
        })
    })();
    if let Ok(s) = &r {
        hw.mmio_write(MmioReg::SmmuCmdqBase, s.cmdq.q_base());
    }
    hw.leave(back);
    r
}

/// `struct arm_smmu_cmdq_ent`, the commands this model issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdqEnt {
    TlbiNhVa {
        asid: u16,
        addr: u64,
        leaf: bool,
        /// Range fields (0 unless range invalidation is in use).
        tg: u8,
        ttl: u8,
        num: u8,
        scale: u8,
    },
    TlbiNhAsid {
        asid: u16,
    },
    Sync,
}

impl CmdqEnt {
    pub fn kind(&self) -> SmmuCmdKind {
        match self {
            CmdqEnt::TlbiNhVa { .. } => SmmuCmdKind::TlbiNhVa,
            CmdqEnt::TlbiNhAsid { .. } => SmmuCmdKind::TlbiNhAsid,
            CmdqEnt::Sync => SmmuCmdKind::Sync,
        }
    }

    /// `arm_smmu_cmdq_build_cmd()`: the entry's two little-endian double words.
    pub fn encode(&self) -> [u64; CMDQ_ENT_DWORDS] {
        match *self {
            CmdqEnt::TlbiNhVa {
                asid,
                addr,
                leaf,
                tg,
                ttl,
                num,
                scale,
            } => [
                CMDQ_OP_TLBI_NH_VA
                    | (u64::from(num) & 0x1f) << 12
                    | (u64::from(scale) & 0x1f) << 20
                    | u64::from(asid) << 48,
                u64::from(leaf)
                    | (u64::from(ttl) & 3) << 8
                    | (u64::from(tg) & 3) << 10
                    | (addr & !0xfff),
            ],
            CmdqEnt::TlbiNhAsid { asid } => [CMDQ_OP_TLBI_NH_ASID | u64::from(asid) << 48, 0],
            CmdqEnt::Sync => [
                CMDQ_OP_CMD_SYNC
                    | CMDQ_SYNC_0_CS_SEV << 12
                    | ARM_SMMU_SH_ISH << 22
                    | ARM_SMMU_MEMATTR_OIWB << 24,
                0,
            ],
        }
    }
}

pub use crate::stats::CmdqStats;

/// How CPUs share the command queue, by release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdqProtocol {
    /// ≤ 5.3: `smmu->cmdq.lock` around each command's insertion and its producer-index write
    /// (`arm_smmu_cmdq_issue_cmd`, one doorbell per command); a `CMD_SYNC` right after another
    /// is not inserted again, its completion shared (`prev_cmd_opcode`, `sync_nr`); the CPU
    /// polls the MSI-written `sync_count` after unlocking.
    Locked,
    /// 5.4 (587e6c10a7ce, "Reduce contention during command-queue insertion"): space claimed
    /// by `cmpxchg` on `llq`; the first CPU to claim after the owner flag was cleared becomes
    /// the owner, waits for the previous owner, stops gathering (`atomic_fetch_andnot`), waits
    /// until every gathered entry is valid and rings the doorbell once for all of them; a list
    /// with a `CMD_SYNC` holds the queue's lock shared while its CPU polls the sync's own slot.
    LockFree,
}

/// The command queue's shared state: a ring of 16-byte entries and what the CPUs meet on to
/// fill it (the lock before 5.4; `llq`, `owner_prod` with the shared lock, and the valid map
/// from 5.4), each owning what the kernel keeps under it or on its line. One per SMMU, which
/// every CPU calling the domain reaches through it. The ring's slots are written by the
/// CPU that claimed them and read by the owner that publishes them, borrowed only between the
/// points where a CPU may wait.
#[derive(Debug)]
pub struct Cmdq {
    ring: RefCell<Ring>,
    protocol: CmdqProtocol,
    /// ≤ 5.3: `smmu->cmdq.lock` and the producer index it protects.
    lock: SpinLock<LockedQueue>,
    /// ≤ 5.3: `smmu->prev_cmd_opcode` and `smmu->sync_nr`, read and written under the lock by
    /// whichever CPU holds it: a line that follows the lock from CPU to CPU.
    last_cmd: Shared<LastCmd>,
    /// 5.4: the `llq` word (`prod` with the owner flag) on a line of its own.
    llq: Shared<Llq>,
    /// How slots are claimed on `llq` (5.4 on).
    claim: CmdqClaim,
    /// The atomic-add claim: `llq.cons` on a line of its own (mainline keeps it in `llq`'s).
    cons: Shared<()>,
    /// 5.4: `owner_prod` and the shared lock's count, which share one line (with the valid
    /// map's pointer, `struct arm_smmu_cmdq` as 5.4 lays it out).
    owner: Shared<OwnerLine>,
    /// 5.4: the valid bitmap: per slot, the index (plus one) it was last marked valid for (the
    /// kernel's bits flip with each wrap). ≤ 5.3 has none; the model still marks each slot it
    /// publishes, to check that nothing is published before it is written.
    valid: Shared<Vec<u64>>,
    /// CPUs waiting for `owner_prod`, for entries to become valid, for a doorbell.
    owner_q: WaitQueue,
    valid_q: WaitQueue,
    doorbell_q: WaitQueue,
    pub stats: Cell<CmdqStats>,
    /// 5.4: the `llq` `cmpxchg` loop's own instructions between a failed attempt and the next
    /// (`arm_smmu_cmdq_claim_retry`), priced once the queue joins a domain.
    claim_retry: SwCost,
}

/// ≤ 5.3: what `cmdq->lock` protects.
#[derive(Debug, Default)]
struct LockedQueue {
    /// The producer index.
    prod: u64,
}

/// ≤ 5.3: neighbours in `struct arm_smmu_device`, so one line, written under `cmdq->lock`.
#[derive(Debug, Default)]
struct LastCmd {
    /// The last command inserted was a `CMD_SYNC` (`prev_cmd_opcode`), completing at this time.
    prev_sync: Option<u64>,
    /// The last sync's MSI payload (`sync_nr`).
    sync_nr: u32,
}

/// 5.4: `cmdq->q.llq`'s producer half.
#[derive(Clone, Copy, Debug, Default)]
struct Llq {
    /// The next index to claim.
    prod: u64,
    /// A CPU owns the gathering (`CMDQ_PROD_OWNED_FLAG`; the atomic-add claim's `count`).
    owned: bool,
    /// The atomic-add claim: the syncs gathered since the owner's claim (`llq.sync`).
    syncs: u32,
}

/// How a CPU claims its slots in the lock-free queue (5.4 on; the `cmdq_claim` policy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CmdqClaim {
    /// Mainline: `READ_ONCE` of `llq` and a `cmpxchg` loop, which fails whenever another CPU
    /// claimed since the read.
    #[default]
    Cmpxchg,
    /// The 2020 series "iommu/arm-smmu-v3: Remove cmpxchg() in arm_smmu_cmdq_issue_cmdlist()"
    /// (v2, August 2020; posted, not merged): one `atomic64_fetch_add` of (one claimant, its
    /// sync, its slots) claims them and cannot fail, the owner being the CPU that found no
    /// claimant; `cons` moves to a line of its own, read for the space check after the claim;
    /// the owner takes the queue's lock shared once for every sync it gathered, instead of
    /// each sync's CPU taking it.
    AtomicAdd,
}

impl crate::types::Choice for CmdqClaim {
    const ALL: &'static [CmdqClaim] = &[CmdqClaim::Cmpxchg, CmdqClaim::AtomicAdd];
    fn name(self) -> &'static str {
        match self {
            CmdqClaim::Cmpxchg => "cmpxchg",
            CmdqClaim::AtomicAdd => "atomic-add",
        }
    }
}

/// 5.4: `cmdq->owner_prod` and the shared lock `cmdq->lock`, on one line.
#[derive(Debug, Default)]
struct OwnerLine {
    /// Where the next owner starts.
    owner_prod: u64,
    /// CPUs holding the queue's lock shared (a sync list, while its CPU polls).
    shared: u32,
}

#[derive(Debug)]
struct Ring {
    entries: Vec<[u64; CMDQ_ENT_DWORDS]>,
    /// The ring's length less one: the length is a power of two, so an index wraps by this mask
    /// (the kernel's `Q_IDX`), not by a division.
    mask: u64,
    /// What the SMMU has consumed, as the CPUs that polled it learnt (its `CONS` register).
    cons: u64,
    /// Per slot: the kind of the command written there.
    kinds: Vec<SmmuCmdKind>,
    /// Where the last doorbell published up to.
    published: u64,
    /// Per slot: when the `CMD_SYNC` published there completes, and the index (plus one) that
    /// time is for.
    sync_done: Vec<(u64, u64)>,
}

impl Ring {
    /// When the `CMD_SYNC` at index `i` completes, once a doorbell has published it.
    fn sync_done_at(&self, i: u64) -> Option<u64> {
        let (t, of) = self.sync_done[(i & self.mask) as usize];
        (of == i + 1).then_some(t)
    }
}

/// Whether every index of `[from, to)` has been written and marked valid in `valid`.
fn all_valid(valid: &[u64], mask: u64, from: u64, to: u64) -> bool {
    (from..to).all(|i| valid[(i & mask) as usize] == i + 1)
}

/// `arm_smmu_cmdq_set_valid_map()`: `[from, to)` may be published.
fn mark_valid(valid: &mut [u64], mask: u64, from: u64, to: u64) {
    for i in from..to {
        valid[(i & mask) as usize] = i + 1;
    }
}

impl Cmdq {
    /// A queue of `1 << log2_entries` entries (IDR1.CMDQS), shared under 5.4's protocol.
    pub fn new(log2_entries: u32) -> Cmdq {
        Cmdq::with_protocol(log2_entries, CmdqProtocol::LockFree)
    }

    /// A queue of `1 << log2_entries` entries shared under `protocol`.
    pub fn with_protocol(log2_entries: u32, protocol: CmdqProtocol) -> Cmdq {
        let n = 1usize << log2_entries.clamp(1, 19);
        Cmdq {
            ring: RefCell::new(Ring {
                entries: vec![[0; CMDQ_ENT_DWORDS]; n],
                mask: n as u64 - 1,
                cons: 0,
                kinds: vec![SmmuCmdKind::Sync; n],
                published: 0,
                sync_done: vec![(0, 0); n],
            }),
            protocol,
            lock: SpinLock::named(
                "cmdq->lock",
                "(spinning on cmdq->lock)",
                LockedQueue::default(),
            ),
            last_cmd: Shared::new("smmu->prev_cmd_opcode, smmu->sync_nr", LastCmd::default()),
            llq: Shared::new("cmdq->q.llq", Llq::default()),
            claim: CmdqClaim::Cmpxchg,
            cons: Shared::new("cmdq->q.llq.cons", ()),
            owner: Shared::new("cmdq->owner_prod, cmdq->lock", OwnerLine::default()),
            valid: Shared::new("cmdq->valid_map", vec![0; n]),
            owner_q: WaitQueue::new(),
            valid_q: WaitQueue::new(),
            doorbell_q: WaitQueue::new(),
            stats: Cell::new(CmdqStats::default()),
            claim_retry: SwCost(0),
        }
    }

    pub fn protocol(&self) -> CmdqProtocol {
        self.protocol
    }

    pub fn entries(&self) -> usize {
        self.ring.borrow().entries.len()
    }

    /// The entry at ring index `i` (for tests and traces).
    pub fn entry(&self, i: usize) -> [u64; CMDQ_ENT_DWORDS] {
        let r = self.ring.borrow();
        r.entries[i % r.entries.len()]
    }

    /// The producer index, as the release keeps it.
    pub fn prod(&self) -> u64 {
        match self.protocol {
            CmdqProtocol::Locked => self.lock.peek().prod,
            CmdqProtocol::LockFree => self.llq.peek().prod,
        }
    }

    pub fn stats(&self) -> CmdqStats {
        self.stats.get()
    }

    /// What the ≤ 5.3 lock saw.
    pub fn lock_record(&self) -> crate::smp::LockRecord {
        self.lock.record()
    }

    /// Bytes of command memory written so far.
    pub fn bytes_written(&self) -> u64 {
        self.stats.get().commands * (CMDQ_ENT_DWORDS as u64 * 8)
    }

    fn stat(&self, f: impl FnOnce(&mut CmdqStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// A list of `n` claimed at `head` would overrun entries the SMMU has not consumed (the
    /// kernel would wait for space): counted.
    fn check_space(&self, head: u64, n: u64) {
        let r = self.ring.borrow();
        if head + n - r.cons > r.entries.len() as u64 {
            self.stat(|s| s.overruns += 1);
        }
    }

    /// Write `cmds` (and a `CMD_SYNC`) into the ring from index `at`.
    fn write_entries(&self, at: u64, cmds: &[CmdqEnt], sync: bool) {
        let mut r = self.ring.borrow_mut();
        let mask = r.mask;
        let all = cmds.iter().copied().chain(sync.then_some(CmdqEnt::Sync));
        for (i, c) in all.enumerate() {
            let slot = ((at + i as u64) & mask) as usize;
            r.entries[slot] = c.encode();
            r.kinds[slot] = c.kind();
        }
    }

    /// The owner publishes `[from, to)`: the doorbell, and each sync's completion noted.
    fn publish<H: DeviceHw + ?Sized>(&self, hw: &mut H, from: u64, to: u64) {
        let kinds: Vec<SmmuCmdKind> = {
            let mut r = self.ring.borrow_mut();
            let valid = self.valid.peek();
            let k = (from..to)
                .map(|i| {
                    let slot = (i & r.mask) as usize;
                    debug_assert_eq!(valid[slot], i + 1, "published before it was valid");
                    r.kinds[slot]
                })
                .collect();
            r.published = to;
            k
        };
        let mut done = Vec::new();
        hw.smmu_cmdq_doorbell(&kinds, &mut done);
        let mut r = self.ring.borrow_mut();
        let mut done = done.into_iter();
        for (i, k) in (from..to).zip(&kinds) {
            if *k == SmmuCmdKind::Sync {
                let t = done.next().expect("a completion per sync");
                let slot = (i & r.mask) as usize;
                r.sync_done[slot] = (t, i + 1);
            }
        }
    }

    /// `arm_smmu_cmdq_issue_cmdlist()` (5.4): write `cmds` (and a `CMD_SYNC` if `sync`),
    /// publish them (this CPU, or the owner that gathers them), and if `sync` wait for its
    /// completion. See [`CmdqProtocol::LockFree`].
    fn issue_cmdlist<H: DeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        cost: SwCost,
        cmds: &[CmdqEnt],
        sync: bool,
    ) {
        let back = hw.enter(crate::frame_id!("arm_smmu_cmdq_issue_cmdlist"));
        hw.sw(cost);
        let n = cmds.len() as u64 + u64::from(sync);
        let mask = self.ring.borrow().mask;
        // 1. Claim n slots; the first CPU to claim after the owner flag was cleared becomes
        // the owner.
        let (head, owner) = match self.claim {
            CmdqClaim::Cmpxchg => self.claim_cmpxchg(hw, n),
            CmdqClaim::AtomicAdd => self.claim_atomic_add(hw, n, sync),
        };
        self.check_space(head, n);
        // 2. Write the entries, then (a sync) take the queue's lock shared; with the
        // atomic-add claim the owner takes it for every sync it gathered.
        self.write_entries(head, cmds, sync);
        hw.smmu_cmdq_write(n);
        if sync && self.claim == CmdqClaim::Cmpxchg {
            hw.update(&self.owner, |_, o| o.shared += 1);
        }
        // 3. dma_wmb(); mark them valid: an owner waiting for them may go on.
        hw.update(&self.valid, |_, v| mark_valid(v, mask, head, head + n));
        hw.wake(&self.valid_q);
        self.stat(|s| {
            s.commands += n;
            s.batches += 1;
        });
        if owner {
            self.publish_gathered(hw, head, mask);
        }
        if sync {
            self.wait_for_sync(hw, head + n - 1);
        }
        hw.leave(back);
    }

    /// Mainline's claim: READ_ONCE brings `llq` over; the cmpxchg fails when another CPU
    /// claimed since, and the loop tries again with the value it returned.
    fn claim_cmpxchg<H: DeviceHw + ?Sized>(&self, hw: &mut H, n: u64) -> (u64, bool) {
        let (_, seen) = hw.read_once(&self.llq);
        let retry = self.claim_retry;
        let (failed, claimed) = hw.cmpxchg_update(&self.llq, seen, retry, |llq| {
            let head = llq.prod;
            llq.prod += n;
            let owner = !llq.owned;
            llq.owned = true;
            (head, owner)
        });
        self.stat(|s| {
            s.claims += 1;
            s.cmpxchg_retries += failed;
        });
        claimed
    }

    /// The atomic-add claim: one `atomic64_fetch_add`, which cannot fail, then `cons` read
    /// from its own line for the space check.
    fn claim_atomic_add<H: DeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        n: u64,
        sync: bool,
    ) -> (u64, bool) {
        let claimed = hw.update(&self.llq, |_, llq| {
            let head = llq.prod;
            llq.prod += n;
            llq.syncs += u32::from(sync);
            let owner = !llq.owned;
            llq.owned = true;
            (head, owner)
        });
        self.stat(|s| s.claims += 1);
        hw.read_once(&self.cons);
        claimed
    }

    /// 5.4's owner, from `head`: wait for the previous owner, stop gathering, wait for every
    /// gathered entry to be valid, ring the doorbell once for all of them, hand over.
    fn publish_gathered<H: DeviceHw + ?Sized>(&self, hw: &mut H, head: u64, mask: u64) {
        // 4a. Wait for the previous owner to finish.
        hw.cond_load(
            &self.owner,
            &self.owner_q,
            "(waiting for the previous cmdq owner)",
            |o| o.owner_prod == head,
        );
        // 4b. Stop gathering: every slot claimed so far is this owner's to publish.
        let (end, syncs) = hw.update(&self.llq, |_, llq| {
            llq.owned = false;
            (llq.prod, std::mem::take(&mut llq.syncs))
        });
        // 4c. Wait until every gathered entry is valid.
        hw.cond_load(
            &self.valid,
            &self.valid_q,
            "(waiting for gathered cmdq entries)",
            |v| all_valid(v, mask, head, end),
        );
        // The atomic-add claim: the lock taken shared for every gathered sync at once, before
        // the doorbell (none are counted under mainline's claim, each sync's CPU took it).
        if syncs > 0 {
            hw.update(&self.owner, |_, o| o.shared += syncs);
        }
        // 4d. One doorbell for all of them; 4e. the next owner may go.
        self.publish(hw, head, end);
        hw.wake(&self.doorbell_q);
        hw.update(&self.owner, |_, o| o.owner_prod = end);
        hw.wake(&self.owner_q);
    }

    /// 5.4's sync list, once its entries are in: poll the sync's own slot (at `slot`) once the
    /// owner has published it, then leave the shared lock.
    fn wait_for_sync<H: DeviceHw + ?Sized>(&self, hw: &mut H, slot: u64) {
        let done = loop {
            if let Some(t) = self.ring.borrow().sync_done_at(slot) {
                break t;
            }
            hw.wait_on(
                &self.doorbell_q,
                None,
                "(waiting for the cmdq owner's doorbell)",
            );
        };
        hw.smmu_cmdq_poll(done);
        {
            let mut r = self.ring.borrow_mut();
            r.cons = r.cons.max(slot + 1);
        }
        self.stat(|s| s.syncs += 1);
        // shared_tryunlock (`atomic_add_unless(&cmdq->lock, -1, 1)`): a reader that is not the
        // last leaves at once; the last also writes llq.cons, then releases.
        let last = hw.update(&self.owner, |_, o| {
            let last = o.shared == 1;
            if !last {
                o.shared -= 1;
            }
            last
        });
        if last {
            // WRITE_ONCE(cmdq->q.llq.cons): in llq's line, or (atomic-add) its own.
            match self.claim {
                CmdqClaim::Cmpxchg => hw.update(&self.llq, |_, _| ()),
                CmdqClaim::AtomicAdd => hw.update(&self.cons, |_, _| ()),
            }
            // The release's store is folded into tryunlock's atomic above.
            self.owner.peek_mut().shared -= 1;
        }
    }

    /// `arm_smmu_cmdq_issue_cmd()` (≤ 5.3): one command inserted and published under the lock.
    fn issue_cmd<H: DeviceHw + ?Sized>(&self, hw: &mut H, cost: SwCost, cmd: &CmdqEnt) {
        let back = hw.enter(crate::frame_id!("arm_smmu_cmdq_issue_cmd"));
        hw.sw(cost);
        hw.with_lock(&self.lock, |hw, q| {
            self.insert_and_publish(hw, q, cmd);
            hw.update(&self.last_cmd, |_, last| last.prev_sync = None);
        });
        hw.leave(back);
    }

    /// `queue_insert_raw()` and `queue_inc_prod()` under the lock: the entry written and its
    /// producer-index write. Returns its index.
    fn insert_and_publish<H: DeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        q: &mut LockedQueue,
        cmd: &CmdqEnt,
    ) -> u64 {
        let head = self.insert(q, cmd);
        hw.smmu_cmdq_write(1);
        self.publish(hw, head, head + 1);
        head
    }

    /// `queue_insert_raw()` under the lock: the entry at `prod`, valid at once.
    fn insert(&self, q: &mut LockedQueue, cmd: &CmdqEnt) -> u64 {
        let head = q.prod;
        q.prod += 1;
        self.check_space(head, 1);
        self.write_entries(head, std::slice::from_ref(cmd), false);
        let mask = self.ring.borrow().mask;
        mark_valid(&mut self.valid.peek_mut(), mask, head, head + 1);
        self.stat(|s| {
            s.commands += 1;
            s.batches += 1;
        });
        head
    }

    /// `arm_smmu_cmdq_issue_sync()` → `__arm_smmu_cmdq_issue_sync_msi()` (≤ 5.3): a
    /// `CMD_SYNC` inserted under the lock unless the last command inserted was one, then the
    /// poll for its completion after unlocking.
    fn issue_sync_locked<H: DeviceHw + ?Sized>(&self, hw: &mut H, cost: SwCost) {
        let back = hw.enter(crate::frame_id!("arm_smmu_cmdq_issue_sync"));
        hw.sw(cost);
        let done = hw.with_lock(&self.lock, |hw, q| {
            // prev_cmd_opcode read and, unless it was a sync, ++sync_nr: the line exclusive
            // here once; inserting the sync then writes prev_cmd_opcode on a line still here.
            let prev = hw.update(&self.last_cmd, |_, last| {
                if last.prev_sync.is_none() {
                    last.sync_nr = last.sync_nr.wrapping_add(1);
                }
                last.prev_sync
            });
            match prev {
                Some(t) => {
                    self.stat(|s| s.coalesced += 1);
                    t
                }
                None => {
                    let head = self.insert_and_publish(hw, q, &CmdqEnt::Sync);
                    let t = self.ring.borrow().sync_done_at(head).expect("published");
                    hw.update(&self.last_cmd, |_, last| last.prev_sync = Some(t));
                    t
                }
            }
        });
        hw.smmu_cmdq_poll(done);
        {
            let mut r = self.ring.borrow_mut();
            r.cons = r.cons.max(r.published);
        }
        self.stat(|s| s.syncs += 1);
        hw.leave(back);
    }

    /// `cmds` then, if `sync`, a `CMD_SYNC` and the wait for it, as the release issues them:
    /// one list (5.4), or each command on its own and a sync (≤ 5.3).
    fn issue<H: DeviceHw + ?Sized>(&self, hw: &mut H, cost: SwCost, cmds: &[CmdqEnt], sync: bool) {
        match self.protocol {
            CmdqProtocol::LockFree => self.issue_cmdlist(hw, cost, cmds, sync),
            CmdqProtocol::Locked => {
                for c in cmds {
                    self.issue_cmd(hw, cost, c);
                }
                if sync {
                    self.issue_sync_locked(hw, cost);
                }
            }
        }
    }

    /// `arm_smmu_cmdq_issue_sync()`: a `CMD_SYNC` on its own and the wait for its completion.
    pub fn issue_sync<H: DeviceHw + ?Sized>(&self, hw: &mut H, cost: SwCost) {
        self.issue(hw, cost, &[], true);
    }
}

/// The release's command-queue invalidation code (the `smmuv3_inv` policy): each choice is named
/// after the release that introduced its behaviour and holds until the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SmmuV3Rules {
    /// ≤ 5.3: each leaf's `CMD_TLBI_NH_VA` goes out at once, as io-pgtable unmaps it
    /// (`tlb_add_flush` = `arm_smmu_tlb_inv_range_nosync`), every command inserted on its own
    /// under `cmdq->lock` ([`CmdqProtocol::Locked`]); `iotlb_sync` issues the `CMD_SYNC`.
    Linux5_3,
    /// 5.4–5.6: per-granule `CMD_TLBI_NH_VA` even on SMMUv3.2; ASID invalidation is two command
    /// lists (`arm_smmu_cmdq_issue_cmd` then `arm_smmu_cmdq_issue_sync`).
    Linux5_4,
    /// 5.7–5.14: range invalidation on SMMUv3.2 (commit 6a481a95d4c1), TTL on every range.
    Linux5_7,
    /// 5.15–6.5: `CMD_TLBI_NH_ASID` + `CMD_SYNC` published as one list.
    Linux5_15,
    /// 6.6–7.0: TTL only for leaves; a walk never has both NUM and SCALE zero.
    Linux6_6,
    /// 7.1: `arm_smmu_domain_inv_range()` turns a range of `1 << (log2(granule) - 3)` granules or
    /// more into one `CMD_TLBI_NH_ASID` when the SMMU has no range invalidation.
    #[default]
    Linux7_1,
}

impl crate::types::Choice for SmmuV3Rules {
    const ALL: &'static [Self] = &[
        SmmuV3Rules::Linux5_3,
        SmmuV3Rules::Linux5_4,
        SmmuV3Rules::Linux5_7,
        SmmuV3Rules::Linux5_15,
        SmmuV3Rules::Linux6_6,
        SmmuV3Rules::Linux7_1,
    ];
    fn name(self) -> &'static str {
        match self {
            SmmuV3Rules::Linux5_3 => "5.3",
            SmmuV3Rules::Linux5_4 => "5.4",
            SmmuV3Rules::Linux5_7 => "5.7",
            SmmuV3Rules::Linux5_15 => "5.15",
            SmmuV3Rules::Linux6_6 => "6.6",
            SmmuV3Rules::Linux7_1 => "7.1",
        }
    }
}

/// The software cost of issuing under `protocol`.
fn issue_key(protocol: CmdqProtocol) -> SwKey {
    match protocol {
        CmdqProtocol::LockFree => SwKey::ArmSmmuCmdqIssueCmdlist,
        CmdqProtocol::Locked => SwKey::ArmSmmuCmdqIssueCmd,
    }
}

impl SmmuV3Rules {
    /// How the release's CPUs share the command queue.
    pub fn cmdq_protocol(self) -> CmdqProtocol {
        if self >= SmmuV3Rules::Linux5_4 {
            CmdqProtocol::LockFree
        } else {
            CmdqProtocol::Locked
        }
    }
    /// Leaves are gathered and invalidated at `iotlb_sync` (5.4's `tlb_add_page`), rather than
    /// each issued as io-pgtable clears it.
    fn gathers_leaves(self) -> bool {
        self >= SmmuV3Rules::Linux5_4
    }
    /// The driver issues range commands when the SMMU has them (`ARM_SMMU_FEAT_RANGE_INV`).
    fn uses_range_inv(self) -> bool {
        self >= SmmuV3Rules::Linux5_7
    }
    /// `arm_smmu_tlb_inv_asid()` publishes the command and its sync as one list.
    fn asid_with_sync(self) -> bool {
        self >= SmmuV3Rules::Linux5_15
    }
    /// TTL is set for leaves only; a walk avoids NUM = SCALE = 0.
    fn ttl_leaf_only(self) -> bool {
        self >= SmmuV3Rules::Linux6_6
    }
    /// `arm_smmu_inv_size_too_big()` in the common invalidation path.
    fn large_range_to_asid(self) -> bool {
        self >= SmmuV3Rules::Linux7_1
    }
}

impl PartialOrd for SmmuV3Rules {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmmuV3Rules {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (*self as u8).cmp(&(*other as u8))
    }
}

/// SMMU features the driver reads from the ID registers at probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmmuV3Features {
    /// IDR3.RIL: range invalidation (SMMUv3.2).
    pub range_inv: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    build: SwCost,
    /// `arm_smmu_cmdq_issue_cmdlist` (5.4) or `arm_smmu_cmdq_issue_cmd` (≤ 5.3), by the queue's
    /// protocol.
    issue: SwCost,
}

/// One stage-1 domain's `iommu_flush_ops` on an SMMUv3.
#[derive(Debug)]
pub struct ArmSmmuV3Domain {
    pub asid: u16,
    pub features: SmmuV3Features,
    /// The release's invalidation code.
    pub rules: SmmuV3Rules,
    /// The domain's smallest page size (`__ffs(pgsize_bitmap)`), the range commands' TG.
    pub granule: u64,
    /// The SMMU's command queue, which every CPU calling the domain shares (an `Rc`, so that
    /// what it saw can be read after the domain has gone).
    pub cmdq: Rc<Cmdq>,
    costs: Costs,
}

/// `struct arm_smmu_cmdq_batch`: the commands one call gathers before it issues them, a local
/// of that call (on the kernel's stack), so no two CPUs ever share one.
struct CmdqBatch {
    cmds: [CmdqEnt; CMDQ_BATCH_ENTRIES],
    num: usize,
}

impl CmdqBatch {
    fn new() -> CmdqBatch {
        CmdqBatch {
            cmds: [CmdqEnt::Sync; CMDQ_BATCH_ENTRIES],
            num: 0,
        }
    }

    fn cmds(&self) -> &[CmdqEnt] {
        &self.cmds[..self.num]
    }
}

impl ArmSmmuV3Domain {
    /// `granule` is the domain's smallest page size: 4K, 16K or 64K.
    pub fn new(
        hw: &dyn Hw,
        asid: u16,
        granule: u64,
        features: SmmuV3Features,
        cmdq: Cmdq,
    ) -> Result<ArmSmmuV3Domain, IommuError> {
        if !matches!(granule, 0x1000 | 0x4000 | 0x10000) {
            return Err(IommuError::BadGranule(granule));
        }
        let rules = SmmuV3Rules::default();
        let cmdq = Cmdq {
            protocol: rules.cmdq_protocol(),
            claim_retry: hw.sw_cost(SwKey::ArmSmmuCmdqClaimRetry),
            ..cmdq
        };
        Ok(ArmSmmuV3Domain {
            asid,
            features,
            rules,
            granule,
            costs: Costs {
                build: hw.sw_cost(SwKey::ArmSmmuCmdqBuildCmd),
                issue: hw.sw_cost(issue_key(cmdq.protocol)),
            },
            cmdq: Rc::new(cmdq),
        })
    }

    /// The invalidation code of the release that runs (the `smmuv3_inv` policy), and with it
    /// how CPUs share the queue; chosen once, at setup, before any CPU shares the domain.
    pub fn with_rules(mut self, hw: &dyn Hw, rules: SmmuV3Rules) -> ArmSmmuV3Domain {
        self.rules = rules;
        let q = Rc::get_mut(&mut self.cmdq).expect("rules are chosen before the queue is shared");
        q.protocol = rules.cmdq_protocol();
        self.costs.issue = hw.sw_cost(issue_key(q.protocol));
        self
    }

    /// How CPUs claim slots in the lock-free queue (the `cmdq_claim` policy; the locked queue
    /// of 5.3 and before has no claim); chosen once, at setup.
    pub fn with_claim(mut self, claim: CmdqClaim) -> ArmSmmuV3Domain {
        let q =
            Rc::get_mut(&mut self.cmdq).expect("the claim is chosen before the queue is shared");
        q.claim = claim;
        self
    }

    /// `arm_smmu_cmdq_batch_add()`: a full batch is issued first.
    fn batch_add(&self, hw: &mut dyn DeviceHw, batch: &mut CmdqBatch, cmd: CmdqEnt) {
        if batch.num == CMDQ_BATCH_ENTRIES {
            self.cmdq.issue(hw, self.costs.issue, batch.cmds(), false);
            batch.num = 0;
        }
        hw.sw(self.costs.build);
        batch.cmds[batch.num] = cmd;
        batch.num += 1;
    }

    /// `arm_smmu_cmdq_batch_submit()`: what is gathered, and a `CMD_SYNC`.
    fn batch_submit(&self, hw: &mut dyn DeviceHw, batch: &mut CmdqBatch) {
        self.cmdq.issue(hw, self.costs.issue, batch.cmds(), true);
        batch.num = 0;
    }

    /// `arm_smmu_tlb_inv_asid()`: the command and its sync in one list (5.15), or the command,
    /// then an empty list carrying the sync (≤ 5.14).
    fn tlb_inv_asid(&self, hw: &mut dyn DeviceHw) {
        hw.sw(self.costs.build);
        let cmd = [CmdqEnt::TlbiNhAsid { asid: self.asid }];
        if self.rules.asid_with_sync() {
            self.cmdq.issue(hw, self.costs.issue, &cmd, true);
        } else {
            self.cmdq.issue(hw, self.costs.issue, &cmd, false);
            self.cmdq.issue(hw, self.costs.issue, &[], true);
        }
    }

    /// `arm_smmu_inv_size_too_big()` (7.1): without range invalidation, `1 << (log2(granule) - 3)`
    /// granules or more (what one page of 8-byte entries at that granule would index).
    fn inv_size_too_big(&self, size: u64, granule: u64) -> bool {
        if self.features.range_inv {
            return false;
        }
        let max_ops = 1u64 << (granule.trailing_zeros().saturating_sub(3));
        size >= max_ops.saturating_mul(granule)
    }

    /// `arm_smmu_tlb_inv_range_domain()` / `__arm_smmu_tlb_inv_range()`.
    pub fn tlb_inv_range(
        &self,
        hw: &mut dyn DeviceHw,
        iova: u64,
        size: u64,
        granule: u64,
        leaf: bool,
    ) {
        if size == 0 || granule < self.granule {
            return;
        }
        let mut batch = CmdqBatch::new();
        let back = if self.rules.large_range_to_asid() {
            let back = hw.enter(crate::frame_id!("arm_smmu_domain_inv_range"));
            if self.inv_size_too_big(size, granule) {
                // The nsize opcode goes through the same batch as a range would.
                hw.sw(self.costs.build);
                batch.cmds[0] = CmdqEnt::TlbiNhAsid { asid: self.asid };
                batch.num = 1;
                self.batch_submit(hw, &mut batch);
                hw.leave(back);
                return;
            }
            back
        } else {
            hw.enter(crate::frame_id!("arm_smmu_tlb_inv_range_domain"))
        };
        let end = iova.saturating_add(size);
        let mut at = iova;
        if self.features.range_inv && self.rules.uses_range_inv() {
            let tg = self.granule.trailing_zeros() as u64;
            let mut num_pages = size >> tg;
            let tg_field = ((tg - 10) / 2) as u8;
            let level_ttl = || (4 - (u64::from(granule.trailing_zeros()) - 3) / (tg - 3)) as u8;
            let mut ttl = 0u8;
            if !self.rules.ttl_leaf_only() {
                // ≤ 6.5: every range names its granule's level, walks included.
                ttl = level_ttl();
            } else if leaf {
                ttl = level_ttl();
            } else if num_pages & CMDQ_TLBI_RANGE_NUM_MAX == 1 {
                // Avoid a range command with both SCALE and NUM zero.
                num_pages += 1;
            }
            while at < end && num_pages > 0 {
                let scale = num_pages.trailing_zeros() as u64;
                let num = (num_pages >> scale) & CMDQ_TLBI_RANGE_NUM_MAX;
                let cmd = CmdqEnt::TlbiNhVa {
                    asid: self.asid,
                    addr: at,
                    leaf,
                    tg: tg_field,
                    ttl,
                    num: (num - 1) as u8,
                    scale: scale as u8,
                };
                self.batch_add(hw, &mut batch, cmd);
                num_pages -= num << scale;
                at = at.saturating_add(num << (scale + tg));
            }
        } else {
            while at < end {
                let cmd = CmdqEnt::TlbiNhVa {
                    asid: self.asid,
                    addr: at,
                    leaf,
                    tg: 0,
                    ttl: 0,
                    num: 0,
                    scale: 0,
                };
                self.batch_add(hw, &mut batch, cmd);
                at = at.saturating_add(granule);
            }
        }
        self.batch_submit(hw, &mut batch);
        hw.leave(back);
    }
}

impl crate::stats::Stats for ArmSmmuV3Domain {
    fn lock_records(&self) -> Vec<(&'static str, crate::smp::LockRecord)> {
        match self.cmdq.protocol() {
            CmdqProtocol::Locked => vec![("cmdq->lock", self.cmdq.lock_record())],
            CmdqProtocol::LockFree => Vec::new(),
        }
    }

    fn cmdq_stats(&self) -> Option<CmdqStats> {
        Some(self.cmdq.stats())
    }
}

impl IommuFlushOps for ArmSmmuV3Domain {
    fn name(&self) -> &'static str {
        "arm-smmu-v3"
    }

    fn tlb_flush_all(&self, hw: &mut dyn DeviceHw) {
        let back = hw.enter(crate::frame_id!("arm_smmu_tlb_inv_context"));
        self.tlb_inv_asid(hw);
        hw.leave(back);
    }

    fn tlb_flush_walk(&self, hw: &mut dyn DeviceHw, iova: u64, size: u64, granule: u64) {
        let back = hw.enter(crate::frame_id!("arm_smmu_tlb_inv_walk"));
        self.tlb_inv_range(hw, iova, size, granule, false);
        hw.leave(back);
    }

    fn tlb_add_page(
        &self,
        hw: &mut dyn DeviceHw,
        gather: &mut IommuIotlbGather,
        iova: u64,
        granule: u64,
    ) {
        if !self.rules.gathers_leaves() {
            // ≤ 5.3: arm_smmu_tlb_inv_range_nosync() issues the leaf's command at once.
            let back = hw.enter(crate::frame_id!("arm_smmu_tlb_inv_range_nosync"));
            hw.sw(self.costs.build);
            let cmd = CmdqEnt::TlbiNhVa {
                asid: self.asid,
                addr: iova,
                leaf: true,
                tg: 0,
                ttl: 0,
                num: 0,
                scale: 0,
            };
            self.cmdq.issue(hw, self.costs.issue, &[cmd], false);
            hw.leave(back);
            return;
        }
        iommu_iotlb_gather_add_page(self, hw, gather, iova, granule);
    }

    fn iotlb_sync(&self, hw: &mut dyn DeviceHw, gather: &mut IommuIotlbGather) {
        if !self.rules.gathers_leaves() {
            // ≤ 5.3: arm_smmu_iotlb_sync() → arm_smmu_tlb_sync(): the sync alone, every time.
            if !gather.queued {
                let back = hw.enter(crate::frame_id!("arm_smmu_iotlb_sync"));
                self.cmdq.issue_sync(hw, self.costs.issue);
                hw.leave(back);
            }
            return;
        }
        if gather.pgsize != 0 {
            let back = hw.enter(crate::frame_id!("arm_smmu_iotlb_sync"));
            let (start, size, pgsize) =
                (gather.start, gather.end - gather.start + 1, gather.pgsize);
            self.tlb_inv_range(hw, start, size, pgsize, true);
            hw.leave(back);
        }
        let queued = gather.queued;
        *gather = IommuIotlbGather::new();
        gather.queued = queued;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::Counter;
    use crate::hw::recorder::Recorder;

    fn dom(r: &Recorder, range_inv: bool) -> ArmSmmuV3Domain {
        ArmSmmuV3Domain::new(r, 9, 4096, SmmuV3Features { range_inv }, Cmdq::new(10)).unwrap()
    }

    #[test]
    fn per_granule_commands_go_out_in_batches_of_64_with_one_sync() {
        let mut r = Recorder::new(64);
        let d = dom(&r, false);
        d.tlb_flush_walk(&mut r, 0x10_0000, 200 * 4096, 4096);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 200);
        assert_eq!(r.count_of(Counter::CmdqSync), 1);
        let sizes: Vec<usize> = r.cmdq.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![64, 64, 64, 8 + 1]);
        assert_eq!(d.cmdq.bytes_written(), 201 * 16);
    }

    /// The producer index wraps at the ring's length: each slot holds the newest command
    /// written at an index equal to it modulo the length, and a sync goes after its list.
    #[test]
    fn the_ring_wraps_at_its_length() {
        let mut r = Recorder::new(64);
        let q = Cmdq::new(3);
        for asid in 0..19u16 {
            let cmd = [CmdqEnt::TlbiNhAsid { asid }];
            q.issue_cmdlist(&mut r, SwCost(0), &cmd, asid == 18);
        }
        assert_eq!((q.prod(), q.entries()), (20, 8));
        let mut want = [[0u64; CMDQ_ENT_DWORDS]; 8];
        for (i, asid) in (0..19u16).enumerate() {
            want[i % 8] = CmdqEnt::TlbiNhAsid { asid }.encode();
        }
        want[19 % 8] = CmdqEnt::Sync.encode();
        for (i, w) in want.iter().enumerate() {
            assert_eq!(q.entry(i), *w, "slot {i}");
        }
        assert_eq!(r.count_of(Counter::CmdqSync), 1);
    }

    #[test]
    fn large_ranges_without_range_inv_become_one_asid_invalidation() {
        let mut r = Recorder::new(64);
        let d = dom(&r, false);
        d.tlb_flush_walk(&mut r, 0, 2 << 20, 4096);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 0);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), 1);
        assert_eq!(r.count_of(Counter::CmdqSync), 1);
    }

    #[test]
    fn range_invalidation_encodes_tg_ttl_num_scale() {
        let mut r = Recorder::new(64);
        let d = dom(&r, true);
        // 2 MB walk of 4K: 512 pages = 1 << 9: one command, SCALE 9, NUM 1 (field 0).
        d.tlb_flush_walk(&mut r, 0x4000_0000, 2 << 20, 4096);
        assert_eq!(r.cmdq, vec![vec![SmmuCmdKind::TlbiNhVa, SmmuCmdKind::Sync]]);
        let e = d.cmdq.entry(0);
        assert_eq!(e[0] & 0xff, CMDQ_OP_TLBI_NH_VA);
        assert_eq!((e[0] >> 12) & 0x1f, 0, "NUM - 1");
        assert_eq!((e[0] >> 20) & 0x1f, 9, "SCALE");
        assert_eq!(e[0] >> 48, 9, "ASID");
        assert_eq!((e[1] >> 10) & 3, 1, "TG 4K");
        assert_eq!((e[1] >> 8) & 3, 0, "TTL for a walk");
        assert_eq!(e[1] & !0xfff, 0x4000_0000);
        assert_eq!(d.cmdq.entry(1)[0] & 0xff, CMDQ_OP_CMD_SYNC);
        // 37 leaf pages gathered: 37 = 0b100101 -> 5 (scale 0), 32 (scale 5): two commands, TTL 3.
        let mut r = Recorder::new(64);
        let mut g = IommuIotlbGather::new();
        for i in 0..37 {
            d.tlb_add_page(&mut r, &mut g, 0x8000_0000 + i * 4096, 4096);
        }
        assert!(r.cmdq.is_empty(), "leaves wait for iotlb_sync");
        d.iotlb_sync(&mut r, &mut g);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 2);
        let p = d.cmdq.prod() as usize;
        let first = d.cmdq.entry(p - 3);
        assert_eq!(((first[0] >> 12) & 0x1f, (first[0] >> 20) & 0x1f), (4, 0));
        assert_eq!((first[1] >> 8) & 3, 3, "TTL: a last-level leaf");
        let second = d.cmdq.entry(p - 2);
        assert_eq!(((second[0] >> 12) & 0x1f, (second[0] >> 20) & 0x1f), (0, 5));
        assert_eq!(second[1] & !0xfff, 0x8000_0000 + 5 * 4096);
        assert!(g.is_empty());
    }

    /// Seed 001's unmaps on an SMMUv3 through the iommu core (5.15 unmap_pages).
    #[test]
    fn core_unmaps_on_smmu_v3() {
        use crate::iommu::Prot;
        use crate::iommu::core::{IommuDomain, SplitKind};
        use crate::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
        use crate::mm::physmem::PhysMem;
        use crate::types::{IovaAddr, PhysAddr};
        for range_inv in [false, true] {
            let mut r = Recorder::new(64);
            let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
            let t = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(4096, 48), mem, None).unwrap();
            let ops = Box::new(dom(&r, range_inv));
            let d = IommuDomain::new(&r, t, ops, SplitKind::UnmapPages);
            let segs: Vec<_> = (0..8192u64)
                .map(|i| (PhysAddr(0x8000_0000 + i * 8192), 4096))
                .collect();
            d.iommu_map_sg(&mut r, IovaAddr(1 << 32), &segs, Prot::RW)
                .unwrap();
            let mut r = Recorder::new(64);
            d.iommu_unmap(&mut r, IovaAddr(1 << 32), 32 << 20).unwrap();
            // 16 table frees, each flushed at once and synced; no leaves gathered.
            assert_eq!(r.count_of(Counter::CmdqSync), 16);
            if range_inv {
                assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 16);
            } else {
                assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), 16);
            }
            // 1 MB of leaves: gathered into one range at iotlb_sync.
            let mut r = Recorder::new(64);
            d.iommu_map_sg(&mut r, IovaAddr(1 << 32), &segs[..256], Prot::RW)
                .unwrap();
            let mut r = Recorder::new(64);
            d.iommu_unmap(&mut r, IovaAddr(1 << 32), 1 << 20).unwrap();
            assert_eq!(r.count_of(Counter::CmdqSync), 1);
            if range_inv {
                assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 1);
            } else {
                assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 256);
                assert_eq!(r.count_of(Counter::CmdqBatch), 4);
            }
        }
    }

    /// 5.3: each leaf's command goes out as io-pgtable clears it, one doorbell per command,
    /// and `iotlb_sync` publishes the sync alone; a sync asked for right after another is
    /// not inserted again. 5.4 gathers the same unmap into one list.
    #[test]
    fn before_5_4_every_leaf_is_its_own_insertion_and_syncs_coalesce() {
        use crate::iommu::Prot;
        use crate::iommu::core::{IommuDomain, SplitKind};
        use crate::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
        use crate::mm::physmem::PhysMem;
        use crate::types::{IovaAddr, PhysAddr};
        let unmap_4_pages = |k: SmmuV3Rules| {
            let mut r = Recorder::new(64);
            let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 16 << 20).shared();
            let t = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(4096, 48), mem, None).unwrap();
            let ops = dom_of(&r, false, 4096, k);
            let q = Rc::clone(&ops.cmdq);
            let d = IommuDomain::new(&r, t, Box::new(ops), SplitKind::UnmapPages);
            d.iommu_map(
                &mut r,
                IovaAddr(1 << 32),
                PhysAddr(0x8000_0000),
                4 << 12,
                Prot::RW,
            )
            .unwrap();
            let mut r = Recorder::new(64);
            d.iommu_unmap(&mut r, IovaAddr(1 << 32), 4 << 12).unwrap();
            (r, q)
        };
        let (r, q) = unmap_4_pages(Linux5_3);
        let one = |k| vec![k];
        assert_eq!(
            r.cmdq,
            [
                one(SmmuCmdKind::TlbiNhVa),
                one(SmmuCmdKind::TlbiNhVa),
                one(SmmuCmdKind::TlbiNhVa),
                one(SmmuCmdKind::TlbiNhVa),
                one(SmmuCmdKind::Sync),
            ]
        );
        assert_eq!(q.protocol(), CmdqProtocol::Locked);
        let mut r = Recorder::new(64);
        q.issue_sync(&mut r, SwCost(0));
        assert!(
            r.cmdq.is_empty(),
            "the sync already last in the queue is waited for"
        );
        assert_eq!(q.stats().coalesced, 1);
        assert_eq!(q.stats().syncs, 2);
        let (r, _) = unmap_4_pages(Linux5_4);
        assert_eq!(
            r.cmdq,
            [vec![
                SmmuCmdKind::TlbiNhVa,
                SmmuCmdKind::TlbiNhVa,
                SmmuCmdKind::TlbiNhVa,
                SmmuCmdKind::TlbiNhVa,
                SmmuCmdKind::Sync
            ]]
        );
    }

    /// Two CPUs of a machine of their own (its SMMU idle) each issue a lone `CMD_SYNC` on `q`
    /// at time 0: each CPU's end and doorbells. Commands cost 5 ns to write, the doorbell
    /// 10 ns, a sync 100 ns of the SMMU's time; no topology, so lines move for free.
    fn two_lone_syncs(q: &Rc<Cmdq>) -> Vec<(u64, u64)> {
        use crate::hw::model::{Model, ModelParams, SmmuKind, SmmuParams};
        use crate::smp::{self, Body};
        let base = Model::new(ModelParams {
            smmu: Some(SmmuParams {
                kind: SmmuKind::SmmuV3,
                mmio_write_ps: 10_000,
                cmdq_write_ps: 5_000,
                sync_ps: 100_000,
                ..SmmuParams::default()
            }),
            ..ModelParams::default()
        });
        let bodies: Vec<Body<(u64, u64)>> = (0..2)
            .map(|_| {
                let (q, mut m) = (Rc::clone(q), base.on_cpu(0, 0));
                Box::new(move |c| {
                    m.set_cpu(c);
                    q.issue_sync(&mut m, SwCost(0));
                    let bells = m.ledger().totals()[Counter::CmdqBatch as usize];
                    (m.now_ps(), bells)
                }) as Body<(u64, u64)>
            })
            .collect();
        smp::run(bodies).unwrap()
    }

    /// Two CPUs each issue a lone `CMD_SYNC` at time 0, worked by hand (commands cost 5 ns to
    /// write, the doorbell 10 ns, a sync 100 ns of the SMMU's time; no topology, so lines move
    /// for free).
    ///
    /// 5.4: CPU 0 claims first and owns; CPU 1's claim is gathered behind it. CPU 0 waits
    /// (from 5 ns) until CPU 1 has marked its entry valid (at 5 ns), rings one doorbell for
    /// both at 15 ns; the SMMU completes CPU 0's sync at 115 ns and CPU 1's at 215 ns, which is
    /// when each CPU sees its own. 5.3: CPU 0 takes the lock, inserts and rings (15 ns) and
    /// unlocks; CPU 1 spins those 15 ns, finds the sync last in the queue, inserts nothing and
    /// waits for the same completion, 115 ns.
    #[test]
    fn two_cpus_share_the_queue_as_each_release_does() {
        for (protocol, ends, doorbells, coalesced) in [
            (CmdqProtocol::LockFree, [115_000, 215_000], 1, 0),
            (CmdqProtocol::Locked, [115_000, 115_000], 1, 1),
        ] {
            let q = Rc::new(Cmdq::with_protocol(8, protocol));
            let r = two_lone_syncs(&q);
            assert_eq!([r[0].0, r[1].0], ends, "{protocol:?}");
            assert_eq!(r[0].1 + r[1].1, doorbells, "{protocol:?}");
            assert_eq!(q.stats().coalesced, coalesced, "{protocol:?}");
            assert_eq!(q.stats().syncs, 2, "{protocol:?}");
        }
    }

    /// The atomic-add claim on the same two lone syncs: each CPU's claim is one atomic add that
    /// cannot fail; CPU 0 found no claimant and owns, CPU 1's list is gathered behind it, and
    /// the owner takes the lock shared for both syncs before its one doorbell. The times are
    /// mainline's (lines move free here), and the lock is free again at the end.
    #[test]
    fn the_atomic_add_claim_never_retries_and_the_owner_locks_for_its_gathered_syncs() {
        let mut q = Cmdq::with_protocol(8, CmdqProtocol::LockFree);
        q.claim = CmdqClaim::AtomicAdd;
        let q = Rc::new(q);
        let r = two_lone_syncs(&q);
        assert_eq!([r[0].0, r[1].0], [115_000, 215_000]);
        assert_eq!(r[0].1 + r[1].1, 1, "one doorbell");
        let s = q.stats();
        assert_eq!((s.claims, s.cmpxchg_retries, s.syncs), (2, 0, 2));
        assert_eq!(q.owner.peek().shared, 0, "every shared hold released");
        assert_eq!(q.llq.peek().syncs, 0, "the owner took every gathered sync");
    }

    /// 5.3: the CPU that takes `cmdq->lock` after another reads `prev_cmd_opcode` and, for a
    /// sync of its own, writes `sync_nr`: that line comes from the last holder's cache, a
    /// transfer of its own beside the lock word's.
    #[test]
    fn under_5_3_the_sync_record_follows_the_lock() {
        use crate::hw::model::{Model, ModelParams, SmmuKind, SmmuParams};
        use crate::smp::{self, Body};
        let params = ModelParams {
            smmu: Some(SmmuParams {
                kind: SmmuKind::SmmuV3,
                ..SmmuParams::default()
            }),
            line_transfer_ps: Some(40_000),
            ..ModelParams::default()
        };
        let base = Model::new(params);
        let q = Rc::new(Cmdq::with_protocol(8, CmdqProtocol::Locked));
        let bodies: Vec<Body<u64>> = (0..2)
            .map(|cpu| {
                let (q, mut m) = (Rc::clone(&q), base.on_cpu(cpu, 0));
                Box::new(move |c| {
                    m.set_cpu(c);
                    q.issue_sync(&mut m, SwCost(0));
                    m.ledger().totals()[Counter::NumaLine as usize]
                }) as Body<u64>
            })
            .collect();
        let lines = smp::run(bodies).unwrap();
        // CPU 0 finds both lines in no other cache; CPU 1 takes the lock word and then the
        // sync record from CPU 0.
        assert_eq!(lines, [0, 2]);
        let last = q.last_cmd.line().last_writer().map(|l| l.cpu);
        assert_eq!(last, Some(1), "CPU 1 read prev_cmd_opcode exclusive");
        assert_eq!(q.stats().coalesced, 1);
    }

    #[test]
    fn bad_granule_is_an_error() {
        let r = Recorder::new(64);
        let e = ArmSmmuV3Domain::new(&r, 1, 8192, SmmuV3Features::default(), Cmdq::new(8));
        assert_eq!(e.unwrap_err(), IommuError::BadGranule(8192));
    }

    #[test]
    fn disjoint_pages_sync_the_gather_early() {
        let mut r = Recorder::new(64);
        let d = dom(&r, false);
        let mut g = IommuIotlbGather::new();
        d.tlb_add_page(&mut r, &mut g, 0x1000, 4096);
        d.tlb_add_page(&mut r, &mut g, 0x2000, 4096);
        d.tlb_add_page(&mut r, &mut g, 0x9000, 4096);
        assert_eq!(r.count_of(Counter::CmdqSync), 1);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 2);
        d.iotlb_sync(&mut r, &mut g);
        assert_eq!(r.count_of(Counter::CmdqSync), 2);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 3);
        // Nothing gathered: nothing issued.
        d.iotlb_sync(&mut r, &mut g);
        assert_eq!(r.count_of(Counter::CmdqSync), 2);
    }

    use SmmuV3Rules::*;

    /// A domain under `k`'s rules (the release presets are checked in `policy`'s tests).
    fn dom_of(r: &Recorder, range_inv: bool, granule: u64, k: SmmuV3Rules) -> ArmSmmuV3Domain {
        ArmSmmuV3Domain::new(r, 9, granule, SmmuV3Features { range_inv }, Cmdq::new(10))
            .unwrap()
            .with_rules(r, k)
    }

    /// Item 2 of #8: without range invalidation, a 2 MB walk flush is 512 `CMD_TLBI_NH_VA` in 8
    /// command lists on every release up to 7.0 (5.15, 6.1, 6.6 read); 7.1's common
    /// `arm_smmu_domain_inv_range()` makes it one `CMD_TLBI_NH_ASID`.
    #[test]
    fn a_2m_walk_flush_is_per_granule_until_7_0_and_one_asid_from_7_1() {
        for k in [Linux5_4, Linux5_7, Linux5_15, Linux6_6] {
            let mut r = Recorder::new(64);
            let d = dom_of(&r, false, 4096, k);
            d.tlb_flush_walk(&mut r, 0x4020_0000, 2 << 20, 4096);
            assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 512, "{k:?}");
            assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), 0, "{k:?}");
            assert_eq!(r.count_of(Counter::CmdqSync), 1, "{k:?}");
            assert_eq!(r.count_of(Counter::CmdqBatch), 8, "{k:?}");
            assert_eq!(d.cmdq.bytes_written(), 513 * 16);
        }
        let mut r = Recorder::new(64);
        let d = dom_of(&r, false, 4096, Linux7_1);
        d.tlb_flush_walk(&mut r, 0x4020_0000, 2 << 20, 4096);
        assert_eq!(
            r.cmdq,
            vec![vec![SmmuCmdKind::TlbiNhAsid, SmmuCmdKind::Sync]]
        );
        // One granule below the threshold stays per granule on 7.1 too.
        let mut r = Recorder::new(64);
        d.tlb_flush_walk(&mut r, 0x4020_0000, 511 * 4096, 4096);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 511);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), 0);
    }

    /// Seed 001's 32 MB unmap through the iommu core (5.15 `unmap_pages`, 16 freed tables):
    /// 8192 `CMD_TLBI_NH_VA` in 128 lists with 16 syncs on 5.15 and 7.0; 16 ASID on 7.1.
    #[test]
    fn a_32m_unmap_is_8192_commands_on_5_15_and_7_0_and_16_asid_on_7_1() {
        use crate::iommu::Prot;
        use crate::iommu::core::{IommuDomain, SplitKind};
        use crate::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
        use crate::mm::physmem::PhysMem;
        use crate::types::{IovaAddr, PhysAddr};
        for (k, va, asid, lists) in [
            (Linux5_15, 8192, 0, 128),
            (Linux6_6, 8192, 0, 128),
            (Linux7_1, 0, 16, 16),
        ] {
            let mut r = Recorder::new(64);
            let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
            let t = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(4096, 48), mem, None).unwrap();
            let ops = Box::new(dom_of(&r, false, 4096, k));
            let d = IommuDomain::new(&r, t, ops, SplitKind::UnmapPages);
            let segs: Vec<_> = (0..8192u64)
                .map(|i| (PhysAddr(0x8000_0000 + i * 8192), 4096))
                .collect();
            d.iommu_map_sg(&mut r, IovaAddr(1 << 32), &segs, Prot::RW)
                .unwrap();
            let mut r = Recorder::new(64);
            d.iommu_unmap(&mut r, IovaAddr(1 << 32), 32 << 20).unwrap();
            assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), va, "{k:?}");
            assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), asid, "{k:?}");
            assert_eq!(r.count_of(Counter::CmdqSync), 16, "{k:?}");
            assert_eq!(r.count_of(Counter::CmdqBatch), lists, "{k:?}");
        }
    }

    /// 7.1's threshold is `1 << (log2(granule) - 3)` granules of the granule passed: 8192 for a
    /// 64K granule, so a 512 MB walk flush is one ASID but 4096 gathered 64K leaves are not.
    #[test]
    fn the_7_1_threshold_follows_the_granule() {
        let mut r = Recorder::new(64);
        let d = dom_of(&r, false, 0x10000, Linux7_1);
        d.tlb_flush_walk(&mut r, 0, 512 << 20, 0x10000);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), 1);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 0);
        let mut r = Recorder::new(64);
        let mut g = IommuIotlbGather::new();
        for i in 0..4096u64 {
            d.tlb_add_page(&mut r, &mut g, i * 0x10000, 0x10000);
        }
        d.iotlb_sync(&mut r, &mut g);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 4096);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), 0);
        assert_eq!(r.count_of(Counter::CmdqBatch), 64);
    }

    /// `arm_smmu_tlb_inv_asid()`: two command lists (the command, then the sync) on 5.14, one
    /// from 5.15.
    #[test]
    fn asid_invalidation_is_two_lists_on_5_14_and_one_from_5_15() {
        let mut r = Recorder::new(64);
        let d = dom_of(&r, false, 4096, Linux5_7);
        d.tlb_flush_all(&mut r);
        assert_eq!(
            r.cmdq,
            vec![vec![SmmuCmdKind::TlbiNhAsid], vec![SmmuCmdKind::Sync]]
        );
        assert_eq!(d.cmdq.stats().batches, 2);
        for k in [Linux5_15, Linux6_6, Linux7_1] {
            let mut r = Recorder::new(64);
            let d = dom_of(&r, false, 4096, k);
            d.tlb_flush_all(&mut r);
            assert_eq!(
                r.cmdq,
                vec![vec![SmmuCmdKind::TlbiNhAsid, SmmuCmdKind::Sync]],
                "{k:?}"
            );
        }
    }

    /// SMMUv3.2 hardware: 5.6 still issues per granule; 5.7 issues range commands. Before 6.6 a
    /// walk's range command carries TTL 3 (its 4K granule's level); from 6.6 only leaves do. 7.1
    /// never turns a range into an ASID invalidation when range commands exist.
    #[test]
    fn range_invalidation_is_used_from_5_7_with_ttl_rules_by_release() {
        let mut r = Recorder::new(64);
        let d = dom_of(&r, true, 4096, Linux5_4);
        d.tlb_flush_walk(&mut r, 0x4000_0000, 2 << 20, 4096);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), 512);
        for (k, ttl) in [(Linux5_7, 3), (Linux5_15, 3), (Linux6_6, 0), (Linux7_1, 0)] {
            let mut r = Recorder::new(64);
            let d = dom_of(&r, true, 4096, k);
            d.tlb_flush_walk(&mut r, 0x4000_0000, 2 << 20, 4096);
            assert_eq!(
                r.cmdq,
                vec![vec![SmmuCmdKind::TlbiNhVa, SmmuCmdKind::Sync]],
                "{k:?}"
            );
            let e = d.cmdq.entry(0);
            assert_eq!((e[1] >> 8) & 3, ttl, "TTL on {k:?}");
            assert_eq!((e[0] >> 20) & 0x1f, 9, "SCALE on {k:?}");
        }
        // A 33-page walk: NUM = 1 in the low five bits. 6.1 issues 1 page (NUM 1, SCALE 0) and
        // then 32 (SCALE 5); 6.6 rounds up to 34 pages, one command of 17 << 1.
        for (k, n, first) in [(Linux5_15, 2, (0, 0)), (Linux6_6, 1, (16, 1))] {
            let mut r = Recorder::new(64);
            let d = dom_of(&r, true, 4096, k);
            d.tlb_flush_walk(&mut r, 0, 33 * 4096, 4096);
            assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), n, "{k:?}");
            let e = d.cmdq.entry(0);
            assert_eq!(((e[0] >> 12) & 0x1f, (e[0] >> 20) & 0x1f), first, "{k:?}");
        }
    }
}
