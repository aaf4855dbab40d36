//! A SATA SSD: controller command rate, flash channel/die parallelism, a DRAM write buffer, a
//! shared SATA link, the controller's bandwidth caps, and a page-mapped FTL with garbage
//! collection ([`super::ftl`]) that decides where data lives and charges GC time to the dies.
//!
//! **Sources.** Profile `samsung-840pro-256g` (Samsung SSD 840 PRO data sheet, 2012, and
//! `docs/references.md`, hardware references): 256 GB (500,118,192 × 512-byte sectors =
//! 256,060,514,304 bytes), MDX controller with 8 channels, 21 nm toggle-mode 2.0 MLC (4 dies
//! per channel for 256 GB: 32 × 64 Gbit; 400 MB/s per channel), 8 KiB pages; sequential read
//! 540 MB/s, sequential write 520 MB/s, 4 KiB random read 100k IOPS and random write 90k IOPS
//! at QD32, SATA 6 Gb/s (600 MB/s), NCQ depth 32. Flash timings: read ~60 µs (t_R plus
//! overhead), program ~250 µs per 8 KiB page, as stated for this project's model. The QD32 IOPS
//! figures are the controller's command rate (its firmware, not the flash, limits them: 32
//! dies could read ~450k pages/s), so they enter as parameters (`read_iops`, `write_iops`)
//! and the model reproduces them only where the controller is the bottleneck.
//! FTL figures: 256 pages of 8 KiB per block (2 MiB blocks, typical of 2x-nm MLC); raw flash
//! 32 × 64 Gbit = 256 GiB for 256,060,514,304 user bytes, i.e. `over_provisioning` = 0.0735
//! (S1, docs/references.md: "256 GB raw flash for 238 GiB user space", ~7 %); block erase 3 ms (typical
//! t_BERS of MLC NAND of that generation, data sheets give ~1.5–5 ms typical, 10 ms max);
//! `gc_threshold` = 4 free blocks per die (an assumption: "a few blocks"; 0.1 % of the 4096
//! blocks of a die); greedy victim selection; `precondition` = clean (fresh) or aged (GC
//! steady state of uniform random writes, built analytically, see [`super::ftl`]). The aged
//! layout and the read retries use the device's seed (derived from the run seed).
//!
//! **Algorithm.** The controller processes commands in arrival order (`read_iops`,
//! `write_iops`); the flash then runs as event-driven stages: each die has its own queues and
//! a channel is handed out when it becomes free, as the ONFI bus interleaves the dies of one
//! channel (ONFI 4.x: read = 00h, address, 30h, then t_R with the bus free, then data out;
//! program = 80h, address, data in, 10h, then t_PROG with the bus free). The scheduling
//! follows MQSim (Tavakkol et al., "MQSim: A Framework for Enabling Realistic Studies of
//! Modern Multi-Queue SSD Devices", FAST 2018; src/ssd/TSU_OutofOrder.cpp serves a chip's
//! read queue before its write queue, src/ssd/NVM_PHY_ONFI_NVDDR2.cpp gives a freed channel to
//! waiting read data out before new commands). `flash_command` = 300 ns is the command and
//! address phase: 7 cycles (command, 5 address, confirm) at NV-DDR2's t_WC = 25 ns plus
//! t_CS, t_WB and t_RR (MQSim's ONFI_Channel_NVDDR2: 290 ns for a read, 361 ns for a program).
//!
//! ```text
//! submit:  accept = max(now, controller free) + 1/read_iops (or 1/write_iops)   (FIFO)
//! at accept:
//!   read:  pieces = runs of 4 KiB units held by one flash page (FTL lookup; unmapped units
//!          are striped statically: page % dies); each piece joins its die's read queue
//!   write: joins the buffer's admission queue (FIFO, with flushes)
//!   trim:  unmap the whole 4 KiB units in the range; done
//! die idle: take the head of its read queue, else of its program queue
//!   read:    want channel (command, flash_command) -> t_R -> want channel (data out,
//!            piece / channel_rate) -> piece out -> idle
//!   program: GC installment (die busy, channel free) -> want channel (flash_command +
//!            page / channel_rate) -> t_PROG -> on flash -> idle
//! channel free: give it to the waiting die with the smallest (data out before command,
//!            waiting since, die number)
//! piece out: the first piece of a read reserves the link from max(now, link free) for
//!            len at min(link, seq_read); done = max(reservation end, last piece out + its
//!            transfer) (cut-through)
//! admission: head write fits in the buffer, or nothing but the open page is in it (a
//!            write larger than the room takes the buffer as its programs free it; its first
//!            units complete the open page; run again when a write lands, and when a page
//!            is on flash): link in at
//!            min(link, seq_write) -> in buffer: 4 KiB units fill the open page; a full
//!            page goes to the next die round-robin (FTL allocation; if it ran GC there the
//!            die owes gc = read_pages*t_R + program_pages*t_PROG + erases*t_BERS and pays
//!            debt / (host pages left in its active block + 1) before the program);
//!            done (FUA, or `write_cache = false`: the open page is programmed too and the
//!            write is done when its programs are)
//! on flash:  the page's bytes leave the buffer; waiting writes are admitted
//! flush:     its turn in the admission queue, once every earlier write is in the buffer:
//!            program the open (partial) page; done when every page issued so far is on flash
//! ```
//!
//! Ties at one instant are served in event order (time, then insertion), so runs are
//! deterministic. A die holds a sensed page until its data is out (its page register), so a
//! die waiting for its channel cannot start its next read: with random reads at QD32 the
//! dies' queues are uneven and the tail is several services long (see the tests: 4 channels
//! x 4 dies, t_R 75 us, 4 KiB random reads at QD32 give 112.7 k IOPS and a p99 of 1.06 ms,
//! beside MQSim's 112.9 k and 1,064 µs on that configuration).
//!
//! **Incremental GC.** The FTL collects a whole victim when a die opens a new block, but the
//! die's time for it is spread over the host pages that die takes until its next collection
//! (the pages left in the new active block): the controller interleaves GC copies with host
//! programs instead of stalling the die for the whole victim (~70 ms on an aged 840 Pro:
//! ~220 copied pages × (t_R + t_PROG) + t_BERS). This is how SSD firmware bounds write latency
//! under GC (preemptible/partial GC: Lee et al., "Preemptible I/O scheduling of garbage
//! collection for solid state drives", IEEE TCAD 32(2), 2013; Jung et al., "HIOS: a host
//! interface I/O scheduler for SSDs", ISCA 2014). The total GC time, and so the sustained
//! aged throughput, is unchanged; what changes is its shape in time: whole-victim stalls
//! make every die collect in lockstep (all dies take pages round-robin and their cycles
//! have the same length), which turns GC into periodic ~70 ms device-wide stalls.
//!
//! **Read look-ahead.** SSD controllers prefetch after a sequential read: Chen, Koufaty and
//! Zhang ("Understanding intrinsic characteristics and system implications of flash memory
//! based solid state drives", SIGMETRICS 2009) found read-ahead in the SATA SSDs they
//! measured (sequential small reads far faster than random ones); a vendor's measurement of
//! a current drive (Memblaze, PBlaze7 7940, "read-ahead", 2024) gives 4K QD1 sequential reads
//! 56.95 µs without it and 5.96 µs with it. No data sheet states the size: `read_ahead` =
//! 256 KiB is an estimate (one 8 KiB page on each of the profile's 32 dies).
//!
//! ```text
//! read at accept (read_ahead > 0):
//!   sequential = offset == end of the previous read
//!   if every unit of the read is in the window [base, base + len(window)):
//!       wait for the window's prefetches it needs, then the link alone (from the buffer)
//!       base = end of the read; top up
//!   else: a flash read (above); the window restarts empty at its end; top up if sequential
//! top up: prefetch whole pages (each a read piece on its die, data out to the buffer)
//!         until base + read_ahead (rounded down to a page)
//! a write or trim overlapping the window empties it
//! ```
//!
//! So a sequential 4 KiB read stream at QD1 runs at 1 / (1/read_iops + 4 KiB / min(link,
//! seq_read)) (56.9 k IOPS for the profile) instead of paying t_R each (11.3 k).
//!
//! **Page types** (`cell_type`). In MLC and TLC NAND the bits of one cell lie in different
//! pages of a block, and the page holding the lower bit (LSB) reads and programs faster than
//! the one holding the upper bit (MSB): Grupp et al. ("Characterizing flash memory:
//! anomalies, observations, and applications", MICRO 2009) measured bimodal program
//! latencies on every MLC chip, fast and slow pages alternating through a block. MQSim has
//! per-type latencies (Page_Read_Latency_LSB/CSB/MSB, Page_Program_Latency_LSB/CSB/MSB in
//! ssdconfig.xml) and assigns types as `page % 2` for MLC and, for TLC, after Yaakobi et al.
//! (ICNC 2012): pages 0-5 LSB, 6-7 CSB, then pairs cycling LSB, CSB, MSB. Its shipped
//! configuration sets the three equal, and no data sheet of the profile's flash states them,
//! so the factors are estimates that keep `read_latency` and `program_latency` as the means
//! (each type is about as frequent as the others):
//!
//! ```text
//!            read LSB / CSB / MSB      program LSB / CSB / MSB
//! slc        1                         1
//! mlc        0.75 / - / 1.25           0.5 / - / 1.5      (default: the 840 Pro's 2-bit MLC)
//! tlc        0.75 / 1 / 1.25           0.5 / 1 / 1.5
//! t_R(page)    = read_latency    x factor(type(page % pages_per_block))
//! t_PROG(page) = program_latency x factor(type(page % pages_per_block))
//! ```
//!
//! A read's page is its physical page (unwritten data: its striped virtual page); GC copies
//! are charged at the means. With `mlc` the means, and so throughput-bound figures, stay
//! close; what changes is the spread: a 4 KiB read at QD1 takes 45 or 75 µs of t_R instead
//! of 60, a page program 125 or 375 µs instead of 250.
//!
//! **Read retries.** As flash wears, the cells' threshold-voltage distributions widen and
//! shift (Cai et al., "Threshold voltage distribution in MLC NAND flash memory:
//! characterization, analysis, and modeling", DATE 2013), so a read at the default
//! references fails ECC more often and the controller reads again with shifted references
//! (read-retry; Park et al., "Reducing solid-state drive read latency by optimizing
//! read-retry", ASPLOS 2021, measured retries to be common on worn and retained flash).
//! No data sheet gives the rate, so `read_retry` = 0.5 (the chance that a sensing fails at
//! the rated endurance) and the cap of 7 retries are estimates; `endurance` = 3,000 P/E
//! cycles is the usual rating of 2x-nm MLC; `pe_cycles` = 0 (a new drive) keeps the default
//! device free of retries until its own GC erases add wear:
//!
//! ```text
//! wear(die) = pe_cycles + erases of the die in this run / its blocks
//! p = min(1, read_retry x wear / endurance)
//! retries k: while k < 7 and draw < p: k += 1     (E[k] = p + p^2 + ... + p^7)
//! sense = t_R(page) x (1 + k)
//! ```
//!
//! The draws come from the device's own stream, seeded from the run seed and the device's
//! name (`Rng::derive(seed, "ssd/read-retry")`, the seed that also lays out an aged FTL),
//! taken in event order: runs are deterministic.
//!
//! **Program/erase suspension** (`suspend`, off by default). Wu and He ("Reducing SSD read
//! latency via NAND flash program and erase suspension", FAST 2012) let a read suspend the
//! program or erase in progress on its die, run, and resume it, so reads stop waiting
//! behind t_PROG and t_BERS; MQSim models it (CMD_Suspension_Support, with
//! Suspend_Program_Time = 100 µs and Suspend_Erase_Time = 700 µs in its ssdconfig.xml).
//! `suspend_latency` = 100 µs is MQSim's program figure, used for both (the die's GC
//! installments mix copies and erases). Off by default: the profile's 2012 controller is
//! not known to suspend, and off keeps its figures.
//!
//! ```text
//! read queued on a die in a program's t_PROG or a GC installment, suspend on,
//!   and the step ends later than now + suspend_latency:
//!     left = step end - now; the die is busy suspend_latency, then serves its reads
//!     when its read queue is empty: the suspended step resumes for `left`
//! ```
//!
//! **What the arbitration changed in a closed loop: JBD2 convoys.** Under FileBench's
//! varmail on an aged device (16 threads per VM, each `append; fsync` twice per loop; the
//! golden case `ssd-aged-mcfq-none-varmail-4vms`, seed 8, 2 s), replacing the booking at
//! submission by this arbitration cost 20 % of the I/Os (9,664 -> 7,768; 16 % with the host
//! scheduler `none`), yet no device command got slower. The device's own means, before ->
//! after (the SSD change alone, mcfq): FLUSH 2.94 -> 3.03 ms, write 105 -> 105 µs, read
//! 180 -> 143 µs, page program (issue to on flash) 2.87 -> 2.84 ms of which GC installment
//! 2.59 -> 2.57 ms, GC time per flash byte unchanged; channel waits a few µs per command;
//! the 32 MiB write buffer never blocks an admission (mean occupancy 80 KB). With `none`
//! the device got faster still (FLUSH 6.58 -> 4.33 ms, program 5.82 -> 4.91 ms). What
//! changed is the guests' group commit. Before, every VM's 16 threads moved as one convoy:
//! exactly 16.0 fsyncs per JBD2 commit in every VM under both schedulers, the next
//! transaction running 0.7 ms (`none`) before its commit. After, with `none`, the threads
//! run as the two groups JBD2's pipeline allows (one transaction committing while the next
//! one runs, fs/jbd2/commit.c): 8.1 fsyncs per commit, the running transaction open 9 ms.
//! (Inferred, not traced: first-come-first-served booking finished the threads' reads
//! together; reads served first on their own dies finish apart, and a thread that misses
//! the running transaction waits for the next one.) A commit's cost is fixed (a descriptor
//! and a commit block, two FLUSHes, each programming a partial open page with its GC
//! installment), so half as many fsyncs share it: journal bytes per fsync 2,658 -> 4,273,
//! device FLUSHes 1,040 -> 1,738 for fewer I/Os, flash pages per fsync +12 %. Under `mcfq`
//! vm1 (weight 1000) kept its convoy (16.0 per commit, fsync 14.9 -> 12.5 ms) while vm2-vm4
//! split (10.6, 8.2, 12.0 per commit; their I/Os -33 to -51 %). A lockstep convoy of every
//! thread is an artifact of deterministic first-come-first-served service, the pipelined
//! commit JBD2's steady state, so the new figures stand.
//!
//! A die paying GC does not hold its channel: the other dies use it. GC copies are copyback
//! (no channel transfer). Out-of-range commands are served like in-range ones (the
//! engine validates ranges); the FTL ignores their units.

