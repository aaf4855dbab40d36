"""`vmio calibrate TARGET`: a battery of fio runs on a file or a block device of
this machine, fitted to the simulator's `flash` device model
(crates/vmio-sim/src/device/flash.rs), written as a runnable native stack (`stack.toml`),
the raw measurements (`measurements.json`) and the fit's account (`fit.txt`: every point
measured, the model's closed form, and `vmio sim` of the same job on stack.toml).

Sources. fio 3.33 (fio/HOWTO.rst): `filename`, `size`, `rw` (read, write, randread,
randwrite, randrw), `bs`, `iodepth`, `ioengine=libaio` (the queue depth is real) and `psync`,
`direct`, `rwmixread`, `fdatasync=1` (an fdatasync after every write), `time_based` with
`runtime` (in ms), the command-line `--readonly` (fio refuses any job that writes) and
`--output-format=json`; the JSON job's `read`/`write` objects (`iops`, `bw_bytes`,
`lat_ns.mean` = submission + completion, `clat_ns.percentile["50.000000"|"99.000000"]`) and
`sync.lat_ns.mean` (the fdatasync calls alone: fio's io_u of DDIR_DATASYNC is timed on its
own, the write before it already completed). Linux: /proc/mounts; /sys/dev/block/<maj:min>
(a file's st_dev, a device node's st_rdev) and its disk's queue/{scheduler, nr_requests,
max_sectors_kb, write_cache, fua} (block/blk-sysfs.c: `queue_wc_show` "write back" or "write
through", `queue_fua_show` 0 or 1), `size` in 512-byte sectors (block/genhd.c), `holders/`
(block/holder.c: device-mapper, md); fs/open.c `do_dentry_open` refuses O_DIRECT (EINVAL) on a
file whose filesystem does not set FMODE_CAN_ODIRECT (tmpfs before Linux 6.6, mm/shmem.c
`shmem_file_open`): the target is probed with an O_DIRECT open and measured with direct=0
when refused. util-linux `blkid -p` (low-level probing of superblocks and partition tables;
exit status 2 when it finds none). The fit's parameters and closed forms are the `flash` model's
keys and rules (crates/vmio-sim/src/device/flash.rs's module doc; docs/validation.md).

Target and safety:

```text
a file (default ./vmio-calibrate.tmp): created if missing and removed afterwards (also on
    Ctrl-C); an existing file is overwritten only with --force (and kept afterwards).
    Written through once (1 MiB sequential writes, direct) before the battery, so reads
    hit written blocks and writes overwrite (no unwritten-extent conversion)
a block device (/dev/...): read only (fio --readonly) unless --write; with --write it is
    refused while mounted, held (holders/: dm, md), used as swap, or while `blkid -p` finds a
    filesystem or partition-table signature on it, unless --force
direct=1, or direct=0 when the O_DIRECT open fails with EINVAL (a note says so)
--size (default 1 GiB, 256 MiB on tmpfs; a block device's own size at most): the region
```

Battery (`battery`; fio, one job each, time-based; libaio but the flush point):

```text
read, write        bs 4k 16k 64k 256k 1m  x QD 1 8 32          30 points
randread, randwrite bs 4k  x QD 1 2 4 8 16 32                   12 points (clat p50/p99 kept,
                                                                 p99.9 from 10,000 I/Os)
write              bs 4k 64k  x QD 2 4                            4 points (the write path at
                                                                 small depth: b and k on writes)
randrw rwmixread=70 bs 4k  x QD 1 8                              2 points
rw rwmixread=50    bs 64k 256k  x QD 8                           2 points (duplex)
fdatasync          randwrite 4k 16k 64k 256k QD1 psync fdatasync=1  4 points (sync.lat_ns
                                                                 mean: a FLUSH's cost by size)
fdatasync4-1m      randwrite 1m QD1 psync fdatasync=4              1 point (a FLUSH behind four
                                                                 writes: 4 MiB to drain)
randrw30-1m-qd16   randrw rwmixread=30 bs 1m QD 16                  1 point (reads overtaking
                                                                 writes: read_priority)
--quick: randread/randwrite 4k QD 1 8 32, read/write 1m QD 1 32, randrw QD 8, rw 256k QD 8,
    fdatasync 4k and 64k
reads only (a block device without --write): the read and randread points
budget: default 300 s, --quick 60 s, --budget S: the whole run (write-through, battery and
    the simulations of fit.txt, SIM_RESERVE_S a point). Before each point:
    runtime = (battery deadline - now) / points left - fio's start-up (measured: the mean of
    each finished point's wall time minus its runtime; FIO_STARTUP_S before the first),
    at least MIN_RUNTIME_S
```

The fit (`fit`; per direction d; L bytes a request, q outstanding, X requests per second,
T the mean latency fio's lat_ns gives, c = transfer_overhead, t(L,d) = c + L / min(rate_d,
link_rate), b = batch_overhead and k = command_overhead of the model's command processor).
Every parameter but units, duplex, c, b and k follows from them in closed form; those are
fitted together on the loaded points, once per duplex:

```text
S_d           = the d points with q >= 8 and bs >= 64k (pipe-bound: 1 / X_i = c + L_i / rate_d)
rate_d(c)     = sum_i (L_i / Y_i)^2 / sum_i L_i (Y_i - c) / Y_i^2   over S_d, Y_i = 1 / X_i
                (least relative squares of that line for the given c; one point of S_d alone
                gives rate_d = L / (Y - c))
link_rate     = max(read_rate, write_rate, total bw_bytes of the mixed points)
intercept_d   = argmin sum_i ((h + I + L_i / rate_d - T_i) / T_i)^2 over the QD1 d points
              = sum_i (T_i - L_i / rate_d) / T_i^2 / sum_i 1 / T_i^2 - h
                h = the host's path (below; 0 when T_i are clat medians, which exclude it)
latency_d = a = intercept_d - c - b - k   (at least MIN_LATENCY_NS = 5 us: a lone command
                passes the processor, b + k, its unit, a, and its pipe, t; the search keeps
                c + b + k <= min_d intercept_d - 5 us, "Bounds" below)
E(N, c, b, k, duplex) = sum (ln X_model - ln X_measured)^2 over every point with q > 1
N, c, b, k    = the least E of the descents (below; a third with a draining processor:
                `batching`), each alternating until a round lowers E by
                less than ROUND_GAIN (ROUNDS at most); in a round, each of c, b, k in turn is
                the least E on a grid of C_GRID steps over [0, the room the others leave)
                refined by golden section (to 0.1 ns) between the best step's neighbours,
                then N = the N in 1..stop_depth of the least E (the smallest of a tie):
                - without a processor (b = k = 0), from c = 0, over c and N only;
                - with one, from the least E of a coarse grid (START_GRID steps of c, b, k;
                  N among powers of two): from zero, the descent stops at the sharp knee
                  of a few units instead of the gradual rise a batching processor gives.
                room = the least of the QD1 intercepts at c = 0 and the random 4k QD1 points'
                clat p50 (every command pays c + b + k: at most what half of them took),
                less 5 us; c <= min(room - b - k,
                the least Y of S_d) (beyond it a rate would be negative); b <= room - c - k;
                k <= room - c - b
write_command_overhead = k_w, a write's own k (flash.rs, "Each direction's command cost":
                Firecracker's block thread serves a read and a write by two system calls down
                two host paths): one more descent from the best fit with a processor, k_w
                a fourth coordinate after k, on [0, room - c - b) (a command pays k or k_w,
                not both), from k_w = k; kept, as the draining pass, when it lowers E by
                PASS_GAIN (1 %) at least, else not written (a cost chosen by the points'
                noise would take QD1 time from write_latency, with which it is collinear
                there). Everything above that holds k holds k_w for the writes: a write's
                latency_d = intercept_d - c - b - k_w, and with a draining pass the write
                line's intercept is c + k_w (rate_write(c + k_w)). The loaded reads move k,
                the loaded writes k_w (random 4 KiB writes at QD 2 to 32 and the small writes
                at QD 2 and 4; the mixes both); with a draining pass c adds to both in the
                pass, so the points identify c + k and c + k_w, and c may take the part they
                share (a k_w of 0 then). Not written reads only (k then is the writes' too),
                and a k_w of 0 is held at its bound in the uncertainty as k is. This
                machine's disk moved 4 KiB reads at QD 32 at 11-13 us a command and writes at
                5-9 us: one k for both settled between them
duplex        = the one whose fit gives the smaller sum (ln X_model - ln X)^2 over the mixed
                points ("full", the model's default, on a tie)
turnaround    = 0: not fitted (below)
  X_model = the flash model's closed forms with these parameters, in real numbers (one
       direction min(N / a, P(q, a + t + h, 1 / t)); a mix of read share p = rwmixread / 100
       with the mean a and t and the pipes of its duplex; P the processor's mean-value
       approximation): crates/vmio-sim/src/device/flash.rs, `ClosedForm`, called through
       vmio._native (`flash_predict`, `flash_bounds`)
h             = the host's path (`host_path_ns`, vmio._native `host_path_ns`): what `vmio sim`
                adds to every request of stack.toml's native host outside the device (vdisk's
                `host` interface: the system call's submission, 1.5 us, fio's slat), a delay in
                the closed loop (the closed forms' `path_ns`). The measured latencies hold the
                real host's submission, so the fit leaves it out of the device; without it the
                device's figures held it and vmio sim added it again: 4k QD1 on a RAM-backed
                file, whose device takes 6.5 us, came out 13-19 % slower than the closed form
flush_latency, flush_rate = the fdatasync points' line S_i = F0 + L_i / F (`fit_flush`: least
                relative squares over the sizes; sync.lat_ns, the fdatasync calls alone, each
                after k writes of L, L_i = k L (k = 1, fdatasync4-1m's 4): the model's FLUSH
                drains the bytes written since the last one at flush_rate, flash.rs "Streams
                and the cache's drain");
                flush_latency = F0 less b + k (the model's FLUSH passes the processor). A
                slope not above 0, or one size: no flush_rate, and flush_latency the points'
                mean less b + k (the sizes' spread then shows in its uncertainty)
stream_d      = the stream rate of direction d (flash.rs, "Streams"; `fit_stream`): the QD1
                line becomes T_i = h + max(I + L_i / rate_d, b + k + L_i / s), I the intercept
                over the points the line binds; s the least sum ((model - T_i) / T_i)^2 on a
                log grid of STREAM_GRID steps from max_i L_i / (T_i - h) (the fastest a lone
                command was measured at) to rate_d (above it the stream never binds), first
                at c = 0 with nothing in front, then again at the descent's c with its b + k
                (and a_d from that intercept); no stream when none lowers the error or the
                best is rate_d. QD1 latencies of a cloud disk here grew as 56, 62, 74, 248,
                896 us at 4k to 1m: a line through all of them (store and forward) misses
                both ends
batching      = "drain" (flash.rs, "The processor's passes") when the descent from the coarse
                grid with a draining processor ends with an E at least PASS_GAIN (1 %) below
                the better of the other two; else the snapshot's (not written). A draining
                pass moves each command's data, k + t(L, d) a command, so its saturated
                points' line is 1 / X_i = c + k + L_i / rate_d (rate_d(c + k)), and its
                stream starts as the command arrives (nothing in front of it). A disk here
                whose 4 KiB random reads took R(q) = 45 + 10.7 q us from QD 1 to 32 (and
                16 KiB about 15.9 us more a command) had its held-out bandwidth and mean
                latency errors lowered by 3-7 points with it (docs/validation.md)
stall         = (probability pi, mean D, spread, floor) of the stall component (flash.rs,
                "Stalls"), fitted first (`fit_stall`): from the random 4 KiB points' fio clat
                percentile lists at every depth (5 to 99.99 %, each level with at least
                TAIL_IOS requests above it; fio's 1 % level of a direct 4k read was 2.7 us
                here against a p5 of 19 us: not the disk's body), each point's body x50 (f +
                (1 - f) r^s), r = P / (1 - P), about its measured median x50, the stall shared
                by all (a stall here is a property of the disk, not of one depth); the
                mixture M(P) = body(P / (1 - pi)) for P < 1 - pi, x50 + Q_stall((P - (1 -
                pi)) / pi) above (`mixture_ns`); the least sum (ln M - ln x_P)^2 over both
                lists, alternating STALL_ROUNDS times between the stall on its grids (pi 1e-4
                to 0.1 and D 100 us to 1 s on log grids, spread and floor on even ones) and the
                bodies' (s, f); no stall when it does not lower the bodies' own error.
                With a stall, the QD1 line's T_i are the points' clat p50 (the body's: a
                stall's share of a mean varies between points, 87 and 159 us for two 4k QD1
                reads of one battery here), and a_d, once its distribution is fitted, is
                moved from that median to the distribution's mean (a_d / (f + (1 - f) /
                m(s)), twice); the stalls' mean z = pi D is the stall's own: in the closed
                forms each unit holds a + z and a round trip is a + t + z
spread_d, floor_d = the unit time's shifted log-logistic (flash.rs, "Service times"), from
                the random 4 KiB QD1 point of direction d: the least
                sum_p (ln M(p) - ln clat_p)^2 over its fio percentile list (without one, its
                p50, p99 and p99.9 from P999_MIN_IOS requests), M(p) = b + k + t(4k, d) +
                the mixture of Q_d and the stall above (a lone command's
                completion: the processor, the transfer, quantile p of its unit time, whose
                mean is a_d), Q_d(p) = a_d (f + (1 - f) (p / (1 - p))^s / m(s)), m(s) = pi s /
                sin(pi s); on a grid of s in [0, 1/2] and f in [0, 1), refined twice around
                the best cell (two percentiles and two parameters: exact when the median is
                below the mean, as it is when the tail is to the right)
freeze        = (interval I, duration D) of device-wide freezes (flash.rs, "Freezes";
                `fit_freeze`), from every loaded point's fio clat list (QD > 1, no fdatasync;
                the QD1 points' tails are the stalls'), D at most MAX_FREEZE_SHARE (0.1) of
                I: each point's body x50 (f + (1 - f) r^s) fitted on its levels up to
                BODY_LEVEL (p90), then for its levels from TAIL_LEVEL (p99 up) the model
                M(P) = body(P / (1 - pi)) below 1 - pi and x50 + D above, pi = R / I (R its
                measured mean latency: Little's law gives the share of its commands in
                flight when a freeze starts); (I, D) the least sum (ln M - ln x_P)^2 on log
                grids (I 1 ms to 100 s, D 10 us to 100 ms) refined FREEZE_REFINE times; none
                when that does not lower the bodies' own error by FREEZE_GAIN (10 %). This
                machine's virtio disk had p99.9 of 2-3 ms at 4-8 KiB, QD 12-24, against 0.2 ms
                from a stall on one unit; its batteries of 29 Nov gave I = 75 and 177 ms, D =
                1.3 and 1.5 ms. Fitted before the body, which is then fitted on the points
                with the freezes' share taken out (`_unfrozen`: X / (1 - D / I), T (1 - D /
                I)); the residuals and the uncertainty then hold every loaded point's tail
                levels. Or freezes started by commands (flash.rs, "Freezes started by
                commands": freeze_trigger = "command", read_freeze_probability p_r,
                write_freeze_probability p_w, freeze_time D), fitted on the same tail levels
                with the share pi = q (f p_r + (1 - f) p_w) (f the point's read share, q its
                depth: a command that blocks stops the processor and the q commands of its
                pass wait) on grids of p_r (1e-6 to 0.1) and D for each p_w of a grid (0, then
                1e-7 to 0.1, refined about the best), and kept instead of the clock's when its
                error is FREEZE_GAIN below the clock's (the depths and directions tell them
                apart: the clock catches R / I of every point whatever its direction and depth);
                they then enter the closed forms (a command's mean (f p_r + (1 - f) p_w) D on
                the processor) in place of `_unfrozen`, and need a processor (a body without
                one: the clock's instead)
ring_descriptors = 2 x the disk's tags when it is a virtio disk without indirect
                descriptors (`ring_of`: sysfs device/features bit 28 is 0), else not written
                (flash.rs, "The ring": a request takes 2 + one descriptor per 4 KiB page)
ring_scheduler = "mq-deadline" with the ring when the disk's queue/scheduler is mq-deadline:
                the commands waiting for descriptors wait in it (flash.rs, "The ring")
max_segments  = the disk's queue/max_segments with the ring (flash.rs, "The ring's
                requests": a command of more pages goes as several requests)
ring_merges   = true with ring_scheduler = "mq-deadline", max_segments and queue/nomerges 0:
                adjacent commands waiting for the ring merge, up to max_segments pages
ring_dispatch_position = true with ring_scheduler = "mq-deadline" on Linux 6.5 or later
                (`uname -r`): the guest's mq-deadline takes a batch's next request at or
                above the start of the last dispatched one, looked up at each dispatch
                (flash.rs, "The ring"; Linux's "block: mq-deadline: Track the dispatch
                position")
read_priority = true (flash.rs, "Reads first") when `vmio sim` of the battery's loaded mixed
                points (with the ring) on the fit with it gives a sum of (ln sim - ln
                measured)^2 over each direction's bandwidth and mean latency at least
                PASS_GAIN below the fit without it (`read_first`); randrw30-1m-qd16 is the
                battery's large mix at depth, where reads can overtake writes
write_buffer  = 0;  queue_depth = the tags of the disk's hardware queues (mq/*/nr_tags;
                else its nr_requests; 128 when unknown, tmpfs)
write_cache, fua = what the disk's queue advertises (`queue_caps`): write_cache = its
                queue/write_cache is "write back", fua = its queue/fua is 1; a file on tmpfs
                or ramfs (no block device): both false (nothing volatile below the page
                cache, so the block layer sends no FLUSH and keeps no FUA); a file on no
                disk vmio can find (overlay...): the flash model's defaults, and a line of
                stack.toml says so. The simulator's block layer then treats FLUSH and FUA as
                Linux's blk-flush does (crates/vmio-core/src/blockq.rs): a disk with a cache
                and no FUA, as this machine's virtio disk, pays a FLUSH after every FUA
                write (a host journal's commit record). They are not part of the fit:
                `params` stays the closed forms' figures.
capacity      = the file's size rounded down to 4 KiB, or the block device's size
```

Bounds, uncertainty and refusal (`fit`, `uncertainty`; fit.txt's last table):

```text
bounds        read_latency, write_latency >= 5 us (MIN_LATENCY_NS: a NAND page read takes
                tens of us, a program into a controller's DRAM several; a disk below the
                page cache, a RAM disk, is not what the flash model stands for);
              1 <= units <= stop_depth: over the random 4k reads and writes, the first depth
                whose next depth gains less than RISE (10 %) in throughput, that next depth
                (throughput has stopped rising by it; 4096 when a series rises to its
                deepest point); 0 <= c, b, k within the room above; 0 <= spread <= 1/2
residuals     r = ln model - ln measured of every point's requests per second, every
                fdatasync point's latency, the random 4k QD1 points' listed percentiles
                (the mixture of unit time and stall), with freezes every point's levels
                from TAIL_LEVEL (`freeze_residuals`)
Jacobian      J_ij = dr_i / dtheta_j by central differences (steps of 1e-3 of the value, at
                least 10 ns, 1 kB/s, 0.01 unit, 0.001 of a share)
uncertainty   cov = s^2 (J^T J)^+ over the identified parameters not held at a bound, in
                units of each parameter's scale, s^2 = sum r^2 / (n - p); sigma_j = sqrt(cov_jj)
held          an overhead at 0, a unit time at 5 us, units at 1 or at stop_depth, a spread at
                0 (its floor then does nothing) or 1/2, a stall probability of 0 (the stall's
                other parameters then do nothing) or at its bound 0.1: active constraints,
                no sigma
identified by the three points of the largest J_ij^2, with their share of sum_i J_ij^2;
                a column of zeros: not identified (no point moves with it)
flags         a unit time within 1 % of 5 us (or c + b + k filling the room), units at
                stop_depth below 4096, a spread at 1/2 (the stall's too), a stall probability
                at 0.1: one line each, "NAME = VALUE sits at
                its lower|upper bound BOUND (why)"; run() writes measurements.json and fit.txt
                and refuses the fit (CalibrateError, the first flag) unless accept_bounds
                (--accept-bounds), which writes stack.toml with the flags as notes
model mean latency of a point = q / X_model; of the fdatasync point: b + k + flush_latency
    (the model's FLUSH with no write buffer: through the processor, then flush_latency)
reads only: write_latency, write_rate = the read's (a note in stack.toml says so); no
    flush_latency (the model's default)
```

fit.txt's simulations (`simulate`): each point's job on stack.toml, direct=1, for
SIM_RUNTIME_MS (500 ms) of simulated time, or, when the fit has stalls, for SIM_STALLS (20)
of them at the closed forms' rate, (SIM_STALLS / stall_probability) / X_model seconds, at
most SIM_MAX_IOS (400,000) requests' worth (about 2.5 s of a debug build's simulator). The
model places one stall in each block of 1 / p commands (flash.rs, "Stalls"), so a run holds
its share within one stall: 20 put the mean stall within 5 % of p D. A 0.5 s run of a
RAM-backed file's fit on a loaded machine (p = 9e-5, D = 36.7 ms) held about 11 stalls at
QD 8 and 4.5 at QD 1; the simulator then moved from the closed forms by -23 % to +23 % with
the seed, and the round trip's sim-vs-model median by 1.5 % to 23 %.

Why these fits. c: a per-command cost on the pipe shows where the rates (set by large
requests) overestimate mid-size requests at depth (16k-64k at QD 8-32: 1 / X well above
L / rate) while QD1 only gives a + c together, so c is what the loaded points say beyond
the QD1 intercept; fitting it with units on the same log errors keeps one criterion for
both (a smaller a raises the unit bound N / a that c's pipe bound lowers). The rates come
from every saturated point, not the fastest one: on a cloud disk here the fastest of six
6-second points gave a read rate 40 % above the others' line. The processor (b, k): this
machine's disk raised 4 KiB random read latency from QD 1 on (61, 89, 132 us at QD 1, 2, 4)
while its throughput kept growing to QD 32, a gradual rise that units behind a fixed cost
cannot give (their throughput is q / (a + t) until a sharp knee) and a processor that
takes every waiting command at once, paying b per batch, does (the model's module doc).
The rw points are 50/50, sequential, at QD 8: pipe-bound for a device of a few units, and
the mix where the two duplexes differ most (full moves 1 / (p t_r) or 1 / ((1-p) t_w), half
1 / (p t_r + (1-p) t_w): a factor 2 at p = 0.5 when t_r = t_w, 1.43 at 70/30); 64k and 256k
so that c weighs differently in them. turnaround is no longer fitted: the model turns the
pipe on 2 p (1-p) of the commands of a saturated mix, FIFO, which the battery's QD 8 mixes
made as large as 97 us, while the same disk mixed small requests at QD 32 at the rate of
its pure loads. In the recorded runs of seeds 2 and 3 (docs/validation.md) the fitted
turnaround raised the held-out errors; it stays a model parameter a user may set.

flush_latency is the fdatasync mean as measured, not less a 4 KiB write's model time (the
first version's rule): fio's sync.lat_ns times the fdatasync calls alone (the direct write
before each has completed) and the model's FLUSH with no buffer costs flush_latency alone,
so nothing is subtracted. On a loop device on /dev/shm that rule gave 0 (fdatasync
18 us, a 4k write 342 us) and vmio sim an fdatasync of 1.5 us; this one gives 18 us.

Why the bounds. Without them a full calibration of this machine's disk came back as units =
1, read_latency = 22 ns, write_latency = 1 ns, the time in the processor's b and k: it fitted
the battery's points and missed what lies between them (held-out median errors 29 % on
bandwidth, 21 % on mean latency), and no disk has such parameters. The 5 us floor makes a
command's QD1 time mostly the unit's (where a real device spends it); the stop depth keeps
units within what the battery could see. The uncertainty says which parameters the battery
pins down and which points do it; a parameter at a bound is reported as such, not hidden.

What the battery cannot fit, and why:
- `write_buffer`: a buffer of B bytes acknowledges writes at their transfer's end while
  their unit work drains at N / write_latency; in a closed loop of seconds it is either
  never full (a writer slower than the drain: writes then look like write_latency ~ 0 with
  enough units, which the fit already expresses) or full within B / rate (then writes
  complete at the drain rate, as without a buffer). Only a burst after idle (latency that
  jumps after B bytes) would show B; the battery's steady runs average it away.
- `link_rate` above the largest total the battery moved: the link is seen only when large
  mixed requests on a full-duplex device load it beyond one direction (the rw points), and
  then only as high as they went.
- a synchronous target (tmpfs, a loop device on it: the copy runs in the submitting thread,
  so throughput does not grow with the queue depth): the model's least parallelism is one
  unit with its transfer pipelined after it, X(q > 1) = min(1 / a, 1 / t), up to twice the
  QD1 figure 1 / (a + t); its loaded points are overestimated by up to that much.
- a cloud disk's or a host's throttling (token buckets) and the page cache of a direct=0
  target look like rates and latencies; fit.txt shows how far the closed forms miss.
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from vmio import stackfile
from vmio.progress import format_duration
from vmio.real import fiorun, machine
from vmio.real.machineprofile import (
    Disk,
    ProfileError,
    disk_of,
    disk_of_device,
    fio_missing,
    mount_of,
)
from vmio.sim import VmioError, native, parse_size, simulate_text
from vmio.version import __version__

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

SEQ_SIZES: tuple[int, ...] = (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB)
SEQ_QDS: tuple[int, ...] = (1, 8, 32)
RAND_QDS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
MIX_QDS: tuple[int, ...] = (1, 8)
RWMIXREAD = 70
# Large sequential 50/50 mixes at QD 8: pipe-bound, so they tell half from full duplex.
DUPLEX_SIZES: tuple[int, ...] = (64 * KIB, 256 * KIB)
DUPLEX_QD = 8
DUPLEX_MIX = 50
SMALL = 4 * KIB
# The write path at small depth (sequential writes of a small and a mid size at QD 2 and 4:
# the processor's per-batch and per-command costs on writes) and the fdatasync at several
# sizes (whether a FLUSH's cost depends on what was written before it).
SMALL_WRITE_SIZES: tuple[int, ...] = (4 * KIB, 64 * KIB)
SMALL_WRITE_QDS: tuple[int, ...] = (2, 4)
FLUSH_SIZES: tuple[int, ...] = (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB)
# A FLUSH behind several large writes (size, writes per fdatasync): what the cache drains
# when it holds more than one write (flush_rate, flash.rs "Streams and the cache's drain").
FLUSH_BEHIND: tuple[tuple[int, int], ...] = ((MIB, 4),)
# A mix of large requests at depth (size, depth, read share): whether reads overtake the
# writes queued before them (read_priority, flash.rs "Reads first").
LARGE_MIXES: tuple[tuple[int, int, int], ...] = ((MIB, 16, 30),)
# --quick's points (by name): enough for every parameter of the fit.
QUICK: frozenset[str] = frozenset(
    {
        *(f"rand{d}-4k-qd{q}" for d in ("read", "write") for q in (1, 8, 32)),
        *(f"{d}-1m-qd{q}" for d in ("read", "write") for q in (1, 32)),
        "randrw-4k-qd8",
        "rw-256k-qd8",
        "fdatasync-4k",
        "fdatasync-64k",
    }
)

DEFAULT_TARGET = Path("vmio-calibrate.tmp")
DEFAULT_OUT = Path("vmio-calibration")
DEFAULT_BUDGET_S = 300.0
QUICK_BUDGET_S = 60.0
MAX_BUDGET_S = 86_400.0
DEFAULT_SIZE = GIB
TMPFS_SIZE = 256 * MIB
MIN_SIZE = 16 * MIB
TMPFS = ("tmpfs", "ramfs")
# Time per point besides fio's run: its start-up (an estimate until measured) and the
# simulation of fit.txt's third column; the shortest run a point gets.
FIO_STARTUP_S = 0.6
SIM_RESERVE_S = 0.3
MIN_RUNTIME_S = 0.25
SIM_RUNTIME_MS = 500
# With stalls, a simulation holds at least this many (module doc, "fit.txt's simulations"),
# within at most this many requests.
SIM_STALLS = 20
SIM_MAX_IOS = 400_000
MAX_UNITS = 4096
# The overhead's search: grid steps, the golden ratio of its refinement, rounds of the
# alternation.
C_GRID = 100
GOLDEN = (1 + 5**0.5) / 2
ROUNDS = 20
# The descent stops when a round lowers E by less than this fraction.
ROUND_GAIN = 1e-3
# The coarse grid the fit's descent starts from: steps of (c, b, k) and the units tried.
START_GRID = (6, 12, 10)
START_UNITS = tuple(2**i for i in range(13))
UNKNOWN_QUEUE_DEPTH = 128
# The disk schedulers stack.toml keeps as the kernel names them: blk-mq's (none, mq-deadline,
# bfq, kyber) that the simulator has; the others become mq-deadline.
SCHEDULERS = ("none", "mq-deadline")
# Physical bounds of the fit (module doc, "Bounds"): a flash unit's time at least 5 us (a
# NAND page read is tens of us, a program into a controller's DRAM several us; a cloud
# disk's round trip more), units from 1 to the depth where throughput stops rising (a
# depth's throughput gains less than RISE over the one before it).
MIN_LATENCY_NS = 5_000.0
RISE = 1.1
# fio's p99.9 is kept when a run completed at least this many requests (10 beyond it).
P999_MIN_IOS = 10_000
# The unit-time distribution's fit: the spread's upper bound (flash.rs MAX_SPREAD), its
# grid, the floor's grid.
MAX_SPREAD = 0.5
# flash.rs MAX_STALL_PROBABILITY; the stall fit's grids (`fit_stall`): probabilities and mean
# durations on log grids, the duration's spread and floor on even ones; a level P of fio's
# clat list is used when at least TAIL_IOS requests lie above it.
MAX_STALL_PROBABILITY = 0.1
STALL_P = (1e-4, MAX_STALL_PROBABILITY, 31)
STALL_D_NS = (1e5, 1e9, 41)
STALL_SPREADS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
STALL_FLOORS = (0.0, 0.2, 0.4, 0.6, 0.8)
STALL_ROUNDS = 3
STALL_REFINE = 3
TAIL_IOS = 10
MIN_LEVEL = 0.05
SPREAD_GRID = 100
FLOOR_GRID = 100
# A parameter within this share of a bound sits at it.
AT_BOUND = 0.01
STREAM_GRID = 200
SNAPSHOT, DRAIN = "snapshot", "drain"
PASS_GAIN = 0.01
# Device-wide freezes (`fit_freeze`): each point's body from its clat levels up to
# BODY_LEVEL, the freezes from its levels from TAIL_LEVEL; the grids of the interval between
# freezes and of their duration (ns: from, to, steps), FREEZE_REFINE finer grids; kept when
# they lower the tails' error by FREEZE_GAIN.
BODY_LEVEL = 0.9
TAIL_LEVEL = 0.99
FREEZE_INTERVAL_NS = (1e6, 1e11, 51)
FREEZE_TIME_NS = (1e4, 1e8, 41)
# Freezes started by commands (`fit_freeze`, flash.rs "Freezes started by commands"): the
# grids of a read's probability of one (from, to, steps; at most the model's
# MAX_STALL_PROBABILITY) and of a write's (0, then these).
FREEZE_PROBABILITY = (1e-6, 0.1, 51)
FREEZE_WRITE_PROBABILITY = (1e-7, 0.1, 31)
FREEZE_REFINE = 3
FREEZE_GAIN = 0.1
MAX_FREEZE_SHARE = 0.1
# The first Linux whose mq-deadline tracks each direction's dispatch position
# (`ring_dispatch_position`).
DISPATCH_POSITION_KERNEL = (6, 5)


class CalibrateError(VmioError):
    """A target, option or measurement vmio calibrate cannot use; the message is the user's."""


