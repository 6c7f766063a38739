//! The offline checks raise no false alarm: the input drives a generator of traces that hold no
//! misuse of the DMA API (maps of fresh memory, syncs inside their mapping in its direction,
//! unmaps of live mappings in any order with the map's size and direction, lists longer than
//! the 128 entries a line prints, buffers mapped twice at one address, coherent allocations,
//! other events and blank lines between), and every finding on such a trace is a failure, as a
//! panic is; what is no misuse in a window (`live-at-end`, `mapped-before`) is allowed.
#![no_main]

use dmasim::trace::checks::check;
use libfuzzer_sys::fuzz_target;
use std::fmt::Write;

/// The fuzzer's bytes as the generator's choices; zeros once they run out.
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
}

const DIRS: [&str; 3] = ["TO_DEVICE", "FROM_DEVICE", "BIDIRECTIONAL"];
const DEVICES: [&str; 3] = ["0000:01:00.0", "1c0e000.isp", "a600000.usb"];

/// A live mapping as the generator made it: its device, direction, and entries as (DMA
/// address, physical address, length); `sg` for a list.
struct Live {
    dev: usize,
    dir: &'static str,
    entries: Vec<(u64, u64, u64)>,
    sg: bool,
}

struct Gen {
    text: String,
    line_us: u64,
    /// The next fresh physical page: no two live mappings share a cache line.
    page: u64,
    /// The next IOVA, for a device behind an IOMMU (the first).
    iova: u64,
    live: Vec<Live>,
    allocs: Vec<(usize, u64, u64)>,
}

impl Gen {
    fn line(&mut self, dev: usize, event: &str, fields: &str) {
        let (s, us) = (self.line_us / 1_000_000, self.line_us % 1_000_000);
        let _ = writeln!(
            self.text,
            "  kworker/0:1-12  [000] ..... {s}.{us:06}: {event}: {} {fields}",
            DEVICES[dev]
        );
        self.line_us += 1;
    }

    fn fresh(&mut self, pages: u64) -> u64 {
        let p = 0x8000_0000 + self.page * 4096;
        self.page += pages;
        p
    }

    fn map_single(&mut self, c: &mut Choices) {
        let dev = c.below(DEVICES.len());
        let dir = DIRS[c.below(3)];
        let size = 1 + (u64::from(c.byte()) << 4);
        let phys = self.fresh(1);
        // The first device is behind an IOMMU: its DMA addresses are IOVAs.
        let dma = if dev == 0 {
            self.iova -= 4096;
            self.iova
        } else {
            phys
        };
        let f = format!("dir={dir} dma_addr={dma:x} size={size} phys_addr={phys:x} attrs=");
        // Sometimes the same buffer mapped again without an IOMMU (one address twice): only
        // one the device reads, as two it may write would share cache lines (a misuse).
        let times = if dev != 0 && dir == "TO_DEVICE" && c.below(8) == 0 {
            2
        } else {
            1
        };
        for _ in 0..times {
            self.line(dev, "dma_map_phys", &f);
            self.live.push(Live {
                dev,
                dir,
                entries: vec![(dma, phys, size)],
                sg: false,
            });
        }
    }

    /// A list on a direct-mapped device, up to 200 entries, the line capped at 128.
    fn map_sg(&mut self, c: &mut Choices) {
        let dev = 1 + c.below(2);
        let dir = DIRS[c.below(3)];
        let n = 1 + c.below(200);
        let entries: Vec<(u64, u64, u64)> = (0..n)
            .map(|_| {
                let p = self.fresh(1);
                (p, p, 4096)
            })
            .collect();
        let shown = n.min(128);
        let hex = |v: &mut dyn Iterator<Item = u64>| {
            v.map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(",")
        };
        let cap = if n > 128 {
            format!("nents={shown}/{n} ents={shown}/{n} [TRUNCATED]")
        } else {
            format!("nents={n}/{n} ents={n}/{n}")
        };
        let f = format!(
            "dir={dir} {cap} dma_addrs={{{}}} sizes={{{}}} phys_addrs={{{}}} attrs=",
            hex(&mut entries[..shown].iter().map(|e| e.0)),
            hex(&mut entries[..shown].iter().map(|e| e.2)),
            hex(&mut entries[..shown].iter().map(|e| e.1)),
        );
        self.line(dev, "dma_map_sg", &f);
        self.live.push(Live {
            dev,
            dir,
            entries,
            sg: true,
        });
    }

