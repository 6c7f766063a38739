//! A block driver for a DMA engine in programmable logic, and the engine itself.
//!
//! Kernel counterpart: an out-of-tree driver of the kind seed 002 describes (modelled on IIO's
//! buffer blocks): the driver allocates blocks, user space maps them and hands them back and forth
//! with `ioctl(ENQUEUE_BLOCK)` / `ioctl(DEQUEUE_BLOCK)`. Each ioctl makes the DMA API calls its
//! coherence option calls for: `dma_sync_single_for_device` / `_for_cpu` of a `kmalloc`'ed block
//! mapped once with `dma_map_single` (streaming), nothing for `dma_alloc_coherent` /
//! `dma_alloc_writecombine` memory, `copy_from_user` / `copy_to_user` between the user's own
//! buffer and a coherent block (bounce), or `get_user_pages` + `sg_init_table` + `sg_set_page` +
//! `dma_map_sg` of the user's buffer and `dma_unmap_sg` + `put_page` after (zero copy, the
//! seed's third path).
//!
//! What it models: the driver's per-block CPU work, run through the model (the DMA API calls go
//! through the device's ops as setup built them, so on ARMv7 they reach arch/arm's
//! `__dma_page_cpu_to_dev` / `__dma_page_dev_to_cpu` and the PL310), the ioctls and the page
//! pinning as named software costs (`[sw]`), copies as `[memory.copy]`; and the engine as a
//! second agent with its own bandwidth (the slower of the scenario's and, on the ACP, the
//! profile's `acp.bandwidth_mb_s`), which moves one block at a time in queue order.
//!
//! Invariants: a block is owned by the CPU or the device, never both: it is enqueued only after
//! the CPU finished with it and dequeued only after the engine completed it. The CPU never
//! computes its own time: every CPU step is the Model clock's advance across it; only the
//! engine's transfer time comes from a bandwidth. User-space access to a block goes through
//! [`user_access`]: the cache state follows it (a block user space wrote through a cached
//! mapping is dirty when it is synced), and with `user_access_bytes` its time is charged by the
//! mapping's memory type.

use crate::dma::DmaError;
use crate::hw::cache::Access as CacheAccess;
use crate::hw::model::Model;
use crate::hw::{FrameId, Hw, SwCost, SwKey};
use crate::mm::physmem::{PhysMemError, SharedPhysMem};
use crate::scatterlist::{PAGE_SIZE, SgTable};
use crate::setup::DeviceDmaApi;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};

/// How the driver makes its blocks coherent between the CPU and the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Coherence {
    /// `dma_alloc_coherent` + `dma_mmap_coherent`: no DMA API call per block; the kernel and the
    /// user mapping are the release's `pgprot_dmacoherent` (ARMv7: Normal non-cacheable,
    /// bufferable). The seed's first try.
    Coherent,
    /// `kmalloc` + `dma_map_single` once; every block synced whole for the device at enqueue and
    /// for the CPU at dequeue. User space maps cached memory. The seed's second try.
    Streaming,
    /// As `Streaming`, but each sync covers only the bytes the block carries (`bytes_used`).
    StreamingPartial,
    /// `dma_alloc_writecombine` + `dma_mmap_writecombine`: no sync; user space writes through a
    /// write-combining mapping (meant for data the CPU only writes).
    WriteCombine,
    /// The engine on the accelerator coherency port: the device is `dma-coherent`, its traffic
    /// snooped, so the streaming driver's syncs issue no maintenance; the port's bandwidth
    /// limits the engine.
    Acp,
    /// Coherent blocks the user never maps: `copy_from_user` into the block before it goes to
    /// the device, `copy_to_user` out of it after it comes back.
    Bounce,
    /// Zero copy from the user's own buffer: `get_user_pages`, `sg_init_table`, `sg_set_page`
    /// per page, `dma_map_sg` at enqueue; `dma_unmap_sg` and `put_page` per page at dequeue.
    UserPages,
}

