//! The trace's own clock in a replay: between two calls the modelled CPU idles until the next
//! call's timestamp, so what the machine does by time (the flush queue's timer) happens as it
//! did on the board, and a call the model makes slower than the trace's gap delays the next.
//!
//! Kernel counterpart: none — the board's time between a driver's calls, and the timer
//! softirq that runs an expired timer on an otherwise idle CPU.
//!
//! What it models: the first timestamped call fixes the origin (the model's clock then, the
//! trace's timestamp); a later call is due that many picoseconds on. Before a call every timer
//! that expires by then runs at its expiry ([`Timers`]), its work charged to no call, and the
//! CPU idles ([`crate::hw::Hw::idle_until`]) until the call is due. A call whose CPU is still
//! busy when it is due (an earlier call, or a timer, ran past its timestamp) starts late, and
//! [`Late`] says how often and behind what. After the trace's last call the pending timers run
//! at their expiry, as they would on the board after the capture stopped. A call without a
//! timestamp (a raw line that printed none) is made at once.
//!
//! Invariants: the model's clock never goes back; no call starts before it is due; every timer
//! that expires before a call is run before it, so no call is charged a timer's work; the
//! timers of a replay end with none pending.

use crate::hw::Hw;
use crate::hw::model::Model;

/// Whoever owns timers in a replay (each device's DMA ops): the earliest pending, and a way
/// to run what expired.
pub trait Timers {
    /// The earliest pending timer's expiry (ps on the model's clock) and its owner's number.
    fn next(&self) -> Option<(u64, usize)>;
    /// Run owner `i`'s expired timers now; how many ran.
    fn run(&mut self, hw: &mut Model, i: usize) -> u64;
}

/// Calls that started after their timestamp, the CPU still busy when they were due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Late {
    pub calls: u64,
    /// Of those, behind a call the trace shows on another CPU: on one modelled CPU, any such
    /// call (on the board the two ran side by side); on the trace's CPUs, the other CPU's
    /// earlier call on the same mapping, which it waited for.
    pub behind_other_cpu: u64,
    /// Of those, behind a timer that ran just before they were due.
    pub behind_timer: u64,
    /// How late they started, in all (ps).
    pub ps: u64,
}

impl Late {
    /// Add another CPU's.
    pub fn absorb(&mut self, o: &Late) {
        self.calls += o.calls;
        self.behind_other_cpu += o.behind_other_cpu;
        self.behind_timer += o.behind_timer;
        self.ps = self.ps.saturating_add(o.ps);
    }
}

/// What kept the CPU busy last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Busy {
    Nothing,
    Call(Option<u32>),
    Timer,
}

/// The trace's clock over a replay.
#[derive(Debug)]
pub struct TraceClock {
    /// The model's clock at the first timestamped call, and that call's timestamp (ns).
    origin: Option<(u64, u64)>,
    busy: Busy,
    pub late: Late,
    /// Timers run after the trace's last call.
    pub after_end: u64,
}

impl Default for TraceClock {
    fn default() -> TraceClock {
        TraceClock {
            origin: None,
            busy: Busy::Nothing,
            late: Late::default(),
            after_end: 0,
        }
    }
}

impl TraceClock {
    /// A clock whose origin is given (the model's clock `at` is the trace's `t0_ns`), as
    /// every CPU of a many-CPU replay shares it.
    pub fn starting_at(at: u64, t0_ns: u64) -> TraceClock {
        TraceClock {
            origin: Some((at, t0_ns)),
            ..TraceClock::default()
        }
    }

    /// When a call traced at `time_ns` is due on the model's clock (now, for the first one, or
    /// one without a timestamp).
    fn due(&mut self, now: u64, time_ns: Option<u64>) -> u64 {
        let Some(t) = time_ns else {
            return now;
        };
        let (at, t0) = *self.origin.get_or_insert((now, t));
        // A timestamp before the first (a merged capture out of order) is due at once.
        at.saturating_add(t.saturating_sub(t0).saturating_mul(1000))
    }

    /// Bring the model's clock to the call traced at `time_ns` on trace CPU `cpu`: run the
    /// timers that expire first, idle until it is due, and note if it starts late.
    pub fn before_call(
        &mut self,
        hw: &mut Model,
        time_ns: Option<u64>,
        cpu: Option<u32>,
        timers: &mut impl Timers,
    ) {
        self.before_call_after(hw, time_ns, cpu, timers, |_| false);
    }

    /// [`TraceClock::before_call`], the call made only once `ready` returns: on many CPUs it
    /// waits, at the call's due time, for another CPU's earlier call on the same mapping, and
    /// says whether it waited. A call it kept past its timestamp is late behind another CPU.
    pub fn before_call_after(
        &mut self,
        hw: &mut Model,
        time_ns: Option<u64>,
        cpu: Option<u32>,
        timers: &mut impl Timers,
        ready: impl FnOnce(&mut Model) -> bool,
    ) {
        let due = self.due(hw.now_ps(), time_ns);
        // A timer that expired while the CPU was busy runs at its first idle moment too.
        self.run_timers(hw, due.max(hw.now_ps()), timers);
        let busy_until = hw.now_ps();
        hw.idle_until(due);
        let waited = ready(hw);
        let now = hw.now_ps();
        if now > due {
            self.late.calls += 1;
            self.late.ps = self.late.ps.saturating_add(now - due);
            match self.busy {
                _ if waited && now > busy_until => self.late.behind_other_cpu += 1,
                Busy::Call(c) if c != cpu => self.late.behind_other_cpu += 1,
                Busy::Timer => self.late.behind_timer += 1,
                _ => {}
            }
        }
        self.busy = Busy::Call(cpu);
    }