    /// A sync of a live mapping: a whole list, or part of one entry, in the mapping's
    /// direction.
    fn sync(&mut self, c: &mut Choices) {
        if self.live.is_empty() {
            return;
        }
        let i = c.below(self.live.len());
        let for_cpu = c.below(2) == 0;
        let whole_list = self.live[i].sg && c.below(2) == 0;
        let m = &self.live[i];
        let (dev, dir) = (m.dev, m.dir);
        let event = if for_cpu { "cpu" } else { "device" };
        if whole_list {
            let a: Vec<String> = m.entries.iter().map(|e| format!("{:#x}", e.0)).collect();
            let s: Vec<String> = m.entries.iter().map(|e| format!("{:#x}", e.2)).collect();
            let f = format!("dir={dir} dma_addrs={{{}}} sizes={{{}}}", a.join(","), s.join(","));
            self.line(dev, &format!("dma_sync_sg_for_{event}"), &f);
            return;
        }
        let (dma, _, len) = m.entries[c.below(m.entries.len())];
        let off = (c.below(256) as u64 * 16) % len;
        let size = 1 + (c.below(256) as u64 * 16) % (len - off);
        let f = format!("dir={dir} dma_addr={:x} size={size}", dma + off);
        self.line(dev, &format!("dma_sync_single_for_{event}"), &f);
    }

    /// An unmap of any live mapping (completions come in any order).
    fn unmap(&mut self, c: &mut Choices) {
        if self.live.is_empty() {
            return;
        }
        let m = self.live.remove(c.below(self.live.len()));
        if m.sg {
            let p: Vec<String> = m.entries.iter().map(|e| format!("{:#x}", e.1)).collect();
            let f = format!("dir={} phys_addrs={{{}}} attrs=", m.dir, p.join(","));
            self.line(m.dev, "dma_unmap_sg", &f);
        } else {
            let (dma, _, size) = m.entries[0];
            let f = format!("dir={} dma_addr={dma:x} size={size} attrs=", m.dir);
            self.line(m.dev, "dma_unmap_phys", &f);
        }
    }

    fn alloc_or_free(&mut self, c: &mut Choices) {
        if !self.allocs.is_empty() && c.below(2) == 0 {
            let (dev, a, size) = self.allocs.remove(c.below(self.allocs.len()));
            let f = format!(
                "dir=BIDIRECTIONAL dma_addr={a:x} size={size} virt_addr=00000000a1b2c3d4 attrs="
            );
            self.line(dev, "dma_free", &f);
            return;
        }
        let dev = c.below(DEVICES.len());
        let a = self.fresh(4);
        let size = 4096 << c.below(3);
        let f = format!(
            "dir=BIDIRECTIONAL dma_addr={a:x} size={size} virt_addr=00000000a1b2c3d4 flags=GFP_KERNEL attrs="
        );
        self.line(dev, "dma_alloc", &f);
        self.allocs.push((dev, a, size));
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Choices(data);
    let mut g = Gen {
        text: String::from("# tracer: nop\n"),
        line_us: 1_000_000,
        page: 0,
        iova: 0x1_0000_0000,
        live: Vec::new(),
        allocs: Vec::new(),
    };
    while !c.0.is_empty() {
        match c.below(8) {
            0 => g.map_single(&mut c),
            1 => g.map_sg(&mut c),
            2 | 3 => g.sync(&mut c),
            4 | 5 => g.unmap(&mut c),
            6 => g.alloc_or_free(&mut c),
            _ => {
                let _ = writeln!(
                    g.text,
                    "  kworker/0:1-12  [000] ..... 1.000000: sched_switch: prev=a next=b\n"
                );
            }
        }
    }
    let t = dmasim::trace::parse("clean.txt", &g.text).expect("a generated trace reads");
    let found = check(&t, false);
    let misuse = found.kept.iter().find(|f| f.kind.fails());
    assert!(misuse.is_none(), "{misuse:?}\n{}", g.text);
});