impl Coherence {
    pub const ALL: [Coherence; 7] = [
        Coherence::Coherent,
        Coherence::Streaming,
        Coherence::StreamingPartial,
        Coherence::WriteCombine,
        Coherence::Acp,
        Coherence::Bounce,
        Coherence::UserPages,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Coherence::Coherent => "coherent",
            Coherence::Streaming => "streaming",
            Coherence::StreamingPartial => "streaming-partial",
            Coherence::WriteCombine => "write-combine",
            Coherence::Acp => "acp",
            Coherence::Bounce => "bounce",
            Coherence::UserPages => "user-pages",
        }
    }

    pub fn parse(s: &str) -> Option<Coherence> {
        Coherence::ALL.iter().copied().find(|c| c.name() == s)
    }

    /// What the driver does, in a driver writer's words.
    pub fn describe(self) -> &'static str {
        match self {
            Coherence::Coherent => "dma_alloc_coherent + dma_mmap_coherent, no syncs",
            Coherence::Streaming => "kmalloc + dma_map_single, whole-block dma_sync_single_for_*",
            Coherence::StreamingPartial => {
                "kmalloc + dma_map_single, dma_sync_single_for_* of the bytes used"
            }
            Coherence::WriteCombine => "dma_alloc_writecombine + dma_mmap_writecombine, no syncs",
            Coherence::Acp => {
                "kmalloc + dma_map_single on the ACP (dma-coherent): syncs do no maintenance"
            }
            Coherence::Bounce => "coherent block + copy_from_user / copy_to_user",
            Coherence::UserPages => {
                "get_user_pages + sg_init_table + dma_map_sg of the user buffer, unmap + put_page"
            }
        }
    }

    /// Whether the device is set up `dma-coherent` (its traffic snooped).
    pub fn device_coherent(self) -> bool {
        self == Coherence::Acp
    }

    /// Whether the option copies (needs `[memory.copy]`).
    pub fn copies(self) -> bool {
        self == Coherence::Bounce
    }

    /// The memory user space reads and writes the block's bytes through.
    pub fn user_memory(self) -> UserMemory {
        match self {
            Coherence::Coherent => UserMemory::DmaCoherent,
            Coherence::WriteCombine => UserMemory::WriteCombine,
            // The user's own malloc'ed buffer (bounce, user-pages) or kmalloc'ed blocks mapped
            // cached (streaming, ACP).
            _ => UserMemory::Cached,
        }
    }
}

/// Which way the blocks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// The CPU produces, the engine consumes (DMA_TO_DEVICE).
    ToDevice,
    /// The engine produces, the CPU consumes (DMA_FROM_DEVICE).
    FromDevice,
    /// Every block goes out and a block of results comes back: one TO_DEVICE and one
    /// FROM_DEVICE buffer per slot. The engine streams the outgoing block in and the results out
    /// at once (an AXI port's read and write channels are independent), so a loopback block
    /// occupies it for one block's transfer time.
    Loopback,
}

impl Flow {
    pub const NAMES: &[&str] = &["to_device", "from_device", "loopback"];

    pub fn parse(s: &str) -> Option<Flow> {
        match s {
            "to_device" => Some(Flow::ToDevice),
            "from_device" => Some(Flow::FromDevice),
            "loopback" => Some(Flow::Loopback),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        Flow::NAMES[self as usize]
    }

    /// The directions of the buffers one slot holds.
    pub fn directions(self) -> &'static [DmaDirection] {
        match self {
            Flow::ToDevice => &[DmaDirection::ToDevice],
            Flow::FromDevice => &[DmaDirection::FromDevice],
            Flow::Loopback => &[DmaDirection::ToDevice, DmaDirection::FromDevice],
        }
    }
}

/// The memory type of the user mapping a block's bytes are accessed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserMemory {
    /// Normal, cached (kmalloc'ed blocks mapped to user space, or the user's own memory).
    Cached,
    /// The release's `pgprot_dmacoherent`: on ARMv7 with `CONFIG_ARM_DMA_MEM_BUFFERABLE`
    /// (3.x), Normal non-cacheable, bufferable.
    DmaCoherent,
    /// `pgprot_writecombine`: on ARMv7 the same Normal non-cacheable, bufferable type.
    WriteCombine,
}