    /// The trace has ended: every pending timer runs when it expires.
    pub fn finish(&mut self, hw: &mut Model, timers: &mut impl Timers) {
        self.after_end += self.run_timers(hw, u64::MAX, timers);
    }

    /// Run, each at its expiry, the timers that expire by `until`; how many ran.
    fn run_timers(&mut self, hw: &mut Model, until: u64, timers: &mut impl Timers) -> u64 {
        let mut ran = 0;
        while let Some((expires, i)) = timers.next().filter(|&(t, _)| t <= until) {
            hw.idle_until(expires);
            let n = timers.run(hw, i);
            if n == 0 {
                // An owner that runs nothing at its own expiry would be asked again forever.
                break;
            }
            ran += n;
            self.busy = Busy::Timer;
        }
        ran
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::SwCost;
    use crate::hw::model::ModelParams;

    /// One timer that re-arms itself `period` ps after each run, `left` more times, each run
    /// `work` ps of CPU time.
    struct Periodic {
        expires: Option<u64>,
        period: u64,
        left: u64,
        work: u64,
        ran_at: Vec<u64>,
    }

    impl Timers for Periodic {
        fn next(&self) -> Option<(u64, usize)> {
            self.expires.map(|t| (t, 0))
        }
        fn run(&mut self, hw: &mut Model, _: usize) -> u64 {
            let Some(t) = self.expires.filter(|&t| t <= hw.now_ps()) else {
                return 0;
            };
            self.ran_at.push(hw.now_ps());
            hw.sw(SwCost(self.work));
            self.left = self.left.saturating_sub(1);
            self.expires = (self.left > 0).then(|| t + self.period);
            1
        }
    }

    fn periodic(first: u64, period: u64, runs: u64, work: u64) -> Periodic {
        Periodic {
            expires: Some(first),
            period,
            left: runs,
            work,
            ran_at: Vec::new(),
        }
    }

    #[test]
    fn calls_are_due_at_their_timestamps_from_the_first() {
        let mut hw = Model::new(ModelParams::default());
        hw.idle_until(7_000);
        let mut c = TraceClock::default();
        let mut none = periodic(0, 1, 0, 0);
        none.expires = None;
        c.before_call(&mut hw, Some(1_000), Some(0), &mut none);
        assert_eq!(hw.now_ps(), 7_000, "the first call is the origin");
        c.before_call(&mut hw, Some(1_050), Some(0), &mut none);
        assert_eq!(hw.now_ps(), 57_000);
        c.before_call(&mut hw, None, Some(0), &mut none);
        assert_eq!(hw.now_ps(), 57_000, "no timestamp: at once");
        assert_eq!(c.late, Late::default());
    }

    #[test]
    fn a_timer_runs_at_its_expiry_between_calls_and_charges_no_call() {
        let mut hw = Model::new(ModelParams::default());
        let mut c = TraceClock::default();
        let mut t = periodic(10_000, 1_000_000, 1, 500);
        c.before_call(&mut hw, Some(0), Some(0), &mut t);
        c.before_call(&mut hw, Some(50), Some(0), &mut t);
        assert_eq!(t.ran_at, [10_000]);
        assert_eq!(hw.now_ps(), 50_000);
        assert_eq!(c.late, Late::default());
        assert_eq!(c.after_end, 0);
    }

    #[test]
    fn a_busy_cpu_starts_the_next_call_late_and_says_behind_what() {
        let mut hw = Model::new(ModelParams::default());
        let mut c = TraceClock::default();
        let mut t = periodic(0, 1, 0, 0);
        t.expires = None;
        c.before_call(&mut hw, Some(0), Some(0), &mut t);
        hw.sw(SwCost(3_000)); // the call takes 3 ns
        c.before_call(&mut hw, Some(1), Some(1), &mut t); // due at 1 ns, on another CPU
        hw.sw(SwCost(3_000));
        c.before_call(&mut hw, Some(2), Some(1), &mut t); // due at 2 ns, its own CPU
        assert_eq!(
            c.late,
            Late {
                calls: 2,
                behind_other_cpu: 1,
                behind_timer: 0,
                ps: 2_000 + 4_000,
            }
        );
        // A timer whose run ends after the next call was due.
        let mut t = periodic(hw.now_ps() + 1_000, 1, 1, 5_000);
        c.before_call(&mut hw, Some(9), Some(1), &mut t);
        assert_eq!(c.late.calls, 3);
        assert_eq!(c.late.behind_timer, 1);
    }

    #[test]
    fn pending_timers_run_after_the_trace_ends_and_none_is_left() {
        let mut hw = Model::new(ModelParams::default());
        let mut c = TraceClock::default();
        let mut t = periodic(5_000, 10_000, 3, 100);
        c.before_call(&mut hw, Some(0), Some(0), &mut t);
        c.finish(&mut hw, &mut t);
        assert_eq!(t.ran_at, [5_000, 15_000, 25_000]);
        assert_eq!(c.after_end, 3);
        assert_eq!(t.next(), None);
    }
}
