use super::*;
use crate::MS;

fn spec(text: &str) -> Result<IotuneSpec, FieldError> {
    let raw: BTreeMap<String, toml::Value> = toml::from_str(text).unwrap();
    IotuneSpec::from_raw(&raw, "vm[0].disk[1].iotune", ())
}

/// Admission times of `n` back-to-back requests of `op`/`len` from one saturating
/// submitter (each tries again at the time it was told).
fn saturate(t: &mut Throttle, op: Op, len: u64, until: Ns) -> Vec<Ns> {
    let mut now = 0;
    let mut times = Vec::new();
    while now <= until {
        match t.admit(now, op, len) {
            Ok(()) => times.push(now),
            Err(at) => {
                assert!(at > now, "a retry time lies ahead");
                now = at;
            }
        }
    }
    times
}

fn rate_between(times: &[Ns], from: Ns, to: Ns) -> f64 {
    let n = times.iter().filter(|&&t| t >= from && t < to).count();
    n as f64 * SEC as f64 / (to - from) as f64
}

#[test]
fn a_saturated_bucket_passes_avg_operations_per_second_in_the_long_run() {
    let mut t = Throttle::new(&spec("total_iops_sec = 100").unwrap());
    let times = saturate(&mut t, Op::Read, 4096, 10 * SEC);
    // Closed form: max = avg / 10 = 10 of slack at once (levels 0..=10 pass), then one
    // every 1/avg: 11 + 100 x 10 s.
    let n = times.len() as i64;
    assert!((n - 1011).abs() <= 1, "{n}");
    let r = rate_between(&times, 2 * SEC, 10 * SEC);
    assert!((r - 100.0).abs() < 0.5, "{r}");
}

#[test]
fn a_bytes_limit_passes_avg_bytes_per_second_in_the_long_run() {
    let mut t = Throttle::new(&spec("write_bytes_sec = 10485760").unwrap());
    let times = saturate(&mut t, Op::Write, 65536, 10 * SEC);
    let bytes = rate_between(&times, 2 * SEC, 10 * SEC) * 65536.0;
    assert!((bytes / 10485760.0 - 1.0).abs() < 0.01, "{bytes}");
}

#[test]
fn a_burst_from_an_idle_bucket_runs_at_max_until_the_bucket_holds_max_times_length() {
    // avg A = 100, max M = 1000, max_length L = 3: the level rises at M - A from M / 10 of
    // burst slack; full (M x L) at T = (M L - M / 10) / (M - A) = 2900 / 900 s.
    let (a, m, l) = (100.0, 1000.0, 3.0);
    let mut t = Throttle::new(
        &spec("total_iops_sec = 100\ntotal_iops_sec_max = 1000\ntotal_iops_sec_max_length = 3")
            .unwrap(),
    );
    let times = saturate(&mut t, Op::Read, 4096, 8 * SEC);
    let burst_end = (m * l - m / 10.0) / (m - a);
    // The burst ends where the gap between admissions first exceeds 1.5 / M.
    let end = times
        .windows(2)
        .find(|w| (w[1] - w[0]) as f64 > 1.5 * SEC as f64 / m)
        .map(|w| w[0] as f64 / SEC as f64)
        .unwrap();
    assert!((end / burst_end - 1.0).abs() < 0.01, "{end} vs {burst_end}");
    let in_burst = rate_between(&times, 100 * MS, 3 * SEC);
    assert!((in_burst / m - 1.0).abs() < 0.01, "{in_burst}");
    let after = rate_between(&times, 4 * SEC, 8 * SEC);
    assert!((after / a - 1.0).abs() < 0.01, "{after}");
    // Operations in the burst: the bucket's size plus what leaked meanwhile.
    let n = times
        .iter()
        .filter(|&&x| (x as f64) <= end * SEC as f64)
        .count() as f64;
    assert!((n / (m * l + a * burst_end) - 1.0).abs() < 0.01, "{n}");
}

#[test]
fn iops_size_counts_a_larger_request_as_len_over_iops_size_operations() {
    for (len, units) in [(2048u64, 1.0), (4096, 1.0), (6144, 1.5), (8192, 2.0)] {
        let mut t = Throttle::new(&spec("total_iops_sec = 100\nsize_iops_sec = 4096").unwrap());
        let times = saturate(&mut t, Op::Read, len, 10 * SEC);
        let r = rate_between(&times, 2 * SEC, 10 * SEC);
        assert!((r * units / 100.0 - 1.0).abs() < 0.01, "{len}: {r}");
    }
}