impl UserMemory {
    /// The memory type an ARMv7 3.16–4.0 kernel maps it with: `arm_dma_mmap`'s
    /// `__get_dma_pgprot` for the coherent and write-combined buffers (both Normal non-cacheable,
    /// bufferable), cacheable otherwise.
    pub fn memory_type(self) -> crate::hw::memory::MemType {
        use crate::arch::arm::pgtable::get_dma_pgprot;
        match self {
            UserMemory::Cached => crate::hw::memory::MemType::Cached,
            UserMemory::DmaCoherent => get_dma_pgprot(false).memory_type(),
            UserMemory::WriteCombine => get_dma_pgprot(true).memory_type(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            UserMemory::Cached => "cached",
            UserMemory::DmaCoherent => "non-cacheable (dmacoherent)",
            UserMemory::WriteCombine => "write-combine",
        }
    }
}

/// What the user program does to a block's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// User space reading or writing `bytes` of a block at `start` through a mapping of type `mem`,
/// with loads or stores of `size` bytes, charged by the memory type the release's page tables
/// give that mapping ([`UserMemory::memory_type`]) through `Hw::cpu_access`: a cached mapping
/// through the functional cache model (fills, and lines a write leaves dirty, which the sync that
/// follows pays to write back), any other a bus transaction per access. With `size` 0 the pass
/// is not charged (the seed's accounting counts only the driver), but through a cached mapping
/// the caches' state still follows it (`Hw::cpu_touch`). Returns whether it was charged.
pub fn user_access(
    hw: &mut dyn Hw,
    mem: UserMemory,
    access: Access,
    start: PhysAddr,
    bytes: u64,
    size: u64,
) -> bool {
    let a = match access {
        Access::Read => CacheAccess::Read,
        Access::Write => CacheAccess::Write,
    };
    if size == 0 {
        if mem == UserMemory::Cached {
            hw.cpu_touch(a, start, bytes);
        }
        return false;
    }
    hw.cpu_access(a, mem.memory_type(), size, start, bytes);
    true
}

/// The driver's typed configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlDmaConfig {
    pub coherence: Coherence,
    pub flow: Flow,
    /// Bytes each buffer holds.
    pub block_bytes: u64,
    /// Bytes each block carries (≤ `block_bytes`): what the engine moves and the user touches.
    pub used_bytes: u64,
    /// Slots the driver and user space cycle through (the queue depth).
    pub slots: u32,
    /// Bytes per load or store of the user program's pass over a block (0: not charged).
    pub user_access_bytes: u64,
}

/// One buffer of one slot.
#[derive(Clone, Debug)]
struct Buffer {
    dir: DmaDirection,
    /// The block the engine reads or writes (kernel memory, or the user's pages).
    phys: PhysAddr,
    /// Its DMA address while mapped (streaming options: mapped once at open).
    dma: DmaAddr,
    /// Bounce: the user's own buffer the bytes are copied to or from.
    user: Option<PhysAddr>,
    /// User pages: the list built at enqueue, unmapped at dequeue.
    sgt: Option<SgTable>,
}

/// The driver, open on one device, with its blocks.
pub struct PlDma {
    pub cfg: PlDmaConfig,
    api: DeviceDmaApi,
    mem: SharedPhysMem,
    slots: Vec<Vec<Buffer>>,
    enqueue: SwCost,
    dequeue: SwCost,
    gup_page: SwCost,
    put_page: SwCost,
    sg_init_entry: SwCost,
    sg_set_page: SwCost,
    /// Whether any user access was charged (see [`user_access`]).
    pub user_access_charged: bool,
}

