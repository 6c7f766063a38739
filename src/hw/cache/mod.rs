//! Functional CPU caches: which lines each level holds, and whether each is clean or dirty.
//!
//! Kernel counterpart: none — this is hardware state, the caches the kernel's maintenance loops
//! (cache-v7.S, cache-l2x0.c, arm64's cache.S) act on. It is what makes a clean of a buffer the
//! CPU has just written cost more than a clean of one it has not touched since the last clean,
//! and what a later check for stale data stands on.
//!
//! What it models: a hierarchy of set-associative levels, each with its geometry from the
//! platform profile (line size, size, ways). Every line is absent, clean or dirty; no data is
//! held (the bytes live in simulated memory), only presence and state.
//!
//! - Levels `0..outer_from` are *inner*: reached by the CPU's maintenance by address
//!   ([`Caches::maint_inner`]: `DCCMVAC`, `DC CVAC`, ...), which acts on every inner level down to
//!   the first outer level (the point of coherency on arm64; the PL310 on ARMv7, which sees the
//!   cleaned line arrive as a write). Levels from `outer_from` are *outer*: reached only by their
//!   own controller's by-PA operations ([`Caches::maint_outer`]: the PL310's `L2X0_*_LINE_PA`).
//! - Inclusion: neither inclusive nor exclusive (what a Cortex-A9 with a PL310 has unless both
//!   are set to exclusive mode, which Zynq's Linux does not do). A read miss allocates the line
//!   in every level on the way (read-allocate); an inner level evicting a line leaves the other
//!   levels' copies alone; an outer operation does not look at the inner levels.
//! - Writes: a level that write-allocates (the profile says, per level) takes a write miss as a
//!   line fill then marks the line dirty; one that does not passes the write to the next level.
//!   A dirty line leaving a level (a clean, or the eviction of a victim) is written into the next
//!   level — dirty there if present, allocated dirty if that level write-allocates, passed on
//!   otherwise — or to memory after the last level.
//! - Replacement: deterministic round-robin per set, after the lowest-numbered invalid way (ARM's
//!   rule for allocation when a way is free). The real Cortex-A9 L1 D-cache is pseudo-random
//!   (A9 TRM §7.1.1); Zynq's Linux sets the PL310 to round-robin (aux control bit 25 in
//!   `l2x0_of_init(0x02060000, ...)`, arch/arm/mach-zynq/common.c). Pseudo-random would make every
//!   run depend on a seed for no gain in what the DMA paths exercise (whole buffers, streamed).
//!
//! A range operation ([`Caches::maint_range`]) steps only the lines of the range the levels it
//! acts on hold, in ascending order: the same walk as one line after another, since a line no
//! such level holds has nothing to change (why none can arrive meanwhile: that function). On a
//! single level each line is stepped in the slot found when the walk was laid out, with no
//! second look-up (nothing the walk does moves another line of that level).
//! A CPU access over a range ([`Caches::access_range`]) on two write-allocating levels of 4 or 8
//! and 8 or 16 ways takes the same steps as [`Caches::access`] line by line, in a loop that holds
//! both levels' sets as fixed-size arrays (`stream2`); other shapes take the line-by-line walk.
//! When neither level holds any line of a long range (a buffer just invalidated, or pushed out
//! by other data), every line of it misses at both, so `stream2` fills without looking up; and
//! when every set of both levels is full as well, each fill takes round-robin's next way.
//! A short range operation looks its lines up one by one, except in blocks a level's summary of
//! what it holds rules out (`Holdings`: built once such look-ups have cost a read of the level,
//! good until a line arrives; 3.14's PL310 code invalidates a megabyte as 4 KB ranges).
//!
//! Invariants: a line number is held at most once per level; a set never holds more than `ways`
//! lines; the state of a line is a pure function of the sequence of operations applied (no
//! randomness, no clock); a level's `resident` is the number of its valid slots, and each set's
//! `filled` the number of its valid ways. Every level's line size is the same (the profile
//! refuses otherwise), so one line number names the same bytes at every level.

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod reference;

/// Most levels a hierarchy may have.
pub const MAX_LEVELS: usize = 4;

/// A line's state at one level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LineState {
    Absent,
    Clean,
    Dirty,
}

/// One level's shape, checked by the profile: every field a power of two, `size >= line * ways`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub line_bytes: u64,
    pub size_bytes: u64,
    pub ways: u64,
}

impl Geometry {
    pub fn sets(&self) -> u64 {
        self.size_bytes / (self.line_bytes * self.ways)
    }

    /// Whether the shape is one a cache can have (each part a power of two, at least one set).
    pub fn is_valid(&self) -> bool {
        self.line_bytes.is_power_of_two()
            && self.size_bytes.is_power_of_two()
            && self.ways.is_power_of_two()
            && self
                .line_bytes
                .checked_mul(self.ways)
                .is_some_and(|w| w <= self.size_bytes)
    }
}

/// One level as the profile describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelSpec {
    /// `"L1"`, `"L2"`: for reports.
    pub name: &'static str,
    pub geometry: Geometry,
    /// Whether a write miss allocates the line here.
    pub write_allocate: bool,
}

/// A hierarchy's shape: its levels, innermost first, and where the outer levels start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HierarchySpec {
    pub levels: Vec<LevelSpec>,
    /// Index of the first level reached only by outer (by-PA controller) operations;
    /// `levels.len()` when every level is inner.
    pub outer_from: usize,
}

/// What a maintenance operation does to a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Maint {
    /// Write a dirty line back to the next level, keep it clean.
    Clean,
    /// Discard the line, dirty or not.
    Inval,
    /// Both.
    CleanInval,
}

impl From<crate::hw::CacheOp> for Maint {
    fn from(op: crate::hw::CacheOp) -> Maint {
        match op {
            crate::hw::CacheOp::Clean => Maint::Clean,
            crate::hw::CacheOp::Inval => Maint::Inval,
            crate::hw::CacheOp::CleanInval => Maint::CleanInval,
        }
    }
}

/// A CPU data access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// What operations did, per level: dirty lines written out of it, and (CPU accesses) which level
/// answered. Index `levels.len()` of `served` is memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Dirty lines written out of each level (to the next level or to memory), for any reason.
    pub writebacks: [u64; MAX_LEVELS],
    /// CPU accesses answered by each level, or by memory (`served[levels]`).
    pub served: [u64; MAX_LEVELS + 1],
}

impl Effects {
    pub fn add(&mut self, o: &Effects) {
        for (a, b) in self.writebacks.iter_mut().zip(o.writebacks) {
            *a += b;
        }
        for (a, b) in self.served.iter_mut().zip(o.served) {
            *a += b;
        }
    }
}