# --- the battery ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One fio job of the battery (a point, before it is measured)."""

    name: str
    rw: str
    bs: int
    iodepth: int
    rwmixread: int | None = None
    fdatasync: bool = False
    sync_every: int = 1
    """With fdatasync: the writes between two fdatasyncs (fio's `fdatasync=N`)."""

    @property
    def ioengine(self) -> str:
        return "psync" if self.fdatasync else "libaio"

    @property
    def direction(self) -> str:
        """`read`, `write`, `mixed` or `flush` (the fdatasync point)."""
        if self.fdatasync:
            return "flush"
        if self.rw in ("randrw", "rw"):
            return "mixed"
        return "write" if "write" in self.rw else "read"

    def options(self, size: int, runtime_ms: int | None, direct: int) -> list[tuple[str, str]]:
        """fio's options of the job but its name and file (time-based when `runtime_ms`)."""
        opts = [
            ("rw", self.rw),
            ("bs", str(self.bs)),
            ("iodepth", str(self.iodepth)),
            ("ioengine", self.ioengine),
            ("direct", str(direct)),
            ("size", str(size)),
        ]
        if runtime_ms is not None:
            opts += [("runtime", f"{runtime_ms}ms"), ("time_based", "1")]
        if self.rwmixread is not None:
            opts.append(("rwmixread", str(self.rwmixread)))
        if self.fdatasync:
            opts.append(("fdatasync", str(self.sync_every)))
        return opts


