//! QEMU's I/O throttling in the simulator: the BlockBackend's throttle groups
//! ([`vmio_core::throttle`], `[vm.disk.iotune]`) between the VMM taking a request and the
//! layers below it (QEMU throttles in `blk_co_do_preadv_part`/`pwritev_part`, before the
//! format driver and the host file).
//!
//! ```text
//! SubmitDone(r) → block_start → throttle_or_start: r's disk unthrottled → block_resume (one None check)
//!                 else group.submit: now → block_resume; queued → ThrottleWake(group) at the
//!                 timer it armed, if any
//! ThrottleWake(g) → group.wake(now): each admitted request → block_resume, in order; the
//!                 timers armed again → ThrottleWake(g) at each (a wake with no timer due
//!                 does nothing)
//! ```
//!
//! The report gets, per throttled disk, its requests, those delayed and the time they spent
//! throttled.

use super::event::Event;
use super::{Sim, SimError};
use vmio_core::stack::Stack;
use vmio_core::throttle::{plan_groups, Submit, ThrottleGroup, ThrottleStats};
use vmio_core::Ns;

/// The throttle groups of the stack's disks.
pub(super) struct SimThrottle {
    /// Per VM disk (stack order): its group and member; empty when no disk is throttled.
    of_disk: Vec<Option<(usize, usize)>>,
    groups: Vec<ThrottleGroup<usize>>,
    /// (member, request) admitted by a wake, reused.
    admitted: Vec<(usize, usize)>,
}

impl SimThrottle {
    pub(super) fn new(stack: &Stack) -> Result<Self, SimError> {
        let plan = plan_groups(&stack.disk_iotunes())
            .map_err(|e| SimError::Job(format!("{}: {e}", stack.file)))?;
        let throttled = plan.of_disk.iter().any(Option::is_some);
        Ok(SimThrottle {
            groups: plan
                .groups
                .iter()
                .map(|(spec, n)| ThrottleGroup::new(spec, *n))
                .collect(),
            of_disk: if throttled { plan.of_disk } else { Vec::new() },
            admitted: Vec::new(),
        })
    }

    /// A throttled disk's figures (stack order); None for an unthrottled one.
    pub(super) fn stats(&self, disk: usize) -> Option<ThrottleStats> {
        let (g, m) = self.of_disk.get(disk).copied().flatten()?;
        Some(self.groups[g].stats(m))
    }
}

impl Sim {
    /// The VMM took request `r`: through its disk's throttle group, if it has one.
    pub(super) fn throttle_or_start(&mut self, now: Ns, r: usize) {
        if self.throttle.of_disk.is_empty() {
            return self.block_resume(now, r);
        }
        let v = self.guest.vreqs.get_ref(r);
        let Some((g, m)) = self.throttle.of_disk.get(v.disk).copied().flatten() else {
            return self.block_resume(now, r);
        };
        match self.throttle.groups[g].submit(now, m, v.op, v.len, r) {
            Submit::Now(r) => self.block_resume(now, r),
            Submit::Queued(Some(at)) => self.q.push(at, Event::ThrottleWake(g).pack()),
            Submit::Queued(None) => {}
        }
    }

    /// A throttle group's timer is due: start what it admits, in order.
    pub(super) fn throttle_wake(&mut self, now: Ns, g: usize) {
        let mut admitted = std::mem::take(&mut self.throttle.admitted);
        let armed = self.throttle.groups[g].wake(now, &mut admitted);
        for at in armed.into_iter().flatten() {
            self.q.push(at, Event::ThrottleWake(g).pack());
        }
        for &(_, r) in &admitted {
            self.block_resume(now, r);
        }
        admitted.clear();
        self.throttle.admitted = admitted;
    }
}

#[cfg(test)]
mod tests {
    use crate::bench::two_hdd_stack;
    use crate::run::{run, run_json, RunInput};

    const RANDREAD: &str = "[j]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=8\nsize=2g\nruntime=4\ntime_based\n";

    fn iotune(lines: &str) -> String {
        format!(
            "{}[vm.disk.iotune]\n{lines}\n",
            two_hdd_stack("raid0", "none")
        )
    }