use vmio_core::request::Op;
use vmio_core::rng::Rng;
use vmio_core::units::transfer_ns;
use vmio_core::{Ns, MS, US};

use super::ftl::{Ftl, FtlGeometry, FtlStats, GcPolicy, Precondition, UNIT_BYTES};
use vmio_core::params::{Entry, Kind, ParamError, ParamSpec, Value, Values};

use super::{
    bad, capacity, fua, Busy, Completions, DevCmd, Device, DeviceStats, Identity, ModelBuild,
    ModelEntry, DURATION, SATA_LINK_RATE, WRITE_CACHE,
};

/// Seed of the aged layout (device constructors take no run seed; the layout is a property of
/// the device's history, the same in every run).
const AGED_SEED: u64 = 0x840_0256;

pub const ENTRY: ModelEntry = Entry {
    name: "ssd",
    help: "SATA SSD: controller command rate, channel/die parallelism, write buffer, page-mapped FTL with GC",
    // Defaults: profile `samsung-840pro-256g` (see the module doc).
    params: &[
        capacity(256_060_514_304),
        ParamSpec {
            name: "channels",
            kind: Kind::Count { min: 1, max: 256 },
            default: Value::Int(8),
            unit: "",
            help: "flash channels",
        },
        ParamSpec {
            name: "dies_per_channel",
            kind: Kind::Count { min: 1, max: 256 },
            default: Value::Int(4),
            unit: "",
            help: "flash dies on each channel",
        },
        ParamSpec {
            name: "page_size",
            kind: Kind::Size {
                min: 512,
                max: 1 << 20,
                pow2: false,
            },
            default: Value::Int(8 << 10),
            unit: "bytes",
            help: "flash page (a multiple of 4k when larger)",
        },
        ParamSpec {
            name: "read_latency",
            kind: DURATION,
            default: Value::Int(60 * US),
            unit: "ns",
            help: "page read time (t_R plus overhead)",
        },
        ParamSpec {
            name: "program_latency",
            kind: DURATION,
            default: Value::Int(250 * US),
            unit: "ns",
            help: "page program time (t_PROG)",
        },
        ParamSpec {
            name: "cell_type",
            kind: Kind::Choice(CellType::NAMES),
            default: Value::Choice("mlc"),
            unit: "",
            help: "bits per cell: page types with fast and slow reads and programs around the means",
        },
        ParamSpec {
            name: "read_retry",
            kind: Kind::Fraction { min: 0.0, max: 1.0 },
            default: Value::Float(0.5),
            unit: "",
            help: "probability that a page read needs a retry at the endurance limit, growing with wear (an estimate)",
        },
        ParamSpec {
            name: "endurance",
            kind: Kind::Count {
                min: 1,
                max: 1_000_000,
            },
            default: Value::Int(3000),
            unit: "",
            help: "rated program/erase cycles of the flash",
        },
        ParamSpec {
            name: "pe_cycles",
            kind: Kind::Count {
                min: 0,
                max: 1_000_000,
            },
            default: Value::Int(0),
            unit: "",
            help: "program/erase cycles the flash has seen before the run (wear)",
        },
        ParamSpec {
            name: "suspend",
            kind: Kind::Bool,
            default: Value::Bool(false),
            unit: "",
            help: "a read suspends a program or erase (GC) on its die and resumes it after",
        },
        ParamSpec {
            name: "suspend_latency",
            kind: DURATION,
            default: Value::Int(100 * US),
            unit: "ns",
            help: "time to suspend a program or erase before the read can start",
        },
        ParamSpec {
            name: "flash_command",
            kind: DURATION,
            default: Value::Int(300),
            unit: "ns",
            help: "command and address phase of a flash operation on its channel (ONFI)",
        },
        ParamSpec {
            name: "channel_rate",
            kind: Kind::Rate,
            default: Value::Int(400_000_000),
            unit: "bps",
            help: "transfer rate of one channel",
        },
        ParamSpec {
            name: "read_iops",
            kind: Kind::Count {
                min: 1,
                max: 1_000_000_000,
            },
            default: Value::Int(100_000),
            unit: "",
            help: "controller command rate for reads (the datasheet's QD32 random-read IOPS)",
        },
        ParamSpec {
            name: "write_iops",
            kind: Kind::Count {
                min: 1,
                max: 1_000_000_000,
            },
            default: Value::Int(90_000),
            unit: "",
            help: "controller command rate for writes (QD32 random-write IOPS)",
        },
        ParamSpec {
            name: "seq_read_rate",
            kind: Kind::Rate,
            default: Value::Int(540_000_000),
            unit: "bps",
            help: "controller cap on read bandwidth",
        },
        ParamSpec {
            name: "seq_write_rate",
            kind: Kind::Rate,
            default: Value::Int(520_000_000),
            unit: "bps",
            help: "controller cap on write bandwidth",
        },
        SATA_LINK_RATE,
        ParamSpec {
            name: "read_ahead",
            kind: Kind::SIZE,
            default: Value::Int(256 << 10),
            unit: "bytes",
            help: "controller read look-ahead after a sequential read (0: off; an estimate)",
        },
        ParamSpec {
            name: "write_buffer",
            kind: Kind::SIZE,
            default: Value::Int(32 << 20),
            unit: "bytes",
            help: "DRAM write buffer",
        },
        ParamSpec {
            name: "queue_depth",
            kind: Kind::Count { min: 1, max: 65_536 },
            default: Value::Int(32),
            unit: "",
            help: "commands queued in the device (NCQ: 32)",
        },
        ParamSpec {
            name: "pages_per_block",
            kind: Kind::Count { min: 1, max: 65_536 },
            default: Value::Int(256),
            unit: "",
            help: "pages per erase block",
        },
        ParamSpec {
            name: "over_provisioning",
            kind: Kind::Fraction {
                min: 0.001,
                max: 10.0,
            },
            default: Value::Float(0.0735),
            unit: "",
            help: "raw flash beyond the capacity, as a fraction of it (256 GiB raw for 256 GB)",
        },
        ParamSpec {
            name: "erase_latency",
            kind: DURATION,
            default: Value::Int(3 * MS),
            unit: "ns",
            help: "block erase time (t_BERS)",
        },
        ParamSpec {
            name: "gc_threshold",
            kind: Kind::Count {
                min: 1,
                max: u32::MAX as u64,
            },
            default: Value::Int(4),
            unit: "",
            help: "free blocks per die below which GC runs (at least 2)",
        },
        ParamSpec {
            name: "gc_policy",
            kind: Kind::Choice(GcPolicy::NAMES),
            default: Value::Choice("greedy"),
            unit: "",
            help: "GC victim selection",
        },
        ParamSpec {
            name: "precondition",
            kind: Kind::Choice(Precondition::NAMES),
            default: Value::Choice("clean"),
            unit: "",
            help: "initial state: fresh, or GC steady state of random writes",
        },
        WRITE_CACHE,
        fua(true),
    ],
    build: ModelBuild {
        profiles: &["samsung-840pro-256g"],
        new,
        memory,
    },
};

fn new(name: &str, profile: &str, v: &Values, seed: u64) -> Result<Box<dyn Device>, ParamError> {
    Ok(Box::new(Ssd::new_seeded(
        name,
        SsdParams::from_values(profile, v)?,
        seed,
    )))
}

/// The FTL tables ([`ftl::estimated_bytes`](super::ftl::estimated_bytes)) and the capacity.
fn memory(v: &Values) -> Result<(u64, u64), ParamError> {
    let p = SsdParams::from_values("", v)?;
    Ok((
        super::ftl::estimated_bytes(&p.ftl_geometry()),
        p.capacity_bytes,
    ))
}

/// Bits per flash cell, accepted by `cell_type`: the page types and their latencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellType {
    Slc,
    Mlc,
    Tlc,
}