def size_name(nbytes: int) -> str:
    """A battery size as its job names spell it (`4k`, `1m`)."""
    return f"{nbytes // MIB}m" if nbytes >= MIB else f"{nbytes // KIB}k"


def battery(quick: bool = False, writes: bool = True) -> tuple[Job, ...]:
    """The battery's jobs in the order they run (module doc)."""
    jobs = [
        Job(f"{d}-{size_name(bs)}-qd{q}", d, bs, q)
        for d in ("read", "write")
        for bs in SEQ_SIZES
        for q in SEQ_QDS
    ]
    jobs += [Job(f"{d}-4k-qd{q}", d, SMALL, q) for d in ("randread", "randwrite") for q in RAND_QDS]
    jobs += [
        Job(f"write-{size_name(bs)}-qd{q}", "write", bs, q)
        for bs in SMALL_WRITE_SIZES
        for q in SMALL_WRITE_QDS
    ]
    jobs += [Job(f"randrw-4k-qd{q}", "randrw", SMALL, q, RWMIXREAD) for q in MIX_QDS]
    jobs += [
        Job(f"rw-{size_name(bs)}-qd{DUPLEX_QD}", "rw", bs, DUPLEX_QD, DUPLEX_MIX)
        for bs in DUPLEX_SIZES
    ]
    jobs += [
        Job(f"fdatasync-{size_name(bs)}", "randwrite", bs, 1, fdatasync=True) for bs in FLUSH_SIZES
    ]
    jobs += [
        Job(f"fdatasync{k}-{size_name(bs)}", "randwrite", bs, 1, fdatasync=True, sync_every=k)
        for bs, k in FLUSH_BEHIND
    ]
    jobs += [
        Job(f"randrw{mix}-{size_name(bs)}-qd{q}", "randrw", bs, q, mix)
        for bs, q, mix in LARGE_MIXES
    ]
    return tuple(
        j for j in jobs if (not quick or j.name in QUICK) and (writes or j.direction == "read")
    )


WRITE_THROUGH = Job("write-through", "write", MIB, 8)


# --- measurements --------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One direction of a measured point (fio's JSON `read` or `write`)."""

    iops: float
    bw_bytes: float
    lat_mean_ns: float
    clat_p50_ns: float
    clat_p99_ns: float
    clat_p999_ns: float = 0.0
    """0 when the run completed fewer than P999_MIN_IOS requests."""


def queue_depth(disk: Disk | None) -> int:
    """The device model's command slots for `disk`: its hardware queues' tags (blk-mq
    allocates one request per tag, block/blk-mq-tag.c; a request beyond them waits in the
    I/O scheduler), else its nr_requests (a disk without blk-mq), else 128 (none known)."""
    if disk is None:
        return UNKNOWN_QUEUE_DEPTH
    return disk.device_slots or UNKNOWN_QUEUE_DEPTH


@dataclass(frozen=True)
class Point:
    """A battery job as measured (or simulated): `size_bytes` the region, `runtime_s` the run,
    per direction its figures (None when it did none), the mean fdatasync latency of the
    flush point, and fio's whole JSON job."""

    job: Job
    size_bytes: int
    runtime_s: float
    read: Side | None
    write: Side | None
    fdatasync_ns: float | None
    fio: dict[str, Any] = field(repr=False)

    @property
    def iops(self) -> float:
        return sum(s.iops for s in (self.read, self.write) if s is not None)

    @property
    def bw_bytes(self) -> float:
        return sum(s.bw_bytes for s in (self.read, self.write) if s is not None)

    @property
    def lat_mean_ns(self) -> float:
        """The mean latency over both directions (weighted by their requests)."""
        sides = [s for s in (self.read, self.write) if s is not None and s.iops > 0]
        total = sum(s.iops for s in sides)
        return sum(s.iops * s.lat_mean_ns for s in sides) / total if total else 0.0

    def record(self) -> dict[str, Any]:
        """The point as measurements.json holds it."""
        j = self.job
        return {
            "name": j.name,
            "rw": j.rw,
            "bs": j.bs,
            "iodepth": j.iodepth,
            "rwmixread": j.rwmixread,
            "ioengine": j.ioengine,
            "fdatasync": j.fdatasync,
            **({"sync_every": j.sync_every} if j.sync_every != 1 else {}),
            "size": self.size_bytes,
            "runtime_s": self.runtime_s,
            "read": asdict(self.read) if self.read else None,
            "write": asdict(self.write) if self.write else None,
            "fdatasync_lat_mean_ns": self.fdatasync_ns,
            "fio": self.fio,
        }


def _side(d: dict[str, Any]) -> Side | None:
    if not d.get("total_ios"):
        return None
    pct = d.get("clat_ns", {}).get("percentile", {})
    enough = int(d["total_ios"]) >= P999_MIN_IOS
    return Side(
        iops=float(d["iops"]),
        bw_bytes=float(d["bw_bytes"]),
        lat_mean_ns=float(d["lat_ns"]["mean"]),
        clat_p50_ns=float(pct.get("50.000000", 0)),
        clat_p99_ns=float(pct.get("99.000000", 0)),
        clat_p999_ns=float(pct.get("99.900000", 0)) if enough else 0.0,
    )


def point_of(job: Job, size: int, runtime_s: float, result: dict[str, Any]) -> Point:
    """The point of fio's (or vmio sim's) JSON job `result` of `job`."""
    read, write = _side(result.get("read", {})), _side(result.get("write", {}))
    sync = result.get("sync", {}).get("lat_ns", {}).get("mean") if job.fdatasync else None
    if (read is None and write is None) or (job.fdatasync and not sync):
        raise CalibrateError(f"fio job {job.name}: no request completed (nothing was measured)")
    return Point(job, size, runtime_s, read, write, float(sync) if sync else None, result)


# --- the model's closed forms and the fit --------------------------------------------------


Params = dict[str, Any]
"""The flash model's parameters as stack.toml names them: numbers in their unit (durations in
ns, sizes in bytes, rates in bytes/s, unrounded), `duplex` "full" | "half"; a missing one is
the model's default."""
Proc = tuple[float, float, float]
"""The model's processor as the fit moves it, in seconds: (batch_overhead, command_overhead,
write_command_overhead)."""
OVERHEADS = ("transfer_overhead", "batch_overhead", "command_overhead", "write_command_overhead")

# The closed forms are the flash model's own (crates/vmio-sim/src/device/flash.rs,
# `ClosedForm`), evaluated through vmio._native; they take the stack file's names.


@functools.cache
def flash_specs() -> dict[str, dict[str, Any]]:
    """The flash model's declared parameters by name: `kind`, `unit`, `default`, `choices`
    (its ParamSpecs, through vmio._native)."""
    return {p["name"]: p for p in native().device_params("flash")}


def duplexes() -> tuple[str, ...]:
    """The model's duplex choices, its default first (it wins the fit's tie)."""
    d = flash_specs()["duplex"]
    return (d["default"], *(c for c in d["choices"] if c != d["default"]))


def durations() -> frozenset[str]:
    """The model's keys that are durations (stack.toml writes them in ns)."""
    return frozenset(n for n, p in flash_specs().items() if p["kind"] == "duration")


@functools.cache
def host_path_ns() -> float:
    """The simulator's per-request path of a native host (module doc, "The host's path")."""
    return float(native().host_path_ns())


def _job(job: Job) -> dict[str, Any]:
    """`job` as the model's closed forms take it (fio's option names), on stack.toml's native
    host: each request also spends `host_path_ns` outside the device."""
    return {
        "rw": job.rw,
        "bs": job.bs,
        "iodepth": job.iodepth,
        "rwmixread": job.rwmixread,
        "fdatasync": job.fdatasync,
        "path_ns": host_path_ns(),
        # A FLUSH behind k writes of L drains k L bytes (flash.rs, "Streams and the
        # cache's drain"): the closed form's fdatasync job takes them as its bs.
        **({"bs": job.bs * job.sync_every} if job.fdatasync else {}),
    }


def _closed(params: Params) -> Params:
    """`params` as the closed forms take them: without the flags (`read_priority`: the
    order reads and writes are served in is not in them, flash.rs "Reads first")."""
    return {k: v for k, v in params.items() if not isinstance(v, bool)}


def processor_x(q: int, b_s: float, c_s: float, r0_s: float, cap: float) -> float:
    """X of a closed loop of q commands through the flash model's command processor (a batch
    of k costs b_s + k c_s) and then r0_s more, at most `cap`: its mean-value approximation
    (flash.rs `processor_x`). Without a processor, min(q / r0, cap)."""
    return native().flash_processor_x(q, b_s, c_s, r0_s, cap)


def bounds(params: Params, job: Job) -> tuple[float, float]:
    """(a, the bound of X without the units) of `job` on the flash model: X = min(N / a,
    that bound) with N = units (flash.rs `ClosedForm::bounds`)."""
    return native().flash_bounds(_closed(params), _job(job))


def throughput(params: Params, job: Job) -> float:
    """X_model: requests per second of `job` (closed loop of iodepth) on the flash model."""
    return native().flash_predict(_closed(params), _job(job))[0]


def predicted(params: Params, job: Job) -> tuple[float, float]:
    """(bytes per second, mean latency ns) of `job` on the model; the fdatasync point's
    latency is its fdatasync, a FLUSH through the processor (no bandwidth: NaN)."""
    return native().flash_predict(_closed(params), _job(job))[1:]


QD1 = tuple[tuple[tuple[int, float], ...], float]
"""The QD1 points of a direction, ((bs, T), ...), and the host's path h in their T."""


def _qd1(points: Sequence[Point], side: str, median: bool = False) -> QD1:
    """(bs, T) of each QD1 point of direction `side`, T its mean latency, and the host's path
    h in it (`host_path_ns`); with `median` its clat p50 (the body's, with stalls; a
    completion latency, without the submission: h = 0)."""
    attr = "clat_p50_ns" if median else "lat_mean_ns"
    qd1 = [(p.job.bs, getattr(getattr(p, side), attr)) for p in points if p.job.iodepth == 1]
    qd1 = [(b, t) for b, t in qd1 if t > 0]
    if not qd1:
        raise CalibrateError(f"no {side} point at QD1 was measured; the fit needs one")
    return tuple(qd1), 0.0 if median else host_path_ns()


def _line(qd1: QD1, rate: float, stream: float = 0.0, front: float = 0.0) -> tuple[float, float]:
    """(I, E): the intercept I of T = h + max(I + L / rate, front + L / stream) (the stream
    off when 0), least relative squares over the points its line binds (module doc,
    "Streams"), and E = sum ((model - T) / T)^2 over all of them; rate and stream in
    bytes/s, T, I and front in ns."""
    pts, path = list(qd1[0]), qd1[1]
    for _ in range(4):
        den = sum(1 / (t * t) for _, t in pts)
        i = sum((t - b * 1e9 / rate) / (t * t) for b, t in pts) / den - path
        if stream <= 0:
            break
        bound = [(b, t) for b, t in qd1[0] if i + b * 1e9 / rate >= front + b * 1e9 / stream]
        if not bound or bound == pts:
            break
        pts = bound
    e = sum(((path + _lone(b, i, rate, stream, front)) / t - 1) ** 2 for b, t in qd1[0])
    return i, e


def _lone(bs: int, i: float, rate: float, stream: float, front: float) -> float:
    """A lone command's latency in ns past the host: I + L / rate, or front + L / stream when
    that is longer."""
    t = i + bs * 1e9 / rate
    return max(t, front + bs * 1e9 / stream) if stream > 0 else t


def fit_stream(qd1: QD1, rate: float, front: float = 0.0) -> float:
    """The stream rate s of a direction (module doc, "Streams"): the least E of `_line` over
    STREAM_GRID log steps from the fastest rate one QD1 command was measured at (max L /
    (T - h): a stream slower than that would make that command slower than it was) to
    `rate` (above which the stream never binds); 0 (no stream) when none lowers E below
    the line's own or the best is the grid's top."""
    lo = max(b * 1e9 / max(t - qd1[1], 1.0) for b, t in qd1[0])
    if lo >= rate or len({b for b, _ in qd1[0]}) < 2:
        return 0.0
    grid = [lo * (rate / lo) ** (i / STREAM_GRID) for i in range(STREAM_GRID + 1)]
    base = _line(qd1, rate)[1]
    e, i = min((_line(qd1, rate, s, front)[1], i) for i, s in enumerate(grid))
    if e >= base * (1 - ROUND_GAIN) or i >= STREAM_GRID:
        return 0.0
    return grid[i]


def _latency_ns(points: Sequence[Point], rate: float, side: str, median: bool = False) -> float:
    """a + c of T = h + a + c + L / rate, least relative squares (module doc), at least 1 ns; T
    each QD1 point's mean latency (h the host's path, `host_path_ns`), or with `median` its
    clat p50 (the body's, with stalls; a completion latency, without the submission: h = 0)."""
    return max(1.0, _line(_qd1(points, side, median), rate)[0])


def _steps(hi: float, n: int) -> list[float]:
    """n evenly spaced values from 0 up to (not including) hi; [0] when hi <= 0."""
    return [hi * i / n for i in range(n)] if hi > 0 else [0.0]


def _saturated(points: Sequence[Point], side: str) -> list[Point]:
    """The points of direction `side` with q >= 8 and bs >= 64k (pipe-bound)."""
    sat = [
        p
        for p in points
        if p.job.iodepth >= 8 and p.job.bs >= 64 * KIB and getattr(p, side).bw_bytes > 0
    ]
    if not sat:
        raise CalibrateError(
            f"no {side} point with bs >= 64k at QD >= 8 was measured; the fit needs one"
        )
    return sat


@dataclass(frozen=True)
class _Direction:
    """What the fit of a direction rests on: its saturated points (bs, time per request) and
    its QD1 points, from which rate_d and a_d follow once c is chosen."""

    points: tuple[Point, ...]
    side: str
    sat: tuple[tuple[int, float], ...]
    median: bool = False
    stream: float = 0.0
    front_ns: float = 0.0

    @classmethod
    def of(cls, points: Sequence[Point], side: str, median: bool = False) -> _Direction:
        sat = tuple((p.job.bs, 1 / getattr(p, side).iops) for p in _saturated(points, side))
        return cls(tuple(points), side, sat, median)

    @property
    def min_time_s(self) -> float:
        """The shortest time per request of a saturated point (c is below it)."""
        return min(y for _, y in self.sat)

    def rate(self, c_s: float) -> float:
        """rate_d: the saturated points are pipe-bound, 1 / X_i = c + L_i / rate_d; the least
        relative squares of that line for the given c."""
        num = sum(b * b / (y * y) for b, y in self.sat)
        den = sum(b * (y - c_s) / (y * y) for b, y in self.sat)
        return num / max(den, 1e-12)

    def intercept_ns(self, c_s: float, line_s: float | None = None) -> float:
        """The QD1 fit's intercept at rate_d(c): a + c + b + k (over the points its line
        binds, with a stream); the rate of the saturated line of intercept `line_s` when
        given (a draining pass: c + k)."""
        qd1 = _qd1(self.points, self.side, self.median)
        rate = self.rate(c_s if line_s is None else line_s)
        return max(1.0, _line(qd1, rate, self.stream, self.front_ns)[0])

    def streamed(self, c_s: float = 0.0, front_ns: float = 0.0) -> _Direction:
        """This direction with its stream rate fitted at rate_d(c) (`fit_stream`)."""
        qd1 = _qd1(self.points, self.side, self.median)
        s = fit_stream(qd1, self.rate(c_s), front_ns)
        return replace(self, stream=s, front_ns=front_ns)

    def latency_ns(self, c_s: float, front_s: float = 0.0, line_s: float | None = None) -> float:
        """a_d = (the QD1 fit's intercept at rate_d) - c - the processor's b + k, at least
        MIN_LATENCY_NS (the search keeps c + b + k below the intercept less it); `line_s`
        as in `intercept_ns`."""
        return max(MIN_LATENCY_NS, self.intercept_ns(c_s, line_s) - (c_s + front_s) * 1e9)


