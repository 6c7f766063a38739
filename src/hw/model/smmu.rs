//! The Model's device side: the SMMU as a second agent with its own timeline, reached through
//! [`SmmuPort`]: register writes and reads, `udelay`, command-queue submission and the wait for a
//! `CMD_SYNC`, priced against the command queue's node on a NUMA machine.
//!
//! Kernel counterpart: none; the drivers that drive it are `iommu::arm_smmu` and
//! `iommu::arm_smmu_v3`.

use super::*;
impl SmmuPort for Model {
    #[inline]
    fn mmio_write(&mut self, reg: MmioReg, val: u64) {
        let p = self.smmu();
        self.advance_count(p.mmio_write_ps, reg.counter());
        // The write reaches the one SMMU of the machine: after every earlier CPU's.
        self.cpu.turn(self.now);
        match reg {
            MmioReg::SmmuTlbiva | MmioReg::SmmuTlbival => self.smmu_work(p.tlbi_va_ps),
            MmioReg::SmmuTlbiasid => self.smmu_work(p.tlbi_asid_ps),
            MmioReg::SmmuTlbsync => self.smmu_sync(p.sync_ps),
            MmioReg::SmmuTlbstatus => {}
            MmioReg::SmmuCmdqBase => {
                // Q_BASE_ADDR_MASK: bits 51:5 hold the address; the low bits carry LOG2SIZE.
                let base = val & 0x000f_ffff_ffff_ffe0;
                self.cmdq_node = self.numa.as_ref().and_then(|n| n.node_of(base));
                self.resolve_cmdq_lines();
            }
        }
    }

    #[inline]
    fn mmio_read(&mut self, reg: MmioReg) -> u64 {
        let p = self.smmu();
        self.advance_count(p.mmio_read_ps, reg.counter());
        match reg {
            // The value is the one the device holds when the read's answer leaves it, which is
            // no earlier than the end of the round trip.
            MmioReg::SmmuTlbstatus if self.now < self.smmu_sync_done => SMMU_TLBSTATUS_GSACTIVE,
            _ => 0,
        }
    }

    #[inline]
    fn udelay(&mut self, us: u64) {
        self.advance_count(us.saturating_mul(1_000_000), Counter::Udelay);
    }

    #[inline]
    fn smmu_cmdq_write(&mut self, n: u64) {
        let p = self.smmu();
        let (cpu_line, _) = self.cmdq_line_ps();
        // Entries are written to memory, their line fetched from its home before dma_wmb()
        // lets the doorbell go.
        self.advance(n.saturating_mul(p.cmdq_write_ps).saturating_add(cpu_line));
    }

    #[inline]
    fn smmu_cmdq_doorbell(&mut self, cmds: &[SmmuCmdKind], sync_done: &mut Vec<u64>) {
        let p = self.smmu();
        for &c in cmds {
            self.ledger.count_one(c.counter());
        }
        self.ledger.count_one(Counter::CmdqBatch);
        let (_, smmu_line) = self.cmdq_line_ps();
        // The producer index is published by one write; it reaches the one SMMU after every
        // earlier CPU's.
        self.advance(p.mmio_write_ps);
        self.cpu.turn(self.now);
        // The SMMU fetches the new commands from the queue's home node: it runs them once they
        // have arrived and it has finished what it was doing (the fetch overlaps earlier work).
        if !cmds.is_empty() {
            self.smmu_fetch(smmu_line);
        }
        for &c in cmds {
            match c {
                SmmuCmdKind::TlbiNhVa => self.smmu_work(p.tlbi_va_ps),
                SmmuCmdKind::TlbiNhAsid => self.smmu_work(p.tlbi_asid_ps),
                // Its MSI write into the sync's slot reaches the home node after the sync: a
                // posted write, in flight while the SMMU goes on with the next command.
                SmmuCmdKind::Sync => {
                    self.smmu_work(p.sync_ps);
                    self.smmu_sync_done = self.smmu_agent.busy().saturating_add(smmu_line);
                    sync_done.push(self.smmu_sync_done);
                }
            }
        }
    }

    fn smmu_cmdq_poll(&mut self, done: u64) {
        // Reported like a barrier's stall: the wait, apart from the instructions that asked.
        // The polling CPU sees the MSI payload once the slot's line has come back from its
        // home node.
        let (cpu_line, _) = self.cmdq_line_ps();
        let seen = if cpu_line > 0 {
            done.max(self.now).saturating_add(cpu_line)
        } else {
            done
        };
        let wait = seen.saturating_sub(self.now);
        self.now = self.now.saturating_add(wait);
        self.ledger.charge_wait(wait);
    }
}
