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
//! layout uses a fixed seed: device constructors receive no run seed.
//!
//! **Algorithm.** Every resource is FIFO, so a command's completion time is computed when it is
//! submitted (eager reservation; no reordering):
//!
//! ```text
//! accept  = max(now, controller free) + 1/read_iops (or 1/write_iops)
//! read:   pieces = runs of 4 KiB units held by one flash page (FTL lookup; unmapped units
//!             are striped statically: page % dies); channel = die % channels
//!             die busy t_R from max(accept, die free); then the channel moves the piece
//!         link: starts when the first piece is ready, at min(link, seq_read) rate; ends no
//!               earlier than the last piece + its transfer (cut-through)        -> done
//! write:  wait for room in the write buffer; link in at min(link, seq_write) -> done
//!         (FUA, or `write_cache = false`: done when programmed, the buffer written
//!         through, as a drive whose cache is off: ATA SET FEATURES 82h); 4 KiB units fill the open page; a full page goes to
//!         the next die round-robin: FTL allocation (if it ran GC on that die, the die owes
//!         gc = read_pages·t_R + program_pages·t_PROG + erases·t_BERS), the die pays
//!         debt / (host pages left in its active block + 1) of what it owes, channel
//!         transfer, then t_PROG; its bytes leave the buffer
//! flush:  program the open (partial) page; done when every page is programmed
//! trim:   unmap the whole 4 KiB units in the range; done after the command time
//! ```
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
//! Channel bandwidth is booked in arrival order, and a transfer to a die that is busy (GC)
//! happens once the die is free without holding the channel for the other dies. GC copies are
//! copyback (no channel transfer). Out-of-range commands are served like in-range ones (the
//! engine validates ranges); the FTL ignores their units.

use vmio_core::request::Op;
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
    pub channel_rate_bps: u64,
    pub read_iops: u64,
    pub write_iops: u64,
    pub seq_read_rate_bps: u64,
    pub seq_write_rate_bps: u64,
    pub link_rate_bps: u64,
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
            channel_rate_bps: v.int("channel_rate"),
            read_iops: v.int("read_iops"),
            write_iops: v.int("write_iops"),
            seq_read_rate_bps: v.int("seq_read_rate"),
            seq_write_rate_bps: v.int("seq_write_rate"),
            link_rate_bps: v.int("link_rate"),
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

pub struct Ssd {
    name: String,
    p: SsdParams,
    ftl: Ftl,
    unit: u64,
    /// Logical units of the open (buffered, not yet programmed) page.
    open_lpns: Vec<u64>,
    gc_ns: u64,
    dies: usize,
    read_cmd_ns: Ns,
    write_cmd_ns: Ns,
    read_rate: u64,
    write_rate: u64,

    ctrl_free: Ns,
    link_free: Ns,
    die_free: Vec<Ns>,
    /// Per die: GC time not yet charged (paid in installments by the next host pages).
    gc_debt: Vec<Ns>,
    chan_free: Vec<Ns>,