def stop_depth(points: Sequence[Point]) -> int:
    """The upper bound of units (module doc, "Bounds"): over the random 4 KiB reads and
    writes, each a series of depths, the first depth whose throughput gains less than RISE
    on the next depth's... the next depth (by then throughput has stopped rising); the larger
    of the two series; MAX_UNITS when a series rises to its deepest point."""
    out = 0
    for rw in ("randread", "randwrite"):
        series = sorted(
            (p.job.iodepth, p.iops)
            for p in points
            if p.job.rw == rw and p.job.bs == SMALL and not p.job.fdatasync and p.iops > 0
        )
        if len(series) < 2:
            continue
        stop = next(
            (q2 for (_, x1), (q2, x2) in itertools.pairwise(series) if x2 < RISE * x1),
            MAX_UNITS,
        )
        out = max(out, stop)
    return out or MAX_UNITS


# fio's clat percentiles the battery keeps (Side's fields) and their quantile.
PERCENTILES: tuple[tuple[str, float, str], ...] = (
    ("clat_p50_ns", 0.5, "p50"),
    ("clat_p99_ns", 0.99, "p99"),
    ("clat_p999_ns", 0.999, "p99.9"),
)
# flash.rs U_CUT: the unit-time draws are cut at these quantiles.
U_CUT = 1e-6
# The parameters that are shares (written unrounded).
FRACTIONS = frozenset(
    {
        "read_spread",
        "read_floor",
        "write_spread",
        "write_floor",
        "stall_probability",
        "stall_spread",
        "stall_floor",
    }
)
STALL_KEYS = ("stall_probability", "stall_time", "stall_spread", "stall_floor")


def quantile_ns(mean_ns: float, floor: float, spread: float, p: float) -> float:
    """Quantile p of a unit time of mean `mean_ns` (flash.rs `ServiceTime::quantile_ns`, the
    shifted log-logistic): mean (floor + (1 - floor) (p / (1 - p))^s / m(s)), m(s) = pi s /
    sin(pi s); the mean itself without a spread."""
    if spread <= 0 or floor >= 1:
        return mean_ns
    p = min(max(p, U_CUT), 1 - U_CUT)
    m = math.pi * spread / math.sin(math.pi * spread)
    return mean_ns * (floor + (1 - floor) * (p / (1 - p)) ** spread / m)


def _tail_point(points: Sequence[Point], side: str) -> Point | None:
    """The random 4 KiB QD1 point of direction `side` (its percentiles fit the unit time)."""
    rw = f"rand{side}"
    return next(
        (
            p
            for p in points
            if p.job.rw == rw and p.job.bs == SMALL and p.job.iodepth == 1 and not p.job.fdatasync
        ),
        None,
    )


def clat_levels(point: Point, side: str) -> list[tuple[float, float]]:
    """(level P, ns) of fio's clat percentile list of direction `side` (1 to 99.99 by
    default), the levels from MIN_LEVEL with at least TAIL_IOS requests above them and a
    figure > 0."""
    d = point.fio.get(side) or {}
    n = int(d.get("total_ios") or 0)
    pct = (d.get("clat_ns") or {}).get("percentile") or {}
    out = []
    for k, v in pct.items():
        q = float(k) / 100
        if MIN_LEVEL <= q < 1 and float(v) > 0 and (1 - q) * n >= TAIL_IOS:
            out.append((q, float(v)))
    return sorted(out)


def stall_of(params: Params) -> tuple[float, float, float, float]:
    """(probability, mean ns, spread, floor) of the model's stall; probability 0: none."""
    p = float(params.get("stall_probability", 0.0))
    d = float(params.get("stall_time", 0.0))
    if p <= 0 or d <= 0:
        return 0.0, 0.0, 0.0, 0.0
    return p, d, float(params.get("stall_spread", 0.0)), float(params.get("stall_floor", 0.0))


def mixture_ns(body: Callable[[float], float], median: float, stall: Params, p: float) -> float:
    """Quantile p of a latency that is `body` (its quantile function, median `median`) with
    probability 1 - pi and the body plus a stall with probability pi (flash.rs "Stalls"):
    body(p / (1 - pi)) for p < 1 - pi, else median + Q_stall((p - (1 - pi)) / pi); exact for
    a constant body, and for a body narrow beside the stalls the stall's quantiles above its
    median (what the battery's tails show: ms-long stalls over a body of tens of us)."""
    pi, d, s, f = stall_of(stall)
    if pi <= 0:
        return body(p)
    if p < 1 - pi:
        return body(p / (1 - pi))
    return median + quantile_ns(d, f, s, (p - (1 - pi)) / pi)


def command_ns(params: Params, side: str) -> float:
    """A command's cost on the model's processor: a write's `write_command_overhead` when
    set, else (and for any other command) `command_overhead` (flash.rs, "Each direction's
    command cost")."""
    k = float(params.get("command_overhead", 0))
    return float(params.get("write_command_overhead", k)) if side == "write" else k


def model_percentile_ns(params: Params, job: Job, side: str, p: float) -> float:
    """Quantile p of a lone command's completion latency on the model (QD1: nothing queues):
    the processor's b + k, the transfer t(L) = c + L / min(rate, link), the unit's Q(p); with
    stalls, the mixture (`mixture_ns`)."""
    rate = min(float(params[f"{side}_rate"]), float(params["link_rate"]))
    fixed = (
        float(params.get("batch_overhead", 0))
        + command_ns(params, side)
        + float(params.get("transfer_overhead", 0))
        + job.bs * 1e9 / rate
    )
    mean = float(params[f"{side}_latency"])
    floor = float(params.get(f"{side}_floor", 0.0))
    spread = float(params.get(f"{side}_spread", 0.0))

    def body(q: float) -> float:
        return fixed + quantile_ns(mean, floor, spread, q)

    return mixture_ns(body, body(0.5), params, p)


def _grid_quantile(mean: Any, floor: Any, spread: Any, q: Any) -> Any:
    """`quantile_ns` on numpy arrays (broadcast): mean (f + (1 - f) r^s / m(s)), r = q / (1 -
    q) with q cut to [U_CUT, 1 - U_CUT]; the mean itself where s = 0."""
    import numpy as np

    s = np.asarray(spread, float)
    q = np.clip(q, U_CUT, 1 - U_CUT)
    m = np.where(s > 0, np.pi * s / np.sin(np.pi * np.maximum(s, 1e-300)), 1.0)
    v = mean * (floor + (1 - floor) * (q / (1 - q)) ** s / m)
    return np.where(s > 0, v, mean * np.ones_like(v))


def _body_q(x50: float, s: Any, f: Any, q: Any) -> Any:
    """Quantile q of a point's body about its measured median x50: x50 (f + (1 - f) r^s),
    r = q / (1 - q) cut to [U_CUT, 1 - U_CUT] (numpy, broadcast)."""
    import numpy as np

    q = np.clip(q, U_CUT, 1 - U_CUT)
    return x50 * (f + (1 - f) * (q / (1 - q)) ** s)


def _fit_body(qs: Any, logs: Any, x50: float, pi: float) -> tuple[float, float, float]:
    """(error, s, f) of a point's body (`_body_q`) on its levels below 1 - pi (their level
    P / (1 - pi)): the least sum of (ln body - ln x)^2 on a grid of s and f."""
    import numpy as np

    keep = qs < 1 - pi
    if keep.sum() == 0:
        return 0.0, 0.0, 0.0
    q, y = qs[keep] / (1 - pi), logs[keep]
    ss = np.linspace(0, MAX_SPREAD, 51)[:, None, None]
    fs = np.linspace(0, 0.98, 50)[None, :, None]
    e = ((np.log(_body_q(x50, ss, fs, q[None, None, :])) - y) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(e)), e.shape)
    return float(e[i, j]), float(ss[i, 0, 0]), float(fs[0, j, 0])


@dataclass(frozen=True)
class _Tail:
    """A battery point's tail as the freeze fit sees it (`fit_freeze`): its label, its body
    (median x50, spread s, floor f, fitted on the levels up to BODY_LEVEL), its measured
    mean latency R (ns) and its levels from TAIL_LEVEL with their ln ns."""

    label: str
    x50: float
    s: float
    f: float
    mean: float
    levels: Any
    logs: Any
    depth: int = 1
    reads: float = 1.0
    """Its loop's depth and share of reads (freezes started by commands: `command_freeze_ns`)."""


def _tails(points: Sequence[Point]) -> list[_Tail]:
    """Every loaded point (QD > 1: the QD1 points' tails are the stalls', `fit_stall`) and
    direction with a clat list of at least three body levels and one tail level
    (`clat_levels`), the fdatasync points aside."""
    import numpy as np

    out = []
    for p in points:
        if p.job.fdatasync or p.job.iodepth <= 1:
            continue
        for side in ("read", "write"):
            m = getattr(p, side)
            levels = clat_levels(p, side) if m is not None else []
            x50 = next((v for q, v in levels if abs(q - 0.5) < 1e-9), 0.0)
            body = [(q, v) for q, v in levels if q <= BODY_LEVEL]
            tail = [(q, v) for q, v in levels if q >= TAIL_LEVEL]
            if len(body) < 3 or not tail or x50 <= 0 or m.lat_mean_ns <= 0:
                continue
            qs, logs = np.array([q for q, _ in body]), np.log([v for _, v in body])
            _, s, f = _fit_body(qs, logs, x50, 0.0)
            out.append(
                _Tail(
                    f"{p.job.name} {side}",
                    x50,
                    s,
                    f,
                    m.lat_mean_ns,
                    np.array([q for q, _ in tail]),
                    np.log([v for _, v in tail]),
                    p.job.iodepth,
                    _read_share(p.job),
                )
            )
    return out


def _read_share(job: Job) -> float:
    """The share of `job`'s commands that are reads (a mix: rwmixread, fio's default 50)."""
    if job.direction == "mixed":
        return (50 if job.rwmixread is None else job.rwmixread) / 100
    return 1.0 if job.direction == "read" else 0.0


def freeze_ns(t: _Tail, interval: Any, time: Any) -> Any:
    """The tail levels of point `t` with device-wide freezes every `interval` ns lasting
    `time` ns (flash.rs, "Freezes"; numpy, broadcast over interval and time): a share pi =
    R / interval of its commands are in flight when a freeze starts (Little's law: the q in
    flight over the q / R a second completed), each then waits `time` more; quantile P is
    the body's at P / (1 - pi) below 1 - pi and x50 + time above."""
    import numpy as np

    return _frozen_levels(t, np.minimum(t.mean / np.asarray(interval, float), 0.5), time)


def command_freeze_ns(t: _Tail, read_p: Any, write_p: float, time: Any) -> Any:
    """The tail levels of point `t` when each read (write) stops the command processor for
    `time` ns with probability `read_p` (`write_p`) (flash.rs, "Freezes started by commands";
    numpy, broadcast over read_p and time): its q commands go round in one pass, so one
    blocking delays them all: a share pi = q (f p_r + (1 - f) p_w) waits `time` more (f its
    read share); the levels as `freeze_ns`'s."""
    import numpy as np

    p = t.reads * np.asarray(read_p, float) + (1 - t.reads) * write_p
    return _frozen_levels(t, np.minimum(t.depth * p, 0.5), time)


def _frozen_levels(t: _Tail, pi: Any, time: Any) -> Any:
    """Quantile P of point `t` when a share `pi` of its commands waits `time` ns more: the
    body's at P / (1 - pi) below 1 - pi, x50 + time above (numpy, broadcast)."""
    import numpy as np

    pi = np.asarray(pi, float)[..., None]
    q = t.levels
    low = _body_q(t.x50, t.s, t.f, q / (1 - pi))
    high = t.x50 + np.asarray(time, float)[..., None] + 0 * q
    return np.where(q < 1 - pi, low, high)


def freeze_residuals(params: Params, tails: Sequence[_Tail]) -> list[tuple[str, float]]:
    """(label, ln model - ln measured) of every tail level of `tails` with the fit's freezes
    (none: the bodies alone)."""
    import numpy as np

    interval = float(params.get("freeze_interval", 0.0))
    time = float(params.get("freeze_time", 0.0))
    read_p = float(params.get("read_freeze_probability", 0.0))
    write_p = float(params.get("write_freeze_probability", 0.0))
    commands = params.get("freeze_trigger") == "command"
    out = []
    for t in tails:
        if commands and read_p + write_p > 0 and time > 0:
            m = command_freeze_ns(t, np.array(read_p), write_p, np.array(time))
        elif not commands and interval > 0 and time > 0:
            m = freeze_ns(t, np.array(interval), np.array(time))
        else:
            m = _body_q(t.x50, t.s, t.f, t.levels)
        for q, x, y in zip(t.levels, np.log(m), t.logs, strict=True):
            out.append((f"{t.label} p{100 * q:g}", float(x - y)))
    return out


def fit_freeze(points: Sequence[Point], triggers: Sequence[str] = ("clock", "command")) -> Params:
    """Freezes (flash.rs, "Freezes" and "Freezes started by commands") from every point's
    clat list (module doc): each point's body fitted on its levels up to BODY_LEVEL, then for
    each trigger of `triggers` its parameters the least sum over the levels from TAIL_LEVEL
    of (ln M - ln x)^2 on log grids refined FREEZE_REFINE times about their best cell: the
    clock's (interval, time) (`freeze_ns`; time at most MAX_FREEZE_SHARE of the interval),
    the commands' (read probability, time) for each write probability of a grid (0, then
    FREEZE_WRITE_PROBABILITY, refined about the best) (`command_freeze_ns`); the commands'
    kept only when their error is below the clock's by FREEZE_GAIN (the battery's depths and
    directions tell them apart: a clock catches a share R / I of every point's commands,
    commands a share q (f p_r + (1 - f) p_w) growing with the depth); {} when the kept one
    does not lower the bodies' own error by FREEZE_GAIN."""
    import numpy as np

    tails = _tails(points)
    if not tails:
        return {}
    alone = sum(x * x for _, x in freeze_residuals({}, tails))
    clock_e, (interval, clock_time) = _grid_fit(
        tails, freeze_ns, FREEZE_INTERVAL_NS, lambda iv, tm: tm <= MAX_FREEZE_SHARE * iv
    )
    best: tuple[float, float, tuple[float, float]] = (math.inf, 0.0, (0.0, 0.0))
    if "command" in triggers:

        def at(write_p: float) -> tuple[float, float, tuple[float, float]]:
            e, found = _grid_fit(
                tails,
                lambda t, p, tm: command_freeze_ns(t, p, write_p, tm),
                FREEZE_PROBABILITY,
                lambda p, tm: p <= MAX_STALL_PROBABILITY,
            )
            return e, write_p, found

        coarse = np.geomspace(*FREEZE_WRITE_PROBABILITY)
        best = min((at(float(w)) for w in (0.0, *coarse)), key=lambda r: r[0])
        if best[1] > 0:
            step = float(coarse[1] / coarse[0])
            fine = best[1] * np.geomspace(step**-0.5, step**0.5, 7)
            best = min((best, *(at(float(w)) for w in fine)), key=lambda r: r[0])
    command_e, write_p, (read_p, command_time) = best
    if command_e < (1 - FREEZE_GAIN) * clock_e:
        if command_e >= (1 - FREEZE_GAIN) * alone:
            return {}
        return {
            "freeze_trigger": "command",
            "read_freeze_probability": read_p,
            "write_freeze_probability": write_p,
            "freeze_time": command_time,
        }
    if clock_e >= (1 - FREEZE_GAIN) * alone:
        return {}
    return {"freeze_interval": interval, "freeze_time": clock_time}


def _grid_fit(
    tails: Sequence[_Tail],
    model: Callable[[_Tail, Any, Any], Any],
    first: tuple[float, float, int],
    allowed: Callable[[Any, Any], Any],
) -> tuple[float, tuple[float, float]]:
    """(error, (x, time)) of the least sum over `tails`' levels of (ln model(t, x, time) -
    ln level)^2 on a log grid of x (`first`) and of time (FREEZE_TIME_NS) where `allowed`,
    refined FREEZE_REFINE times about its best cell."""
    import numpy as np

    axes = [np.geomspace(*first), np.geomspace(*FREEZE_TIME_NS)]
    for _ in range(1 + FREEZE_REFINE):
        xs, tm = axes[0][:, None], axes[1][None, :]
        e = sum(((np.log(model(t, xs, tm)) - t.logs) ** 2).sum(axis=-1) for t in tails)
        e = np.where(allowed(xs, tm), e, np.inf)
        i, j = np.unravel_index(int(np.argmin(e)), e.shape)
        best = float(e[i, j])
        at = (float(axes[0][i]), float(axes[1][j]))
        steps = [
            a[min(k + 1, len(a) - 1)] / a[max(k - 1, 0)] for a, k in zip(axes, (i, j), strict=True)
        ]
        axes = [x * np.geomspace(st**-0.5, st**0.5, 11) for x, st in zip(at, steps, strict=True)]
    return best, at