const EMPTY: u64 = u64::MAX;

#[derive(Clone, Debug)]
struct Level {
    spec: LevelSpec,
    set_mask: u64,
    /// log2 of `ways` (a power of two, the profile checks): a set's first slot is
    /// `set << way_shift`, with no multiplication per look-up.
    way_shift: u32,
    ways: usize,
    /// Line number held by each (set, way), `EMPTY` when invalid.
    tags: Vec<u64>,
    dirty: Vec<bool>,
    /// Per set: the way round-robin replaces next, and how many ways are valid.
    sets: Vec<SetState>,
    /// How many slots hold a line: a level holding none has nothing for a range operation to
    /// look at.
    resident: usize,
    /// Bumped whenever a line may arrive (a fill, a streamed access): [`Holdings`] built
    /// before then may miss it. A removal leaves them conservative (a set bit where nothing is
    /// held only means look), so it does not bump.
    epoch: u64,
    /// Which blocks of lines the level held at some epoch, for short range operations.
    holdings: Holdings,
}

/// Lines per block of [`Holdings`] (a power of two): 2 KB of 32-byte lines.
const BLOCK_SHIFT: u32 = 6;
/// Bits in [`Holdings`]: blocks this far apart share one.
const HOLDING_BITS: u64 = 4096;

/// A summary of a level's lines for short range operations, which otherwise look each line of
/// the range up (3.14's PL310 code invalidates a megabyte as 256 ranges of 4 KB, one after the
/// other, with nothing changing the cache between them). Bit `(line >> BLOCK_SHIFT) %
/// HOLDING_BITS` is set when the level holds a line of that block, or of another block sharing
/// the bit: a clear bit means none of the block's lines is held, a set one means look. Built by
/// reading every slot, and only once the look-ups made since a line last arrived have
/// compared as many slots as that read costs (so a run of look-ups with changes between them
/// never pays more than twice what it did without it); good while the level's epoch is the one
/// it was built at (no line has arrived since).
#[derive(Clone, Debug, Default)]
struct Holdings {
    /// The level's epoch `bits` describe, `None` before the first build.
    built_at: Option<u64>,
    bits: Vec<u64>,
    /// The epoch `work` was counted at, and the slots compared by look-ups since.
    work_at: u64,
    work: u64,
}

/// What a set keeps besides its slots. `filled` is the count of its valid ways, so that a full
/// set (every set of a level a streamed buffer has run through) replaces at once, without
/// looking for an invalid way first; it is derived state, kept equal to the count of non-`EMPTY`
/// tags of the set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SetState {
    next: u32,
    filled: u32,
}

impl SetState {
    /// Round-robin's way in a full set of `ways` ways, and the pointer moved past it.
    #[inline(always)]
    fn next_way(&mut self, ways: usize) -> usize {
        // `next` is below `ways`, a power of two (the profile checks), as it is only ever stored
        // masked: masking it again changes nothing and spares a bounds check.
        let way = self.next as usize & (ways - 1);
        self.next = ((way + 1) & (ways - 1)) as u32;
        way
    }
}

/// The way of `set` whose tag is `tag`. Sets of four and of eight ways (every level of the
/// built-in profiles) are compared unrolled: a miss, the common case of a streamed buffer,
/// compares every way, two instructions each rather than a loop's five.
#[inline(always)]
fn way_of(set: &[u64], tag: u64) -> Option<usize> {
    #[inline(always)]
    fn unrolled<const W: usize>(set: &[u64; W], tag: u64) -> Option<usize> {
        (0..W).find(|&w| set[w] == tag)
    }
    if let Ok(s) = <&[u64; 8]>::try_from(set) {
        unrolled(s, tag)
    } else if let Ok(s) = <&[u64; 4]>::try_from(set) {
        unrolled(s, tag)
    } else {
        set.iter().position(|&t| t == tag)
    }
}

/// Place an absent `line` in the set whose slots are `tags` and `dirty` (its `ways` ways):
/// the lowest-numbered invalid way, or round-robin's next when every way is valid. Returns the
/// way and the victim it displaced (line, dirty). Shared by [`Level::insert`] and the streamed
/// path of [`Caches::access_range`], which hands it fixed-size sets.
#[inline(always)]
fn insert_into(
    tags: &mut [u64],
    dirty: &mut [bool],
    st: &mut SetState,
    resident: &mut usize,
    line: u64,
    now_dirty: bool,
) -> (usize, Option<(u64, bool)>) {
    let ways = tags.len();
    let full = st.filled as usize == ways;
    let way = if full {
        st.next_way(ways)
    } else {
        // The lowest-numbered invalid way; there is one, since the set is not full.
        st.filled += 1;
        *resident += 1;
        tags.iter().position(|&t| t == EMPTY).unwrap_or(0)
    };
    let tag = std::mem::replace(&mut tags[way], line);
    let was_dirty = std::mem::replace(&mut dirty[way], now_dirty);
    (way, full.then_some((tag, was_dirty)))
}

/// Two write-allocating levels of `W0` and `W1` ways borrowed as fixed-size sets, for
/// [`Caches::access_range`]'s streamed loop: the steps of [`Caches::fill`] and
/// [`Caches::write_into`] for two such levels, with a level's set index the line masked by its
/// set count less one (every array of a level has one entry per set, checked once in `new`,
/// so a masked index needs no bounds check per line).
struct Pair<'a, const W0: usize, const W1: usize> {
    tags0: &'a mut [[u64; W0]],
    dirty0: &'a mut [[bool; W0]],
    sets0: &'a mut [SetState],
    res0: &'a mut usize,
    tags1: &'a mut [[u64; W1]],
    dirty1: &'a mut [[bool; W1]],
    sets1: &'a mut [SetState],
    res1: &'a mut usize,
    k0: usize,
    k1: usize,
}