impl CellType {
    pub const NAMES: &'static [&'static str] = &["slc", "mlc", "tlc"];
    const READ: usize = 0;
    const PROGRAM: usize = 1;
    /// Latency factors by page type (LSB, CSB, MSB) of reads and of programs, relative to
    /// `read_latency` and `program_latency` (estimates, see the module doc; each type's pages
    /// are about equally many, so the means stay those of the parameters).
    const FACTORS: [[[f64; 3]; 2]; 3] = [
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]],
        [[0.75, 1.25, 1.25], [0.5, 1.5, 1.5]],
        [[0.75, 1.0, 1.25], [0.5, 1.0, 1.5]],
    ];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "slc" => Some(Self::Slc),
            "mlc" => Some(Self::Mlc),
            "tlc" => Some(Self::Tlc),
            _ => None,
        }
    }

    /// Page type (0 LSB, 1 CSB, 2 MSB) of page `page` of a block, as MQSim assigns them
    /// (src/nvm_chip/flash_memory/Flash_Chip.h: MLC alternates; TLC after Yaakobi et al.,
    /// "Characterization and error-correcting codes for TLC flash memories", ICNC 2012).
    pub fn page_type(self, page: u32) -> usize {
        match self {
            Self::Slc => 0,
            Self::Mlc => (page % 2) as usize * 2,
            Self::Tlc => match page {
                0..=5 => 0,
                6..=7 => 1,
                _ => (((page - 8) >> 1) % 3) as usize,
            },
        }
    }

    /// `mean` scaled for page type `ty` of operation `op` ([`CellType::READ`],
    /// [`CellType::PROGRAM`]).
    fn scaled(self, mean: Ns, ty: usize, op: usize) -> Ns {
        let f = Self::FACTORS[self as usize][op][ty];
        (mean as f64 * f).round() as Ns
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SsdParams {
    pub profile: String,
    /// The values it was read from, in declaration order (the result record lists them).
    pub values: Values,
    pub capacity_bytes: u64,
    pub channels: u64,
    pub dies_per_channel: u64,
    pub page_bytes: u64,
    pub read_latency_ns: Ns,
    pub program_latency_ns: Ns,
    /// Command and address phase on the channel (ONFI: read 00h-address-30h, program
    /// 80h-address-data-10h without the data).
    pub flash_command_ns: Ns,
    pub channel_rate_bps: u64,
    pub read_iops: u64,
    pub write_iops: u64,
    pub seq_read_rate_bps: u64,
    pub seq_write_rate_bps: u64,
    pub link_rate_bps: u64,
    /// Bytes prefetched after a sequential read (0: no look-ahead).
    pub read_ahead_bytes: u64,
    pub write_buffer_bytes: u64,
    pub queue_depth: u64,
    pub pages_per_block: u64,
    /// Raw flash beyond the user capacity, as a fraction of it (0.0735 = 7.35 %).
    pub over_provisioning: f64,
    pub erase_latency_ns: Ns,
    /// GC keeps at least this many free blocks per die.
    pub gc_threshold: u64,
    pub gc_policy: GcPolicy,
    pub precondition: Precondition,
    /// The DRAM buffer is a volatile write cache (`write_cache`); false: it writes through.
    pub write_cache: bool,
    pub cell_type: CellType,
    /// Probability that a sensing needs a retry at the endurance limit (0: never).
    pub read_retry: f64,
    /// Rated P/E cycles, and the cycles the flash has seen before the run.
    pub endurance: u64,
    pub pe_cycles: u64,
    /// Program/erase suspension for reads, and its latency.
    pub suspend: bool,
    pub suspend_latency_ns: Ns,
}

impl SsdParams {
    /// Mapping unit: 4 KiB, or the page if pages are smaller.
    pub fn unit_bytes(&self) -> u64 {
        UNIT_BYTES.min(self.page_bytes)
    }

    /// Flash geometry: raw flash = capacity × (1 + over_provisioning), in whole blocks per die.
    pub fn ftl_geometry(&self) -> FtlGeometry {
        let unit = self.unit_bytes();
        let dies = self.channels * self.dies_per_channel;
        let block_bytes = self.page_bytes * self.pages_per_block;
        let raw = self.capacity_bytes as f64 * (1.0 + self.over_provisioning);
        let bpd = (raw / (dies as f64 * block_bytes as f64)).ceil();
        FtlGeometry {
            dies: dies as usize,
            blocks_per_die: bpd.min(u32::MAX as f64) as u32,
            pages_per_block: self.pages_per_block as u32,
            units_per_page: (self.page_bytes / unit) as u32,
            logical_units: self.capacity_bytes.div_ceil(unit),
            gc_threshold: self.gc_threshold as u32,
            policy: self.gc_policy,
        }
    }

    /// The parameters of profile `profile` from their declared values, with the rules that
    /// relate several of them checked.
    pub fn from_values(profile: &str, v: &Values) -> Result<Self, ParamError> {
        let p = Self {
            profile: profile.to_string(),
            values: v.clone(),
            capacity_bytes: v.int("capacity"),
            channels: v.int("channels"),
            dies_per_channel: v.int("dies_per_channel"),
            page_bytes: v.int("page_size"),
            read_latency_ns: v.int("read_latency"),
            program_latency_ns: v.int("program_latency"),
            flash_command_ns: v.int("flash_command"),
            channel_rate_bps: v.int("channel_rate"),
            read_iops: v.int("read_iops"),
            write_iops: v.int("write_iops"),
            seq_read_rate_bps: v.int("seq_read_rate"),
            seq_write_rate_bps: v.int("seq_write_rate"),
            link_rate_bps: v.int("link_rate"),
            read_ahead_bytes: v.int("read_ahead"),
            write_buffer_bytes: v.int("write_buffer"),
            queue_depth: v.int("queue_depth"),
            pages_per_block: v.int("pages_per_block"),
            over_provisioning: v.float("over_provisioning"),
            erase_latency_ns: v.int("erase_latency"),
            gc_threshold: v.int("gc_threshold"),
            // The kinds accept exactly the enums' names.
            gc_policy: GcPolicy::parse(v.choice("gc_policy")).expect("kind: GcPolicy::NAMES"),
            precondition: Precondition::parse(v.choice("precondition"))
                .expect("kind: Precondition::NAMES"),
            write_cache: v.flag("write_cache"),
            read_retry: v.float("read_retry"),
            endurance: v.int("endurance"),
            pe_cycles: v.int("pe_cycles"),
            suspend: v.flag("suspend"),
            suspend_latency_ns: v.int("suspend_latency"),
            cell_type: CellType::parse(v.choice("cell_type")).expect("kind: CellType::NAMES"),
        };
        if p.page_bytes > UNIT_BYTES && !p.page_bytes.is_multiple_of(UNIT_BYTES) {
            return Err(bad(
                "page_size",
                p.page_bytes,
                "must be a multiple of 4096 bytes when larger than 4096 (the FTL maps 4 KiB units)",
            ));
        }
        if let Err((param, why)) = p.ftl_geometry().check() {
            let value = match param {
                "capacity" => p.capacity_bytes.to_string(),
                "gc_threshold" => p.gc_threshold.to_string(),
                _ => p.over_provisioning.to_string(),
            };
            return Err(bad(param, value, &why));
        }
        Ok(p)
    }
}

/// What a die is doing with its current operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// No operation: the die takes the next one from its queues.
    Idle,
    /// Waiting for its channel for a command phase (read: command and address; program:
    /// command, address and data in).
    WantCommand,
    /// Waiting for its channel to move a sensed page out (read data out).
    WantDataOut,
    /// On its channel until the channel's event.
    OnChannel,
    /// Array busy (t_R, t_PROG, GC work) until the die's event.
    Array,
    /// Suspending a program or GC work for a read, until the die's event.
    Suspending,
}

/// A die's operation: a piece of a host read, or a page program.
#[derive(Clone, Copy, Debug)]
enum FlashOp {
    /// `bytes` held by one flash page, for command slot `cmd` or (`prefetch`) for prefetch
    /// slot `cmd`; `sense` is its array time (t_R of its page type, read retries included).
    Read {
        cmd: u32,
        bytes: u64,
        prefetch: bool,
        sense: Ns,
    },
    /// Program slot `prog`.
    Program { prog: u32 },
}

/// One die: its queues (reads before programs, each in arrival order) and the step of its
/// current operation.
#[derive(Debug)]
struct Die {
    stage: Stage,
    op: Option<FlashOp>,
    /// Step of `op`: read 0 command, 1 t_R, 2 data out; program 0 GC work, 1 command and
    /// data in, 2 t_PROG.
    step: u8,
    /// When it started waiting for its channel (arbitration order).
    since: Ns,
    reads: std::collections::VecDeque<FlashOp>,
    programs: std::collections::VecDeque<FlashOp>,
    /// End of the current array step; the epoch of its event (a suspension moves it on).
    array_end: Ns,
    epoch: u32,
    /// A suspended program or GC step: the operation, its step, its remaining array time.
    suspended: Option<(FlashOp, u8, Ns)>,
}

/// A page program in flight: the buffer bytes it frees, the write waiting for it (FUA or
/// write-through), its issue number (flushes wait for every program issued before them),
/// the GC installment its die pays first.
#[derive(Clone, Copy, Debug, Default)]
struct Program {
    bytes: u64,
    /// Its t_PROG (by page type).
    t_prog: Ns,
    waiter: Option<u32>,
    seq: u64,
    gc_pay: Ns,
}

/// A look-ahead prefetch in flight: logical units `first..end` (one flash page's), the
/// window generation it was issued in, the reads waiting for it.
#[derive(Clone, Debug, Default)]
struct Prefetch {
    first: u64,
    end: u64,
    gen: u64,
    waiters: Vec<u32>,
}

/// Read retries of one read at most (the steps of a read-retry table; an estimate).
const MAX_RETRIES: u64 = 7;

/// A look-ahead unit whose data is in the buffer (otherwise: the prefetch slot reading it).
const RA_READY: u32 = u32::MAX;

/// A host command inside the device.
#[derive(Clone, Copy, Debug)]
struct Cmd {
    cmd: DevCmd,
    /// Read: pieces not yet out of flash; write-through: programs not yet done; flush:
    /// programs issued before it not yet done.
    left: u32,
    /// Read: the link's reservation for it (start once its first piece is out), 0 before.
    link_end: Ns,
    /// Flush: programs issued before this number count.
    before_seq: u64,
}

/// Internal events, ordered by (time, insertion).
#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A command leaves the controller's command processing.
    Accepted(u32),
    /// A die's array operation ends.
    Die(u32, u32),
    /// A channel's transfer ends.
    Channel(u32),
    /// A write's data is in the buffer.
    InBuffer(u32),
    /// A flush's turn: every earlier write is in the buffer.
    FlushStart(u32),
}

/// A slab of `T` with a free list (slots are reused; indices stay valid while in use).
#[derive(Debug)]
struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    fn insert(&mut self, t: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = t;
                i
            }
            None => {
                self.items.push(t);
                (self.items.len() - 1) as u32
            }
        }
    }
    fn release(&mut self, i: u32) {
        self.free.push(i);
    }
}

pub struct Ssd {
    name: String,
    p: SsdParams,
    ftl: Ftl,
    unit: u64,
    /// Logical units of the open (buffered, not yet programmed) page.
    open_lpns: Vec<u64>,
    open_fill: u64,
    gc_ns: u64,
    dies: Vec<Die>,
    channels: usize,
    read_cmd_ns: Ns,
    write_cmd_ns: Ns,
    /// t_R by page type (LSB, CSB, MSB).
    t_read: [Ns; 3],
    read_rate: u64,
    write_rate: u64,

    ctrl_free: Ns,
    link_free: Ns,
    /// Per die: GC time not yet charged (paid in installments by the next host pages).
    gc_debt: Vec<Ns>,
    /// Per channel: the die on it, if busy.
    chan_holder: Vec<Option<u32>>,
    /// Per channel: the dies waiting for it, bit k for die `ch + k * channels` (empty when
    /// a channel has more than 64 dies: `arbitrate` then scans them).
    waiting: Vec<u64>,

    events: crate::engine::MinHeap<Ev>,
    /// The heap's top was popped by `advance` and is still in place: the next push replaces
    /// it (engine.rs, "pop leaves its top"), or `advance` removes it before the next look.
    hole: bool,
    ev_seq: u64,
    cmds: Slab<Cmd>,
    programs: Slab<Program>,
    /// Writes and flushes waiting for room in the write buffer, in arrival order.
    admit_queue: std::collections::VecDeque<u32>,
    /// Write buffer: bytes held (admitted, not yet programmed).
    buf_used: u64,
    /// When the last admitted write is in the buffer.
    last_in_buffer: Ns,
    next_die: usize,
    /// Programs issued so far, and those not done.
    prog_seq: u64,
    progs_in_flight: u64,
    /// Flushes waiting for programs.
    flushes: Vec<u32>,

    /// Look-ahead: its size in units (0: off), where a sequential read would start, the
    /// window's first unit and the state of each of its units, its generation, prefetches.
    ra_window: u64,
    ra_next: u64,
    ra_base: u64,
    ra_units: std::collections::VecDeque<u32>,
    ra_gen: u64,
    prefetches: Slab<Prefetch>,

    /// Read retries: blocks erased per die in this run, the retries' random stream, the
    /// retries drawn.
    die_erases: Vec<u64>,
    /// Per die: the chance that a sensing needs a retry (from its wear).
    retry_p: Vec<f64>,
    retry_rng: Rng,
    retry_count: u64,
    /// Program/GC suspensions for reads.
    suspensions: u64,

    done: Completions,
    stats: DeviceStats,
    busy: Busy,
}

impl Ssd {
    pub fn new(name: &str, p: SsdParams) -> Self {
        Self::new_seeded(name, p, AGED_SEED)
    }