def _unfrozen(points: Sequence[Point], freeze: Params) -> list[Point]:
    """`points` as the device would have measured them without the freezes `freeze` (flash.rs,
    "Freezes": it runs a share 1 - D / I of the time, so X = X0 (1 - D / I) and by Little's
    law T = T0 / (1 - D / I)): throughputs over that share, latencies times it; unchanged
    without freezes."""
    if not freeze or freeze.get("freeze_trigger") == "command":
        # Freezes started by commands stop the processor alone: the closed forms hold them
        # (a command's mean p D on it), so the points are fitted as measured.
        return list(points)
    share = 1 - freeze["freeze_time"] / freeze["freeze_interval"]

    def side(m: Side | None) -> Side | None:
        if m is None:
            return None
        return replace(
            m,
            iops=m.iops / share,
            bw_bytes=m.bw_bytes / share,
            lat_mean_ns=m.lat_mean_ns * share,
            clat_p50_ns=m.clat_p50_ns * share,
        )

    return [replace(p, read=side(p.read), write=side(p.write)) for p in points]


def fit_stall(points: Sequence[Point]) -> Params:
    """The stall component (flash.rs "Stalls") from the random 4 KiB points' clat percentile
    lists, every depth (module doc): each point's body a shifted log-logistic about its
    measured median x50, x50 (f + (1 - f) r^s), r = P / (1 - P), the stall shared by all;
    the least sum over the listed levels of (ln M(P) - ln x_P)^2, M the mixture
    (`mixture_ns`), alternating STALL_ROUNDS times between the stall on its grids (given the
    bodies) and each body's (s, f) (given the stall). {} when no point has a list, or when
    the best stall does not lower the error of the bodies alone."""
    import numpy as np

    obs = []
    for side in ("read", "write"):
        p = _tail_point(points, side)
        if p is None or getattr(p, side) is None:
            continue
        levels = clat_levels(p, side)
        x50 = next((v for q, v in levels if abs(q - 0.5) < 1e-9), 0.0)
        mean = getattr(p, side).lat_mean_ns
        if len(levels) >= 3 and x50 > 0 and mean > 0:
            obs.append(
                (np.array([q for q, _ in levels]), np.log([v for _, v in levels]), x50, mean)
            )
    if not obs:
        return {}

    body_q, fit_body = _body_q, _fit_body

    def body_mean(x50: float, s: float, f: float) -> float:
        """The body's mean: x50 (f + (1 - f) m(s)), m(s) = pi s / sin(pi s)."""
        m = math.pi * s / math.sin(math.pi * s) if s > 0 else 1.0
        return x50 * (f + (1 - f) * m)

    # The bodies alone (pi = 0) on every level and the mean: the error a stall must beat.
    alone = 0.0
    bodies = []
    for q, y, x, mean in obs:
        e, s, f = fit_body(q, y, x, 0.0)
        alone += e + (math.log(body_mean(x, s, f)) - math.log(mean)) ** 2
        bodies.append((s, f))

    def grid_error(pis: Any, ds: Any, sds: Any, fds: Any) -> Any:
        """The error of every stall of the grid (axes pi, D, spread, floor), bodies fixed."""
        pis, ds = pis[:, None, None, None, None], ds[None, :, None, None, None]
        sds, fds = sds[None, None, :, None, None], fds[None, None, None, :, None]
        total = 0.0
        for (qs, logs, x50, mean), (s, f) in zip(obs, bodies, strict=True):
            q = qs[None, None, None, None, :]
            low = body_q(x50, s, f, q / (1 - pis))
            high = x50 + _grid_quantile(ds, fds, sds, (q - (1 - pis)) / pis)
            m = np.where(q < 1 - pis, low, high)
            total = total + ((np.log(m) - logs) ** 2).sum(axis=4)
            # The point's mean latency: the body's plus the stalls' pi D.
            total = total + (np.log(body_mean(x50, s, f) + pis * ds) - math.log(mean))[..., 0] ** 2
        return total

    best: tuple[float, Params] = (math.inf, {})
    for _ in range(STALL_ROUNDS):
        axes = [
            np.geomspace(*STALL_P),
            np.geomspace(*STALL_D_NS),
            np.array(STALL_SPREADS),
            np.array(STALL_FLOORS),
        ]
        # The grid, then STALL_REFINE finer grids about its best cell (its neighbours'
        # span, 11 steps an axis; pi and D in log terms).
        for _ in range(1 + STALL_REFINE):
            e = grid_error(*axes)
            i = np.unravel_index(int(np.argmin(e)), e.shape)
            at = [float(a[k]) for a, k in zip(axes, i, strict=True)]
            steps = [
                a[min(k + 1, len(a) - 1)] / a[max(k - 1, 0)]
                for a, k in zip(axes[:2], i[:2], strict=True)
            ]
            spans = [
                a[min(k + 1, len(a) - 1)] - a[max(k - 1, 0)]
                for a, k in zip(axes[2:], i[2:], strict=True)
            ]
            axes = [
                np.clip(
                    at[0] * np.geomspace(steps[0] ** -0.5, steps[0] ** 0.5, 11),
                    1e-6,
                    MAX_STALL_PROBABILITY,
                ),
                at[1] * np.geomspace(steps[1] ** -0.5, steps[1] ** 0.5, 11),
                np.clip(at[2] + np.linspace(-spans[0] / 2, spans[0] / 2, 11), 0.0, MAX_SPREAD),
                np.clip(at[3] + np.linspace(-spans[1] / 2, spans[1] / 2, 11), 0.0, 0.99),
            ]
        stall = {
            "stall_probability": at[0],
            "stall_time": at[1],
            "stall_spread": at[2],
            "stall_floor": at[3],
        }
        pi = stall["stall_probability"]
        fitted = [fit_body(q, y, x, pi) for q, y, x, _ in obs]
        bodies = [b[1:] for b in fitted]
        # The whole error at this stall and these bodies.
        err = 0.0
        for (qs, logs, x50, mean), (s, f) in zip(obs, bodies, strict=True):
            z = pi * stall["stall_time"]
            err += (math.log(body_mean(x50, s, f) + z) - math.log(mean)) ** 2

            def body(q: float, x50: float = x50, s: float = s, f: float = f) -> float:
                return float(body_q(x50, s, f, q))

            m = np.array([mixture_ns(body, x50, stall, float(q)) for q in qs])
            err += float(((np.log(m) - logs) ** 2).sum())
        best = min(best, (err, stall), key=lambda b: b[0])
    return best[1] if best[0] < alone else {}


def _targets(point: Point, side: str) -> list[tuple[float, float]]:
    """(level, ns) a tail point's distribution is fitted on: fio's clat list
    (`clat_levels`), or its kept p50, p99 (p99.9) when the JSON has no list."""
    levels = clat_levels(point, side)
    if len(levels) >= 2:
        return levels
    m = getattr(point, side)
    return [(q, getattr(m, a)) for a, q, _ in PERCENTILES if m is not None and getattr(m, a) > 0]


def fit_service(params: Params, point: Point, side: str) -> tuple[float, float]:
    """(spread, floor) of direction `side`'s unit time: the least sum over the point's
    measured percentiles (`_targets`) of (ln model - ln measured)^2 (module doc), the model's
    quantile the mixture with the stall of `params` (`model_percentile_ns`), on a grid of
    spreads [0, MAX_SPREAD] and floors [0, 1) refined twice around its best cell; (0, 0)
    when the point has fewer than two percentiles."""
    measured_ = getattr(point, side)
    targets = _targets(point, side) if measured_ is not None else []
    if measured_ is None or len(targets) < 2:
        return 0.0, 0.0

    import numpy as np

    # M(p) = fixed + Q(p): the fixed part is the model's QD1 figure without a spread less a.
    mean = float(params[f"{side}_latency"])
    flat = {**params, f"{side}_spread": 0.0, f"{side}_floor": 0.0, "stall_probability": 0.0}
    fixed = model_percentile_ns(flat, point.job, side, 0.5) - mean
    pi, d, sd, fd = stall_of(params)

    def err(ss: Any, fs: Any) -> Any:
        """The error on the grid of spreads `ss` x floors `fs` (the mixture, vectorized)."""
        sv, fv = np.meshgrid(np.asarray(ss, float), np.asarray(fs, float), indexing="ij")
        total = np.zeros_like(sv)
        for q, v in targets:
            if pi > 0 and q >= 1 - pi:
                model = fixed + _grid_quantile(mean, fv, sv, 0.5)
                model = model + quantile_ns(d, fd, sd, (q - (1 - pi)) / pi)
            else:
                model = fixed + _grid_quantile(mean, fv, sv, q / (1 - pi))
            total += (np.log(model) - math.log(v)) ** 2
        return total

    s_lo, s_hi, f_lo, f_hi = 0.0, MAX_SPREAD, 0.0, 1.0 - 1.0 / FLOOR_GRID
    best = (float(err([0.0], [0.0])[0, 0]), 0.0, 0.0)
    for _ in range(3):
        ss = [s_lo + (s_hi - s_lo) * i / SPREAD_GRID for i in range(SPREAD_GRID + 1)]
        fs = [f_lo + (f_hi - f_lo) * i / FLOOR_GRID for i in range(FLOOR_GRID + 1)]
        e = err(ss, fs)
        i, j = np.unravel_index(int(np.argmin(e)), e.shape)
        best = min(best, (float(e[i, j]), ss[i], fs[j]))
        ds, df = 2 * (s_hi - s_lo) / SPREAD_GRID, 2 * (f_hi - f_lo) / FLOOR_GRID
        s_lo, s_hi = max(0.0, best[1] - ds), min(MAX_SPREAD, best[1] + ds)
        f_lo, f_hi = max(0.0, best[2] - df), min(1.0 - 1e-9, best[2] + df)
    return best[1], best[2]


@dataclass(frozen=True)
class Estimate:
    """A fitted parameter's account (module doc, "Uncertainty"): its value, its standard
    error (inf: not identified, no battery point moves with it), the bound it sits at (None:
    inside), and the battery points that identify it with their share of its sensitivity."""

    value: float
    sigma: float
    bound: str | None
    points: tuple[tuple[str, float], ...]


# The parameters the uncertainty covers, with the smallest step of their derivative.
STEPS: tuple[tuple[str, float], ...] = (
    ("units", 1e-2),
    ("read_latency", 10.0),
    ("write_latency", 10.0),
    ("read_rate", 1e3),
    ("write_rate", 1e3),
    ("transfer_overhead", 10.0),
    ("batch_overhead", 10.0),
    ("command_overhead", 10.0),
    ("write_command_overhead", 10.0),
    ("flush_latency", 10.0),
    ("read_spread", 1e-3),
    ("read_floor", 1e-3),
    ("write_spread", 1e-3),
    ("write_floor", 1e-3),
    ("stall_probability", 1e-5),
    ("stall_time", 1e3),
    ("stall_spread", 1e-3),
    ("stall_floor", 1e-3),
    ("read_stream_rate", 1e3),
    ("write_stream_rate", 1e3),
    ("flush_rate", 1e3),
    ("freeze_interval", 1e3),
    ("freeze_time", 1e3),
    ("read_freeze_probability", 1e-7),
    ("write_freeze_probability", 1e-7),
)


def residuals(
    params: Params, points: Sequence[Point], tails: Sequence[_Tail] = ()
) -> list[tuple[str, float]]:
    """(label, ln model - ln measured) of every figure the fit answers for: each point's
    requests per second (at QD1 its mean latency's inverse), each fdatasync point's latency,
    the random 4 KiB QD1 points' percentiles (the unit times' fit), and with freezes every
    point's tail levels `tails` (`fit_freeze`)."""
    out = freeze_residuals(params, tails) if _freezes(params) else []
    for p in points:
        if p.job.fdatasync:
            if p.fdatasync_ns and "flush_latency" in params:
                model = predicted(params, p.job)[1]
                out.append((p.job.name, math.log(model) - math.log(p.fdatasync_ns)))
            continue
        if p.iops <= 0:
            continue
        out.append((p.job.name, math.log(throughput(params, p.job)) - math.log(p.iops)))
        for side in ("read", "write"):
            if _tail_point(points, side) is not p:
                continue
            for q, v in _targets(p, side):
                model = model_percentile_ns(params, p.job, side, q)
                out.append((f"{p.job.name} p{100 * q:g}", math.log(model) - math.log(v)))
    return out


def _freezes(params: Params) -> bool:
    """Whether `params` have freezes (by the clock, or started by commands)."""
    return bool(
        params.get("freeze_interval")
        or params.get("read_freeze_probability")
        or params.get("write_freeze_probability")
    )


def _clamped(key: str, x: float) -> float:
    """`x` within what the model accepts for `key`."""
    if key == "units":
        return min(max(x, 1.0), float(MAX_UNITS))
    if key.endswith("_probability"):
        return min(max(x, 0.0), MAX_STALL_PROBABILITY)
    if key.endswith("_spread"):
        return min(max(x, 0.0), MAX_SPREAD)
    if key.endswith("_floor"):
        return min(max(x, 0.0), 1.0)
    return max(x, 1.0 if key.endswith("_rate") else 0.0)


def uncertainty(
    params: Params, points: Sequence[Point], fixed: frozenset[str] = frozenset()
) -> dict[str, Estimate]:
    """Each fitted parameter's standard error from the Jacobian J of `residuals` at the fit
    (central differences): cov = s^2 (J^T J)^+ over the identified parameters, s^2 = the
    residuals' sum of squares / (n - p); the points that identify it: the largest shares of
    its column's J_ij^2. A column of zeros (no point moves with the parameter): not
    identified, sigma inf. The parameters of `fixed` (at a bound of the search: an active
    constraint) are held: no sigma (NaN), but their columns still name their points. Bounds
    are added by `fit`."""
    import numpy as np

    keys = [
        (k, h)
        for k, h in STEPS
        if k in params
        and not (k.endswith("_floor") and not params.get(k.replace("floor", "spread")))
        and not (k.startswith("stall_") and not params.get("stall_probability"))
    ]
    tails = _tails(points) if _freezes(params) else []
    base = residuals(params, points, tails)
    labels = [label for label, _ in base]
    r = np.array([x for _, x in base])
    cols = []
    for k, h_min in keys:
        x = float(params[k])
        h = max(abs(x) * 1e-3, h_min)
        up, down = _clamped(k, x + h), _clamped(k, x - h)
        if up == down:
            cols.append(np.zeros(len(r)))
            continue
        ru = np.array([v for _, v in residuals({**params, k: up}, points, tails)])
        rd = np.array([v for _, v in residuals({**params, k: down}, points, tails)])
        cols.append((ru - rd) / (up - down))
    jac = np.column_stack(cols) if cols else np.zeros((len(r), 0))
    norms = np.sqrt((jac**2).sum(axis=0))
    # Identified: a change of the parameter by its own size (1000 steps when it is 0) moves
    # the residuals by more than a millionth.
    scale = [max(abs(float(params[k])), 1000 * h) for k, h in keys]
    ident = [i for i, n in enumerate(norms) if n * scale[i] > 1e-6 and keys[i][0] not in fixed]
    out: dict[str, Estimate] = {}
    dof = len(r) - len(ident)
    sigma = np.full(len(keys), math.inf)
    if ident and dof > 0:
        # In units of each parameter's scale, so that (J^T J) is well conditioned.
        sc = np.array([scale[i] for i in ident])
        j = jac[:, ident] * sc
        s2 = float(r @ r) / dof
        cov = s2 * np.linalg.pinv(j.T @ j)
        for n, i in enumerate(ident):
            sigma[i] = math.sqrt(max(float(cov[n, n]), 0.0)) * sc[n]
    for i, (k, _) in enumerate(keys):
        col = jac[:, i] ** 2
        total = float(col.sum())
        top = sorted(range(len(labels)), key=lambda n: -col[n])[:3] if total > 0 else []
        shares = tuple((labels[n], float(col[n]) / total) for n in top if col[n] > 0)
        sd = math.nan if k in fixed else float(sigma[i])
        out[k] = Estimate(float(params[k]), sd, None, shares)
    return out


@dataclass(frozen=True)
class Fit:
    """The flash model's parameters, the notes on what was not measured, each fitted
    parameter's account (`Estimate`) and the one-line flags of the parameters that sit at a
    bound (a fit with flags is refused unless accepted)."""

    params: Params
    notes: tuple[str, ...]
    estimates: dict[str, Estimate] = field(default_factory=dict)
    flags: tuple[str, ...] = ()


def _ns(x: float) -> str:
    return f"{x / 1e3:.1f} us" if x >= 1e3 else f"{x:.0f} ns"