impl<'a, const W0: usize, const W1: usize> Pair<'a, W0, W1> {
    #[inline(always)]
    fn new(l0: &'a mut Level, l1: &'a mut Level) -> Self {
        // Its fills change what both levels hold.
        l0.epoch += 1;
        l1.epoch += 1;
        let (tags0, _) = l0.tags.as_chunks_mut::<W0>();
        let (dirty0, _) = l0.dirty.as_chunks_mut::<W0>();
        let (tags1, _) = l1.tags.as_chunks_mut::<W1>();
        let (dirty1, _) = l1.dirty.as_chunks_mut::<W1>();
        let (n0, n1) = (tags0.len(), tags1.len());
        if n0 == 0
            || n1 == 0
            || dirty0.len() != n0
            || l0.sets.len() != n0
            || dirty1.len() != n1
            || l1.sets.len() != n1
            || l0.set_mask != n0 as u64 - 1
            || l1.set_mask != n1 as u64 - 1
        {
            unreachable!("a level has one entry per set in each of its arrays");
        }
        Pair {
            tags0,
            dirty0,
            sets0: &mut l0.sets,
            res0: &mut l0.resident,
            tags1,
            dirty1,
            sets1: &mut l1.sets,
            res1: &mut l1.resident,
            k0: n0 - 1,
            k1: n1 - 1,
        }
    }

    /// Whether every set of both levels holds as many lines as it has ways.
    fn full(&self) -> bool {
        *self.res0 == self.tags0.len() * W0 && *self.res1 == self.tags1.len() * W1
    }

    /// [`Pair::fill`] when every set of both levels is full: round-robin's next way at each
    /// level, with no free way to look for. The line is left dirty in the L1 if `dirty`.
    /// Returns the L1's victim if it was dirty.
    #[inline(always)]
    fn fill_full(&mut self, line: u64, dirty: bool, wb1: &mut u64) -> Option<u64> {
        let s1 = line as usize & self.k1;
        let w = self.sets1[s1].next_way(W1);
        self.tags1[s1][w] = line;
        if std::mem::replace(&mut self.dirty1[s1][w], false) {
            *wb1 = wb1.wrapping_add(1);
        }
        let s0 = line as usize & self.k0;
        let w = self.sets0[s0].next_way(W0);
        let victim = std::mem::replace(&mut self.tags0[s0][w], line);
        std::mem::replace(&mut self.dirty0[s0][w], dirty).then_some(victim)
    }

    /// A line absent from both levels is filled into the L2 (a dirty victim there written to
    /// memory: counted in `wb1`) and then the L1: [`Pair::fill0`].
    #[inline(always)]
    fn fill(&mut self, line: u64, wb1: &mut u64) -> (usize, usize, Option<u64>) {
        let s1 = line as usize & self.k1;
        // The look-up just read every tag of this set; left to itself the compiler keeps all of
        // them (on the stack) to pick the victim's from. Hiding the set's address makes it load
        // the one tag it needs instead.
        let set1 = std::hint::black_box(&mut self.tags1[s1]);
        let filled = insert_into(
            set1,
            &mut self.dirty1[s1],
            &mut self.sets1[s1],
            self.res1,
            line,
            false,
        );
        if let (_, Some((_, true))) = filled {
            *wb1 = wb1.wrapping_add(1);
        }
        self.fill0(line)
    }

    /// A line absent from the L1 is placed there clean: returns its way and set, and the
    /// victim it displaced if that was dirty (for [`Pair::write_victim`]).
    #[inline(always)]
    fn fill0(&mut self, line: u64) -> (usize, usize, Option<u64>) {
        let s0 = line as usize & self.k0;
        let (w, victim) = insert_into(
            &mut self.tags0[s0],
            &mut self.dirty0[s0],
            &mut self.sets0[s0],
            self.res0,
            line,
            false,
        );
        (w, s0, victim.and_then(|(v, dirty)| dirty.then_some(v)))
    }

    /// `write_into(1, v)`: dirty in the L2 if held there, else allocated dirty, its dirty
    /// victim written to memory (counted in `wb1`).
    #[inline(always)]
    fn write_victim(&mut self, v: u64, wb1: &mut u64) {
        let s = v as usize & self.k1;
        if let Some(w) = way_of(&self.tags1[s], v) {
            self.dirty1[s][w] = true;
        } else {
            // As for the fill: load the victim's tag, not keep the set's.
            let set1 = std::hint::black_box(&mut self.tags1[s]);
            if let (_, Some((_, true))) = insert_into(
                set1,
                &mut self.dirty1[s],
                &mut self.sets1[s],
                self.res1,
                v,
                true,
            ) {
                *wb1 = wb1.wrapping_add(1);
            }
        }
    }
}

impl Level {
    fn new(spec: LevelSpec) -> Level {
        let sets = spec.geometry.sets() as usize;
        let ways = spec.geometry.ways as usize;
        Level {
            spec,
            set_mask: sets as u64 - 1,
            way_shift: ways.trailing_zeros(),
            ways,
            tags: vec![EMPTY; sets * ways],
            dirty: vec![false; sets * ways],
            sets: vec![SetState::default(); sets],
            resident: 0,
            epoch: 0,
            holdings: Holdings::default(),
        }
    }

    #[inline(always)]
    fn set_of(&self, line: u64) -> usize {
        (line & self.set_mask) as usize
    }

    #[inline(always)]
    fn find(&self, line: u64) -> Option<usize> {
        // Four and eight ways (every level of the built-in profiles) take the level's slots as
        // fixed-size sets: one bounds check, no slice of the set to cut and check.
        #[inline(always)]
        fn in_sets<const W: usize>(tags: &[u64], set: usize, line: u64) -> Option<usize> {
            let (sets, _) = tags.as_chunks::<W>();
            way_of(sets.get(set)?, line).map(|w| set * W + w)
        }
        let set = self.set_of(line);
        match self.ways {
            8 => in_sets::<8>(&self.tags, set, line),
            4 => in_sets::<4>(&self.tags, set, line),
            _ => {
                let base = set << self.way_shift;
                way_of(&self.tags[base..base + self.ways], line).map(|w| base + w)
            }
        }
    }

    fn state(&self, line: u64) -> LineState {
        match self.find(line) {
            None => LineState::Absent,
            Some(i) if self.dirty[i] => LineState::Dirty,
            Some(_) => LineState::Clean,
        }
    }

    /// Place an absent `line`; returns the slot and the victim it displaced (line, dirty).
    #[inline(always)]
    fn insert(&mut self, line: u64, dirty: bool) -> (usize, Option<(u64, bool)>) {
        self.epoch += 1;
        let set = self.set_of(line);
        let base = set << self.way_shift;
        let end = base + self.ways;
        let (way, victim) = insert_into(
            &mut self.tags[base..end],
            &mut self.dirty[base..end],
            &mut self.sets[set],
            &mut self.resident,
            line,
            dirty,
        );
        (base + way, victim)
    }

    fn remove(&mut self, slot: usize) {
        if self.tags[slot] != EMPTY {
            self.resident -= 1;
            self.sets[slot >> self.way_shift].filled -= 1;
        }
        self.tags[slot] = EMPTY;
        self.dirty[slot] = false;
    }