    /// An SSD whose aged layout (if `precondition = "aged"`) is drawn from `seed`.
    pub fn new_seeded(name: &str, p: SsdParams, seed: u64) -> Self {
        let dies = (p.channels * p.dies_per_channel) as usize;
        let mut ftl = Ftl::new(p.ftl_geometry());
        let blocks_per_die = ftl.geometry().blocks_per_die;
        if p.precondition == Precondition::Aged {
            ftl.precondition_aged(seed);
        }
        Self {
            name: name.to_string(),
            ftl,
            unit: p.unit_bytes(),
            open_lpns: Vec::with_capacity((p.page_bytes / p.unit_bytes()) as usize),
            open_fill: 0,
            gc_ns: 0,
            dies: (0..dies)
                .map(|_| Die {
                    stage: Stage::Idle,
                    op: None,
                    step: 0,
                    since: 0,
                    reads: Default::default(),
                    programs: Default::default(),
                    array_end: 0,
                    epoch: 0,
                    suspended: None,
                })
                .collect(),
            channels: p.channels as usize,
            read_cmd_ns: (1e9 / p.read_iops as f64).round() as Ns,
            t_read: std::array::from_fn(|ty| {
                p.cell_type.scaled(p.read_latency_ns, ty, CellType::READ)
            }),
            write_cmd_ns: (1e9 / p.write_iops as f64).round() as Ns,
            read_rate: p.link_rate_bps.min(p.seq_read_rate_bps),
            write_rate: p.link_rate_bps.min(p.seq_write_rate_bps),
            ctrl_free: 0,
            link_free: 0,
            gc_debt: vec![0; dies],
            chan_holder: vec![None; p.channels as usize],
            waiting: if p.dies_per_channel <= 64 {
                vec![0; p.channels as usize]
            } else {
                Vec::new()
            },
            events: crate::engine::MinHeap::with_capacity(256),
            hole: false,
            ev_seq: 0,
            cmds: Slab::default(),
            programs: Slab::default(),
            admit_queue: Default::default(),
            buf_used: 0,
            last_in_buffer: 0,
            next_die: 0,
            prog_seq: 0,
            progs_in_flight: 0,
            flushes: Vec::new(),
            ra_window: p.read_ahead_bytes / p.unit_bytes(),
            ra_next: u64::MAX,
            ra_base: 0,
            ra_units: Default::default(),
            ra_gen: 0,
            prefetches: Slab::default(),
            die_erases: vec![0; dies],
            retry_p: vec![Self::retry_p_of(&p, 0, blocks_per_die); dies],
            retry_rng: Rng::derive(seed, "ssd/read-retry"),
            retry_count: 0,
            suspensions: 0,
            done: Completions::with_capacity(p.queue_depth as usize * 2),
            stats: DeviceStats::default(),
            busy: Busy::default(),
            p,
        }
    }

    /// FTL counters, with the GC die time the timing model charged.
    pub fn ftl_stats(&self) -> Option<FtlStats> {
        let mut s = self.ftl.stats();
        s.gc_ns = self.gc_ns;
        s.host_write_bytes = s.host_write_units * self.unit;
        Some(s)
    }

    /// The flash geometry derived from the parameters.
    pub fn ftl_geometry(&self) -> &FtlGeometry {
        self.ftl.geometry()
    }

    /// (die, physical page) holding the unit at byte `pos`. Unmapped units (never written,
    /// trimmed, or beyond the capacity) are read like data striped statically over the dies
    /// by flash page, as the model did before the FTL (datasheet read figures are measured
    /// on written data); their "page" keys are distinct from physical ones.
    fn read_die(&self, pos: u64) -> (usize, u64) {
        match self.ftl.locate(pos / self.unit) {
            Some(dp) => dp,
            None => {
                let vpage = pos / self.p.page_bytes;
                ((vpage % self.dies.len() as u64) as usize, u64::MAX - vpage)
            }
        }
    }

    /// Array time of a read of the page `key` of [`Ssd::read_die`] on `die`: t_R of its
    /// page type.
    fn sense_ns(&mut self, die: usize, key: u64) -> Ns {
        let ppb = self.p.pages_per_block;
        // Unmapped keys count down from u64::MAX (a virtual page number).
        let page = if key > u64::MAX / 2 {
            u64::MAX - key
        } else {
            key
        };
        let t_r = self.t_read[self.p.cell_type.page_type((page % ppb) as u32)];
        t_r * (1 + self.retries(die))
    }

    /// Read retries of a read on `die`: each sensing fails (and is repeated with shifted
    /// read references) with probability p = read_retry x wear / endurance (at most 1),
    /// wear = pe_cycles + the die's erases / its blocks; at most `MAX_RETRIES`.
    fn retries(&mut self, die: usize) -> u64 {
        let p = self.retry_p[die];
        if p == 0.0 {
            return 0;
        }
        let mut k = 0;
        while k < MAX_RETRIES && self.retry_rng.unit() < p {
            k += 1;
        }
        self.retry_count += k;
        k
    }

    /// The retry probability of a sensing on `die` now (kept in `retry_p`, which changes
    /// only when the die's erases do).
    fn retry_p_of(p: &SsdParams, erases: u64, blocks_per_die: u32) -> f64 {
        if p.read_retry == 0.0 {
            return 0.0;
        }
        let wear = p.pe_cycles as f64 + erases as f64 / u64::from(blocks_per_die) as f64;
        (p.read_retry * wear / p.endurance as f64).min(1.0)
    }

    /// Die preferred for the next programmed page (round-robin; the FTL may pick another when
    /// that die has no room).
    fn write_die(&mut self) -> usize {
        let d = self.next_die;
        self.next_die = (self.next_die + 1) % self.dies.len();
        d
    }

    fn channel_of(&self, die: usize) -> usize {
        die % self.channels
    }

    fn push_event(&mut self, at: Ns, ev: Ev) {
        self.ev_seq += 1;
        if self.hole {
            self.hole = false;
            self.events.replace_top((at, self.ev_seq), ev);
        } else {
            self.events.push((at, self.ev_seq), ev);
        }
    }

    /// Command `slot` completes at `at` (now or later: the link's end).
    fn complete(&mut self, slot: u32, at: Ns) {
        let c = self.cmds.items[slot as usize].cmd;
        self.done.push(at, &c);
        self.cmds.release(slot);
    }

    /// The controller has processed command `slot` at `now`: reads go to their dies, writes
    /// and flushes to the write buffer's admission queue.
    fn accepted(&mut self, slot: u32, now: Ns) {
        let c = self.cmds.items[slot as usize].cmd;
        match c.op {
            Op::Read if c.len_bytes > 0 => {
                if !self.look_ahead(slot, now, c.offset_bytes, c.len_bytes) {
                    self.read(slot, now, c.offset_bytes, c.len_bytes);
                }
            }
            Op::Write if c.len_bytes > 0 => {
                self.ra_forget(c.offset_bytes, c.len_bytes);
                self.admit_queue.push_back(slot);
                self.admit(now);
            }
            Op::Flush => {
                self.admit_queue.push_back(slot);
                self.admit(now);
            }
            Op::Trim => {
                self.ra_forget(c.offset_bytes, c.len_bytes);
                // Whole units inside the range are unmapped (a partial unit keeps its data).
                let first = c.offset_bytes.div_ceil(self.unit);
                let last = c.offset_bytes.saturating_add(c.len_bytes) / self.unit;
                let last = last.min(self.ftl.geometry().logical_units);
                for u in first..last {
                    self.ftl.trim(u);
                }
                self.complete(slot, now);
            }
            _ => self.complete(slot, now),
        }
    }

    /// Split a read into pieces (the runs of 4 KiB units held by one flash page) and queue
    /// each on its die.
    fn read(&mut self, slot: u32, now: Ns, off: u64, len: u64) {
        let mut pos = off;
        let end = off.saturating_add(len);
        let mut pieces = 0;
        while pos < end {
            let (die, key) = self.read_die(pos);
            let mut piece = 0;
            while pos < end {
                if piece > 0 && self.read_die(pos) != (die, key) {
                    break;
                }
                let take = (self.unit - pos % self.unit).min(end - pos);
                piece += take;
                pos += take;
            }
            pieces += 1;
            let sense = self.sense_ns(die, key);
            self.dies[die].reads.push_back(FlashOp::Read {
                cmd: slot,
                bytes: piece,
                prefetch: false,
                sense,
            });
            self.suspend_for_read(die, now);
            // Counted before any piece can finish (a die starts at once only when idle).
            self.cmds.items[slot as usize].left = pieces;
            self.die_next(die, now);
        }
    }

    /// Read look-ahead. A read that starts where the last one ended is a sequential stream:
    /// the controller keeps the `read_ahead` bytes after it in its buffer (prefetched in whole
    /// pages, each page read like a host read's piece). A read whose units are all in that
    /// window is served from the buffer (once the prefetches it needs are out): the link
    /// alone. Returns false for a read the flash must serve.
    fn look_ahead(&mut self, slot: u32, now: Ns, off: u64, len: u64) -> bool {
        if self.ra_window == 0 {
            return false;
        }
        let sequential = off == self.ra_next;
        self.ra_next = off.saturating_add(len);
        let first = off / self.unit;
        let end = off.saturating_add(len).div_ceil(self.unit);
        let have = self.ra_base + self.ra_units.len() as u64;
        let covered = first >= self.ra_base && end <= have;
        if !covered {
            // Start over after this read (an empty window unless the stream goes on).
            self.ra_units.clear();
            self.ra_base = end;
            self.ra_gen += 1;
            if sequential {
                self.ra_top_up(now);
            }
            return false;
        }
        let mut left = 0;
        for u in first..end {
            let s = self.ra_units[(u - self.ra_base) as usize];
            if s != RA_READY {
                let w = &mut self.prefetches.items[s as usize].waiters;
                if w.last() != Some(&slot) {
                    w.push(slot);
                    left += 1;
                }
            }
        }
        // The units up to the end of this read are consumed.
        while self.ra_base < end {
            self.ra_units.pop_front();
            self.ra_base += 1;
        }
        self.ra_top_up(now);
        if left == 0 {
            self.serve_buffered(slot, now);
        } else {
            self.cmds.items[slot as usize].left = left;
        }
        true
    }

    /// Prefetch whole pages up to `read_ahead` bytes past the window's start.
    fn ra_top_up(&mut self, now: Ns) {
        let upp = (self.p.page_bytes / self.unit).max(1);
        let limit = self.ftl.geometry().logical_units;
        let want = ((self.ra_base + self.ra_window) / upp * upp).min(limit);
        let mut u = self.ra_base + self.ra_units.len() as u64;
        while u < want {
            // One prefetch = the units up to `want` held by one flash page.
            let (die, key) = self.read_die(u * self.unit);
            let start = u;
            while u < want && (u == start || self.read_die(u * self.unit) == (die, key)) {
                u += 1;
            }
            let pf = self.prefetches.insert(Prefetch {
                first: start,
                end: u,
                gen: self.ra_gen,
                waiters: Vec::new(),
            });
            for _ in start..u {
                self.ra_units.push_back(pf);
            }
            let sense = self.sense_ns(die, key);
            self.dies[die].reads.push_back(FlashOp::Read {
                cmd: pf,
                bytes: (u - start) * self.unit,
                prefetch: true,
                sense,
            });
            self.suspend_for_read(die, now);
            self.die_next(die, now);
        }
    }

    /// Prefetch `pf` is in the buffer at `now`: its units are ready (if still in the window),
    /// the reads waiting for it are served once they wait for nothing else.
    fn prefetch_out(&mut self, pf: u32, now: Ns) {
        let mut waiters = std::mem::take(&mut self.prefetches.items[pf as usize].waiters);
        let Prefetch {
            first, end, gen, ..
        } = self.prefetches.items[pf as usize];
        if gen == self.ra_gen {
            for u in first.max(self.ra_base)..end {
                if let Some(s) = self.ra_units.get_mut((u - self.ra_base) as usize) {
                    *s = RA_READY;
                }
            }
        }
        for &w in &waiters {
            let c = &mut self.cmds.items[w as usize];
            c.left -= 1;
            if c.left == 0 {
                self.serve_buffered(w, now);
            }
        }
        waiters.clear();
        // Keep the allocation for the slot's next use.
        self.prefetches.items[pf as usize].waiters = waiters;
        self.prefetches.release(pf);
    }