#[test]
fn read_and_write_limits_are_separate_and_total_limits_both() {
    let mut t = Throttle::new(&spec("read_iops_sec = 100\nwrite_iops_sec = 50").unwrap());
    let r = saturate(&mut t.clone(), Op::Read, 4096, 5 * SEC);
    let w = saturate(&mut t, Op::Write, 4096, 5 * SEC);
    assert!((rate_between(&r, SEC, 5 * SEC) - 100.0).abs() < 1.0);
    assert!((rate_between(&w, SEC, 5 * SEC) - 50.0).abs() < 1.0);
    // A total limit: reads and writes alternating share it.
    let mut t = Throttle::new(&spec("total_iops_sec = 100").unwrap());
    let (mut now, mut n, mut k) = (0, [0u32; 2], 0);
    while now < 10 * SEC {
        let op = [Op::Read, Op::Write][k % 2];
        match t.admit(now, op, 4096) {
            Ok(()) => {
                if now >= 2 * SEC {
                    n[k % 2] += 1;
                }
                k += 1;
            }
            Err(at) => now = at,
        }
    }
    assert!((n[0] + n[1]) as i32 - 800 <= 1, "{n:?}");
    assert!(n[0].abs_diff(n[1]) <= 1, "{n:?}");
    // The tighter of bps and iops wins: 100 iops of 64 KiB against 1 MiB/s = 16 per second.
    let mut t = Throttle::new(&spec("total_iops_sec = 100\ntotal_bytes_sec = 1048576").unwrap());
    let x = saturate(&mut t, Op::Write, 65536, 10 * SEC);
    assert!((rate_between(&x, 2 * SEC, 10 * SEC) - 16.0).abs() < 0.3);
}

#[test]
fn discards_and_flushes_are_not_throttled() {
    let mut t = Throttle::new(&spec("total_iops_sec = 1").unwrap());
    for _ in 0..100 {
        assert_eq!(t.admit(0, Op::Trim, 1 << 20), Ok(()));
        assert_eq!(t.admit(0, Op::Flush, 0), Ok(()));
    }
}

/// Two members of a group, each submitting again as soon as a request is admitted: the
/// members in admission order until `until`, and their figures.
fn group_run(text: &str, until: Ns) -> (Vec<usize>, [ThrottleStats; 2]) {
    let mut g: ThrottleGroup<u32> = ThrottleGroup::new(&spec(text).unwrap(), 2);
    let mut order = Vec::new();
    let mut timers: Vec<Ns> = Vec::new();
    // Member m submits at `now` until one of its requests waits (it keeps `depth` in flight
    // and a request admitted is done at once).
    let feed = |g: &mut ThrottleGroup<u32>,
                m: usize,
                now: Ns,
                order: &mut Vec<usize>,
                timers: &mut Vec<Ns>| loop {
        match g.submit(now, m, Op::Read, 4096, 0) {
            Submit::Now(_) => order.push(m),
            Submit::Queued(at) => {
                timers.extend(at);
                break;
            }
        }
    };
    for m in [0, 1] {
        feed(&mut g, m, 0, &mut order, &mut timers);
    }
    let mut out = Vec::new();
    while let Some(i) = timers
        .iter()
        .enumerate()
        .min_by_key(|(_, t)| **t)
        .map(|(i, _)| i)
    {
        let now = timers.swap_remove(i);
        if now > until {
            break;
        }
        for at in g.wake(now, &mut out).into_iter().flatten() {
            timers.push(at);
        }
        for (m, _) in std::mem::take(&mut out) {
            order.push(m);
            feed(&mut g, m, now, &mut order, &mut timers);
        }
    }
    (order, [g.stats(0), g.stats(1)])
}

#[test]
fn a_group_shares_one_budget_between_two_disks_round_robin() {
    let (order, stats) = group_run("total_iops_sec = 100\ngroup_name = \"g\"", 10 * SEC);
    // The group passes 100 per second in all (11 at once, then one every 10 ms).
    assert!((order.len() as i64 - 1011).abs() <= 2, "{}", order.len());
    // Once both queue, they alternate.
    let tail = &order[40..];
    assert!(tail.windows(2).all(|w| w[0] != w[1]), "{order:?}");
    let a = order.iter().filter(|&&m| m == 0).count() as i64;
    // The first member takes the bucket's slack (11 at once), then they share evenly.
    assert!(
        (a - (order.len() as i64 - a) - 11).abs() <= 2,
        "{a} of {}",
        order.len()
    );
    assert!(
        stats[0].delayed > 400 && stats[1].delayed > 400,
        "{stats:?}"
    );
    // Each member has one request waiting at a time, admitted every other 10 ms slot.
    let mean = stats[1].throttled_ns as f64 / stats[1].delayed as f64;
    assert!((mean / (20.0 * MS as f64) - 1.0).abs() < 0.05, "{mean}");
}