/// Why the driver could not open: the modelled kernel refused an allocation or a mapping.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// A slot's block (or its user-space copy) could not be allocated.
    #[error("block allocation: {0}")]
    Block(#[source] PhysMemError),
    /// A streaming block could not be mapped once at open (`dma_map_single`).
    #[error("dma_map_single: {0}")]
    Map(#[source] DmaError),
}

impl From<OpenError> for crate::setup::SetupError {
    fn from(e: OpenError) -> crate::setup::SetupError {
        crate::setup::SetupError::DriverOpen {
            driver: "pl_dma open",
            source: Box::new(e),
        }
    }
}

/// The ioctls as the per-call table names them (each includes the DMA API calls it makes).
pub static ENQUEUE_IOCTL: FrameId = FrameId::new("ioctl(ENQUEUE_BLOCK)");
pub static DEQUEUE_IOCTL: FrameId = FrameId::new("ioctl(DEQUEUE_BLOCK)");

/// The frame of a DMA API call as the per-call table names it, with its direction.
pub fn api_call_name(call: &str, dir: DmaDirection) -> &'static str {
    match (call, dir) {
        ("for_device", DmaDirection::ToDevice) => "dma_sync_single_for_device(TO_DEVICE)",
        ("for_device", _) => "dma_sync_single_for_device(FROM_DEVICE)",
        ("for_cpu", DmaDirection::ToDevice) => "dma_sync_single_for_cpu(TO_DEVICE)",
        ("for_cpu", _) => "dma_sync_single_for_cpu(FROM_DEVICE)",
        ("map_sg", DmaDirection::ToDevice) => "dma_map_sg(TO_DEVICE)",
        ("map_sg", _) => "dma_map_sg(FROM_DEVICE)",
        ("unmap_sg", DmaDirection::ToDevice) => "dma_unmap_sg(TO_DEVICE)",
        (_, _) => "dma_unmap_sg(FROM_DEVICE)",
    }
}

impl PlDma {
    /// Open the device: allocate every slot's buffers and, for the streaming options, map them
    /// once with `dma_map_single` (not part of any block's work).
    pub fn open(
        hw: &mut Model,
        api: DeviceDmaApi,
        mem: SharedPhysMem,
        cfg: PlDmaConfig,
    ) -> Result<PlDma, OpenError> {
        let alloc = |bytes: u64| {
            mem.borrow_mut()
                .alloc_aligned(0, bytes, PAGE_SIZE)
                .map_err(OpenError::Block)
        };
        let mut slots = Vec::new();
        for _ in 0..cfg.slots {
            let mut bufs = Vec::new();
            for &dir in cfg.flow.directions() {
                let phys = alloc(cfg.block_bytes)?;
                let user = match cfg.coherence {
                    Coherence::Bounce => Some(alloc(cfg.block_bytes)?),
                    _ => None,
                };
                let dma = match cfg.coherence {
                    Coherence::Streaming | Coherence::StreamingPartial | Coherence::Acp => api
                        .map_single(hw, phys, cfg.block_bytes, dir, DmaAttrs::NONE)
                        .map_err(OpenError::Map)?,
                    // dma_alloc_coherent on a non-coherent ARMv7 device: phys == dma.
                    _ => DmaAddr(phys.0),
                };
                bufs.push(Buffer {
                    dir,
                    phys,
                    dma,
                    user,
                    sgt: None,
                });
            }
            slots.push(bufs);
        }
        Ok(PlDma {
            cfg,
            api,
            mem,
            slots,
            enqueue: hw.sw_cost(SwKey::PlDmaEnqueue),
            dequeue: hw.sw_cost(SwKey::PlDmaDequeue),
            gup_page: hw.sw_cost(SwKey::GetUserPagesPage),
            put_page: hw.sw_cost(SwKey::PutPage),
            sg_init_entry: hw.sw_cost(SwKey::SgInitTableEntry),
            sg_set_page: hw.sw_cost(SwKey::SgSetPage),
            user_access_charged: false,
        })
    }

    /// The engine's side of a block in `slot`: what it reads (nothing to model) and what it
    /// writes — the block's sequence number in the first bytes of every FROM_DEVICE buffer, so
    /// that what user space gets back is the device's data.
    pub fn device_transfer(&mut self, slot: usize, seq: u64) {
        for b in &self.slots[slot] {
            if b.dir == DmaDirection::FromDevice {
                self.mem.borrow_mut().write_u64(b.phys, seq);
            }
        }
    }