    /// Read `slot` from the controller's buffer: the link at min(link, seq_read).
    fn serve_buffered(&mut self, slot: u32, now: Ns) {
        let len = self.cmds.items[slot as usize].cmd.len_bytes;
        let end = now.max(self.link_free) + transfer_ns(len, self.read_rate);
        self.link_free = end;
        self.complete(slot, end);
    }

    /// A write or trim of `[off, off + len)` drops the look-ahead window if it overlaps it.
    fn ra_forget(&mut self, off: u64, len: u64) {
        let first = off / self.unit;
        let end = off.saturating_add(len).div_ceil(self.unit);
        let have = self.ra_base + self.ra_units.len() as u64;
        if first < have && end > self.ra_base {
            self.ra_units.clear();
            self.ra_gen += 1;
        }
    }

    /// An idle die takes its next operation: a read before a program (MQSim's TSU serves a
    /// chip's read queue first), each queue in arrival order.
    fn die_next(&mut self, die: usize, now: Ns) {
        let d = &mut self.dies[die];
        if d.stage != Stage::Idle {
            return;
        }
        if d.reads.is_empty() {
            if let Some((op, step, left)) = d.suspended.take() {
                // Resume the suspended operation for its remaining time.
                d.op = Some(op);
                d.step = step;
                self.array(die, now, left);
                return;
            }
        }
        let Some(op) = d.reads.pop_front().or_else(|| d.programs.pop_front()) else {
            return;
        };
        d.op = Some(op);
        d.step = 0;
        self.step(die, now);
    }

    /// Start step `dies[die].step` of the die's operation at `now`.
    fn step(&mut self, die: usize, now: Ns) {
        let d = &mut self.dies[die];
        let op = d.op.expect("a die steps only with an operation");
        match (op, d.step) {
            (FlashOp::Read { .. }, 0) | (FlashOp::Program { .. }, 1) => {
                d.stage = Stage::WantCommand;
                d.since = now;
                self.want_channel(die, now);
            }
            (FlashOp::Read { sense, .. }, 1) => self.array(die, now, sense),
            (FlashOp::Read { .. }, _) => {
                d.stage = Stage::WantDataOut;
                d.since = now;
                self.want_channel(die, now);
            }
            (FlashOp::Program { prog }, 0) => {
                let pay = self.programs.items[prog as usize].gc_pay;
                if pay > 0 {
                    self.array(die, now, pay);
                } else {
                    d.step = 1;
                    self.step(die, now);
                }
            }
            (FlashOp::Program { prog }, _) => {
                let t = self.programs.items[prog as usize].t_prog;
                self.array(die, now, t);
            }
        }
    }

    /// The die's array is busy from `now` for `dur`.
    fn array(&mut self, die: usize, now: Ns, dur: Ns) {
        let d = &mut self.dies[die];
        d.stage = Stage::Array;
        d.array_end = now + dur;
        let epoch = d.epoch;
        self.push_event(now + dur, Ev::Die(die as u32, epoch));
    }

    /// Program/erase suspension: a read queued on a die busy programming (or paying GC, its
    /// copies and erases) suspends that operation, unless it ends within the suspend latency;
    /// the die serves its reads after the latency and resumes the operation's remaining time
    /// once its read queue is empty.
    fn suspend_for_read(&mut self, die: usize, now: Ns) {
        let lat = self.p.suspend_latency_ns;
        let d = &mut self.dies[die];
        if !self.p.suspend
            || d.stage != Stage::Array
            || d.suspended.is_some()
            || !matches!(d.op, Some(FlashOp::Program { .. }))
            || d.array_end <= now + lat
        {
            return;
        }
        let op = d.op.take().expect("matched");
        d.suspended = Some((op, d.step, d.array_end - now));
        d.epoch += 1;
        d.stage = Stage::Suspending;
        let epoch = d.epoch;
        self.suspensions += 1;
        self.push_event(now + lat, Ev::Die(die as u32, epoch));
    }

    /// `die` now waits for its channel (its stage is set): mark it, then arbitrate.
    fn want_channel(&mut self, die: usize, now: Ns) {
        let ch = self.channel_of(die);
        if let Some(w) = self.waiting.get_mut(ch) {
            *w |= 1 << (die / self.channels);
        }
        self.arbitrate(ch, now);
    }

    /// Hand channel `ch`, if free, to a die waiting for it: a sensed page's data out first
    /// (MQSim's ONFI controller serves waiting read transfers before new commands), then a
    /// command phase; among equals the die waiting longest, then the lowest die number.
    fn arbitrate(&mut self, ch: usize, now: Ns) {
        if self.chan_holder[ch].is_some() {
            return;
        }
        if !self.waiting.is_empty() {
            return self.arbitrate_waiting(ch, now);
        }
        if let Some(die) = self.scan_waiting(ch) {
            self.grant(ch, die, now);
        }
    }

    /// The die of channel `ch` to serve next, by a scan of the channel's dies.
    fn scan_waiting(&self, ch: usize) -> Option<usize> {
        let mut best: Option<(u8, Ns, usize)> = None;
        let mut die = ch;
        while die < self.dies.len() {
            let d = &self.dies[die];
            let class = match d.stage {
                Stage::WantDataOut => 0,
                Stage::WantCommand => 1,
                _ => 2,
            };
            if class < 2 && best.is_none_or(|b| (class, d.since, die) < b) {
                best = Some((class, d.since, die));
            }
            die += self.channels;
        }
        best.map(|b| b.2)
    }

    /// [`Ssd::arbitrate`] over the dies marked as waiting (`waiting`: up to 64 dies per
    /// channel): the same smallest (class, since, die), visiting only the waiting dies, in
    /// ascending order; usually there is one or none.
    fn arbitrate_waiting(&mut self, ch: usize, now: Ns) {
        let w = self.waiting[ch];
        if w == 0 {
            debug_assert_eq!(self.scan_waiting(ch), None);
            return;
        }
        let k = if w & (w - 1) == 0 {
            w.trailing_zeros() as usize
        } else {
            let mut best = (2u8, Ns::MAX, usize::MAX);
            let mut m = w;
            while m != 0 {
                let k = m.trailing_zeros() as usize;
                m &= m - 1;
                let d = &self.dies[ch + k * self.channels];
                let class = u8::from(d.stage != Stage::WantDataOut);
                if (class, d.since, k) < best {
                    best = (class, d.since, k);
                }
            }
            best.2
        };
        self.waiting[ch] &= !(1 << k);
        let die = ch + k * self.channels;
        debug_assert_eq!(Some(die), self.scan_waiting(ch), "the scan's choice");
        self.grant(ch, die, now);
    }

    /// Give channel `ch` to `die`, which waits for it: its transfer starts at `now`.
    fn grant(&mut self, ch: usize, die: usize, now: Ns) {
        debug_assert!(matches!(
            self.dies[die].stage,
            Stage::WantCommand | Stage::WantDataOut
        ));
        let d = &mut self.dies[die];
        let busy = match d.op.expect("a waiting die has an operation") {
            FlashOp::Read { bytes, .. } if d.stage == Stage::WantDataOut => {
                transfer_ns(bytes, self.p.channel_rate_bps)
            }
            FlashOp::Read { .. } => self.p.flash_command_ns,
            FlashOp::Program { .. } => {
                self.p.flash_command_ns + transfer_ns(self.p.page_bytes, self.p.channel_rate_bps)
            }
        };
        d.stage = Stage::OnChannel;
        self.chan_holder[ch] = Some(die as u32);
        self.push_event(now + busy, Ev::Channel(ch as u32));
    }

    /// The die's array step ended at `now`.
    fn die_event(&mut self, die: usize, now: Ns) {
        let d = &mut self.dies[die];
        if d.stage == Stage::Suspending {
            d.stage = Stage::Idle;
            self.die_next(die, now);
            return;
        }
        match (d.op.expect("a busy die has an operation"), d.step) {
            (FlashOp::Program { prog }, 2) => {
                d.stage = Stage::Idle;
                d.op = None;
                self.program_done(prog, now);
                self.die_next(die, now);
            }
            _ => {
                d.step += 1;
                self.step(die, now);
            }
        }
    }

    /// Channel `ch`'s transfer ended at `now`: its die moves on, then the channel is handed
    /// to the next die.
    fn channel_event(&mut self, ch: usize, now: Ns) {
        let die = self.chan_holder[ch]
            .take()
            .expect("a busy channel has a die") as usize;
        let d = &mut self.dies[die];
        match (d.op.expect("a die on a channel has an operation"), d.step) {
            (
                FlashOp::Read {
                    cmd,
                    bytes,
                    prefetch,
                    ..
                },
                2,
            ) => {
                d.stage = Stage::Idle;
                d.op = None;
                if prefetch {
                    self.prefetch_out(cmd, now);
                } else {
                    self.piece_out(cmd, bytes, now);
                }
                self.die_next(die, now);
            }
            _ => {
                d.step += 1;
                self.step(die, now);
            }
        }
        self.arbitrate(ch, now);
    }

    /// A read piece of `bytes` is out of flash at `now`. The link moves the read to the host
    /// from its first piece on (cut-through), at min(link, seq_read) rate, ending no earlier
    /// than the last piece plus its own transfer.
    fn piece_out(&mut self, slot: u32, bytes: u64, now: Ns) {
        let len = self.cmds.items[slot as usize].cmd.len_bytes;
        let c = &mut self.cmds.items[slot as usize];
        if c.link_end == 0 {
            let start = now.max(self.link_free);
            c.link_end = start + transfer_ns(len, self.read_rate);
            self.link_free = c.link_end;
        }
        c.left -= 1;
        if c.left == 0 {
            let end = c.link_end.max(now + transfer_ns(bytes, self.read_rate));
            self.link_free = self.link_free.max(end);
            self.complete(slot, end);
        }
    }

    /// Admit writes (and flushes) in arrival order while the buffer has room: a write's data
    /// crosses the link into the buffer at min(link, seq_write) rate.
    fn admit(&mut self, now: Ns) {
        while let Some(&slot) = self.admit_queue.front() {
            let c = self.cmds.items[slot as usize].cmd;
            if c.op == Op::Flush {
                self.admit_queue.pop_front();
                let at = now.max(self.last_in_buffer);
                self.push_event(at, Ev::FlushStart(slot));
                continue;
            }
            // A write larger than the room waits while earlier data is on its way to flash
            // (in transfer or programming: it leaves the buffer later, and this runs again).
            // The open page's partial data leaves only when a page is full: once it is all
            // the buffer holds, the write is admitted (its first units complete that page),
            // as a write larger than the whole buffer is once the buffer is empty.
            if self.buf_used > self.open_fill
                && self.buf_used + c.len_bytes > self.p.write_buffer_bytes
            {
                break;
            }
            self.admit_queue.pop_front();
            self.buf_used += c.len_bytes;
            let start = now.max(self.link_free);
            let in_buffer = start + transfer_ns(c.len_bytes, self.write_rate);
            self.link_free = in_buffer;
            self.last_in_buffer = in_buffer;
            self.push_event(in_buffer, Ev::InBuffer(slot));
        }
    }

    /// Write `slot`'s data is in the buffer at `now`: its 4 KiB units fill the open page, a
    /// full page is programmed; done now, or (FUA, write-through) when its programs are.
    fn in_buffer(&mut self, slot: u32, now: Ns) {
        let c = self.cmds.items[slot as usize].cmd;
        let through = c.fua || !self.p.write_cache;
        let waiter = through.then_some(slot);
        let units_per_page = (self.p.page_bytes / self.unit) as usize;
        let mut pos = c.offset_bytes;
        let end = c.offset_bytes.saturating_add(c.len_bytes);
        let mut issued = 0;
        while pos < end {
            let u = pos / self.unit;
            let take = (self.unit - pos % self.unit).min(end - pos);
            if self.open_lpns.last() != Some(&u) {
                self.open_lpns.push(u);
                // Its old copy is invalidated when the page is programmed (now or at a later
                // write): start loading what that touches.
                self.ftl.prefetch_old_copy(u);
            }
            self.open_fill += take;
            pos += take;
            if self.open_lpns.len() == units_per_page {
                self.program_open_page(now, waiter);
                issued += 1;
            }
        }
        if through {
            if self.open_fill > 0 {
                self.program_open_page(now, waiter);
                issued += 1;
            }
            self.cmds.items[slot as usize].left = issued;
        } else {
            self.complete(slot, now);
        }
        // The write's bytes are in the buffer: a write waiting for room may fit now (what
        // is left of it beside the open page may be nothing that a program will free).
        self.admit(now);
    }