    /// Append the slots holding a line of `[first, first + n)` to `out`, read the cheaper way:
    /// every slot when the range has at least as many (line, way) pairs as the level has
    /// slots, else the range's lines one by one. Returns whether they went in ascending order
    /// of their lines (always, but for a range over more rounds of the sets than the level
    /// has slots).
    fn slots_of(&mut self, first: u64, n: u64, out: &mut Vec<u64>, buckets: &mut Vec<u32>) -> bool {
        let end = first.saturating_add(n);
        if n.saturating_mul(self.ways as u64) >= self.tags.len() as u64 {
            slots_in_order(self, first, end, out, buckets)
        } else {
            self.slots_in(first, end, out);
            true
        }
    }

    /// Append the slots holding the lines of `[first, end)` this level holds to `out`, in
    /// ascending order of their lines, looking up only the lines of blocks [`Holdings`] does
    /// not rule out once it is worth building.
    fn slots_in(&mut self, first: u64, end: u64, out: &mut Vec<u64>) {
        if end <= first {
            return;
        }
        let (b0, b1) = (first >> BLOCK_SHIFT, (end - 1) >> BLOCK_SHIFT);
        let span = end - first;
        if b1 - b0 < HOLDING_BITS && self.holdings_current(span) {
            for b in b0..=b1 {
                if self.holdings.bits[(b % HOLDING_BITS / 64) as usize] >> (b % 64) & 1 == 1 {
                    let lo = first.max(b << BLOCK_SHIFT);
                    let hi = end.min((b + 1) << BLOCK_SHIFT);
                    out.extend((lo..hi).filter_map(|line| Some(self.find(line)? as u64)));
                }
            }
        } else {
            out.extend((first..end).filter_map(|line| Some(self.find(line)? as u64)));
        }
    }

    /// Whether [`Holdings`] describes the level as it is now, building it when the look-ups
    /// since the last change (`span` lines more, about to be made) have cost a read of every
    /// slot.
    fn holdings_current(&mut self, span: u64) -> bool {
        let h = &mut self.holdings;
        if h.built_at == Some(self.epoch) {
            return true;
        }
        if h.work_at != self.epoch {
            (h.work_at, h.work) = (self.epoch, 0);
        }
        h.work = h.work.saturating_add(span.saturating_mul(self.ways as u64));
        if h.work < self.tags.len() as u64 {
            return false;
        }
        h.bits.clear();
        h.bits.resize((HOLDING_BITS / 64) as usize, 0);
        for &t in self.tags.iter().filter(|&&t| t != EMPTY) {
            let b = (t >> BLOCK_SHIFT) % HOLDING_BITS;
            h.bits[(b / 64) as usize] |= 1 << (b % 64);
        }
        h.built_at = Some(self.epoch);
        true
    }

    fn lines(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        self.tags
            .iter()
            .zip(&self.dirty)
            .filter(|(t, _)| **t != EMPTY)
            .map(|(t, d)| (*t, *d))
    }
}

/// Append the slots of `l` holding a line of `[first, end)` to `out`, reading every slot;
/// returns whether they went in ascending order of their lines.
///
/// They do when the range spans few enough rounds of the sets: a line's set is its low bits, so
/// the lines of one round (`line >> set bits` equal) lie in distinct sets and come out of the slots
/// (set by set) ascending, and two lines of one set are in different rounds. A stable counting
/// sort by round therefore orders them, at two reads of the slots instead of a sort. With more
/// rounds than the level has slots the counters would outweigh that, and the lines go in slot
/// order for the caller to sort.
fn slots_in_order(
    l: &Level,
    first: u64,
    end: u64,
    out: &mut Vec<u64>,
    buckets: &mut Vec<u32>,
) -> bool {
    let span = end.saturating_sub(first);
    let in_range = |t: u64| in_span(t, first, span);
    let set_bits = l.set_mask.count_ones();
    let round0 = first >> set_bits;
    let rounds = (end.saturating_sub(1) >> set_bits).saturating_sub(round0) + 1;
    let held = || {
        (0u64..)
            .zip(&l.tags)
            .filter(|&(_, &t)| in_range(t))
            .map(|(i, &t)| (i, t))
    };
    if end <= first || rounds > l.tags.len() as u64 {
        out.extend(held().map(|(i, _)| i));
        return false;
    }
    buckets.clear();
    buckets.resize(rounds as usize + 1, 0);
    for (_, t) in held() {
        buckets[((t >> set_bits) - round0) as usize + 1] += 1;
    }
    // Prefix sums: bucket r's first index in the output, counted from `start`.
    let start = out.len();
    let mut total = 0u32;
    for b in buckets.iter_mut() {
        total += *b;
        *b = total;
    }
    if total == 0 {
        // None held (a buffer the level has nothing of): no second read to place them.
        return true;
    }
    out.resize(start + total as usize, 0);
    for (i, t) in held() {
        let b = &mut buckets[((t >> set_bits) - round0) as usize];
        out[start + *b as usize] = i;
        *b += 1;
    }
    true
}

/// Whether slot tag `t` is one of the `span` lines from `first`, in one comparison: a line below
/// `first` wraps above the span, and `EMPTY` (u64::MAX) is never inside it, since a span ends at
/// u64::MAX at the latest.
#[inline(always)]
fn in_span(t: u64, first: u64, span: u64) -> bool {
    t.wrapping_sub(first) < span
}

/// The caches of one CPU and the outer caches behind it.
#[derive(Clone, Debug)]
pub struct Caches {
    levels: Vec<Level>,
    outer_from: usize,
    shift: u32,
    /// The lines a range operation steps, kept between calls so a call allocates nothing.
    scratch: Vec<u64>,
    /// Bucket counts for [`Caches::resident_lines`]'s counting sort, kept for the same reason.
    buckets: Vec<u32>,
}

impl Caches {
    /// Build empty caches. The spec must have been checked (the profile does): 1 to
    /// [`MAX_LEVELS`] levels of valid geometry sharing one line size.
    pub fn new(spec: &HierarchySpec) -> Caches {
        assert!(!spec.levels.is_empty() && spec.levels.len() <= MAX_LEVELS);
        let line = spec.levels[0].geometry.line_bytes;
        for l in &spec.levels {
            assert!(
                l.geometry.is_valid() && l.geometry.line_bytes == line,
                "{l:?}"
            );
        }
        Caches {
            levels: spec.levels.iter().copied().map(Level::new).collect(),
            outer_from: spec.outer_from.min(spec.levels.len()),
            shift: line.trailing_zeros(),
            scratch: Vec::new(),
            buckets: Vec::new(),
        }
    }