    /// Write buffer: bytes held, pending releases (time programmed, bytes), the earliest time
    /// the next write may be admitted.
    buf_used: u64,
    releases: crate::engine::MinHeap<()>,
    admit_floor: Ns,
    open_fill: u64,
    /// When the bytes in the open page became available (the latest write into it).
    open_ready: Ns,
    next_die: usize,
    durable_ns: Ns,

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
        if p.precondition == Precondition::Aged {
            ftl.precondition_aged(seed);
        }
        Self {
            name: name.to_string(),
            ftl,
            unit: p.unit_bytes(),
            open_lpns: Vec::with_capacity((p.page_bytes / p.unit_bytes()) as usize),
            gc_ns: 0,
            dies,
            read_cmd_ns: (1e9 / p.read_iops as f64).round() as Ns,
            write_cmd_ns: (1e9 / p.write_iops as f64).round() as Ns,
            read_rate: p.link_rate_bps.min(p.seq_read_rate_bps),
            write_rate: p.link_rate_bps.min(p.seq_write_rate_bps),
            ctrl_free: 0,
            link_free: 0,
            die_free: vec![0; dies],
            gc_debt: vec![0; dies],
            chan_free: vec![0; p.channels as usize],
            buf_used: 0,
            releases: crate::engine::MinHeap::with_capacity(1024),
            admit_floor: 0,
            open_fill: 0,
            open_ready: 0,
            next_die: 0,
            durable_ns: 0,
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
                ((vpage % self.dies as u64) as usize, u64::MAX - vpage)
            }
        }
    }

    /// Die preferred for the next programmed page (round-robin; the FTL may pick another when
    /// that die has no room).
    fn write_die(&mut self) -> usize {
        let d = self.next_die;
        self.next_die = (self.next_die + 1) % self.dies;
        d
    }

    /// Move `bytes` over channel `ch` for a die that can start at `die_ready`; returns the end.
    /// Channel bandwidth is booked in arrival order from `arrival` (when the data could move
    /// had the die been idle), so a die stalled by GC does not hold the channel for the
    /// others: its transfer happens after its die is free, overlapping later bookings.
    fn channel(&mut self, ch: usize, arrival: Ns, die_ready: Ns, bytes: u64) -> Ns {
        let x = transfer_ns(bytes, self.p.channel_rate_bps);
        let booked = arrival.max(self.chan_free[ch]) + x;
        self.chan_free[ch] = booked;
        booked.max(die_ready + x)
    }

    fn channel_of(&self, die: usize) -> usize {
        die % self.p.channels as usize
    }

    fn accept(&mut self, now: Ns, cost: Ns) -> Ns {
        let t = now.max(self.ctrl_free) + cost;
        self.ctrl_free = t;
        t
    }

    fn read(&mut self, accept: Ns, off: u64, len: u64) -> Ns {
        let (mut first, mut last, mut last_piece) = (Ns::MAX, 0, 0);
        let mut pos = off;
        let end = off.saturating_add(len);
        while pos < end {
            // One piece = the consecutive units of the request held by one flash page.
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
            let ch = self.channel_of(die);
            let sensed = accept.max(self.die_free[die]) + self.p.read_latency_ns;
            let xfer_end = self.channel(ch, accept + self.p.read_latency_ns, sensed, piece);
            self.die_free[die] = xfer_end;
            first = first.min(xfer_end);
            if xfer_end >= last {
                last = xfer_end;
                last_piece = piece;
            }
        }
        let start = first.max(self.link_free);
        let end = (start + transfer_ns(len, self.read_rate))
            .max(last + transfer_ns(last_piece, self.read_rate));
        self.link_free = end;
        end
    }

    /// Program the open page (full or, when forced, partial); returns when it is on flash.
    fn program_open_page(&mut self) -> Ns {
        let bytes = self.open_fill;
        let preferred = self.write_die();
        let (die, gc) = self.ftl.write_page(preferred, &self.open_lpns);
        self.open_lpns.clear();
        if !gc.is_empty() {
            let t = gc.read_pages * self.p.read_latency_ns
                + gc.program_pages * self.p.program_latency_ns
                + gc.erases * self.p.erase_latency_ns;
            self.gc_debt[die] += t;
            self.gc_ns += t;
        }
        // Incremental GC: the die pays its collection time in equal installments, one per
        // host page, before each page, until its active block is full (the next GC).
        if self.gc_debt[die] > 0 {
            let left = u64::from(self.ftl.host_pages_left(die));
            let pay = self.gc_debt[die] / (left + 1);
            let pay = if left == 0 { self.gc_debt[die] } else { pay };
            self.gc_debt[die] -= pay;
            self.die_free[die] = self.die_free[die].max(self.open_ready) + pay;
        }
        let ch = self.channel_of(die);
        let xfer_end = self.channel(
            ch,
            self.open_ready,
            self.open_ready.max(self.die_free[die]),
            self.p.page_bytes,
        );
        let done = xfer_end + self.p.program_latency_ns;
        self.die_free[die] = done;
        self.releases.push((done, bytes), ());
        self.durable_ns = self.durable_ns.max(done);
        self.open_fill = 0;
        done
    }

    /// Admit `len` bytes into the write buffer no earlier than `t`; returns the admission time.
    fn admit(&mut self, t: Ns, len: u64) -> Ns {
        let mut t = t.max(self.admit_floor);
        while let Some((rt, bytes)) = self.releases.peek_key() {
            let needed = self.buf_used + len > self.p.write_buffer_bytes;
            if rt > t && !needed {
                break;
            }
            self.releases.pop();
            t = t.max(rt);
            self.buf_used -= bytes;
        }
        // A write larger than the whole buffer is admitted once the buffer is empty.
        self.buf_used += len;
        self.admit_floor = t;
        t
    }

    fn write(&mut self, accept: Ns, off: u64, len: u64, fua: bool) -> Ns {
        let admitted = self.admit(accept, len);
        let start = admitted.max(self.link_free);
        let in_buffer = start + transfer_ns(len, self.write_rate);
        self.link_free = in_buffer;
        let mut last_program = in_buffer;
        let units_per_page = (self.p.page_bytes / self.unit) as usize;
        let mut pos = off;
        let end = off.saturating_add(len);
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
            self.open_ready = in_buffer;
            pos += take;
            if self.open_lpns.len() == units_per_page {
                last_program = last_program.max(self.program_open_page());
            }
        }
        if fua {
            if self.open_fill > 0 {
                last_program = last_program.max(self.program_open_page());
            }
            last_program
        } else {
            in_buffer
        }
    }

    fn flush(&mut self, accept: Ns) -> Ns {
        if self.open_fill > 0 {
            self.open_ready = self.open_ready.max(accept);
            self.program_open_page();
        }
        accept.max(self.durable_ns)
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
        let done_at = match cmd.op {
            Op::Read => {
                let a = self.accept(now, self.read_cmd_ns);
                if cmd.len_bytes == 0 {
                    a
                } else {
                    self.read(a, cmd.offset_bytes, cmd.len_bytes)
                }
            }
            Op::Write => {
                let a = self.accept(now, self.write_cmd_ns);
                if cmd.len_bytes == 0 {
                    a
                } else {
                    let through = cmd.fua || !self.p.write_cache;
                    self.write(a, cmd.offset_bytes, cmd.len_bytes, through)
                }
            }
            Op::Flush => {
                let a = self.accept(now, self.write_cmd_ns);
                self.flush(a)
            }
            Op::Trim => {
                // Whole units inside the range are unmapped (a partial unit keeps its data).
                let first = cmd.offset_bytes.div_ceil(self.unit);
                let last = cmd.offset_bytes.saturating_add(cmd.len_bytes) / self.unit;
                let last = last.min(self.ftl.geometry().logical_units);
                for u in first..last {
                    self.ftl.trim(u);
                }
                self.accept(now, self.write_cmd_ns)
            }
        };
        self.done.push(done_at, &cmd);
    }

    fn next_event_ns(&self) -> Option<Ns> {
        self.done.next()
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
    use super::super::testkit::{closed_loop, one, typed_params};
    use super::super::DeviceError;
    use super::*;
    use std::collections::BTreeMap;
    use vmio_core::rng::Rng;

    fn ssd() -> Ssd {
        ssd_with("").unwrap()
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
        let mut d = ssd();
        let t = one(&mut d, 0, 1, Op::Read, 1 << 30, 4096, false);
        let want =
            10 * US + 60 * US + transfer_ns(4096, 400_000_000) + transfer_ns(4096, 540_000_000);
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
        let mut d = ssd();
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
        let mut cached = ssd();
        let mut through = ssd_with("write_cache = false").unwrap();
        let fua = one(&mut cached, 0, 1, Op::Write, 0, 4096, true);
        let plain = one(&mut through, 0, 1, Op::Write, 0, 4096, false);
        assert!(plain >= 250 * US, "{plain}");
        assert_eq!(plain, fua);
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