    /// Program the open page (full or, when forced, partial) from `now`.
    fn program_open_page(&mut self, now: Ns, waiter: Option<u32>) {
        let bytes = self.open_fill;
        let preferred = self.write_die();
        let (die, gc) = self.ftl.write_page(preferred, &self.open_lpns);
        self.open_lpns.clear();
        self.open_fill = 0;
        if !gc.is_empty() {
            let t = gc.read_pages * self.p.read_latency_ns
                + gc.program_pages * self.p.program_latency_ns
                + gc.erases * self.p.erase_latency_ns;
            self.gc_debt[die] += t;
            self.gc_ns += t;
            self.die_erases[die] += gc.erases;
            let blocks = self.ftl.geometry().blocks_per_die;
            self.retry_p[die] = Self::retry_p_of(&self.p, self.die_erases[die], blocks);
        }
        // Incremental GC: the die pays its collection time in equal installments, one per
        // host page, before each page, until its active block is full (the next GC).
        let mut gc_pay = 0;
        if self.gc_debt[die] > 0 {
            let left = u64::from(self.ftl.host_pages_left(die));
            let pay = self.gc_debt[die] / (left + 1);
            gc_pay = if left == 0 { self.gc_debt[die] } else { pay };
            self.gc_debt[die] -= gc_pay;
        }
        let page = self.ftl.last_page_in_block(die);
        let t_prog = self.p.cell_type.scaled(
            self.p.program_latency_ns,
            self.p.cell_type.page_type(page),
            CellType::PROGRAM,
        );
        let prog = self.programs.insert(Program {
            bytes,
            t_prog,
            waiter,
            seq: self.prog_seq,
            gc_pay,
        });
        self.prog_seq += 1;
        self.progs_in_flight += 1;
        self.dies[die].programs.push_back(FlashOp::Program { prog });
        self.die_next(die, now);
    }

    /// Program `prog` is on flash at `now`: its bytes leave the buffer, the writes and
    /// flushes waiting for it count it, waiting writes are admitted.
    fn program_done(&mut self, prog: u32, now: Ns) {
        let p = self.programs.items[prog as usize];
        self.programs.release(prog);
        self.progs_in_flight -= 1;
        self.buf_used -= p.bytes;
        if let Some(w) = p.waiter {
            let c = &mut self.cmds.items[w as usize];
            c.left -= 1;
            if c.left == 0 {
                self.complete(w, now);
            }
        }
        let mut i = 0;
        while i < self.flushes.len() {
            let f = self.flushes[i];
            let c = &mut self.cmds.items[f as usize];
            if p.seq < c.before_seq {
                c.left -= 1;
                if c.left == 0 {
                    self.flushes.swap_remove(i);
                    self.complete(f, now);
                    continue;
                }
            }
            i += 1;
        }
        self.admit(now);
    }

    /// A flush's turn at `now`: program the open (partial) page; done when every page issued
    /// so far is programmed.
    fn flush_start(&mut self, slot: u32, now: Ns) {
        if self.open_fill > 0 {
            self.program_open_page(now, None);
        }
        if self.progs_in_flight == 0 {
            self.complete(slot, now);
            return;
        }
        let c = &mut self.cmds.items[slot as usize];
        c.left = self.progs_in_flight as u32;
        c.before_seq = self.prog_seq;
        self.flushes.push(slot);
    }
}

