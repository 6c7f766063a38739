//! A Zynq-7000 memory benchmark away from the seeds: glibc memcpy between two large buffers.
//!
//! Runs the built-in scenario (scenarios/zynq-memcpy.toml: the `zynq7000` profile, a program's
//! memcpy from one 8 MiB malloc'ed buffer into another) and compares its steady-state rate with
//! the published Linux baseline of Genode's memcpy test on a Zynq-7000. No profile parameter is
//! fitted on it: the row checks the line fill, linefill-buffer and eviction-buffer costs that
//! seed 002's rows do not exercise.
//!
//! The steady state is the run of several passes less the run of one, over the passes between:
//! the model is deterministic, so the difference is exactly what the later passes cost, with
//! the caches full of the previous pass's lines as the benchmark's 1024 passes leave them.

use super::{Report, RowBuilder};
use crate::hw::Counter;
use crate::input::InputError;
use crate::scenario::{Outcome, Scenario, execute};

pub const SCENARIO: &str = include_str!("../../scenarios/zynq-memcpy.toml");
const FILE: &str = "scenarios/zynq-memcpy.toml";

/// Picoseconds of `passes` passes, and the loads and stores and the line fills of all of them.
fn passes(base: &Scenario, passes: u32) -> Result<(u64, u64, u64), InputError> {
    let mut s = base.clone();
    match &mut s.workload {
        crate::scenario::Workload::UserAccess(w) => w.iterations = passes,
        _ => return Err(InputError::new(FILE, "not a user_access scenario")),
    }
    match execute(&s).map_err(|e| InputError::new(FILE, e.to_string()))? {
        Outcome::UserAccess(r) => Ok((
            r.total_ps,
            r.count(Counter::CpuAccess),
            r.count(Counter::LineFill),
        )),
        _ => Err(InputError::new(FILE, "not a user_access scenario")),
    }
}

pub fn run() -> Result<Report, InputError> {
    let published = crate::published::get("zynq-memcpy")
        .ok_or_else(|| InputError::new("zynq-memcpy", "no published data"))?;
    let mut base = Scenario::parse(FILE, SCENARIO, std::path::Path::new("."))?;
    if let Some(c) = published.condition("buffer_bytes")
        && let crate::scenario::Workload::UserAccess(w) = &mut base.workload
    {
        w.buffer_bytes = c.value as u64;
    }
    let bytes = match &base.workload {
        crate::scenario::Workload::UserAccess(w) => w.buffer_bytes,
        _ => return Err(InputError::new(FILE, "not a user_access scenario")),
    };
    let (one, _, _) = passes(&base, 1)?;
    let (five, accesses, fills) = passes(&base, 5)?;
    let per_pass_ps = five.saturating_sub(one) as f64 / 4.0;
    let mib_s = bytes as f64 / (1u64 << 20) as f64 / (per_pass_ps / 1e12);
    let b = RowBuilder {
        published: &published,
        profile: &base.profile,
    };
    let mut row = b.row(
        "libc_memcpy",
        "MiB/s",
        "glibc memcpy of a large buffer",
        mib_s,
    );
    row.detail
        .insert("cpu_access_per_pass".into(), (accesses / 5).into());
    row.detail
        .insert("line_fill_per_pass".into(), (fills / 5).into());
    Ok(Report::of(
        &published,
        base.profile.name(),
        vec![
            format!("{bytes}-byte buffers, the source's and the destination's lines 32-byte aligned, both cacheable (malloc)"),
            "glibc's ARMv7 memcpy: 64-bit loads and stores (ldrd/strd or vldr/vstr), the line's eight per 64 bytes interleaved with its stores (sysdeps/arm/armv7/multiarch/memcpy_impl.S)".into(),
            "the PL310 prefetch offset at 0, as Zynq's Linux leaves it and as the benchmark ran: each stream's next line is asked for once the CPU reaches the line before it (the profile's l1_prefetch)".into(),
            "steady state: five passes less one, over four".into(),
        ],
        vec![row],
    ))
}