    /// What the user program reads back from `slot`'s FROM_DEVICE buffer: the device's stamp,
    /// through the user's own buffer when the option copies.
    pub fn user_sees(&self, slot: usize) -> Option<u64> {
        let b = self.slots[slot]
            .iter()
            .find(|b| b.dir == DmaDirection::FromDevice)?;
        Some(self.mem.borrow().read_u64(b.user.unwrap_or(b.phys)))
    }

    /// The user program's work on a slot before it is enqueued: it writes the bytes it sends.
    pub fn user_produce(&mut self, hw: &mut Model, slot: usize) {
        let used = self.cfg.used_bytes;
        let size = self.cfg.user_access_bytes;
        let mem = self.cfg.coherence.user_memory();
        for i in 0..self.slots[slot].len() {
            let b = &self.slots[slot][i];
            if b.dir == DmaDirection::ToDevice {
                let at = b.user.unwrap_or(b.phys);
                let back = hw.enter(crate::frame_id!("user: write block"));
                self.user_access_charged |= user_access(hw, mem, Access::Write, at, used, size);
                hw.leave(back);
            }
        }
    }

    /// The user program's work on a slot after it was dequeued: it reads the bytes it received.
    pub fn user_consume(&mut self, hw: &mut Model, slot: usize) {
        let used = self.cfg.used_bytes;
        let size = self.cfg.user_access_bytes;
        let mem = self.cfg.coherence.user_memory();
        for i in 0..self.slots[slot].len() {
            let b = &self.slots[slot][i];
            if b.dir == DmaDirection::FromDevice {
                let at = b.user.unwrap_or(b.phys);
                let back = hw.enter(crate::frame_id!("user: read block"));
                self.user_access_charged |= user_access(hw, mem, Access::Read, at, used, size);
                hw.leave(back);
            }
        }
    }

    /// Bytes each sync covers: the bytes used for `streaming-partial`, the whole block otherwise.
    fn sync_bytes(&self) -> u64 {
        if self.cfg.coherence == Coherence::StreamingPartial {
            self.cfg.used_bytes
        } else {
            self.cfg.block_bytes
        }
    }

    /// `ioctl(ENQUEUE_BLOCK)` for every buffer of `slot`: give it to the device. `timer` times
    /// the DMA API calls inside.
    pub fn enqueue(
        &mut self,
        hw: &mut Model,
        slot: usize,
        timer: &mut crate::hw::calls::CallTimer,
    ) {
        let used = self.cfg.used_bytes;
        for i in 0..self.slots[slot].len() {
            let t0 = hw.now_ps();
            let back = hw.enter(&ENQUEUE_IOCTL);
            hw.sw(self.enqueue);
            let (dir, dma, phys) = {
                let b = &self.slots[slot][i];
                (b.dir, b.dma, b.phys)
            };
            match self.cfg.coherence {
                Coherence::Coherent | Coherence::WriteCombine => {}
                Coherence::Streaming | Coherence::Acp | Coherence::StreamingPartial => {
                    let size = self.sync_bytes();
                    let api = &mut self.api;
                    timer.time(hw, api_call_name("for_device", dir), |hw| {
                        api.sync_single_for_device(hw, dma, size, dir)
                    });
                }
                Coherence::Bounce => {
                    if dir == DmaDirection::ToDevice {
                        let user = self.slots[slot][i].user.unwrap_or(phys);
                        let back2 = hw.enter(crate::frame_id!("copy_from_user"));
                        self.mem.borrow_mut().copy(phys, user, used);
                        // Reads the user's cached buffer; writes the non-cacheable block.
                        hw.cpu_touch(CacheAccess::Read, user, used);
                        hw.copy(used);
                        hw.leave(back2);
                    }
                }
                Coherence::UserPages => {
                    let sgt = self.pin_user_pages(hw, phys, used);
                    let mut sgt = sgt;
                    let api = &mut self.api;
                    let mapped = timer.time_result(hw, api_call_name("map_sg", dir), |hw| {
                        api.map_sg(hw, &mut sgt, dir, DmaAttrs::NONE)
                    });
                    if mapped.is_some() {
                        self.slots[slot][i].sgt = Some(sgt);
                    }
                }
            }
            hw.leave(back);
            timer.record(ENQUEUE_IOCTL.name(), hw.now_ps() - t0);
        }
    }