    #[test]
    fn a_throttled_disk_runs_at_its_iops_limit_and_reports_its_time_throttled() {
        // Unthrottled, the two disks do well above 50 random reads per second at depth 8.
        let free = run(&RunInput::texts(
            &two_hdd_stack("raid0", "none"),
            RANDREAD,
            1,
        ))
        .unwrap();
        let j = &free.report.jobs[0];
        let free_iops = j.stats[0].total_ios as f64 * 1e9 / j.runtime_ns as f64;
        assert!(free_iops > 120.0, "{free_iops}");
        assert!(free.report.throttle.is_empty());
        let o = run(&RunInput::texts(
            &iotune("total_iops_sec = 50"),
            RANDREAD,
            1,
        ))
        .unwrap();
        let j = &o.report.jobs[0];
        // 50 per second, plus the bucket's slack (avg / 10 + 1) at the start.
        let iops = j.stats[0].total_ios as f64 * 1e9 / j.runtime_ns as f64;
        assert!((iops / (50.0 + 6.0 / 4.0) - 1.0).abs() < 0.03, "{iops}");
        let t = &o.report.throttle[0];
        assert_eq!(t.disk, "sdb");
        assert!(
            t.stats.delayed > 150 && t.stats.throttled_ns > 0,
            "{:?}",
            t.stats
        );
        // Depth 8 waiting at 50 per second: about 8 / 50 s each.
        let mean = t.stats.throttled_ns as f64 / t.stats.delayed as f64 / 1e9;
        assert!((mean / 0.16 - 1.0).abs() < 0.15, "{mean}");
    }

    #[test]
    fn a_burst_runs_at_max_for_its_closed_form_length_then_at_avg() {
        // avg 50, max 100, max_length 2: full after (100 x 2 - 10) / (100 - 50) = 3.8 s, so
        // about 100 x 2 + 50 x 3.8 + 1 operations by then and 50 per second after.
        let job = RANDREAD.replace("runtime=4", "runtime=8");
        let stack =
            iotune("total_iops_sec = 50\ntotal_iops_sec_max = 100\ntotal_iops_sec_max_length = 2");
        let o = run(&RunInput::texts(&stack, &job, 1)).unwrap();
        let ios = o.report.jobs[0].stats[0].total_ios as f64;
        let expected = 200.0 + 50.0 * 3.8 + 1.0 + 50.0 * (8.0 - 3.8);
        assert!((ios / expected - 1.0).abs() < 0.03, "{ios} vs {expected}");
    }

    #[test]
    fn two_disks_of_one_group_share_its_budget_evenly() {
        let group = "[vm.disk.iotune]\ntotal_iops_sec = 60\ngroup_name = \"g\"\n";
        let stack = format!(
            "{}{group}[[vm.disk]]\nname = \"sdc\"\nvolume = \"vol\"\noffset = \"100g\"\n\
             size = \"100g\"\ninterface = \"virtio-scsi\"\ncache = \"none\"\n{group}",
            two_hdd_stack("raid0", "none")
        );
        let jobs = format!(
            "{}filename=sdb\n{}filename=sdc\n",
            RANDREAD,
            RANDREAD.replace("[j]", "[k]")
        );
        let o = run(&RunInput::texts(&stack, &jobs, 1)).unwrap();
        let iops: Vec<f64> = o
            .report
            .jobs
            .iter()
            .map(|j| j.stats[0].total_ios as f64 * 1e9 / j.runtime_ns as f64)
            .collect();
        // 60 per second for the two together (plus the slack of 7 at the start).
        let total = iops[0] + iops[1];
        assert!((total / (60.0 + 7.0 / 4.0) - 1.0).abs() < 0.03, "{iops:?}");
        assert!((iops[0] / iops[1] - 1.0).abs() < 0.05, "{iops:?}");
        assert_eq!(o.report.throttle.len(), 2);
    }

    #[test]
    fn only_a_throttled_run_gains_the_throttle_figures_in_its_json() {
        let plain = run_json(&RunInput::texts(
            &two_hdd_stack("raid0", "none"),
            RANDREAD,
            1,
        ))
        .unwrap();
        // Keys, not words: the breakdown names its throttling layer vm.disk.iotune.
        assert!(!plain.contains("\"throttle\"") && !plain.contains("\"iotune\""));
        let j = run_json(&RunInput::texts(&iotune("read_iops_sec = 50"), RANDREAD, 1)).unwrap();
        assert!(
            j.contains("\"throttled_ns\"") && j.contains("\"read_iops_sec\": 50"),
            "{j}"
        );
    }
}