def fit_flush(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """(F0 in ns, F in bytes/s) of the fdatasync points' line S = F0 + L / F (module doc,
    "Flush"): least relative squares over (L, S), each a write of L bytes then the FLUSH;
    None (no drain: the sizes' mean, as before) with fewer than two sizes or a slope not
    above 0 (a flush that does not grow with what was written before it)."""
    if len({b for b, _ in points}) < 2:
        return None
    w = [1 / (s * s) for _, s in points]
    sw = sum(w)
    mb = sum(wi * b for wi, (b, _) in zip(w, points, strict=True)) / sw
    ms = sum(wi * s for wi, (_, s) in zip(w, points, strict=True)) / sw
    sxx = sum(wi * (b - mb) ** 2 for wi, (b, _) in zip(w, points, strict=True))
    sxy = sum(wi * (b - mb) * (s - ms) for wi, (b, s) in zip(w, points, strict=True))
    slope = sxy / sxx if sxx > 0 else 0.0
    # A drain below the simulator's nanosecond at the largest size is none.
    if slope * max(b for b, _ in points) < 1.0:
        return None
    return ms - slope * mb, 1e9 / slope


def _blocking_s(freeze: Params, side: str, proc: Sequence[float]) -> float:
    """A `side` command's mean time of the processor stopped by freezes started by commands,
    p_side D in seconds (flash.rs, `command_freeze_s`); 0 without them or without a
    processor (`proc`'s costs all 0)."""
    if freeze.get("freeze_trigger") != "command" or sum(proc) <= 0:
        return 0.0
    return float(freeze.get(f"{side}_freeze_probability", 0.0)) * freeze["freeze_time"] / 1e9


def fit(
    points: Sequence[Point],
    capacity: int,
    queue_depth: int,
    shapes: bool = True,
    triggers: Sequence[str] = ("clock", "command"),
) -> Fit:
    """The flash parameters of the battery's `points` (module doc); `shapes` False: without
    the streams, the draining processor and the flush's drain (the fit before them);
    `triggers`: the freezes' triggers `fit_freeze` may choose from."""
    passes = shapes
    notes: list[str] = []
    # The stall component first (from the QD1 points' percentile lists). With stalls, the
    # unit times follow the QD1 medians (the body: a stall's share of a point's mean
    # varies from point to point, here 87 to 159 us for two 4k QD1 reads) and the stalls'
    # mean z = p D is their own (on the unit, in the closed forms).
    stall = fit_stall(points)
    # Device-wide freezes, from every loaded point's tail (module doc, "freeze"); the body
    # is then fitted on the points with their share taken out (`_unfrozen`).
    freeze = fit_freeze(points, triggers) if shapes else {}
    measured_points, points = points, _unfrozen(points, freeze)
    # Freezes started by commands enter the closed forms (a command's mean p D on the
    # processor).
    in_body = freeze if freeze.get("freeze_trigger") == "command" else {}
    by = {d: [p for p in points if p.job.direction == d] for d in ("read", "write", "mixed")}
    read = _Direction.of(by["read"], "read", bool(stall))
    if by["write"]:
        write = _Direction.of(by["write"], "write", bool(stall))
    else:
        write = read
        notes.append("reads only: write_latency and write_rate are the read's (not measured)")
    # Each direction's stream (module doc, "Streams"), from its QD1 points at rate_d(0);
    # fitted again below at the descent's c with the processor's b + k in front of it.
    if shapes:
        read = read.streamed()
        write = write.streamed() if by["write"] else read
    loaded = [p for p in points if p.job.iodepth > 1 and p.iops and not p.job.fdatasync]
    # c + b + k is at most the smaller QD1 intercept less the least unit time (a_d >= 5
    # us); c at most the saturated points' time.
    intercept = min(d.intercept_ns(0.0) / 1e9 for d in (read, write))
    # Every command pays c + b + k, so they are at most what half the QD1 commands took: the
    # random 4k QD1 points' clat p50 (a mean inflated by rare stalls would otherwise put the
    # stalls into costs every command pays).
    medians = [
        getattr(t, d).clat_p50_ns / 1e9
        for d in ("read", "write")
        if (t := _tail_point(points, d)) is not None and getattr(t, d) and getattr(t, d).clat_p50_ns
    ]
    room = max(0.0, min([intercept, *medians]) - MIN_LATENCY_NS / 1e9)
    c_max = min(room, read.min_time_s, write.min_time_s)
    u_max = stop_depth(points)
    # A write's own command cost ("write_command_overhead") from the loaded writes, with a
    # processor; reads only, or without the shapes, writes cost k as reads do.
    per_write = shapes and bool(by["write"])

    def params_of(
        c_s: float, units: int, duplex: str, proc: Proc, batching: str = SNAPSHOT
    ) -> Params:
        # A draining pass holds each command for k_d + t, so a direction's saturated points'
        # line has the intercept c + k_d (module doc, "batching"); k_d is the read's k or
        # the write's k_w ("write_command_overhead"), and with freezes started by commands
        # k_d + p_d D (a direction's mean blocking is on the processor: flash.rs,
        # `command_freeze_s`).
        b, k, k_w = proc
        line_r = c_s + k + _blocking_s(in_body, "read", proc) if batching == DRAIN else c_s
        line_w = c_s + k_w + _blocking_s(in_body, "write", proc) if batching == DRAIN else c_s
        r_rate, w_rate = read.rate(line_r), write.rate(line_w)
        extra: Params = {"batching": batching} if batching != SNAPSHOT else {}
        for d in (read, write):
            if d.stream > 0:
                extra[f"{d.side}_stream_rate"] = d.stream
        return {
            "capacity": capacity,
            "units": units,
            "read_latency": read.latency_ns(c_s, b + k, line_r),
            "write_latency": write.latency_ns(c_s, b + k_w, line_w),
            "read_rate": r_rate,
            "write_rate": w_rate,
            "link_rate": max(r_rate, w_rate, *(p.bw_bytes for p in by["mixed"])),
            "duplex": duplex,
            "transfer_overhead": c_s * 1e9,
            "turnaround": 0,
            "batch_overhead": b * 1e9,
            "command_overhead": k * 1e9,
            "write_command_overhead": k_w * 1e9,
            "write_buffer": 0,
            "queue_depth": queue_depth,
            **stall,
            **in_body,
            **extra,
        }

    def cost(params: Params, which: Sequence[Point]) -> float:
        return sum((math.log(throughput(params, p.job)) - math.log(p.iops)) ** 2 for p in which)

    def units_cost(
        c_s: float, duplex: str, proc: Proc, batching: str = SNAPSHOT
    ) -> Callable[[int], float]:
        """E over the loaded points as a function of N, the rest fixed: N enters only the
        unit bound N / a, so each point's other bound is computed once."""
        base = params_of(c_s, 1, duplex, proc, batching)
        terms = [(bounds(base, p.job), p.iops) for p in loaded]
        return lambda n: sum(
            (math.log(min(n / a, other)) - math.log(x)) ** 2 for (a, other), x in terms
        )

    def best_units(c_s: float, duplex: str, proc: Proc, batching: str) -> int:
        return min(range(1, u_max + 1), key=units_cost(c_s, duplex, proc, batching))

    def argmin(f: Callable[[float], float], hi: float) -> float:
        """The least f on [0, hi): a grid of C_GRID steps, then golden section (0.1 ns)
        between the best step's neighbours; 0 when hi <= 0."""
        if hi <= 0:
            return 0.0
        grid = [hi * k / C_GRID for k in range(C_GRID)]
        k = min(range(C_GRID), key=lambda i: f(grid[i]))
        lo, up = grid[max(k - 1, 0)], hi * min(k + 1, C_GRID) / C_GRID
        while up - lo > 1e-10:
            m1, m2 = up - (up - lo) / GOLDEN, lo + (up - lo) / GOLDEN
            lo, up = (lo, m2) if f(m1) <= f(m2) else (m1, up)
        return min((grid[k], (lo + up) / 2), key=f)

    def start(duplex: str, batching: str = SNAPSHOT) -> tuple[float, Proc]:
        """The descent's start: the least E on a coarse grid of (c, b, k) within the room
        with units from powers of two (from zero, the descent stops in a local minimum: the
        sharp knee of a few units rather than the gradual rise the processor gives); a
        write's k_w starts at k."""
        grid = []
        steps = [_steps(hi, n) for hi, n in zip((c_max, room, room), START_GRID, strict=True)]
        units = [u for u in START_UNITS if u <= u_max] or [1]
        for c, b, k in itertools.product(*steps):
            if c + b + k > room:
                continue
            e = min(map(units_cost(c, duplex, (b, k, k), batching), units))
            grid.append((e, c, b, k))
        _, c, b, k = min(grid)
        return c, (b, k, k)

    def descend(
        duplex: str,
        begin: tuple[float, Proc] | None,
        batching: str = SNAPSHOT,
        own_write: bool = False,
    ) -> tuple[float, Params]:
        """From `begin` (c, (b, k, k_w)), alternate over c, the processor's b, k and (with
        `own_write`) the write's k_w, and units until a round gains less than ROUND_GAIN
        (ROUNDS at most), each within the room the others leave (k and k_w each: a command
        pays one of them; without `own_write` k_w is k); returns (E, parameters). `begin`
        None: from c = 0 without a processor, over c and units only."""
        c_s, proc = begin or (0.0, (0.0, 0.0, 0.0))
        units = best_units(c_s, duplex, proc, batching)
        error = cost(params_of(c_s, units, duplex, proc, batching), loaded)
        for _ in range(ROUNDS):

            def e(c: float, pr: Proc, n: int = units) -> float:
                return cost(params_of(c, n, duplex, pr, batching), loaded)

            c_s = argmin(lambda c, pr=proc: e(c, pr), min(c_max, room - proc[0] - max(proc[1:])))
            if begin is not None:
                _, k, k_w = proc
                b = argmin(lambda b, c=c_s, k=k, kw=k_w: e(c, (b, k, kw)), room - c_s - max(k, k_w))
                # Without a write's own cost, k_w follows k.
                k = argmin(
                    lambda k, c=c_s, b=b, kw=k_w: e(c, (b, k, kw if own_write else k)),
                    room - c_s - b,
                )
                k_w = k
                if own_write:
                    k_w = argmin(lambda kw, c=c_s, b=b, k=k: e(c, (b, k, kw)), room - c_s - b)
                proc = (b, k, k_w)
            units = best_units(c_s, duplex, proc, batching)
            error, before = cost(params_of(c_s, units, duplex, proc, batching), loaded), error
            if before - error <= ROUND_GAIN * before:
                break
        return error, params_of(c_s, units, duplex, proc, batching)

    # Three descents, the best end: from the grid's start with a snapshot processor, from
    # the grid's start with a draining one (module doc, "The processor's passes"), and
    # without one (the plain units-and-pipes device, whose c the coarse grid may miss).
    def descents(d: str) -> Params:
        e, best = min((descend(d, start(d)), descend(d, None)), key=lambda r: r[0])
        if passes:
            # A draining processor is kept when it lowers E by PASS_GAIN at least (a mode
            # chosen by the points' noise, at a few ns of overhead, is not a shape).
            e_drain, drained = descend(d, start(d, DRAIN), DRAIN)
            if e_drain < (1 - PASS_GAIN) * e:
                e, best = e_drain, drained
        b, k = best["batch_overhead"] / 1e9, best["command_overhead"] / 1e9
        if per_write and b + k > 0:
            # A write's own command cost, a descent more from the best with it free: kept,
            # as the draining pass, when it lowers E by PASS_GAIN at least.
            begin = (best["transfer_overhead"] / 1e9, (b, k, k))
            e_own, own = descend(d, begin, best.get("batching", SNAPSHOT), own_write=True)
            if e_own < (1 - PASS_GAIN) * e:
                return own
        # Writes cost k as reads do: the model's default, not written.
        best.pop("write_command_overhead", None)
        return best

    fits = {d: descents(d) for d in duplexes()}
    duplex = min(duplexes(), key=lambda d: cost(fits[d], by["mixed"]))
    best = fits[duplex]
    if read.stream > 0 or write.stream > 0:
        # The streams again with the processor's b + k in front of them (a stream starts
        # past the processor), and each unit time from its intercept then.
        c_s = best["transfer_overhead"] / 1e9
        drains = best.get("batching") == DRAIN
        k_of = {
            "read": best["command_overhead"],
            "write": best.get("write_command_overhead", best["command_overhead"]),
        }
        proc = (best["batch_overhead"] / 1e9, k_of["read"] / 1e9, k_of["write"] / 1e9)
        front = {d: best["batch_overhead"] + k for d, k in k_of.items()}
        line = {
            d: c_s + k / 1e9 + _blocking_s(in_body, d, proc) if drains else c_s
            for d, k in k_of.items()
        }
        # A draining pass's stream starts as the command arrives: nothing in front of it.
        ahead = {d: 0.0 if drains else f for d, f in front.items()}
        if read.stream > 0:
            read = read.streamed(line["read"], ahead["read"])
        if write.stream > 0:
            write = write.streamed(line["write"], ahead["write"])
        if not by["write"]:
            write = read
        for d in (read, write):
            best[f"{d.side}_latency"] = d.latency_ns(c_s, front[d.side] / 1e9, line[d.side])
            best.pop(f"{d.side}_stream_rate", None)
            if d.stream > 0:
                best[f"{d.side}_stream_rate"] = d.stream
    processor = best["batch_overhead"] + best["command_overhead"]
    if in_body and processor + best.get("write_command_overhead", 0) <= 0:
        # Commands stop the command processor; a body without one has nothing to stop: the
        # clock's freezes then, with the body fitted again on the points they leave
        # (`_unfrozen`; flash.rs, "Freezes started by commands").
        again = fit(measured_points, capacity, queue_depth, shapes, triggers=("clock",))
        note = (
            "freezes: the commands' trigger fitted better, but the body has no command "
            "processor for them to stop: the clock's freezes instead"
        )
        return replace(again, notes=(note, *again.notes))
    params = {
        k: v if isinstance(v, str) else round(v)
        for k, v in {**best, **freeze}.items()
        if not k.endswith("_freeze_probability")
    }
    for k in ("read_freeze_probability", "write_freeze_probability"):
        if k in freeze:
            params[k] = float(f"{freeze[k]:.4g}")
    points = measured_points
    if stall:
        params["stall_probability"] = round(stall["stall_probability"], 6)
        params["stall_spread"] = round(stall["stall_spread"], 4)
        params["stall_floor"] = round(stall["stall_floor"], 4)
    flush = [p.fdatasync_ns for p in points if p.fdatasync_ns is not None]
    if flush:
        # The model's FLUSH passes the processor alone, then takes flush_latency (and with
        # a flush_rate F the drain of the write before it, L / F: module doc, "Flush").
        front = params["batch_overhead"] + params["command_overhead"]
        drain = fit_flush(
            [(p.job.bs * p.job.sync_every, p.fdatasync_ns) for p in points if p.fdatasync_ns]
        )
        if shapes and drain is not None:
            params["flush_latency"] = max(0, round(drain[0] - front))
            params["flush_rate"] = round(drain[1])
        else:
            params["flush_latency"] = max(0, round(statistics.fmean(flush) - front))
    else:
        notes.append("no fdatasync measured: flush_latency is the model's default")
    # The unit times' distributions, from the random 4 KiB QD1 points' percentiles.
    sides = ("read", "write") if by["write"] else ("read",)
    for side in sides:
        tail = _tail_point(points, side)
        if tail is None:
            notes.append(f"no random 4k {side} at QD1: {side}_spread is 0 (no tail fitted)")
            continue
        s, f = fit_service(params, tail, side)
        if stall:
            # The unit time above came from the QD1 medians: its distribution's median is
            # a (f + (1 - f) / m(s)), so its mean is that over the ratio; then the
            # distribution again about that mean.
            median = params[f"{side}_latency"]
            for _ in range(2):
                ratio = quantile_ns(1.0, f, s, 0.5)
                params[f"{side}_latency"] = round(max(MIN_LATENCY_NS, median / ratio))
                s, f = fit_service(params, tail, side)
        params[f"{side}_spread"], params[f"{side}_floor"] = round(s, 4), round(f, 4)
    if not by["write"]:
        params["write_latency"] = params["read_latency"]
        params["write_spread"] = params.get("read_spread", 0.0)
        params["write_floor"] = params.get("read_floor", 0.0)
    # Held at their bounds in the uncertainty (active constraints): an overhead at 0, a unit
    # time at its floor, units at 1 or at the stop depth, a spread at 0 (its floor then
    # does nothing) or at its maximum.
    fixed = {k for k in OVERHEADS if k in params and params[k] <= 0}
    fixed |= {f"{d}_latency" for d in ("read", "write") if params[f"{d}_latency"] <= MIN_LATENCY_NS}
    fixed |= {"units"} if params["units"] <= 1 or params["units"] >= u_max else set()
    for d in ("read", "write", "stall"):
        spread = params.get(f"{d}_spread", 0.0)
        if spread <= 0 or spread >= MAX_SPREAD:
            fixed |= {f"{d}_spread", f"{d}_floor"}
    if params.get("stall_probability", 0.0) >= MAX_STALL_PROBABILITY * (1 - AT_BOUND):
        fixed |= {"stall_probability"}
    for k in ("read_freeze_probability", "write_freeze_probability"):
        if params.get(k, 0.0) >= MAX_STALL_PROBABILITY * (1 - AT_BOUND):
            fixed |= {k}
    estimates = uncertainty(params, points, frozenset(fixed))
    flags = []

    def flag(key: str, text: str) -> None:
        flags.append(f"{key} = {text}")
        if key in estimates:
            estimates[key] = replace(estimates[key], bound=text.split(" sits at ")[-1])

    # A unit time at its floor; overheads that fill the room (the QD1 intercept's or the
    # median's, less 5 us: then the unit time, or the median, bounds them).
    front = (
        params["transfer_overhead"]
        + params["batch_overhead"]
        + max(params["command_overhead"], params.get("write_command_overhead", 0))
    )
    for side in sides:
        a = params[f"{side}_latency"]
        if a <= MIN_LATENCY_NS * (1 + AT_BOUND):
            flag(
                f"{side}_latency",
                f"{_ns(a)} sits at its lower bound {_ns(MIN_LATENCY_NS)} (the least unit time "
                "of flash: the QD1 latency went to the per-command overheads)",
            )
    if room > 0 and front >= room * 1e9 * (1 - AT_BOUND):
        by_median = medians and min(medians) < intercept
        why = "the random 4k QD1 clat p50" if by_median else "the QD1 latency's intercept"
        text = (
            f"{_ns(front)} sits at its upper bound {_ns(room * 1e9)} ({why} less "
            f"{_ns(MIN_LATENCY_NS)}: every command pays them)"
        )
        flags.append(f"transfer_overhead + batch_overhead + command_overhead = {text}")
        for k in OVERHEADS:
            if params.get(k, 0) > 0:
                estimates[k] = replace(estimates[k], bound=text.split(" sits at ")[-1])
    n = params["units"]
    if u_max < MAX_UNITS and n >= u_max:
        flag(
            "units",
            f"{n} sits at its upper bound {u_max} (the depth where the random 4k throughput "
            "stops rising)",
        )
    for side in sides:
        if params.get(f"{side}_spread", 0.0) >= MAX_SPREAD * (1 - AT_BOUND):
            flag(
                f"{side}_spread",
                f"{params[f'{side}_spread']} sits at its upper bound {MAX_SPREAD} (a tail "
                "heavier than the model's distribution allows)",
            )
    if params.get("stall_probability", 0.0) >= MAX_STALL_PROBABILITY * (1 - AT_BOUND):
        flag(
            "stall_probability",
            f"{params['stall_probability']} sits at its upper bound {MAX_STALL_PROBABILITY} "
            "(stalls as common as that are the body, not a tail)",
        )
    for k in ("read_freeze_probability", "write_freeze_probability"):
        if params.get(k, 0.0) >= MAX_STALL_PROBABILITY * (1 - AT_BOUND):
            flag(
                k,
                f"{params[k]} sits at its upper bound {MAX_STALL_PROBABILITY} (commands "
                "stopping the processor that often are its body, not a tail)",
            )
    if "freeze_interval" in params and params["freeze_time"] >= MAX_FREEZE_SHARE * params[
        "freeze_interval"
    ] * (1 - AT_BOUND):
        flag(
            "freeze_time",
            f"{_ns(params['freeze_time'])} sits at its upper bound {MAX_FREEZE_SHARE} x "
            "freeze_interval (a device frozen that often is its body, not a tail)",
        )
    if stall and params.get("stall_spread", 0.0) >= MAX_SPREAD * (1 - AT_BOUND):
        flag(
            "stall_spread",
            f"{params['stall_spread']} sits at its upper bound {MAX_SPREAD} (stall durations "
            "spread wider than the model's distribution allows)",
        )
    return Fit(params, tuple(notes), estimates, tuple(flags))


# --- the target ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What the battery runs on: a file or a block device, its region and its disk."""

    path: Path
    block: bool
    existed: bool
    direct: int
    size_bytes: int
    capacity: int
    name: str
    fstype: str
    disk: Disk | None
    writes: bool


def direct_ok(path: Path) -> bool:
    """Whether `path` (an existing file or device) opens with O_DIRECT (module doc)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return False
        raise
    os.close(fd)
    return True


def _in_use(node: Path, disk: Disk) -> str | None:
    """Why writing to block device `node` would destroy something (None: nothing found)."""
    sysdir = Path("/sys/class/block") / disk.device
    if disk.mount:
        return f"it is mounted on {disk.mount}"
    names = [disk.device, *(p.name for p in sysdir.iterdir() if (p / "partition").is_file())]
    for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
        source, mnt = line.split()[:2]
        if source.startswith("/dev/") and os.path.basename(os.path.realpath(source)) in names:
            return f"{source} is mounted on {mnt}"
    for name in names:
        holders = sorted(h.name for h in (Path("/sys/class/block") / name / "holders").glob("*"))
        if holders:
            return f"{name} is held by {', '.join(holders)}"
    swaps = Path("/proc/swaps").read_text(encoding="utf-8").splitlines()[1:]
    if any(os.path.realpath(s.split()[0]) == os.path.realpath(node) for s in swaps):
        return "it is in use as swap"
    if shutil.which("blkid") is None:
        return "blkid (util-linux) is missing, so no filesystem signature can be ruled out"
    r = subprocess.run(
        ["blkid", "-p", "-o", "export", str(node)], capture_output=True, text=True, check=False
    )
    if r.returncode == 0:
        found = [x for x in r.stdout.split() if x.startswith(("TYPE=", "PTTYPE="))]
        return f"blkid -p finds a signature on it ({' '.join(found) or r.stdout.strip()})"
    if r.returncode != 2:
        return f"blkid -p cannot probe it ({r.stderr.strip() or r.returncode})"
    return None


def open_target(path: Path, size: int | None, write: bool, force: bool) -> Target:
    """Check `path` and describe it (module doc: Target and safety). Creates nothing."""
    if path.is_block_device():
        disk = disk_of_device(path)
        if disk.size_bytes <= 0:
            raise CalibrateError(f"block device {path} has no size (no medium?)")
        if write and not force and (why := _in_use(path, disk)):
            raise CalibrateError(
                f"refusing to write to {path}: {why}; pass --force to destroy its contents"
            )
        region = min(size or DEFAULT_SIZE, disk.size_bytes) // (4 * KIB) * (4 * KIB)
        direct = 1 if direct_ok(path) else 0
        return Target(
            path, True, True, direct, region, disk.size_bytes, disk.device, "", disk, write
        )
    if path.exists() and not path.is_file():
        raise CalibrateError(
            f"target {path} is neither a regular file nor a block device; accepted: a file "
            "(created if missing) or a block device /dev/..."
        )
    if path.exists() and not force:
        raise CalibrateError(
            f"target file {path} exists and the battery would overwrite it; pass --force, or "
            "name a file that does not exist (it is created and removed afterwards)"
        )
    parent = path.absolute().parent
    if not parent.is_dir():
        raise CalibrateError(f"target {path}: directory {parent} does not exist")
    fstype = mount_of(parent)[1]
    try:
        disk: Disk | None = disk_of(parent)
    except ProfileError:  # tmpfs, overlay...: no block device under the file
        disk = None
    default = TMPFS_SIZE if fstype in TMPFS else DEFAULT_SIZE
    region = (size or default) // (4 * KIB) * (4 * KIB)
    free = shutil.disk_usage(parent).free + (path.stat().st_size if path.exists() else 0)
    if region > free:
        raise CalibrateError(
            f"--size {region} bytes: only {free} bytes are free in {parent}; accepted: a size "
            f"of {size_name(MIN_SIZE)} to the free space"
        )
    name = disk.device if disk else (fstype or "file")
    return Target(path, False, path.exists(), 1, region, region, name, fstype, disk, True)


def _probe_direct(target: Target) -> Target:
    """The target with direct=0 when its file refuses O_DIRECT (the file exists by now)."""
    if target.block or direct_ok(target.path):
        return target
    return replace(target, direct=0)


# --- running fio ---------------------------------------------------------------------------


def fio_args(job: Job, target: Target, runtime_ms: int | None) -> list[str]:
    """fio's command line of `job` on `target` (read-only targets get --readonly)."""
    opts = job.options(target.size_bytes, runtime_ms, target.direct)
    args = ["fio", f"--name={job.name}", f"--filename={target.path}"]
    args += [f"--{k}={v}" for k, v in opts] + ["--output-format=json"]
    return args + ([] if target.writes else ["--readonly"])


def fio_json(args: Sequence[str], name: str) -> str:
    """Run fio; the text of its JSON output (a failure: CalibrateError with fio's first error
    line; vmio.real.fiorun)."""
    return fiorun.fio_json(args, name, CalibrateError)


def run_fio(args: list[str], name: str) -> dict[str, Any]:
    """Run fio; its first JSON job (a failure: CalibrateError with fio's first error line)."""
    return json.loads(fio_json(args, name))["jobs"][0]


def write_through(path: Path, size: int, direct: int) -> None:
    """Write `[0, size)` of `path` once, sequentially (WRITE_THROUGH), so that reads find
    written blocks and writes overwrite (module doc)."""
    opts = WRITE_THROUGH.options(size, None, direct)
    args = ["fio", f"--name={WRITE_THROUGH.name}", f"--filename={path}"]
    fio_json([*args, *(f"--{k}={v}" for k, v in opts), "--output-format=json"], "write-through")


class Schedule:
    """Shares the budget's battery time among the points left (module doc)."""

    def __init__(self, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.deadline = deadline
        self.clock = clock
        self.startups: list[float] = []

    def startup_s(self) -> float:
        return statistics.fmean(self.startups) if self.startups else FIO_STARTUP_S

    def runtime_ms(self, points_left: int) -> int:
        share = (self.deadline - self.clock()) / max(points_left, 1) - self.startup_s()
        return round(1000 * max(MIN_RUNTIME_S, share))

    def finished(self, wall_s: float, runtime_s: float) -> None:
        self.startups.append(max(0.0, wall_s - runtime_s))


def min_budget_s(points: int) -> float:
    """The shortest budget for `points`: each its shortest run, fio's start-up, a sim."""
    return points * (MIN_RUNTIME_S + FIO_STARTUP_S + SIM_RESERVE_S)


def measure(
    target: Target, jobs: Sequence[Job], schedule: Schedule, progress: TextIO | None
) -> list[Point]:
    """Run `jobs` on `target` within the schedule, one progress line each."""
    bar = fiorun.PointProgress(len(jobs), title="calibrate", stream=progress or sys.stderr)
    points = []
    for i, job in enumerate(jobs):
        runtime_ms = schedule.runtime_ms(len(jobs) - i)
        t0 = schedule.clock()
        result = run_fio(fio_args(job, target, runtime_ms), job.name)
        schedule.finished(schedule.clock() - t0, runtime_ms / 1000)
        p = point_of(job, target.size_bytes, runtime_ms / 1000, result)
        points.append(p)
        what = (
            f"{p.fdatasync_ns / 1e3:.0f} us" if p.fdatasync_ns else f"{p.bw_bytes / 1e6:.0f} MB/s"
        )
        bar.advance(f"{job.name} {runtime_ms / 1000:.2f} s: {p.iops:.0f} IOPS, {what}")
    bar.close()
    return points


# --- outputs -------------------------------------------------------------------------------


def job_text(point: Point, runtime_ms: int = SIM_RUNTIME_MS) -> str:
    """The fio job file of a battery point for `vmio sim` on stack.toml: the VM's (the
    host's) one disk, the point's region, always direct=1 (the device is what the model
    stands for, whatever page cache a direct=0 target went through), `runtime_ms` of
    simulated time (the simulation is deterministic: a short run is its steady state)."""
    opts = point.job.options(point.size_bytes, runtime_ms, 1)
    return f"[{point.job.name}]\n" + "".join(f"{k}={v}\n" for k, v in opts)


def machine_of(target: Target) -> dict[str, Any]:
    """This machine as measurements.json describes it: vmio.real.machine's description of the
    target, and the target's filesystem and disk as the fit read them."""
    return {
        **machine.describe([str(target.path)]),
        "fstype": target.fstype,
        "disk": asdict(target.disk) if target.disk else None,
    }


def _queue_dir(device: str) -> Path:
    """The /sys queue directory of block device `device` (a partition's is its disk's)."""
    dev = (Path("/sys/class/block") / device).resolve()
    return (dev.parent if (dev / "partition").is_file() else dev) / "queue"


def queue_caps(target: Target) -> dict[str, bool]:
    """The target's `write_cache` and `fua` as its disk's queue advertises them (module doc:
    the fit); a tmpfs or ramfs file: neither; a file on no disk found: {} (the defaults)."""
    if target.disk is None:
        return {"write_cache": False, "fua": False} if target.fstype in TMPFS else {}
    q = _queue_dir(target.disk.device)
    try:
        wc = (q / "write_cache").read_text(encoding="utf-8").strip()
        fua = (q / "fua").read_text(encoding="utf-8").strip()
    except OSError:
        return {}
    return {"write_cache": wc == "write back", "fua": fua == "1"}


INDIRECT_DESC = 28
"""VIRTIO_RING_F_INDIRECT_DESC, the feature bit of indirect descriptors (virtio 1.1, 6.2)."""


def ring_of(target: Target) -> Params:
    """The target's virtqueue when its disk is a virtio disk without indirect descriptors
    (flash.rs, "The ring"): {"ring_descriptors": 2 x its tags} (Linux's virtio_blk sizes its
    tag set to the ring's free descriptors and halves that without VIRTIO_RING_F_INDIRECT_DESC,
    "we use 2 descs per req": drivers/block/virtio_blk.c `virtblk_probe`), and
    "ring_scheduler": "mq-deadline" when its queue/scheduler is mq-deadline; else {}.
    sysfs: /sys/class/block/<disk>/device/features, one character per feature bit."""
    disk = target.disk
    if disk is None or not disk.device_slots:
        return {}
    try:
        features = (_queue_dir(disk.device).parent / "device" / "features").read_text(
            encoding="utf-8"
        )
    except OSError:
        return {}
    features = features.strip()
    if len(features) <= INDIRECT_DESC or not set(features) <= {"0", "1"}:
        return {}
    if features[INDIRECT_DESC] == "1":
        return {}
    ring: Params = {"ring_descriptors": 2 * disk.device_slots}
    q = _queue_dir(disk.device)
    segments = _sysfs_int(q / "max_segments")
    if segments:
        # A command past max_segments pages goes as several requests (flash.rs, "The
        # ring's requests").
        ring["max_segments"] = segments
    if disk.scheduler == "mq-deadline":
        # What waits for descriptors waits in the guest's scheduler, which orders it, and
        # merges adjacent requests unless the queue's nomerges forbids it.
        ring["ring_scheduler"] = "mq-deadline"
        if segments and _sysfs_int(q / "nomerges") == 0:
            ring["ring_merges"] = True
        if kernel_at_least(kernel_release(), DISPATCH_POSITION_KERNEL):
            # Linux 6.5 on: a batch's next request is the first at or above the last
            # dispatched one's start (flash.rs, "The ring").
            ring["ring_dispatch_position"] = True
    return ring


def kernel_release() -> str:
    """This machine's kernel release (`uname -r`): the guest whose disk is calibrated."""
    return os.uname().release


def kernel_at_least(release: str, version: tuple[int, int]) -> bool:
    """Whether a kernel release string (`uname -r`, "6.18.44-fc-v657") is at least
    `version` (major, minor); False when it does not start with two numbers."""
    parts = release.split(".")
    try:
        have = (int(parts[0]), int("".join(itertools.takewhile(str.isdigit, parts[1]))))
    except (IndexError, ValueError):
        return False
    return have >= version


def _sysfs_int(path: Path) -> int | None:
    """The integer in sysfs file `path`; None when it cannot be read as one."""
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def stack_toml(fit_: Fit, target: Target, cores: int, when: str) -> str:
    """A runnable native stack of this machine whose one device is the fit (module doc)."""
    disk = target.disk
    sched = disk.scheduler if disk and disk.scheduler else "none"
    kind = "block device" if target.block else "file"
    head = [
        f"vmio calibrate {__version__} on {target.path} ({kind}, "
        f"{target.fstype or 'raw'}, direct={target.direct}), {when}",
        f"machine: {os.uname().nodename}, {cores} cores, kernel {os.uname().release}, "
        f"disk {disk.device + ' ' + disk.model if disk else target.name}",
        *(f"note: {n}" for n in fit_.notes),
    ]
    if sched not in SCHEDULERS:
        head.append(f"the disk's scheduler is {sched}, which the simulator lacks")
        sched = "mq-deadline"
    scheduler: dict[str, Any] = {"name": sched}
    if sched == "mq-deadline" and disk and disk.max_sectors_kb:
        scheduler["max_merge"] = f"{disk.max_sectors_kb}k"
    caps = queue_caps(target)
    if not caps:
        head.append(
            "the target's disk was not found: write_cache and fua are the flash model's defaults"
        )
    n = target.name
    dev = {"name": n, "model": "flash"}
    dev |= {k: f"{v}ns" if k in durations() else v for k, v in fit_.params.items()}
    dev |= caps
    doc = {
        "host": {"cores": cores, "hypervisor": "native"},
        "device": [dev],
        "volume": [{"name": n, "layout": "single", "devices": [n]}],
        "scheduler": scheduler,
        "vm": [
            {
                "name": "host",
                "disk": [{"name": n, "volume": n, "interface": "host", "cache": "none"}],
            }
        ],
    }
    return stackfile.render(doc, head)


def sim_runtime_ms(params: Params | None, job: Job) -> int:
    """The simulated time of `job` on the fit `params` (module doc, "fit.txt's simulations"):
    SIM_RUNTIME_MS, or, with stalls or freezes, long enough for SIM_STALLS of them (the
    stalls at the closed forms' rate), at most SIM_MAX_IOS requests' worth."""
    pi = stall_of(params)[0] if params else 0.0
    interval = float((params or {}).get("freeze_interval", 0) or 0)
    # Freezes started by commands: one in 1 / p commands (flash.rs, "Freezes started by
    # commands").
    f = _read_share(job)
    reads = f * float((params or {}).get("read_freeze_probability", 0) or 0) + (1 - f) * float(
        (params or {}).get("write_freeze_probability", 0) or 0
    )
    if (pi <= 0 and interval <= 0 and reads <= 0) or job.fdatasync:
        return SIM_RUNTIME_MS
    x = throughput(params or {}, job)
    least = max(SIM_STALLS / pi if pi > 0 else 0.0, SIM_STALLS / reads if reads > 0 else 0.0)
    ios = min(max(least, SIM_STALLS * interval / 1e9 * x), SIM_MAX_IOS)
    return max(SIM_RUNTIME_MS, math.ceil(ios / x * 1000))


def simulate(stack: str, points: Sequence[Point], params: Params | None = None) -> list[Point]:
    """`vmio sim` of every point's job on `stack` (deterministic: one run each), each for
    `sim_runtime_ms` of the fit `params` (None: SIM_RUNTIME_MS)."""
    out = []
    for p in points:
        ms = sim_runtime_ms(params, p.job)
        text = job_text(p, ms)
        result = json.loads(simulate_text(stack, "stack.toml", text, f"{p.job.name}.fio"))
        out.append(point_of(p.job, p.size_bytes, ms / 1000, result["jobs"][0]))
    return out


def read_first(params: Params, points: Sequence[Point], stack_of: Callable[[Params], str]) -> bool:
    """Whether the fit's processor serves reads first (flash.rs, "Reads first"; module doc,
    "read_priority"): `vmio sim` of the battery's loaded mixed points on `stack_of(params)`
    with and without it, each direction's bandwidth and mean latency against the measured;
    True when it lowers the sum of (ln sim - ln measured)^2 by PASS_GAIN. False without a
    processor (nothing to order) or a loaded mix."""
    mixed = [p for p in points if p.job.direction == "mixed" and p.job.iodepth > 1 and p.iops]
    costs = ("batch_overhead", "command_overhead", "write_command_overhead")
    if not mixed or sum(params.get(k, 0) for k in costs) <= 0:
        return False

    def error(first: bool) -> float:
        trial = {**params, "read_priority": first}
        e = 0.0
        for p, s in zip(mixed, simulate(stack_of(trial), mixed, trial), strict=True):
            for side in ("read", "write"):
                m, x = getattr(p, side), getattr(s, side)
                if m is None or x is None or min(m.iops, x.iops) <= 0:
                    continue
                e += (math.log(x.bw_bytes) - math.log(m.bw_bytes)) ** 2
                e += (math.log(x.lat_mean_ns) - math.log(m.lat_mean_ns)) ** 2
        return e

    return error(True) < (1 - PASS_GAIN) * error(False)


def _err(x: float, ref: float) -> float:
    return x / ref - 1 if ref > 0 and not math.isnan(x) else math.nan


def errors(
    params: Params, points: Sequence[Point], simulated: Sequence[Point] | None
) -> list[tuple[Point, tuple[float, float], tuple[float, float] | None]]:
    """Per point: (the point, model (bw, lat), sim (bw, lat) or None)."""
    sims: Sequence[Point | None] = simulated if simulated is not None else [None] * len(points)
    rows = []
    for p, s in zip(points, sims, strict=True):
        sim = None
        if s is not None:
            sim = (
                (math.nan, s.fdatasync_ns or 0.0)
                if p.job.fdatasync
                else (s.bw_bytes, s.lat_mean_ns)
            )
        rows.append((p, predicted(params, p.job), sim))
    return rows


def measured(p: Point) -> tuple[float, float]:
    """(bytes per second, mean latency ns) as measured; the fdatasync point's latency."""
    return (math.nan, p.fdatasync_ns or 0.0) if p.job.fdatasync else (p.bw_bytes, p.lat_mean_ns)


def median_abs(xs: Sequence[float]) -> float:
    """The median of |x| over the numbers of `xs` (NaN: none)."""
    xs = [abs(x) for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def summary(
    params: Params, points: Sequence[Point], simulated: Sequence[Point] | None
) -> dict[str, float]:
    """Median absolute relative errors: bw_model, lat_model, bw_sim, lat_sim (NaN: none)."""
    rows = errors(params, points, simulated)
    out = {}
    for i, what in enumerate(("bw", "lat")):
        out[f"{what}_model"] = median_abs([_err(m[i], measured(p)[i]) for p, m, _ in rows])
        out[f"{what}_sim"] = median_abs(
            [_err(s[i], measured(p)[i]) for p, _, s in rows if s is not None]
        )
    return out


def fit_text(
    params: Params,
    points: Sequence[Point],
    simulated: Sequence[Point] | None,
    fitted: Fit | None = None,
) -> str:
    """fit.txt: every point measured, the model's closed form and vmio sim, with errors; the
    QD1 percentiles the unit times were fitted on; with `fitted`, each parameter's value,
    uncertainty, bound and the points that identify it, and the flags."""

    def cell(x: float, scale: float, ref: float | None = None) -> str:
        if math.isnan(x):
            return f"{'-':>9}" + ("" if ref is None else f"{'':>8}")
        e = "" if ref is None else f"{100 * _err(x, ref):>+7.1f}%"
        return f"{x / scale:>9.1f}" + e

    head = (
        f"{'point':<16}{'MB/s':>9}{'model':>9}{'err':>8}{'sim':>9}{'err':>8}"
        f"{'lat us':>9}{'model':>9}{'err':>8}{'sim':>9}{'err':>8}"
    )
    lines = [head]
    for p, model, sim in errors(params, points, simulated):
        mb, ml = measured(p)
        s = sim or (math.nan, math.nan)
        lines.append(
            f"{p.job.name:<16}{cell(mb, 1e6)}{cell(model[0], 1e6, mb)}{cell(s[0], 1e6, mb)}"
            f"{cell(ml, 1e3)}{cell(model[1], 1e3, ml)}{cell(s[1], 1e3, ml)}"
        )
    sm = summary(params, points, simulated)
    lines.append(
        f"median |error|: bandwidth model {100 * sm['bw_model']:.1f} %, vmio sim "
        f"{100 * sm['bw_sim']:.1f} %; mean latency model {100 * sm['lat_model']:.1f} %, "
        f"vmio sim {100 * sm['lat_sim']:.1f} %"
    )
    note = "(the fdatasync points: mean latency of the fdatasync calls; model = flush_latency)"
    lines.append(note)
    lines += ["", *percentile_lines(params, points, simulated)]
    if fitted is not None:
        lines += ["", *estimate_lines(fitted)]
    return "\n".join(lines) + "\n"


def percentile_lines(
    params: Params, points: Sequence[Point], simulated: Sequence[Point] | None
) -> list[str]:
    """The random 4 KiB QD1 points' completion-latency percentiles: measured, the model's
    closed form (`model_percentile_ns`) and vmio sim's, in us with errors."""
    sims = dict(zip([p.job.name for p in points], simulated or [], strict=False))
    lines = [f"{'QD1 clat':<16}{'pct':>7}{'us':>9}{'model':>9}{'err':>8}{'sim':>9}{'err':>8}"]
    for side in ("read", "write"):
        p = _tail_point(points, side)
        if p is None or getattr(p, side) is None:
            continue
        s = sims.get(p.job.name)
        for attr, q, label in PERCENTILES:
            v = getattr(getattr(p, side), attr)
            if v <= 0:
                continue
            m = model_percentile_ns(params, p.job, side, q)
            sv = getattr(getattr(s, side), attr) if s is not None and getattr(s, side) else 0.0
            sim_cells = f"{sv / 1e3:>9.1f}{100 * _err(sv, v):>+7.1f}%" if sv > 0 else f"{'-':>9}"
            lines.append(
                f"{p.job.name:<16}{label:>7}{v / 1e3:>9.1f}{m / 1e3:>9.1f}"
                f"{100 * _err(m, v):>+7.1f}%{sim_cells}"
            )
    return lines


def estimate_lines(fitted: Fit) -> list[str]:
    """Each fitted parameter: value, standard error (and relative), the bound it sits at,
    the battery points that identify it (their share of its sensitivity); then the flags."""
    lines = [f"{'parameter':<19}{'value':>14}{'+-':>12}{'rel':>8}  bound / identified by"]
    for k, e in fitted.estimates.items():
        rel = e.sigma / abs(e.value) if e.value and math.isfinite(e.sigma) else math.inf
        sigma = (
            f"{e.sigma:>12.4g}"
            if math.isfinite(e.sigma)
            else f"{'held':>12}"
            if math.isnan(e.sigma)
            else f"{'n/a':>12}"
        )
        rel_s = f"{100 * rel:>7.1f}%" if math.isfinite(rel) else f"{'-':>8}"
        who = ", ".join(f"{n} {100 * w:.0f}%" for n, w in e.points) or "not identified"
        where = f"AT BOUND {e.bound}; " if e.bound else ""
        lines.append(f"{k:<19}{e.value:>14.6g}{sigma}{rel_s}  {where}{who}")
    lines += [f"flag: {x}" for x in fitted.flags]
    return lines


@dataclass(frozen=True)
class Calibration:
    """What `run` made: the output files, the fitted parameters, the measured points and
    vmio sim's run of each on the stack, and the notes (also in stack.toml)."""

    out_dir: Path
    stack_path: Path
    params: Params
    points: list[Point]
    simulated: list[Point]
    notes: tuple[str, ...]


def check_budget(budget_s: float | None, quick: bool, jobs: int) -> float:
    """The budget in seconds (default by mode), refused outside the accepted range."""
    budget = budget_s if budget_s is not None else QUICK_BUDGET_S if quick else DEFAULT_BUDGET_S
    low = math.ceil(min_budget_s(jobs))
    if not (low <= budget <= MAX_BUDGET_S) or math.isnan(budget):
        raise CalibrateError(
            f"--budget {budget:g}: accepted: {low} to {MAX_BUDGET_S:.0f} seconds for the "
            f"{jobs} points of this battery (each at least {MIN_RUNTIME_S} s of fio, its "
            "start-up and a simulation)"
        )
    return budget


def check_size(text: int | str | None) -> int | None:
    """--size in bytes (None: the target's default), refused below MIN_SIZE."""
    if text is None:
        return None
    try:
        size = parse_size(text)
    except VmioError as e:
        raise CalibrateError(f"--size {e}") from None
    if size < MIN_SIZE:
        raise CalibrateError(
            f"--size {size} bytes: accepted: {size_name(MIN_SIZE)} or more (e.g. 64m, 1g)"
        )
    return size


def run(
    target: str | Path,
    out_dir: str | Path,
    quick: bool = False,
    budget_s: float | None = None,
    write: bool = False,
    size: int | str | None = None,
    progress: TextIO | None = None,
    force: bool = False,
    accept_bounds: bool = False,
) -> Calibration:
    """Measure the battery on `target`, fit the flash model, write out_dir's three files; a
    fit with a parameter at a bound (`Fit.flags`) writes measurements.json and fit.txt and is
    refused (CalibrateError naming the first) unless `accept_bounds`."""
    stream = progress or sys.stderr
    if why := fio_missing():
        raise CalibrateError(why)
    out = Path(out_dir)
    if out.exists() and not force:
        raise CalibrateError(f"output directory {out} exists; pass --force to overwrite it")
    t = open_target(Path(target), check_size(size), write, force)
    jobs = battery(quick, t.writes)
    budget = check_budget(budget_s, quick, len(jobs))
    start = time.monotonic()
    if t.block and not t.writes:
        stream.write(
            f"vmio: note: {t.path} is a block device: reads only (pass --write to "
            "run the writes too, destroying its contents)\n"
        )
    created = not t.existed
    try:
        if t.writes and not t.block:
            t0 = time.monotonic()
            stream.write(f"vmio: calibrate: writing {t.path} through ({t.size_bytes} bytes)\n")
            if created:
                t.path.touch()
            t = _probe_direct(t)
            if not t.direct:
                stream.write(
                    f"vmio: note: {t.path} refuses O_DIRECT (EINVAL): measured with "
                    "direct=0 (the page cache is part of what is measured)\n"
                )
            write_through(t.path, t.size_bytes, t.direct)
            stream.write(f"vmio: calibrate: written in {format_duration(time.monotonic() - t0)}\n")
        deadline = start + budget - SIM_RESERVE_S * len(jobs)
        points = measure(t, jobs, Schedule(deadline), stream)
    finally:
        if created:
            t.path.unlink(missing_ok=True)
    qd = queue_depth(t.disk)
    f = fit(points, t.capacity, qd)
    f = replace(f, params={**f.params, **ring_of(t)})
    cores = os.cpu_count() or 1
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if read_first(f.params, points, lambda p: stack_toml(replace(f, params=p), t, cores, when)):
        f = replace(f, params={**f.params, "read_priority": True})
    if f.flags and accept_bounds:
        f = replace(f, notes=(*f.notes, *(f"accepted at its bound: {x}" for x in f.flags)))
    stack = stack_toml(f, t, cores, when)
    out.mkdir(parents=True, exist_ok=True)
    stack_path = out / "stack.toml"
    record = {
        "vmio_calibrate": {
            "version": __version__,
            "date": when,
            "target": str(t.path),
            "block_device": t.block,
            "writes": t.writes,
            "direct": t.direct,
            "size": t.size_bytes,
            "quick": quick,
            "budget_s": budget,
            "elapsed_s": round(time.monotonic() - start, 3),
            "params": f.params,
            # sigma None: held at a bound or not identified (JSON has no NaN).
            "uncertainty": {
                k: {**asdict(e), "sigma": e.sigma if math.isfinite(e.sigma) else None}
                for k, e in f.estimates.items()
            },
            "flags": list(f.flags),
            "queue": queue_caps(t),
            "notes": list(f.notes),
        },
        "machine": machine_of(t),
        "points": [p.record() for p in points],
    }
    (out / "measurements.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if f.flags and not accept_bounds:
        (out / "fit.txt").write_text(fit_text(f.params, points, None, f), encoding="utf-8")
        more = f" (and {len(f.flags) - 1} more, {out / 'fit.txt'})" if len(f.flags) > 1 else ""
        raise CalibrateError(
            f"the fit is refused: {f.flags[0]}{more}; pass --accept-bounds to write "
            "stack.toml anyway"
        )
    stack_path.write_text(stack, encoding="utf-8")
    simulated = simulate(stack, points, f.params)
    (out / "fit.txt").write_text(fit_text(f.params, points, simulated, f), encoding="utf-8")
    return Calibration(out, stack_path, f.params, points, simulated, f.notes)