    pub fn line_bytes(&self) -> u64 {
        1 << self.shift
    }

    /// The line number holding byte address `addr`.
    pub fn line_of(&self, addr: u64) -> u64 {
        addr >> self.shift
    }

    pub fn depth(&self) -> usize {
        self.levels.len()
    }

    pub fn outer_from(&self) -> usize {
        self.outer_from
    }

    pub fn level_name(&self, level: usize) -> &'static str {
        self.levels[level].spec.name
    }

    /// The state of `line` at `level`.
    pub fn state(&self, level: usize, line: u64) -> LineState {
        self.levels[level].state(line)
    }

    /// Everything that decides what later operations do (each level's slots, dirty bits and
    /// round-robin pointers), for tests comparing two walks.
    #[cfg(test)]
    pub(crate) fn fingerprint(&self) -> String {
        let levels: Vec<_> = self
            .levels
            .iter()
            .map(|l| (&l.tags, &l.dirty, &l.sets, l.resident))
            .collect();
        format!("{levels:?}")
    }

    /// Whether each level's derived counts agree with its slots: `resident` with the valid slots,
    /// each set's `filled` with its valid ways.
    #[cfg(test)]
    pub(crate) fn bookkeeping_holds(&self) -> bool {
        self.levels.iter().all(|l| {
            let valid = |s: &[u64]| s.iter().filter(|&&t| t != EMPTY).count();
            valid(&l.tags) == l.resident
                && l.tags
                    .chunks(l.ways)
                    .zip(&l.sets)
                    .all(|(s, st)| valid(s) == st.filled as usize)
        })
    }

    /// Every line `level` holds, with whether it is dirty, in no particular order.
    pub fn contents(&self, level: usize) -> Vec<(u64, bool)> {
        self.levels[level].lines().collect()
    }

    /// A dirty `line` leaves level `from - 1` into level `from` (or memory past the last).
    /// A level that holds it takes it as dirty; one that write-allocates places it, and a dirty
    /// victim it displaces goes on to the next level the same way; one that does not passes it
    /// on.
    #[inline]
    fn write_into(&mut self, mut from: usize, mut line: u64, fx: &mut Effects) {
        while let Some(l) = self.levels.get_mut(from) {
            if let Some(i) = l.find(line) {
                l.dirty[i] = true;
                return;
            }
            if l.spec.write_allocate {
                let Some((v, true)) = l.insert(line, true).1 else {
                    return;
                };
                fx.writebacks[from] += 1;
                line = v;
            }
            from += 1;
        }
    }

    /// Bring `line` into every level above the one holding it (read-allocate); returns the
    /// level that answered (`depth()` for memory). The levels above `from` are known not to hold
    /// it (the caller looked).
    /// Also returns the line's slot in the L1 when the fill placed it there.
    #[inline(always)]
    fn fill(&mut self, line: u64, mut from: usize, fx: &mut Effects) -> (usize, Option<usize>) {
        while from < self.levels.len() && self.levels[from].find(line).is_none() {
            from += 1;
        }
        let mut slot = None;
        for k in (0..from).rev() {
            // An eviction further in can have written this line into level k meanwhile only if
            // it was dirty above, and it was absent above: so it is still absent here.
            let (i, victim) = self.levels[k].insert(line, false);
            // A victim goes further in, never back to a level already filled.
            if let Some((v, true)) = victim {
                fx.writebacks[k] += 1;
                self.write_into(k + 1, v, fx);
            }
            slot = Some(i);
        }
        (from, slot)
    }

    /// One CPU access to `line`.
    #[inline]
    pub fn access(&mut self, a: Access, line: u64, fx: &mut Effects) {
        match a {
            Access::Read => {
                let (k, _) = self.fill(line, 0, fx);
                fx.served[k] += 1;
            }
            Access::Write => {
                if let Some(i) = self.levels[0].find(line) {
                    fx.served[0] += 1;
                    self.levels[0].dirty[i] = true;
                } else if self.levels[0].spec.write_allocate {
                    let (k, i) = self.fill(line, 1, fx);
                    fx.served[k] += 1;
                    // A miss places the line in the L1: `i` is its slot there.
                    if let Some(i) = i {
                        self.levels[0].dirty[i] = true;
                    }
                } else {
                    // No allocation at L1: the store goes on to the next level as a write
                    // (or to memory when there is none: `served[1]` is then memory).
                    self.write_into(1, line, fx);
                    fx.served[1] += 1;
                }
            }
        }
    }

    /// CPU accesses to every line of `[start, start + bytes)`.
    pub fn access_range(&mut self, a: Access, start: u64, bytes: u64) -> Effects {
        let mut fx = Effects::default();
        if bytes == 0 {
            return fx;
        }
        let first = self.line_of(start);
        let last = self.line_of(start.saturating_add(bytes - 1));
        let shape = match &self.levels[..] {
            [l0, l1] if l0.spec.write_allocate && l1.spec.write_allocate => (l0.ways, l1.ways),
            _ => (0, 0),
        };
        let write = a == Access::Write;
        match (shape, write) {
            ((4, 8), false) => self.stream2::<4, 8, false>(first, last, &mut fx),
            ((4, 8), true) => self.stream2::<4, 8, true>(first, last, &mut fx),
            ((4, 16), false) => self.stream2::<4, 16, false>(first, last, &mut fx),
            ((4, 16), true) => self.stream2::<4, 16, true>(first, last, &mut fx),
            ((8, 8), false) => self.stream2::<8, 8, false>(first, last, &mut fx),
            ((8, 8), true) => self.stream2::<8, 8, true>(first, last, &mut fx),
            ((8, 16), false) => self.stream2::<8, 16, false>(first, last, &mut fx),
            ((8, 16), true) => self.stream2::<8, 16, true>(first, last, &mut fx),
            _ => {
                for line in first..=last {
                    self.access(a, line, &mut fx);
                }
            }
        }
        fx
    }

    /// [`Caches::access`] on every line of `first..=last`, for two write-allocating levels of
    /// `W0` and `W1` ways (the Zynq's A9 L1 and PL310, and the common shapes beside it): the
    /// same steps in the same order, with both levels' sets borrowed once for the whole range
    /// and every set a fixed-size array, so a line's look-ups and fills are straight-line code.
    fn stream2<const W0: usize, const W1: usize, const WRITE: bool>(
        &mut self,
        first: u64,
        last: u64,
        fx: &mut Effects,
    ) {
        let a = if WRITE { Access::Write } else { Access::Read };
        let [l0, l1] = &mut self.levels[..] else {
            // Not two levels (the caller checked): the line-by-line walk.
            for line in first..=last {
                self.access(a, line, fx);
            }
            return;
        };
        // A range no level holds a line of (a DMA buffer just invalidated, or streamed out of the
        // caches by other data) misses at both levels on every line: each line is absent when
        // its turn comes, since a step brings in only its own line and the victims of lines
        // held before. Then neither look-up of the line itself is needed. Finding out reads
        // every slot once, which a long range repays many times over.
        let lines = last - first + 1;
        let slots = l0.tags.len() + l1.tags.len();
        let absent = lines.saturating_mul(8) >= slots as u64
            && !l0
                .tags
                .iter()
                .chain(&l1.tags)
                .any(|&t| in_span(t, first, lines));
        let mut p = Pair::<W0, W1>::new(l0, l1);
        // Counted in locals, added to `fx` once: L1 hits are the lines less the L1 misses, and
        // L2 hits the L1 misses less the L2 misses. Each count is at most `lines`, so none
        // can wrap.
        let (mut miss0, mut miss1, mut wb0, mut wb1) = (0u64, 0u64, 0u64, 0u64);
        if absent && p.full() {
            // Every set of both levels full (a level a long buffer has streamed through), and
            // it stays so: each line replaces round-robin's next way at each level.
            for line in first..=last {
                if let Some(v) = p.fill_full(line, WRITE, &mut wb1) {
                    wb0 = wb0.wrapping_add(1);
                    p.write_victim(v, &mut wb1);
                }
            }
            (miss0, miss1) = (lines, lines);
        } else if absent {
            // Its own loop: with no look-up and no hit to count, it keeps its state in
            // registers.
            for line in first..=last {
                let (w, s0, victim) = p.fill(line, &mut wb1);
                if let Some(v) = victim {
                    wb0 = wb0.wrapping_add(1);
                    p.write_victim(v, &mut wb1);
                }
                if WRITE {
                    p.dirty0[s0][w] = true;
                }
            }
            (miss0, miss1) = (lines, lines);
        } else {
            for line in first..=last {
                let s0 = line as usize & p.k0;
                if let Some(w) = way_of(&p.tags0[s0], line) {
                    if WRITE {
                        p.dirty0[s0][w] = true;
                    }
                    continue;
                }
                miss0 = miss0.wrapping_add(1);
                let (w, s0, victim) = if way_of(&p.tags1[line as usize & p.k1], line).is_some() {
                    p.fill0(line)
                } else {
                    miss1 = miss1.wrapping_add(1);
                    p.fill(line, &mut wb1)
                };
                if let Some(v) = victim {
                    wb0 = wb0.wrapping_add(1);
                    p.write_victim(v, &mut wb1);
                }
                if WRITE {
                    p.dirty0[s0][w] = true;
                }
            }
        }
        // Each count is at most the one before it: no subtraction below can go negative.
        fx.served[0] += lines - miss0;
        fx.served[1] += miss0 - miss1;
        fx.served[2] += miss1;
        fx.writebacks[0] += wb0;
        fx.writebacks[1] += wb1;
    }

    fn maint_level(&mut self, level: usize, op: Maint, line: u64, fx: &mut Effects) {
        if let Some(i) = self.levels[level].find(line) {
            self.maint_slot(level, op, line, i, fx);
        }
    }

    /// [`Caches::maint_level`] on `line`, held in slot `i` of `level`.
    fn maint_slot(&mut self, level: usize, op: Maint, line: u64, i: usize, fx: &mut Effects) {
        let dirty = self.levels[level].dirty[i];
        if dirty && op != Maint::Inval {
            fx.writebacks[level] += 1;
            self.levels[level].dirty[i] = false;
            self.write_into(level + 1, line, fx);
        }
        if op != Maint::Clean {
            // The write into the next level cannot have moved this line within this level.
            self.levels[level].remove(i);
        }
    }

    /// Maintenance by address on the inner levels (to the point of coherency): each inner level
    /// in turn, innermost first, so a line cleaned out of L1 into an inner L2 is cleaned from
    /// there too; a line cleaned out of the last inner level lands in the first outer level.
    pub fn maint_inner(&mut self, op: Maint, line: u64, fx: &mut Effects) {
        for level in 0..self.outer_from {
            self.maint_level(level, op, line, fx);
        }
    }

    /// The outer controller's by-PA operation on `line`, on every outer level.
    pub fn maint_outer(&mut self, op: Maint, line: u64, fx: &mut Effects) {
        for level in self.outer_from..self.levels.len() {
            self.maint_level(level, op, line, fx);
        }
    }

    /// [`Caches::maint_inner`] (or, with `outer`, [`Caches::maint_outer`]) on every line of
    /// `[first, first + n)` in ascending order, stepping only the lines those levels hold:
    /// `each(offset, &effects)` is called, in ascending offset, for each line stepped. Every
    /// line not stepped was absent from every level the operation acts on, where the
    /// line-by-line walk would have found nothing to do.
    ///
    /// Why skipping is exact: while the walk runs, the only line that can arrive at one of the
    /// levels it acts on is the line being maintained (written into the next level) or a
    /// victim pushed down from one of those levels, which was held there already (inner levels
    /// are a prefix of the hierarchy and outer ones a suffix, so a victim of one lands in
    /// another of the same kind or in memory). So the lines of the range held by those levels
    /// at the start are a superset of the ones the walk will find, and stepping those (some may
    /// have been evicted meanwhile: their step finds nothing) in order is the same walk.
    pub fn maint_range(
        &mut self,
        outer: bool,
        op: Maint,
        first: u64,
        n: u64,
        mut each: impl FnMut(u64, &Effects),
    ) {
        self.walk_range(outer, first, n, |c, levels, line, slot| {
            let mut fx = Effects::default();
            c.maint_levels(levels, op, line, slot, &mut fx);
            each(line - first, &fx);
        });
    }

    /// [`Caches::maint_range`] for a caller that needs only the sum of the lines' effects
    /// (an outer controller's range, priced per line by its count): added to `fx`.
    pub fn maint_range_sum(
        &mut self,
        outer: bool,
        op: Maint,
        first: u64,
        n: u64,
        fx: &mut Effects,
    ) {
        self.walk_range(outer, first, n, |c, levels, line, slot| {
            c.maint_levels(levels, op, line, slot, fx);
        });
    }

    /// One line's step of a range walk: `op` on `line` at each of `levels`, or, when the walk
    /// knows its slot in the one level it acts on, there directly.
    #[inline(always)]
    fn maint_levels(
        &mut self,
        levels: std::ops::Range<usize>,
        op: Maint,
        line: u64,
        slot: Option<usize>,
        fx: &mut Effects,
    ) {
        match slot {
            Some(i) => self.maint_slot(levels.start, op, line, i, fx),
            None => {
                for level in levels {
                    self.maint_level(level, op, line, fx);
                }
            }
        }
    }

    /// `step(caches, levels, line, slot)` on each line of `[first, first + n)` the levels an
    /// inner (or `outer`) operation acts on hold, ascending: the walk of
    /// [`Caches::maint_range`]. When it acts on one level, `slot` is where that level holds the
    /// line: a step changes only its own line's slot there (what it writes goes to levels
    /// further out), so slots found before the walk stay right through it.
    fn walk_range(
        &mut self,
        outer: bool,
        first: u64,
        n: u64,
        mut step: impl FnMut(&mut Caches, std::ops::Range<usize>, u64, Option<usize>),
    ) {
        let levels = if outer {
            self.outer_from..self.levels.len()
        } else {
            0..self.outer_from
        };
        let mut found = std::mem::take(&mut self.scratch);
        if levels.len() == 1 {
            let level = levels.start;
            self.resident_slots(level, first, n, &mut found);
            for &i in &found {
                let line = self.levels[level].tags[i as usize];
                step(self, levels.clone(), line, Some(i as usize));
            }
        } else {
            self.resident_lines(levels.clone(), first, n, &mut found);
            for &line in &found {
                step(self, levels.clone(), line, None);
            }
        }
        self.scratch = found;
    }

    /// Append the slots of one level holding a line of `[first, first + n)` to `out`
    /// (cleared first), in ascending order of their lines: [`Caches::resident_lines`]'s
    /// reading of one level.
    fn resident_slots(&mut self, level: usize, first: u64, n: u64, out: &mut Vec<u64>) {
        out.clear();
        let l = &mut self.levels[level];
        if l.resident == 0 {
            return;
        }
        if !l.slots_of(first, n, out, &mut self.buckets) {
            out.sort_unstable_by_key(|&i| l.tags[i as usize]);
        }
    }

    /// The lines of `[first, first + n)` that any of `levels` holds, ascending, into `out`.
    /// Each level is read the cheaper way: every slot when the range has at least as many
    /// (line, way) pairs as the level has slots, else the range's lines one by one.
    fn resident_lines(
        &mut self,
        levels: std::ops::Range<usize>,
        first: u64,
        n: u64,
        out: &mut Vec<u64>,
    ) {
        out.clear();
        let mut sorted = true;
        let mut sources = 0;
        for l in &mut self.levels[levels] {
            if l.resident == 0 {
                continue;
            }
            sources += 1;
            let start = out.len();
            sorted &= l.slots_of(first, n, out, &mut self.buckets);
            for x in &mut out[start..] {
                *x = l.tags[*x as usize];
            }
        }
        if !sorted || sources > 1 {
            out.sort_unstable();
            out.dedup();
        }
    }

    /// The outer controller's whole-cache operation by way: every line each outer level holds,
    /// in slot order (set by set, way by way), gets [`Caches::maint_outer`].
    pub fn maint_outer_all(&mut self, op: Maint, fx: &mut Effects) {
        if self.levels.len() - self.outer_from == 1 {
            // One outer level: nothing the walk does arrives in it (what it writes goes to
            // memory), so each slot is stepped where it is; an empty one has nothing to step.
            let level = self.outer_from;
            if self.levels[level].resident == 0 {
                return;
            }
            for i in 0..self.levels[level].tags.len() {
                let line = self.levels[level].tags[i];
                if line != EMPTY {
                    self.maint_slot(level, op, line, i, fx);
                }
            }
            return;
        }
        let mut lines = std::mem::take(&mut self.scratch);
        for level in self.outer_from..self.levels.len() {
            // The walk of one level is fixed before it starts: a line written into this level
            // by the walk itself (from an outer level above it) is not visited again.
            lines.clear();
            lines.extend(
                self.levels[level]
                    .tags
                    .iter()
                    .copied()
                    .filter(|&t| t != EMPTY),
            );
            for &line in &lines {
                self.maint_outer(op, line, fx);
            }
        }
        self.scratch = lines;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Cortex-A9 L1 (32 KB, 4-way) and a PL310 (512 KB, 8-way), 32-byte lines.
    pub(crate) fn zynq() -> Caches {
        let g = |size_bytes, ways| Geometry {
            line_bytes: 32,
            size_bytes,
            ways,
        };
        Caches::new(&HierarchySpec {
            levels: vec![
                LevelSpec {
                    name: "L1",
                    geometry: g(32 << 10, 4),
                    write_allocate: true,
                },
                LevelSpec {
                    name: "L2",
                    geometry: g(512 << 10, 8),
                    write_allocate: true,
                },
            ],
            outer_from: 1,
        })
    }

    #[test]
    fn geometry_of_the_zynq_levels() {
        let c = zynq();
        assert_eq!(c.levels[0].tags.len(), 1024);
        assert_eq!(c.levels[0].set_mask, 255);
        assert_eq!(c.levels[1].tags.len(), 16384);
        assert_eq!(c.levels[1].set_mask, 2047);
        assert!(
            !Geometry {
                line_bytes: 32,
                size_bytes: 96 << 10,
                ways: 4
            }
            .is_valid()
        );
        assert!(
            !Geometry {
                line_bytes: 64,
                size_bytes: 128,
                ways: 4
            }
            .is_valid()
        );
    }

    #[test]
    fn a_write_dirties_l1_and_a_clean_moves_it_to_l2() {
        let mut c = zynq();
        let mut fx = Effects::default();
        c.access(Access::Write, 7, &mut fx);
        assert_eq!(fx.served[2], 1, "a write miss fills from memory");
        assert_eq!(c.state(0, 7), LineState::Dirty);
        assert_eq!(c.state(1, 7), LineState::Clean, "read-allocated on the way");
        let mut fx = Effects::default();
        c.maint_inner(Maint::Clean, 7, &mut fx);
        assert_eq!(fx.writebacks, [1, 0, 0, 0]);
        assert_eq!(c.state(0, 7), LineState::Clean);
        assert_eq!(c.state(1, 7), LineState::Dirty);
        // The same clean again writes nothing back.
        let mut fx = Effects::default();
        c.maint_inner(Maint::Clean, 7, &mut fx);
        assert_eq!(fx.writebacks, [0; 4]);
        // The PL310 clean writes it to DDR; its invalidate then drops it.
        c.maint_outer(Maint::Clean, 7, &mut fx);
        assert_eq!(fx.writebacks, [0, 1, 0, 0]);
        assert_eq!(c.state(1, 7), LineState::Clean);
        c.maint_outer(Maint::Inval, 7, &mut fx);
        assert_eq!(c.state(1, 7), LineState::Absent);
        assert_eq!(
            c.state(0, 7),
            LineState::Clean,
            "an outer op leaves L1 alone"
        );
    }

    #[test]
    fn an_invalidate_discards_dirty_data() {
        let mut c = zynq();
        let mut fx = Effects::default();
        c.access(Access::Write, 3, &mut fx);
        c.maint_inner(Maint::Inval, 3, &mut fx);
        assert_eq!(c.state(0, 3), LineState::Absent);
        assert_eq!(c.state(1, 3), LineState::Clean);
        assert_eq!(fx.writebacks, [0; 4]);
        c.access(Access::Write, 3, &mut fx);
        c.maint_inner(Maint::CleanInval, 3, &mut fx);
        assert_eq!(c.state(0, 3), LineState::Absent);
        assert_eq!(c.state(1, 3), LineState::Dirty);
        assert_eq!(fx.writebacks[0], 1);
    }

    #[test]
    fn writing_a_megabyte_leaves_the_last_32k_dirty_in_l1_and_the_rest_in_l2() {
        let mut c = zynq();
        let fx = c.access_range(Access::Write, 0x1000_0000, 1 << 20);
        // L1 holds 1024 lines: the other 31744 were evicted dirty into the PL310, which holds
        // 16384 lines: 16384 of those were in turn written to DDR.
        assert_eq!(fx.writebacks[0], 32768 - 1024);
        assert_eq!(fx.served[2], 32768);
        let l1 = c.contents(0);
        assert_eq!(l1.len(), 1024);
        assert!(l1.iter().all(|&(_, d)| d));
        let l2 = c.contents(1);
        assert_eq!(l2.len(), 16384);
        let dirty_l2 = l2.iter().filter(|l| l.1).count() as u64;
        // The PL310 holds the last 512 KB of the buffer; of those, the lines still in L1 are
        // clean in L2 (read-allocated by the fill, never written back).
        assert_eq!(dirty_l2, 16384 - 1024);
        // Each of the first 16384 lines was evicted from the PL310 by the line 512 KB after it,
        // long after L1 had written it back: all dirty.
        assert_eq!(fx.writebacks[1], 16384);
    }

    /// 3.14's PL310 code walks a megabyte as 4 KB ranges; once those look-ups have cost a read
    /// of the level, its holdings summary is built and skips the blocks it holds nothing of.
    /// Lines arriving afterwards, by a single access or a streamed one, must be found again.
    #[test]
    fn short_outer_ranges_find_lines_that_arrived_after_the_summary() {
        let mut c = zynq();
        let mut fx = Effects::default();
        let inval_blocks = |c: &mut Caches, first: u64, blocks: u64, fx: &mut Effects| {
            for b in 0..blocks {
                c.maint_range_sum(true, Maint::Inval, first + b * 128, 128, fx);
            }
        };
        c.access(Access::Read, 5, &mut fx);
        let built = |c: &Caches| c.levels[1].holdings.built_at == Some(c.levels[1].epoch);
        // 32 ranges of 128 lines at 8 ways: twice a read of the PL310's 16384 slots.
        inval_blocks(&mut c, 1 << 20, 32, &mut fx);
        assert!(built(&c));
        // A streamed read brings 4096 lines (a 128 KB block) into both levels.
        let first = 1 << 16;
        c.access_range(Access::Read, first * 32, 4096 * 32);
        assert_eq!(c.state(1, first), LineState::Clean);
        inval_blocks(&mut c, first, 32, &mut fx);
        assert!(built(&c));
        // And one line by a single access.
        c.access(Access::Read, 9 << 16, &mut fx);
        inval_blocks(&mut c, 9 << 16, 1, &mut fx);
        let held: Vec<_> = c.contents(1).into_iter().map(|(l, _)| l).collect();
        assert_eq!(
            held,
            vec![5],
            "every line but the first read is invalidated"
        );
    }

    /// A range over more rounds of the sets than the level has slots is read slot by slot and
    /// then sorted: the walk still goes in ascending line order, which decides where each
    /// cleaned line lands in the next level and so which one a later fill replaces.
    #[test]
    fn a_range_longer_than_the_level_walks_its_lines_in_ascending_order() {
        let one_set = |ways| LevelSpec {
            name: "L",
            geometry: Geometry {
                line_bytes: 32,
                size_bytes: 32 * ways,
                ways,
            },
            write_allocate: true,
        };
        let mut c = Caches::new(&HierarchySpec {
            levels: vec![one_set(2), one_set(2)],
            outer_from: 1,
        });
        let mut fx = Effects::default();
        // The L1 holds 10 in way 0 and 3 in way 1, both dirty; the L2 neither.
        c.access(Access::Write, 10, &mut fx);
        c.access(Access::Write, 3, &mut fx);
        c.maint_outer(Maint::Inval, 10, &mut fx);
        c.maint_outer(Maint::Inval, 3, &mut fx);
        // Sixteen rounds of the L1's one set: 3 is cleaned into the L2's way 0, 10 into way 1.
        c.maint_range_sum(false, Maint::Clean, 0, 16, &mut fx);
        // The L2 is full: the next fill replaces its way 0.
        c.access(Access::Read, 20, &mut fx);
        assert_eq!(c.state(1, 3), LineState::Absent);
        assert_eq!(c.state(1, 10), LineState::Dirty);
    }

    #[test]
    fn round_robin_after_invalid_ways() {
        let mut c = zynq();
        let mut fx = Effects::default();
        // Five lines of one L1 set (stride 256 lines): the fifth replaces way 0.
        for k in 0..5 {
            c.access(Access::Read, k * 256, &mut fx);
        }
        assert_eq!(c.state(0, 0), LineState::Absent);
        assert_eq!(c.state(0, 4 * 256), LineState::Clean);
        // Free way 2; the next fill takes it, and round-robin goes on at way 1 after that.
        c.maint_inner(Maint::Inval, 2 * 256, &mut fx);
        c.access(Access::Read, 5 * 256, &mut fx);
        c.access(Access::Read, 6 * 256, &mut fx);
        assert_eq!(c.state(0, 256), LineState::Absent);
        for k in [3, 4, 5, 6] {
            assert_eq!(c.state(0, k * 256), LineState::Clean, "{k}");
        }
    }
}