impl Device for Ssd {
    fn identity(&self) -> Identity<'_> {
        let p = &self.p;
        Identity::new(&self.name, &ENTRY, &p.profile, &p.values)
            .limits(p.capacity_bytes, p.queue_depth)
    }

    fn submit(&mut self, now: Ns, cmd: DevCmd) {
        self.busy.start(now);
        let cost = if cmd.op == Op::Read {
            self.read_cmd_ns
        } else {
            self.write_cmd_ns
        };
        let accept = now.max(self.ctrl_free) + cost;
        self.ctrl_free = accept;
        let slot = self.cmds.insert(Cmd {
            cmd,
            left: 0,
            link_end: 0,
            before_seq: 0,
        });
        self.push_event(accept, Ev::Accepted(slot));
    }

    fn next_event_ns(&self) -> Option<Ns> {
        match (self.events.peek_key(), self.done.next()) {
            (Some((e, _)), Some(d)) => Some(e.min(d)),
            (Some((e, _)), None) => Some(e),
            (None, d) => d,
        }
    }

    fn prefetch(&self, op: Op, offset_bytes: u64, len_bytes: u64) {
        if !matches!(op, Op::Read | Op::Write) || len_bytes == 0 {
            return;
        }
        // One hint per cache line of mapping entries (16 units), at most 64 lines.
        let first = offset_bytes / self.unit;
        let last = (offset_bytes.saturating_add(len_bytes) - 1) / self.unit;
        self.ftl.prefetch(first);
        if last / 16 != first / 16 {
            for u in (first + 16..=last).step_by(16).take(63) {
                self.ftl.prefetch(u);
            }
            self.ftl.prefetch(last);
        }
    }

    fn advance(&mut self, now: Ns, done: &mut Vec<u64>) {
        loop {
            if self.hole {
                self.hole = false;
                self.events.pop();
            }
            let Some(((t, _), ev)) = self.events.peek().filter(|e| e.0 .0 <= now) else {
                break;
            };
            // Taken: the handler's first push replaces it.
            self.hole = true;
            match ev {
                Ev::Accepted(slot) => self.accepted(slot, t),
                Ev::Die(die, epoch) => {
                    // An array step cut short by a suspension has a newer epoch.
                    if epoch == self.dies[die as usize].epoch {
                        self.die_event(die as usize, t);
                    }
                }
                Ev::Channel(ch) => self.channel_event(ch as usize, t),
                Ev::InBuffer(slot) => self.in_buffer(slot, t),
                Ev::FlushStart(slot) => self.flush_start(slot, t),
            }
        }
        self.done
            .drain_due(now, done, &mut self.stats, &mut self.busy);
    }

    fn stats(&self, now: Ns) -> DeviceStats {
        let f = self.ftl.stats();
        DeviceStats {
            flash_write_bytes: f.flash_write_pages * self.p.page_bytes,
            gc_count: f.gc_count,
            gc_ns: self.gc_ns,
            ..self.stats.as_of(&self.busy, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{closed_loop, drain, one, typed_params};
    use super::super::DeviceError;
    use super::*;
    use std::collections::BTreeMap;
    use vmio_core::rng::Rng;

    fn ssd() -> Ssd {
        ssd_with("").unwrap()
    }

    /// The profile with every page at the mean latencies.
    fn slc() -> Ssd {
        ssd_with("cell_type = \"slc\"").unwrap()
    }

    fn random_iops(op: Op, qd: usize) -> f64 {
        let mut d = ssd();
        let mut rng = Rng::new(2);
        let n = 50_000;
        let pages = d.capacity_bytes() / 4096;
        let offs: Vec<u64> = (0..n).map(|_| rng.below(pages) * 4096).collect();
        closed_loop(&mut d, 0, qd, n, |i| (op, offs[i], 4096)).iops()
    }

    fn seq_bps(op: Op, qd: usize, bs: u64) -> f64 {
        let mut d = ssd();
        let n = 4000;
        let run = closed_loop(&mut d, 0, qd, n, |i| (op, i as u64 * bs, bs));
        (n as u64 * bs) as f64 / (run.elapsed_ns as f64 / 1e9)
    }

    #[test]
    fn random_4k_reads_at_qd32_reach_the_datasheet_iops() {
        let iops = random_iops(Op::Read, 32);
        eprintln!("ssd random 4k read QD32: {iops:.0} IOPS");
        assert!((85_000.0..=115_000.0).contains(&iops), "{iops}");
    }

    #[test]
    fn random_4k_writes_at_qd32_reach_the_datasheet_iops() {
        let iops = random_iops(Op::Write, 32);
        eprintln!("ssd random 4k write QD32: {iops:.0} IOPS");
        assert!((76_500.0..=103_500.0).contains(&iops), "{iops}");
    }

    #[test]
    fn a_4k_read_at_qd1_takes_command_flash_channel_and_link_time() {
        let mut d = slc();
        let t = one(&mut d, 0, 1, Op::Read, 1 << 30, 4096, false);
        let want = 10 * US
            + 300
            + 60 * US
            + transfer_ns(4096, 400_000_000)
            + transfer_ns(4096, 540_000_000);
        assert_eq!(t, want);
        let qd1 = random_iops(Op::Read, 1);
        eprintln!("ssd random 4k read QD1: {qd1:.0} IOPS");
        assert!(qd1 < 15_000.0);
    }

    #[test]
    fn sequential_reads_and_writes_are_capped_at_the_datasheet_bandwidth() {
        let r = seq_bps(Op::Read, 32, 128 << 10);
        let w = seq_bps(Op::Write, 32, 128 << 10);
        let r1 = seq_bps(Op::Read, 1, 128 << 10);
        eprintln!("ssd seq 128k QD32: read {r:.3e} B/s, write {w:.3e} B/s; read QD1 {r1:.3e} B/s");
        assert!((r / 540e6 - 1.0).abs() < 0.03, "{r}");
        assert!((w / 520e6 - 1.0).abs() < 0.03, "{w}");
        assert!(r1 < r);
    }

    #[test]
    fn a_flush_waits_for_buffered_writes_to_be_programmed() {
        let mut d = slc();
        let w = one(&mut d, 0, 1, Op::Write, 0, 4096, false);
        assert!(w < 50 * US, "{w}");
        let f = one(&mut d, w, 2, Op::Flush, 0, 0, false);
        assert!(f - w >= 250 * US, "{}", f - w);
        // FUA: the write itself waits for its page program.
        let fua = one(&mut d, f, 3, Op::Write, 8192, 4096, true);
        assert!(fua - f >= 250 * US, "{}", fua - f);
        assert_eq!(d.stats(Ns::MAX).flush_ops, 1);
    }

    #[test]
    fn without_its_write_cache_every_write_waits_for_its_page_program_as_fua_does() {
        let mut cached = slc();
        let mut through = ssd_with("write_cache = false\ncell_type = \"slc\"").unwrap();
        let fua = one(&mut cached, 0, 1, Op::Write, 0, 4096, true);
        let plain = one(&mut through, 0, 1, Op::Write, 0, 4096, false);
        assert!(plain >= 250 * US, "{plain}");
        assert_eq!(plain, fua);
    }

    #[test]
    fn a_write_larger_than_the_room_left_beside_a_partial_open_page_is_admitted() {
        // 1 MiB of buffer; a 4 KiB write leaves half of an 8 KiB page open (nothing to
        // program, so nothing frees the buffer); a 1 MiB write then needs more than the room
        // left. Its first units complete the open page: it is admitted and both complete.
        let mut d = ssd_with("channels = 1\ndies_per_channel = 1\nwrite_buffer = \"1m\"").unwrap();
        for (tag, off, len) in [(0, 0, 4096), (1, 4096, 1 << 20)] {
            d.submit(
                0,
                DevCmd {
                    tag,
                    op: Op::Write,
                    offset_bytes: off,
                    len_bytes: len,
                    fua: false,
                },
            );
        }
        let done = drain(&mut d);
        assert_eq!(done.len(), 2, "{done:?}");
        // The big write crosses the link after the small one, and waits for nothing else.
        let link = |n: u64| transfer_ns(n, d.write_rate);
        assert!(done[&1] >= done[&0] + link(1 << 20), "{done:?}");
        // What stays is the new open page's half (write-back cache, no flush).
        assert_eq!((d.buf_used, d.open_fill), (4096, 4096));
    }

    #[test]
    fn sustained_writes_beyond_the_buffer_are_paced_by_programming() {
        // With 1 channel x 1 die, programming (8 KiB per ~270 us ≈ 30 MB/s) is the bottleneck.
        let mut d = ssd_with("channels = 1\ndies_per_channel = 1\nwrite_buffer = \"1m\"").unwrap();
        let n = 2000;
        let run = closed_loop(&mut d, 0, 8, n, |i| (Op::Write, i as u64 * 65536, 65536));
        let bps = (n as u64 * 65536) as f64 / (run.elapsed_ns as f64 / 1e9);
        let prog = 8192.0 / ((250e3 + transfer_ns(8192, 400_000_000) as f64) / 1e9);
        assert!((bps / prog - 1.0).abs() < 0.05, "{bps} vs {prog}");
    }

    /// A device of `channels` x `dies` with a command time of 1 ns and a link of 100 GB/s,
    /// so that the flash alone sets the times.
    fn bare(channels: u64, dies: u64) -> Ssd {
        ssd_with(&format!(
            "channels = {channels}\ndies_per_channel = {dies}\nread_iops = 1000000000\n\
             cell_type = \"slc\"\n\
             seq_read_rate = 100000000000\nlink_rate = 100000000000"
        ))
        .unwrap()
    }

    fn read_at(d: &mut Ssd, tag: u64, off: u64) {
        d.submit(
            0,
            DevCmd {
                tag,
                op: Op::Read,
                offset_bytes: off,
                len_bytes: 4096,
                fua: false,
            },
        );
    }

    #[test]
    fn a_read_to_an_idle_die_does_not_wait_behind_reads_queued_for_another_die() {
        // 1 channel, 2 dies; unwritten data is striped by 8 KiB page: even pages on die 0.
        let (c, r) = (300, 60 * US);
        let x = transfer_ns(4096, 400_000_000);
        let l = transfer_ns(4096, 100_000_000_000);
        for n in 1..=8u64 {
            let mut d = bare(1, 2);
            for i in 0..n {
                read_at(&mut d, i, 2 * i * 8192);
            }
            read_at(&mut d, n, 8192);
            let done = drain(&mut d);
            // Die 0's command [1, 1+c]; die 1's command right after it; die 0's data out
            // [1+c+r, 1+c+r+x]; die 1's data out next (before die 0's second command).
            assert_eq!(done[&n], 1 + c + r + 2 * x + l, "{n} reads queued on die 0");
            // Die 0's reads follow one another: command, t_R, data out each.
            assert_eq!(done[&0], 1 + c + r + x + l);
            if n > 1 {
                assert_eq!(done[&1], 1 + c + r + 2 * x + c + r + x + l);
            }
        }
    }

    #[test]
    fn dies_on_one_channel_overlap_their_array_reads_and_share_its_transfers() {
        let (c, r) = (300, 60 * US);
        let x = transfer_ns(4096, 400_000_000);
        let l = transfer_ns(4096, 100_000_000_000);
        let mut d = bare(1, 4);
        for i in 0..4 {
            read_at(&mut d, i, i * 8192);
        }
        let done = drain(&mut d);
        // Commands back to back, t_R overlapped, data outs back to back.
        for i in 0..4 {
            assert_eq!(done[&i], 1 + c + r + (i + 1) * x + l, "die {i}");
        }
    }

    #[test]
    fn random_reads_on_16_dies_at_qd32_reach_the_closed_queueing_networks_throughput() {
        // MQSim's configuration (4 channels x 4 dies, t_R 75 us, 333 MB/s channels, 4 GB/s
        // link). A closed network of N = 32 commands routed uniformly to K = 16 servers of
        // service time s = command + t_R + data out has throughput K/s * N/(N+K-1)
        // (product form); channel waits lower it a little.
        let mut d = ssd_with(
            "channels = 4\ndies_per_channel = 4\nread_latency = \"75us\"\ncell_type = \"slc\"\n\
             channel_rate = 333000000\nread_iops = 1000000000\nseq_read_rate = 4000000000\n\
             link_rate = 4000000000\ncapacity = \"16g\"",
        )
        .unwrap();
        let mut rng = Rng::new(2);
        let n = 50_000;
        let pages = d.capacity_bytes() / 4096;
        let offs: Vec<u64> = (0..n).map(|_| rng.below(pages) * 4096).collect();
        let run = closed_loop(&mut d, 0, 32, n, |i| (Op::Read, offs[i], 4096));
        let s = (300 + 75 * US + transfer_ns(4096, 333_000_000)) as f64 / 1e9;
        let want = 16.0 / s * 32.0 / 47.0;
        let mut lat = run.latencies_ns.clone();
        lat.sort_unstable();
        let p99 = lat[lat.len() * 99 / 100];
        eprintln!(
            "4x4 random 4k read QD32: {:.1} k IOPS (closed form {:.1} k), mean {:.0} us, p99 {:.0} us",
            run.iops() / 1e3,
            want / 1e3,
            run.mean_latency_ns() / 1e3,
            p99 as f64 / 1e3
        );
        assert!((run.iops() / want - 1.0).abs() < 0.15, "{}", run.iops());
        // Per-die queues: the tail is several services long, not one.
        assert!(p99 as f64 > 5.0 * s * 1e9, "{p99}");
    }

    #[test]
    fn a_sequential_4k_qd1_read_stream_runs_at_the_look_aheads_rate() {
        let n = 2000;
        let mut d = slc();
        let run = closed_loop(&mut d, 0, 1, n, |i| (Op::Read, i as u64 * 4096, 4096));
        // Served from the buffer: the controller's command time, then the link.
        let want = 10 * US + transfer_ns(4096, 540_000_000);
        assert!(
            run.latencies_ns[2..].iter().all(|&l| l == want),
            "{:?}",
            &run.latencies_ns[..8]
        );
        let iops = run.iops();
        eprintln!(
            "ssd sequential 4k read QD1: {iops:.0} IOPS (closed form {:.0})",
            1e9 / want as f64
        );
        // Without look-ahead every read pays the flash.
        let mut off = ssd_with("read_ahead = 0\ncell_type = \"slc\"").unwrap();
        let run = closed_loop(&mut off, 0, 1, n, |i| (Op::Read, i as u64 * 4096, 4096));
        let flash = 10 * US
            + 300
            + 60 * US
            + transfer_ns(4096, 400_000_000)
            + transfer_ns(4096, 540_000_000);
        assert!(run.latencies_ns.iter().all(|&l| l == flash));
    }

    #[test]
    fn random_reads_are_unchanged_by_the_look_ahead() {
        let lat = |src: &str| {
            let mut d = ssd_with(src).unwrap();
            let mut rng = Rng::new(3);
            let pages = d.capacity_bytes() / 4096;
            let offs: Vec<u64> = (0..20_000).map(|_| rng.below(pages) * 4096).collect();
            closed_loop(&mut d, 0, 32, offs.len(), |i| (Op::Read, offs[i], 4096)).latencies_ns
        };
        assert_eq!(lat(""), lat("read_ahead = 0"));
    }

    #[test]
    fn a_write_into_the_look_ahead_window_drops_it() {
        let mut d = ssd();
        let mut t = 0;
        for i in 0..4u64 {
            t = one(&mut d, t, i, Op::Read, i * 4096, 4096, false);
        }
        let t = one(&mut d, t + MS, 10, Op::Write, 4 * 4096, 4096, false);
        let t1 = one(&mut d, t + MS, 11, Op::Read, 4 * 4096, 4096, false);
        // The read after the write is a flash read (the window was dropped).
        assert!(t1 - (t + MS) > 60 * US, "{}", t1 - t - MS);
    }

    #[test]
    fn mlc_pages_alternate_fast_lsb_and_slow_msb_reads_and_programs_around_the_means() {
        // Reads of unwritten data: virtual page 0 is an LSB page, page 1 an MSB page.
        let read = |page: u64| {
            let mut d = ssd_with("read_ahead = 0").unwrap();
            one(&mut d, 0, 1, Op::Read, page * 8192, 4096, false)
        };
        let (lsb, msb) = (read(0), read(1));
        assert_eq!(msb - lsb, 30 * US, "t_R 45 us against 75 us");
        assert_eq!(lsb + msb, 2 * read_qd1_slc(), "the mean stays 60 us");
        // FUA page programs on one die: page 0 (LSB, 125 us), page 1 (MSB, 375 us).
        let mut d = ssd_with("channels = 1\ndies_per_channel = 1").unwrap();
        let t0 = one(&mut d, 0, 1, Op::Write, 0, 8192, true);
        let t1 = one(&mut d, t0, 2, Op::Write, 8192, 8192, true);
        let mut s = ssd_with("channels = 1\ndies_per_channel = 1\ncell_type = \"slc\"").unwrap();
        let s0 = one(&mut s, 0, 1, Op::Write, 0, 8192, true);
        assert_eq!(s0 - t0, 125 * US);
        assert_eq!((t1 - t0) - s0, 125 * US);
    }

    fn read_qd1_slc() -> Ns {
        let mut d = ssd_with("read_ahead = 0\ncell_type = \"slc\"").unwrap();
        one(&mut d, 0, 1, Op::Read, 0, 4096, false)
    }

    #[test]
    fn tlc_page_types_keep_the_mean_latencies_over_a_block() {
        let t = CellType::Tlc;
        let types: Vec<usize> = (0..12).map(|p| t.page_type(p)).collect();
        assert_eq!(types, [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1]);
        for op in [CellType::READ, CellType::PROGRAM] {
            let sum: u64 = (0..256).map(|p| t.scaled(1000, t.page_type(p), op)).sum();
            let mean = sum as f64 / 256.0 / 1000.0;
            assert!((mean - 1.0).abs() < 0.02, "{mean}");
        }
        assert_eq!(CellType::Slc.scaled(60 * US, 0, CellType::READ), 60 * US);
    }

    #[test]
    fn read_retries_grow_with_wear_as_a_truncated_geometric_number_of_extra_senses() {
        let base = read_qd1_slc();
        for (pe, p) in [(0u64, 0.0f64), (1500, 0.25), (3000, 0.5)] {
            let src = format!("read_ahead = 0\ncell_type = \"slc\"\npe_cycles = {pe}");
            let mut d = ssd_with(&src).unwrap();
            let mut rng = Rng::new(5);
            let pages = d.capacity_bytes() / 4096;
            let offs: Vec<u64> = (0..20_000).map(|_| rng.below(pages) * 4096).collect();
            let run = closed_loop(&mut d, 0, 1, offs.len(), |i| (Op::Read, offs[i], 4096));
            // E[retries] = sum_{k=1}^{7} p^k, each one more t_R.
            let extra: f64 = (1..=MAX_RETRIES as i32).map(|k| p.powi(k)).sum();
            let want = base as f64 + extra * (60 * US) as f64;
            let mean = run.mean_latency_ns();
            eprintln!(
                "pe {pe}: mean {:.1} us, closed form {:.1} us",
                mean / 1e3,
                want / 1e3
            );
            assert!((mean / want - 1.0).abs() < 0.01, "{mean} vs {want}");
            if pe == 0 {
                assert!(run.latencies_ns.iter().all(|&l| l == base));
            }
        }
    }

    #[test]
    fn read_retries_are_drawn_from_the_devices_own_seeded_stream() {
        let lat = |seed: u64| {
            let p = typed_params("sdb", "ssd", "pe_cycles = 3000", SsdParams::from_values).unwrap();
            let mut d = Ssd::new_seeded("sdb", p, seed);
            let run = closed_loop(&mut d, 0, 4, 2000, |i| (Op::Read, (i as u64) << 20, 4096));
            (run.latencies_ns, d.retry_count)
        };
        let (a, ra) = lat(1);
        assert_eq!((a.clone(), ra), lat(1));
        assert!(ra > 0);
        assert_ne!(a, lat(2).0);
    }

    #[test]
    fn a_read_suspends_a_program_on_its_die_and_the_program_resumes_after_it() {
        let (c, r, big_s) = (300, 60 * US, 100 * US);
        let x = transfer_ns(4096, 400_000_000);
        let link = transfer_ns(4096, 540_000_000);
        let run = |suspend: bool, read: bool| {
            let src = format!(
                "channels = 1\ndies_per_channel = 1\ncell_type = \"slc\"\nread_ahead = 0\nsuspend = {suspend}"
            );
            let mut d = ssd_with(&src).unwrap();
            // A FUA page write: its program runs from about 48 us to 298 us.
            d.submit(
                0,
                DevCmd {
                    tag: 1,
                    op: Op::Write,
                    offset_bytes: 0,
                    len_bytes: 8192,
                    fua: true,
                },
            );
            let mut done = Vec::new();
            d.advance(100 * US, &mut done);
            if read {
                d.submit(
                    100 * US,
                    DevCmd {
                        tag: 2,
                        op: Op::Read,
                        offset_bytes: 1 << 30,
                        len_bytes: 4096,
                        fua: false,
                    },
                );
            }
            let at = drain(&mut d);
            (at[&1], at.get(&2).copied(), d.suspensions)
        };
        let (w0, _, _) = run(true, false);
        // The read reaches the die at 110 us (the controller's 10 us).
        let s = 110 * US;
        let (w, rd, n) = run(true, true);
        assert_eq!(n, 1);
        assert_eq!(rd, Some(s + big_s + c + r + x + link));
        assert_eq!(w, w0 + big_s + c + r + x);
        // Without suspension the read waits for the program.
        let (w, rd, n) = run(false, true);
        assert_eq!((w, n), (w0, 0));
        assert_eq!(rd, Some(w0 + c + r + x + link));
    }

    fn ssd_with(src: &str) -> Result<Ssd, DeviceError> {
        let p = typed_params("sdb", "ssd", src, SsdParams::from_values)?;
        Ok(Ssd::new("sdb", p))
    }

    /// A 4 GiB device with the profile's dies, timings and over-provisioning (smaller blocks
    /// so that each die still has hundreds of them).
    fn small(precondition: &str) -> Ssd {
        ssd_with(&format!(
            "capacity = \"4g\"\npages_per_block = 64\ngc_threshold = 2\nprecondition = \"{precondition}\""
        ))
        .unwrap()
    }

    /// Stream A writes sequentially with 512 KiB requests, stream B randomly with `bs_b`
    /// (aligned), each keeping `qd` commands outstanding, until A has written `a_bytes`.
    /// Returns the bandwidth of A and of B (bytes/s) over that time.
    fn two_writers(d: &mut Ssd, bs_b: u64, qd: usize, a_bytes: u64) -> (f64, f64) {
        const BS_A: u64 = 512 << 10;
        let cap = d.capacity_bytes();
        let mut rng = Rng::new(9);
        let (mut a_off, mut a_done, mut b_done) = (0u64, 0u64, 0u64);
        let mut tag = 0u64;
        let mut now = 0;
        let mut kind: BTreeMap<u64, bool> = BTreeMap::new();
        let mut issue = |d: &mut Ssd, now: Ns, is_a: bool, kind: &mut BTreeMap<u64, bool>| {
            let (off, len) = if is_a {
                let o = a_off % (cap / 2);
                a_off += BS_A;
                (o, BS_A)
            } else {
                (rng.below(cap / bs_b) * bs_b, bs_b)
            };
            tag += 1;
            kind.insert(tag, is_a);
            d.submit(
                now,
                DevCmd {
                    tag,
                    op: Op::Write,
                    offset_bytes: off,
                    len_bytes: len,
                    fua: false,
                },
            );
        };
        for _ in 0..qd {
            issue(d, now, true, &mut kind);
            issue(d, now, false, &mut kind);
        }
        let mut done = Vec::new();
        while a_done < a_bytes {
            now = d.next_event_ns().unwrap();
            done.clear();
            d.advance(now, &mut done);
            for t in &done {
                let is_a = kind.remove(t).unwrap();
                if is_a {
                    a_done += BS_A;
                } else {
                    b_done += bs_b;
                }
                issue(d, now, is_a, &mut kind);
            }
        }
        let secs = now as f64 / 1e9;
        (a_done as f64 / secs, b_done as f64 / secs)
    }

    #[test]
    fn sequential_writes_beside_a_random_writer_are_far_slower_on_an_aged_device_than_on_a_clean_one(
    ) {
        let mut ratios = Vec::new();
        for bs_b in [4u64 << 10, 64 << 10, 512 << 10] {
            let mut clean = small("clean");
            let mut aged = small("aged");
            let (ca, cb) = two_writers(&mut clean, bs_b, 4, 384 << 20);
            let (aa, ab) = two_writers(&mut aged, bs_b, 4, 384 << 20);
            let (cs, ast) = (clean.ftl_stats().unwrap(), aged.ftl_stats().unwrap());
            eprintln!(
                "B bs {:>3} KiB: clean A {:6.1} MB/s B {:6.1} MB/s WA {:.2} | aged A {:6.1} MB/s B {:6.1} MB/s WA {:.2} gc {} ({:.0} ms)",
                bs_b >> 10,
                ca / 1e6,
                cb / 1e6,
                cs.write_amplification,
                aa / 1e6,
                ab / 1e6,
                ast.write_amplification,
                ast.gc_count,
                ast.gc_ns as f64 / 1e6
            );
            assert_eq!(cs.gc_count, 0);
            assert!(ast.gc_count > 0 && ast.write_amplification > 2.0);
            ratios.push(aa / ca);
        }
        for r in &ratios {
            assert!(*r < 0.5, "aged/clean sequential bandwidth {ratios:?}");
        }
    }

    #[test]
    fn an_aged_device_sustains_far_less_random_write_throughput_than_a_clean_one() {
        let iops = |mut d: Ssd| {
            let mut rng = Rng::new(4);
            let n = 60_000;
            let cap = d.capacity_bytes() / 4096;
            let offs: Vec<u64> = (0..n).map(|_| rng.below(cap) * 4096).collect();
            let run = closed_loop(&mut d, 0, 32, n, |i| (Op::Write, offs[i], 4096));
            // Past the write buffer: the second half of the run.
            let half = run.latencies_ns.len() / 2;
            let t_half: Ns = run.latencies_ns[half..].iter().sum::<u64>() / 32;
            (half as f64 / (t_half as f64 / 1e9), d.stats(Ns::MAX))
        };
        let (clean, cs) = iops(small("clean"));
        let (aged, st) = iops(small("aged"));
        eprintln!(
            "random 4k write QD32: clean {clean:.0} IOPS, aged {aged:.0} IOPS (gc {} victims, {:.0} ms, flash {} MiB for host {} MiB)",
            st.gc_count,
            st.gc_ns as f64 / 1e6,
            st.flash_write_bytes >> 20,
            st.write_bytes >> 20
        );
        assert_eq!(cs.gc_count, 0);
        assert!(st.gc_count > 0 && st.flash_write_bytes > 2 * st.write_bytes);
        assert!(aged < 0.5 * clean, "{aged} vs {clean}");
    }

    #[test]
    fn a_bad_gc_policy_is_named_with_the_accepted_policies() {
        let e = ssd_with("gc_policy = \"lru\"").err().unwrap().to_string();
        assert_eq!(
            e,
            "device 'sdb': gc_policy = \"lru\": must be one of greedy, fifo, cost-benefit"
        );
        let cases = [
            (
                "precondition = \"used\"",
                "precondition = \"used\": must be one of clean, aged",
            ),
            ("gc_policy = 3", "gc_policy = 3: must be one of greedy"),
            (
                "over_provisioning = \"lots\"",
                "over_provisioning = \"lots\": must be a fraction",
            ),
            (
                "over_provisioning = 0.0",
                "over_provisioning = 0.0: must be a fraction",
            ),
            (
                "over_provisioning = 0.001",
                "over_provisioning = 0.001: leaves",
            ),
            (
                "gc_threshold = 1",
                "gc_threshold = 1: must be between 2 and",
            ),
            (
                "page_size = 6144",
                "page_size = 6144: must be a multiple of 4096",
            ),
            ("capacity = \"64t\"", "capacity = 70368744177664: gives"),
        ];
        for (src, want) in cases {
            let e = ssd_with(src)
                .err()
                .unwrap_or_else(|| panic!("{src} accepted"))
                .to_string();
            assert!(
                e.starts_with("device 'sdb': ") && e.contains(want),
                "{src}: got {e}"
            );
        }
    }

    #[test]
    fn ftl_parameters_show_in_the_effective_parameters_and_shape_the_flash() {
        let d = ssd_with(
            "over_provisioning = \"28%\"\ngc_policy = \"cost-benefit\"\nerase_latency = \"2.5ms\"",
        )
        .unwrap();
        let p: BTreeMap<String, String> = d.params().into_iter().collect();
        assert_eq!(p["over_provisioning"], "0.28");
        assert_eq!(p["gc_policy"], "cost-benefit");
        assert_eq!(p["erase_latency"], "2.5ms");
        assert_eq!(p["precondition"], "clean");
        assert_eq!(p["pages_per_block"], "256");
        // The profile: 32 dies of 2 MiB blocks, 256 GiB raw for 256 GB user.
        let g = ssd().ftl_geometry().clone();
        assert_eq!((g.dies, g.pages_per_block, g.units_per_page), (32, 256, 2));
        let raw = g.blocks() * 2 * 1024 * 1024;
        assert!(
            (raw as f64 / (256u64 << 30) as f64 - 1.0).abs() < 0.001,
            "{raw}"
        );
        assert_eq!(d.ftl_stats().unwrap().host_write_units, 0);
    }

    #[test]
    fn trim_unmaps_whole_units_only() {
        let mut d = small("clean");
        let t = one(&mut d, 0, 1, Op::Write, 0, 64 << 10, true);
        assert!(d.ftl.locate(0).is_some() && d.ftl.locate(15).is_some());
        let t = one(&mut d, t, 2, Op::Trim, 2048, 16 << 10, false);
        assert!(d.ftl.locate(0).is_some(), "a partial unit keeps its data");
        assert!((1..4).all(|u| d.ftl.locate(u).is_none()));
        assert!(d.ftl.locate(4).is_some());
        one(&mut d, t, 3, Op::Trim, 0, u64::MAX, false);
        assert!((0..16).all(|u| d.ftl.locate(u).is_none()));
    }

    /// Release-build check of the aging cost and of the simulator's speed on an aged 256 GB
    /// device: `cargo test --release -p vmio-sim --lib aging -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn aging_the_256g_profile_is_fast() {
        let t0 = std::time::Instant::now();
        let mut d = ssd_with("precondition = \"aged\"").unwrap();
        let aging = t0.elapsed();
        let mut rng = Rng::new(1);
        let n = 2_000_000;
        let pages = d.capacity_bytes() / 4096;
        let t1 = std::time::Instant::now();
        let run = closed_loop(&mut d, 0, 32, n, |_| {
            (Op::Write, rng.below(pages) * 4096, 4096)
        });
        let wall = t1.elapsed().as_secs_f64();
        let f = d.ftl_stats().unwrap();
        eprintln!(
            "aging 256 GB: {:.2} s; then {n} random 4k writes: {:.0} simulated IOPS, WA {:.2}, {:.2} M simulated I/Os per wall second",
            aging.as_secs_f64(),
            run.iops(),
            f.write_amplification,
            n as f64 / wall / 1e6
        );
    }

    #[test]
    fn zero_length_and_out_of_range_commands_complete_without_panicking() {
        let mut d = ssd();
        let cap = d.capacity_bytes();
        let mut t = 0;
        for (i, (op, off, len)) in [
            (Op::Read, 0, 0),
            (Op::Write, 0, 0),
            (Op::Trim, 0, 1 << 30),
            (Op::Read, cap + 4096, 4096),
            (Op::Write, u64::MAX - 10, 4096),
            (Op::Read, u64::MAX - 10, 4096),
            (Op::Flush, 0, 0),
        ]
        .into_iter()
        .enumerate()
        {
            t = one(&mut d, t, i as u64, op, off, len, false);
        }
        assert!(d.next_event_ns().is_none());
    }
}