    /// `get_user_pages` of the user's buffer, then `sg_init_table` and `sg_set_page` per page.
    fn pin_user_pages(&mut self, hw: &mut Model, start: PhysAddr, bytes: u64) -> SgTable {
        let pages = bytes.div_ceil(PAGE_SIZE);
        let back = hw.enter(crate::frame_id!("get_user_pages"));
        for _ in 0..pages {
            hw.sw(self.gup_page);
        }
        hw.leave(back);
        let back = hw.enter(crate::frame_id!("sg_init_table"));
        for _ in 0..pages {
            hw.sw(self.sg_init_entry);
        }
        hw.leave(back);
        let back = hw.enter(crate::frame_id!("sg_set_page"));
        for _ in 0..pages {
            hw.sw(self.sg_set_page);
        }
        hw.leave(back);
        SgTable::from_contiguous(start, bytes, &[PAGE_SIZE as u32])
    }

    /// `ioctl(DEQUEUE_BLOCK)` for every buffer of `slot` once the device completed it: take it
    /// back for the CPU.
    pub fn dequeue(
        &mut self,
        hw: &mut Model,
        slot: usize,
        timer: &mut crate::hw::calls::CallTimer,
    ) {
        let used = self.cfg.used_bytes;
        for i in 0..self.slots[slot].len() {
            let t0 = hw.now_ps();
            let back = hw.enter(&DEQUEUE_IOCTL);
            hw.sw(self.dequeue);
            let (dir, dma, phys) = {
                let b = &self.slots[slot][i];
                (b.dir, b.dma, b.phys)
            };
            match self.cfg.coherence {
                Coherence::Coherent | Coherence::WriteCombine => {}
                Coherence::Streaming | Coherence::Acp | Coherence::StreamingPartial => {
                    let size = self.sync_bytes();
                    let api = &mut self.api;
                    timer.time(hw, api_call_name("for_cpu", dir), |hw| {
                        api.sync_single_for_cpu(hw, dma, size, dir)
                    });
                }
                Coherence::Bounce => {
                    if dir == DmaDirection::FromDevice {
                        let user = self.slots[slot][i].user.unwrap_or(phys);
                        let back2 = hw.enter(crate::frame_id!("copy_to_user"));
                        self.mem.borrow_mut().copy(user, phys, used);
                        // Reads the non-cacheable block; writes the user's cached buffer.
                        hw.cpu_touch(CacheAccess::Write, user, used);
                        hw.copy(used);
                        hw.leave(back2);
                    }
                }
                Coherence::UserPages => {
                    if let Some(mut sgt) = self.slots[slot][i].sgt.take() {
                        let api = &mut self.api;
                        timer.time(hw, api_call_name("unmap_sg", dir), |hw| {
                            api.unmap_sg(hw, &mut sgt, dir, DmaAttrs::NONE)
                        });
                        let back2 = hw.enter(crate::frame_id!("put_page"));
                        for _ in 0..sgt.orig_nents() {
                            hw.sw(self.put_page);
                        }
                        hw.leave(back2);
                    }
                }
            }
            hw.leave(back);
            timer.record(DEQUEUE_IOCTL.name(), hw.now_ps() - t0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Coherence::ALL {
            assert_eq!(Coherence::parse(c.name()), Some(c));
        }
        assert_eq!(Coherence::parse("ACP"), None);
        for (i, n) in Flow::NAMES.iter().enumerate() {
            assert_eq!(Flow::parse(n).map(|f| f as usize), Some(i));
        }
    }

    #[test]
    fn only_the_acp_is_dma_coherent_and_only_bounce_copies() {
        for c in Coherence::ALL {
            assert_eq!(c.device_coherent(), c == Coherence::Acp);
            assert_eq!(c.copies(), c == Coherence::Bounce);
        }
        assert_eq!(Coherence::Coherent.user_memory(), UserMemory::DmaCoherent);
        assert_eq!(Coherence::Streaming.user_memory(), UserMemory::Cached);
    }
}