#[test]
fn the_table_reads_libvirts_names_and_shows_only_what_is_set() {
    let s = spec(
        "total_bytes_sec = 1000000\nread_iops_sec = 200\nread_iops_sec_max = 400\n\
         read_iops_sec_max_length = 5\nsize_iops_sec = 4096\ngroup_name = \"db\"",
    )
    .unwrap();
    assert_eq!(s.buckets[BPS_TOTAL].avg, 1_000_000);
    assert_eq!(
        s.buckets[OPS_READ],
        Limit {
            avg: 200,
            max: 400,
            max_length: 5
        }
    );
    assert_eq!(s.buckets[OPS_WRITE], Limit::default());
    assert_eq!(s.group_name.as_deref(), Some("db"));
    let shown = toml::to_string(&s).unwrap();
    assert!(shown.contains("read_iops_sec_max_length = 5"), "{shown}");
    assert!(!shown.contains("write"), "{shown}");
}

#[test]
fn the_table_refuses_what_qemu_and_libvirt_refuse_naming_the_key() {
    for (text, key, says) in [
        ("total_iops_sec = 10\nread_iops_sec = 5", "read_iops_sec", "cannot be set with total_iops_sec"),
        ("total_bytes_sec = 10\ntotal_bytes_sec_max = 20\nwrite_bytes_sec = 0\nwrite_bytes_sec_max = 30", "write_bytes_sec_max", "a burst needs an average"),
        ("total_iops_sec = 10\ntotal_iops_sec_max = 5", "total_iops_sec_max", "5 is below total_iops_sec (10)"),
        ("total_iops_sec = 10\ntotal_iops_sec_max_length = 3", "total_iops_sec_max_length", "needs a burst rate"),
        ("total_iops_sec = 10\ntotal_iops_sec_max = 20\ntotal_iops_sec_max_length = 0", "total_iops_sec_max_length", "cannot be 0"),
        ("total_bytes_sec = 10\nsize_iops_sec = 4096", "size_iops_sec", "needs an iops limit"),
        ("total_iops_sec = 1000000000000001", "total_iops_sec", "from 0 to 1000000000000000"),
        ("total_iops_sec = -1", "total_iops_sec", "from 0 to"),
        ("total_iops_sec = \"fast\"", "total_iops_sec", "must be an integer"),
        ("iops = 10", "iops", "unknown key; accepted: total_bytes_sec, total_bytes_sec_max"),
        ("total_iops_sec = 10\ntotal_iops_sec_max = 1000000000000\ntotal_iops_sec_max_length = 2000", "total_iops_sec_max_length", "burst too long"),
    ] {
        let e = spec(text).unwrap_err();
        assert_eq!(e.field, format!("vm[0].disk[1].iotune.{key}"), "{text}: {e}");
        assert!(e.message.contains(says), "{text}: {e}");
        assert!(!e.to_string().contains('\n'));
    }
    // Read and write limits of one kind together, and total of another kind, are fine.
    assert!(spec("read_iops_sec = 10\nwrite_iops_sec = 5\ntotal_bytes_sec = 100").is_ok());
}

#[test]
fn disks_of_one_group_share_it_and_must_give_the_same_limits() {
    let a = spec("total_iops_sec = 100\ngroup_name = \"g\"").unwrap();
    let b = spec("total_iops_sec = 200\ngroup_name = \"g\"").unwrap();
    let own = spec("total_iops_sec = 100").unwrap();
    fn d<'a>(
        f: &str,
        vm: &'static str,
        n: &'static str,
        s: Option<&'a IotuneSpec>,
    ) -> (String, &'static str, &'static str, Option<&'a IotuneSpec>) {
        (f.to_string(), vm, n, s)
    }
    let p = plan_groups(&[
        d("vm[0].disk[0]", "v", "x", Some(&a)),
        d("vm[0].disk[1]", "v", "y", None),
        d("vm[0].disk[2]", "v", "z", Some(&a)),
        d("vm[0].disk[3]", "v", "w", Some(&own)),
        d("vm[1].disk[0]", "u", "x", Some(&a)),
    ])
    .unwrap();
    assert_eq!(p.groups.len(), 3);
    assert_eq!(
        p.of_disk,
        vec![Some((0, 0)), None, Some((0, 1)), Some((1, 0)), Some((2, 0))]
    );
    let e = plan_groups(&[
        d("vm[0].disk[0]", "v", "x", Some(&a)),
        d("vm[0].disk[1]", "v", "y", Some(&b)),
    ])
    .unwrap_err();
    assert_eq!(e.field, "vm[0].disk[1].iotune");
    assert!(
        e.message.contains("other limits in vm[0].disk[0].iotune"),
        "{e}"
    );
}
