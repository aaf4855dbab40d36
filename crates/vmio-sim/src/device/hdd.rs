//! A 7200 rpm SATA hard disk: zoned geometry, seek curve, rotational position, NCQ with
//! shortest-positioning-time-first, a segmented read-ahead cache and a write-back cache.
//!
//! **Sources.** Profile `hdd-7200-2tb` is a Seagate BarraCuda ST2000DM008 (Seagate, *BarraCuda
//! 3.5 HDD data sheet*, DS1900): 2 TB (3,907,029,168 × 512-byte sectors = 2,000,398,934,016
//! bytes), 7200 rpm (8.33 ms per rotation, 4.16 ms average latency), 220 MB/s maximum
//! sustained (outer zone), 256 MB cache, SATA 6 Gb/s (600 MB/s after 8b/10b). The datasheet
//! gives no seek times; track-to-track 0.8 ms, average 8.5 ms and full stroke 16 ms are the
//! middle of the ranges for 7200 rpm desktop disks in `docs/references.md` (hardware
//! references). The inner-zone rate (about half the outer one) follows from constant linear
//! density: track capacity is proportional to radius, and inner/outer radius is about 1/2 on
//! 3.5-inch platters. The modelling follows Ruemmler & Wilkes, "An introduction to disk drive
//! modeling", IEEE Computer 27(3), 1994: seek curve with a square-root (acceleration-limited)
//! short-seek part and a linear (coasting) long-seek part, rotational position, controller
//! overhead per command (50 µs is typical of DiskSim's validated parameter sets) and a
//! segmented cache whose read-ahead fills the segment after a read until another command needs
//! the head. The three-point seek fit through (one track, track-to-track), (1/3 stroke,
//! average) and (full stroke, full-stroke time) is Lee & Katz's form (SIGMETRICS 1993), also
//! DiskSim's "3-point curve".
//!
//! **Geometry.** Data is laid out as one spiral from the outer edge (offset 0) inwards;
//! bytes per track fall linearly with the track index `t` (zoning approximated as continuous):
//! `B(t) = B_o − k·t`, with `B_o = outer_rate·T_rot`, `B_i = inner_rate·T_rot`,
//! `N = capacity / ((B_o + B_i)/2)` tracks and `k = (B_o − B_i)/N`. Bytes before track `t` are
//! `S(t) = B_o·t − k·t²/2`, so an offset maps to `t = 2·o / (B_o + √(B_o² − 2·k·o))` (inverse of
//! the quadratic) and its angle on the platter is `frac(t)`. A transfer of `[o1, o2)` takes
//! `(t(o2) − t(o1))·T_rot`: the media rate is track bytes per rotation (220 MB/s outside,
//! `inner_rate` inside) and a transfer continues across tracks without a gap, i.e. track skew
//! is assumed to hide head and track switches (the sustained datasheet rates include them).
//! A seek covers `|⌊t2⌋ − ⌊t1⌋|` tracks, normalised by `N`, so "one track" is `1/N` of the
//! stroke; a same-track access has no seek. Head settling is part of the seek time.
//!
//! **Rotation.** The platter angle at time `τ` is `frac(τ / T_rot)`; a sector at angle `φ` can
//! be accessed when the platter angle equals `φ` after the seek ends.
//!
//! **Algorithm** (all times in ns; one controller, one SATA link, one head):
//!
//! ```text
//! submit:    controller busy for command_overhead (FIFO)          -> accept
//! accept:    read:  p = cached prefix (segments, dirty data, live read-ahead stream)
//!                   all cached            -> link transfer -> done            (hit)
//!                         sequential in the segment whose read-ahead stopped at its
//!                         limit, head idle, nothing queued
//!                                         -> read ahead again from where it stopped
//!                                            (resumed read-ahead, below)
//!                   rest ahead on the live stream (within its read-ahead limit)
//!                                         -> wait for the stream, no seek      (hit)
//!                   otherwise             -> NCQ queue for [offset+p, end)     (miss)
//!            write: write_cache and room in the write half of the cache
//!                                         -> link -> done, data becomes dirty
//!                   no room               -> wait for destaging
//!                   FUA, !write_cache or larger than the write half
//!                                         -> link -> NCQ queue -> done when on media
//!            flush: done when every dirty extent written before it is on media (with
//!                   write_cache false the host's block layer sends none: device module)
//! head free: candidates = NCQ queue
//!                       + dirty extents near the head, if no queued reads or a flush or
//!                         a write is waiting for room
//!            none queued and a read-ahead is running, destaging not urgent
//!                                             -> keep reading ahead (speculative), then destage
//!            a command older than 1 s         -> it goes first (starvation guard)
//!            else pick min positioning time = seek(|Δtrack|) + rotational wait (SPTF;
//!            the queue is kept sorted by angle and visited from the head's phase on
//!            until a candidate's angle alone puts it at or past the best time found
//!            (below): exact, and cheap at QD32);
//!            abort the read-ahead at the point reached (kept in its segment)
//!            read:  position, then stream from offset: done at end (-> link),
//!                   keep reading up to end + readahead into an LRU segment
//!            write: position, transfer (destage: at most 1 MiB of one merged extent)
//! ```
//!
//! **SPTF's bounds.** The positioning time of a candidate at track position `trk` (its
//! fractional part is the sector's angle, in turns), from a head at phase `φ0` now, is the
//! first instant at or after its seek `s` at which the sector passes under the head:
//!
//! ```text
//! pos = s + trot·frac(trk − φ0 − s/trot)  =  trot·(φ + k),  φ = frac(trk − φ0),
//!                                            k the least integer ≥ 0 with trot·(φ + k) ≥ s
//! ```
//!
//! so `pos ≥ s` (the seek bound: candidates visited by track distance stop at the first
//! whose seek reaches the best) and `pos ≥ trot·φ` (the angle bound: a candidate whose
//! sector is further round than the best time is skipped without its seek). The snap of a
//! wait within `PHASE_EPS` of a full turn to 0 only lowers `pos` below `trot·φ` when φ
//! itself is within `PHASE_EPS` of a turn, and such candidates are not skipped; the bound is
//! used with a margin of 10⁻⁶ turn, far above the rounding of `trk` (below 10⁻⁹ turn at
//! 2·10⁶ tracks), so a skipped candidate's computed time is never below the best, and the
//! choice (the first strictly smaller time in visiting order) is the one the full scan
//! makes.
//!
//! **SPTF's order.** The choice is the least positioning time, a tie going to the first
//! candidate in order of seek distance from the head's track `h` (at equal distance those
//! on or above `h` first; above, in enqueue order; below, in reverse enqueue order: the
//! order of a scan outwards from the head over a queue sorted by track). The queue is kept
//! sorted by angle, so the candidates are visited by `φ` from the head's phase on:
//!
//! ```text
//! best = ∞
//! for c in queue from the first with angle ≥ φ0, wrapping round:
//!     if φ(c) < 1 − PHASE_EPS − margin and trot·(φ(c) − margin) ≥ best: stop
//!         (φ only grows along the walk: every later candidate passes the bound too)
//!     if seek_floor(dist(c)) > trot·(φ(c) + margin) and trot·(φ(c) + 1 − PHASE_EPS − margin) ≥ best:
//!         skip c (the turn bound, below)
//!     best = min(best, (pos(c), rank(c)))
//! then the candidates the walk did not reach with φ ≥ 1 − PHASE_EPS − margin
//! ```
//!
//! The turn bound: a candidate whose seek is longer than its sector's angle (`s > trot·φ`)
//! waits for the sector's next pass, `pos = trot·(φ + k)` with k ≥ 1, or `pos = s` when the
//! wait snaps to 0, which needs `s` within `PHASE_EPS` of a turn past `φ`: either way at
//! least `trot·(φ + 1 − PHASE_EPS)`. `seek_floor(d)`, the seek over the largest power of two
//! tracks at most `d`, is a floor of the seek over `d` tracks when the curve is increasing
//! (it is zero otherwise, and the bound never fires).
//!
//! A candidate the walk does not reach is positioned no sooner than the best (the angle
//! bound), and the walk computes the positioning time only of those whose angle is below
//! the best time, the fewest the angle bound allows. Worthington, Ganger and Patt, "Scheduling algorithms for modern disk drives"
//! (SIGMETRICS 1994), define SPTF (their SATF) on exactly this seek + rotational latency.
//!
//! **Resumed read-ahead.** The read-ahead stops when it is `readahead` bytes past the last
//! read (its segment is full). A sequential read that then hits the segment makes the drive
//! read ahead again into the room the transfer frees, at the same time as it sends the hit
//! data (Fujitsu MHD2032AT/MHC2040AT product manual, C141-E050-02EN, §6.5 "Read-Ahead
//! Cache", "Sequential hit": "The disk drive performs the read-ahead operation of the new
//! continuous data to the empty area that becomes vacant by data transfer at the same time
//! as the disk drive starts transferring data to the host system"). The head is still on
//! the track where the read-ahead stopped, so it waits for the platter to bring the next
//! sector round (up to one rotation), in the background while the host reads the rest of
//! the segment; sequential hits on that segment extend the resumed read-ahead as they
//! extend a running one. Without it, a QD1 sequential reader slower than the media (a host path of
//! ~120 µs per 32 KiB request, or two raid0 members read in turn) ran off the end of the
//! segment every `readahead` bytes and paid that rotational wait in the foreground: 0.7 %
//! of the requests of `vmio study volumes-cache`'s A-raid0-read-32k, at half a rotation
//! (4.2 ms) each once the path's wake-ups spread the arrival phase (`wake_spread`), 22 %
//! of the run's time (203.5 MB/s, against 257.9 without the spread, whose arrivals were
//! phase-locked to a 0.85 ms wait); with it, 1 miss per disk in the run, 264.0 MB/s
//! (272.8 without the spread: the spread's own 4 µs per request).
//!
//! Simplifications, stated: the cache is split in a fixed read half (`cache_segments` LRU
//! segments, one sequential stream each, sliding when a stream outgrows it) and a write half;
//! read-ahead is limited to the segment size. The link is half duplex (reads and writes
//! share it) and each command's data crosses it after the media phase (store and forward).
//! Data written through (FUA, no write cache) leaves older dirty copies of the same range
//! to be destaged later (harmless for timing). Commands beyond the capacity are served
//! as if their out-of-range bytes were cached (the engine validates ranges); zero-length
//! reads, writes and trims complete after the command overhead.

use std::collections::{BTreeMap, VecDeque};

use vmio_core::request::Op;
use vmio_core::units::transfer_ns;
use vmio_core::{Ns, MS, SEC, US};

use vmio_core::params::{format_ms, Entry, Kind, ParamError, ParamSpec, Value, Values};

use super::{
    bad, capacity, fua, record, Busy, DevCmd, Device, DeviceStats, Identity, ModelBuild,
    ModelEntry, DURATION, SATA_LINK_RATE,
};

pub const ENTRY: ModelEntry = Entry {
    name: "hdd",
    help: "SATA hard disk: zoned geometry, seek curve, rotation, NCQ (SPTF), segmented read-ahead and write-back cache",
    // Defaults: profile `hdd-7200-2tb` (Seagate BarraCuda ST2000DM008; see the module doc).
    params: &[
        capacity(2_000_398_934_016),
        ParamSpec {
            name: "rpm",
            kind: Kind::Count { min: 1, max: 100_000 },
            default: Value::Int(7200),
            unit: "",
            help: "spindle speed",
        },
        ParamSpec {
            name: "outer_rate",
            kind: Kind::Rate,
            default: Value::Int(220_000_000),
            unit: "bps",
            help: "media rate of the outer zone (the datasheet's sustained rate)",
        },
        ParamSpec {
            name: "inner_rate",
            kind: Kind::Rate,
            default: Value::Int(110_000_000),
            unit: "bps",
            help: "media rate of the inner zone (at most outer_rate)",
        },
        ParamSpec {
            name: "track_to_track",
            kind: DURATION,
            default: Value::Int(800 * US),
            unit: "ns",
            help: "seek time to the next track",
        },
        ParamSpec {
            name: "avg_seek",
            kind: DURATION,
            default: Value::Int(8_500 * US),
            unit: "ns",
            help: "seek time over 1/3 of the stroke (between track_to_track and full_stroke)",
        },
        ParamSpec {
            name: "full_stroke",
            kind: DURATION,
            default: Value::Int(16 * MS),
            unit: "ns",
            help: "seek time over the whole stroke",
        },
        ParamSpec {
            name: "ncq_depth",
            kind: Kind::Count { min: 1, max: 1024 },
            default: Value::Int(32),
            unit: "",
            help: "commands queued in the disk (SATA NCQ: 32)",
        },
        ParamSpec {
            name: "cache_size",
            kind: Kind::SIZE,
            default: Value::Int(256 << 20),
            unit: "bytes",
            help: "disk cache: half read segments, half write-back",
        },
        ParamSpec {
            name: "cache_segments",
            kind: Kind::Count { min: 1, max: 4096 },
            default: Value::Int(16),
            unit: "",
            help: "read-cache segments (one sequential stream each)",
        },
        ParamSpec {
            name: "readahead",
            kind: Kind::SIZE,
            default: Value::Int(2 << 20),
            unit: "bytes",
            help: "read-ahead after a read (at most one segment)",
        },
        ParamSpec {
            name: "write_cache",
            kind: Kind::Bool,
            default: Value::Bool(true),
            unit: "",
            help: "write-back cache on (false: writes go to the media, and the block layer sends no FLUSH and drops FUA)",
        },
        fua(true),
        SATA_LINK_RATE,
        ParamSpec {
            name: "command_overhead",
            kind: DURATION,
            default: Value::Int(50 * US),
            unit: "ns",
            help: "controller time per command",
        },
    ],
    build: ModelBuild {
        profiles: &["hdd-7200-2tb"],
        new,
        memory,
    },
};

fn new(name: &str, profile: &str, v: &Values, _seed: u64) -> Result<Box<dyn Device>, ParamError> {
    Ok(Box::new(Hdd::new(
        name,
        HddParams::from_values(profile, v)?,
    )))
}

/// The model's state does not grow with the capacity: no memory, and the capacity.
fn memory(v: &Values) -> Result<(u64, u64), ParamError> {
    HddParams::from_values("", v).map(|p| (0, p.capacity_bytes))
}

/// A command older than this is served before any SPTF choice.
const STARVATION_NS: Ns = SEC;
/// Largest piece of one dirty extent written by one destage operation.
const DESTAGE_MAX_BYTES: u64 = 1 << 20;
/// Dirty extents on each side of the head considered by one destage choice.
const DESTAGE_CANDIDATES: usize = 16;
/// A rotational wait within this fraction of a full turn counts as none (float rounding).
const PHASE_EPS: f64 = 1e-5;

#[derive(Clone, Debug, PartialEq)]
pub struct HddParams {
    pub profile: String,
    /// The values it was read from, in declaration order (the result record lists them).
    pub values: Values,
    pub capacity_bytes: u64,
    pub rpm: u64,
    pub outer_rate_bps: u64,
    pub inner_rate_bps: u64,
    pub track_to_track_ns: Ns,
    pub avg_seek_ns: Ns,
    pub full_stroke_ns: Ns,
    pub ncq_depth: u64,
    pub cache_bytes: u64,
    pub cache_segments: u64,
    pub readahead_bytes: u64,
    pub write_cache: bool,
    pub link_rate_bps: u64,
    pub command_overhead_ns: Ns,
}

impl HddParams {
    /// The parameters of profile `profile` from their declared values, with the rules that
    /// relate several of them checked.
    pub fn from_values(profile: &str, v: &Values) -> Result<Self, ParamError> {
        let p = Self {
            profile: profile.to_string(),
            values: v.clone(),
            capacity_bytes: v.int("capacity"),
            rpm: v.int("rpm"),
            outer_rate_bps: v.int("outer_rate"),
            inner_rate_bps: v.int("inner_rate"),
            track_to_track_ns: v.int("track_to_track"),
            avg_seek_ns: v.int("avg_seek"),
            full_stroke_ns: v.int("full_stroke"),
            ncq_depth: v.int("ncq_depth"),
            cache_bytes: v.int("cache_size"),
            cache_segments: v.int("cache_segments"),
            readahead_bytes: v.int("readahead"),
            write_cache: v.flag("write_cache"),
            link_rate_bps: v.int("link_rate"),
            command_overhead_ns: v.int("command_overhead"),
        };
        if p.inner_rate_bps > p.outer_rate_bps {
            return Err(bad(
                "inner_rate",
                p.inner_rate_bps,
                &format!(
                    "must be at most outer_rate ({}): inner tracks are shorter",
                    p.outer_rate_bps
                ),
            ));
        }
        if !(p.track_to_track_ns <= p.avg_seek_ns && p.avg_seek_ns <= p.full_stroke_ns) {
            return Err(bad(
                "avg_seek",
                format_ms(p.avg_seek_ns),
                &format!(
                    "must lie between track_to_track ({}) and full_stroke ({})",
                    format_ms(p.track_to_track_ns),
                    format_ms(p.full_stroke_ns)
                ),
            ));
        }
        let geo = Geometry::new(&p);
        if !SeekCurve::fit(&p, geo.tracks).is_increasing() {
            return Err(bad(
                "avg_seek",
                format_ms(p.avg_seek_ns),
                &format!(
                    "must be such that the seek curve a + b·√x + c·x through track_to_track ({}), \
                     avg_seek at 1/3 stroke and full_stroke ({}) increases with distance; \
                     move avg_seek towards (2·track_to_track + full_stroke)/3",
                    format_ms(p.track_to_track_ns),
                    format_ms(p.full_stroke_ns)
                ),
            ));
        }
        Ok(p)
    }

    fn rotation_ns(&self) -> f64 {
        60e9 / self.rpm as f64
    }
    /// The write half of the cache (for the write-back cache).
    fn write_part_bytes(&self) -> u64 {
        self.cache_bytes / 2
    }
    /// The size of one read segment.
    fn segment_bytes(&self) -> u64 {
        (self.cache_bytes - self.write_part_bytes()) / self.cache_segments
    }
    /// Read-ahead as effectively used: at most one segment.
    fn effective_readahead(&self) -> u64 {
        self.readahead_bytes.min(self.segment_bytes())
    }
}

/// Offset <-> track position on the zoned spiral (see the module doc).
#[derive(Clone, Debug)]
struct Geometry {
    cap: u64,
    tracks: f64,
    bo: f64,
    bo2: f64,
    k: f64,
    trot: f64,
    inv_trot: f64,
}

impl Geometry {
    fn new(p: &HddParams) -> Self {
        let trot = p.rotation_ns();
        let bo = p.outer_rate_bps as f64 * trot / 1e9;
        let bi = p.inner_rate_bps as f64 * trot / 1e9;
        let tracks = p.capacity_bytes as f64 / ((bo + bi) / 2.0);
        Self {
            cap: p.capacity_bytes,
            tracks,
            bo,
            bo2: bo * bo,
            k: (bo - bi) / tracks,
            trot,
            inv_trot: 1.0 / trot,
        }
    }
    /// Track position (integer part: track index, fraction: angle) of a byte offset.
    #[inline]
    fn track_of(&self, off: u64) -> f64 {
        let o = off.min(self.cap) as f64;
        2.0 * o / (self.bo + (self.bo2 - 2.0 * self.k * o).max(0.0).sqrt())
    }
    /// Byte offset at a track position.
    #[inline]
    fn offset_of(&self, t: f64) -> f64 {
        let t = t.clamp(0.0, self.tracks);
        self.bo * t - 0.5 * self.k * t * t
    }
    /// Media rate (bytes/s) at an offset.
    fn rate_at(&self, off: u64) -> f64 {
        (self.bo - self.k * self.track_of(off)) * 1e9 / self.trot
    }
}

/// t(x) = a + b·√x + c·x over normalised distance x ∈ (0, 1]; 0 for no movement.
#[derive(Clone, Debug)]
struct SeekCurve {
    a: f64,
    b: f64,
    c: f64,
    x1: f64,
    inv_tracks: f64,
}

impl SeekCurve {
    fn fit(p: &HddParams, tracks: f64) -> Self {
        // A tiny capacity override gives few tracks; keep the anchors apart so the fit exists.
        let x1 = (1.0 / tracks.max(1.0)).min(0.01);
        let (t1, t2, t3) = (
            p.track_to_track_ns as f64,
            p.avg_seek_ns as f64,
            p.full_stroke_ns as f64,
        );
        let (s1, s2) = (x1.sqrt(), (1.0f64 / 3.0).sqrt());
        let x2 = 1.0 / 3.0;
        // b·(s2−s1) + c·(x2−x1) = t2−t1 ;  b·(1−s1) + c·(1−x1) = t3−t1
        let det = (s2 - s1) * (1.0 - x1) - (x2 - x1) * (1.0 - s1);
        let b = ((t2 - t1) * (1.0 - x1) - (x2 - x1) * (t3 - t1)) / det;
        let c = ((s2 - s1) * (t3 - t1) - (1.0 - s1) * (t2 - t1)) / det;
        let a = t1 - b * s1 - c * x1;
        Self {
            a,
            b,
            c,
            x1,
            inv_tracks: 1.0 / tracks.max(1.0),
        }
    }
    fn is_increasing(&self) -> bool {
        // The derivative b/(2√x) + c is monotone in x: checking both ends suffices.
        let d = |x: f64| self.b / (2.0 * x.sqrt()) + self.c;
        d(self.x1) >= -1e-9 && d(1.0) >= -1e-9
    }
    /// A distance in tracks from which every seek takes at least `t` ns (conservative:
    /// never larger than the exact one).
    fn tracks_at_least(&self, t: f64) -> u64 {
        if t >= self.at_x(1.0) {
            return u64::MAX;
        }
        // Solve c·s² + b·s + (a − t) = 0 for s = √x.
        let s = if self.c.abs() < 1e-12 {
            (t - self.a) / self.b
        } else {
            let disc = self.b * self.b - 4.0 * self.c * (self.a - t);
            (-self.b + disc.max(0.0).sqrt()) / (2.0 * self.c)
        };
        if s.is_nan() || s <= 0.0 {
            return 1;
        }
        ceil_ns(s * s / self.inv_tracks) + 1
    }
    #[inline]
    fn at_x(&self, x: f64) -> f64 {
        (self.a + self.b * x.sqrt() + self.c * x).max(0.0)
    }
    #[inline]
    fn ns(&self, tracks: u64) -> f64 {
        if tracks == 0 {
            0.0
        } else {
            self.at_x((tracks as f64 * self.inv_tracks).clamp(self.x1, 1.0))
        }
    }
}

/// Margin of [`angle_bound_passes`], in turns (module doc, SPTF's bounds).
const ANGLE_MARGIN: f64 = 1e-6;

/// A candidate whose sector is `d` turns (in (−1, 1)) round from the head's phase now cannot
/// be positioned sooner than `best` ns: its positioning time is at least `trot`·frac(d)
/// (module doc, SPTF's bounds), with a margin; never for a sector within `PHASE_EPS` of a
/// full turn, whose wait may snap to 0.
#[inline]
fn angle_bound_passes(d: f64, trot: f64, best: f64) -> bool {
    let phi = if d < 0.0 { d + 1.0 } else { d };
    phi < 1.0 - PHASE_EPS - ANGLE_MARGIN && (phi - ANGLE_MARGIN) * trot >= best
}

/// `x.ceil() as Ns` for 0 ≤ x < 2^63 without the libm call (through `i64`, whose
/// conversion is one instruction where `u64`'s needs a range test: the same value there).
#[inline]
fn ceil_ns(x: f64) -> Ns {
    debug_assert!((0.0..9.2e18).contains(&x), "{x}");
    let i = x as i64;
    (if (i as f64) < x { i + 1 } else { i }) as Ns
}

/// Fractional part in [0, 1) (`f64::floor` is a libm call on baseline x86-64; this is not).
#[inline]
fn frac(x: f64) -> f64 {
    let f = x - (x as i64) as f64;
    if f < 0.0 {
        f + 1.0
    } else {
        f
    }
}

#[derive(Clone, Copy, Debug)]
struct Cmd {
    tag: u64,
    op: Op,
    off: u64,
    len: u64,
    fua: bool,
    submit_ns: Ns,
    /// First byte the head must access (after a cached prefix) and its track position.
    media_off: u64,
    trk: f64,
}

/// An NCQ queue entry: track position of the first media byte, its track index, its
/// angle (the fractional part, in turns), submission time, the command.
#[derive(Clone, Copy, Debug)]
struct QEnt {
    trk: f64,
    trk_i: i64,
    ang: f64,
    submit_ns: Ns,
    idx: u32,
    read: bool,
    /// Its place in enqueue order: with `trk_i`, its place in track order (module doc).
    seq: u64,
}

impl QEnt {
    /// Its place in the order SPTF visits by seek distance from a head on track `head_i`
    /// (module doc, SPTF's order): by distance, the head's track and those above before
    /// those below at the same distance, those above in enqueue order, those below in
    /// reverse enqueue order.
    #[inline]
    fn visit_rank(&self, head_i: i64) -> (u64, bool, u64) {
        if self.trk_i >= head_i {
            ((self.trk_i - head_i) as u64, false, self.seq)
        } else {
            ((head_i - self.trk_i) as u64, true, !self.seq)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterLink {
    ReadDone,
    WriteCached,
    WriteMedia,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    Idle,
    /// Reading sequentially (see `Stream`).
    Stream,
    /// Writing to media until `end`; `cmd` is `NONE` for a destage.
    Write {
        end: Ns,
        cmd: u32,
    },
}

const NONE: u32 = u32::MAX;

/// The head reading sequentially from `origin_off` (reached at `origin_ns`, after positioning)
/// into segment `seg`, for the `waiters` (ready time, command) and then speculatively up to
/// `limit_off`.
#[derive(Clone, Debug)]
struct Stream {
    seg: usize,
    origin_off: u64,
    origin_trk: f64,
    origin_ns: Ns,
    limit_off: u64,
    limit_ns: Ns,
    waiters: Vec<(Ns, u32)>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Seg {
    start: u64,
    end: u64,
    used: u64,
}

/// A dirty extent: end offset and the epoch of its oldest data (see flushes).
#[derive(Clone, Copy, Debug)]
struct Dirty {
    end: u64,
    epoch: u64,
}

pub struct Hdd {
    name: String,
    p: HddParams,
    geo: Geometry,
    seek: SeekCurve,
    /// `seek_floor[j]`: the seek over 2^j tracks, a floor of every seek of 2^j tracks or
    /// more (all zero when the fitted curve is not increasing).
    seek_floor: [f64; 64],
    seg_bytes: u64,
    write_part: u64,
    readahead: u64,
    link_rate: u64,
    overhead: Ns,

    cmds: Vec<Cmd>,
    free: Vec<u32>,
    ctrl_free: Ns,
    ctrl_q: VecDeque<(Ns, u32)>,
    link_free: Ns,
    link_q: VecDeque<(Ns, u32, AfterLink)>,
    /// Commands waiting for the head, with what SPTF needs kept contiguous, sorted by
    /// angle (module doc, SPTF's order).
    media_q: Vec<QEnt>,
    /// The next `QEnt::seq`.
    media_seq: u64,
    /// The smallest `submit_ns` in `media_q` (`Ns::MAX` when empty).
    media_oldest: Ns,
    write_wait: VecDeque<u32>,
    flush_wait: VecDeque<(u64, u32)>,

    head: Head,
    head_off: u64,
    head_trk: f64,
    head_next: Ns,
    stream: Stream,

    segs: Vec<Seg>,
    lru_clock: u64,
    /// The segments from least to most recently used (by `used`, then index: the order
    /// `alloc_segment`'s choice of the least recently used, the first of equals, follows).
    lru: VecDeque<usize>,
    dirty: BTreeMap<u64, Dirty>,
    /// Bytes of the write half in use: admitted writes, dirty data and the extent being destaged.
    buf_used: u64,
    destaging: Option<(u64, u64, u64)>,
    epoch: u64,
    epoch_counts: BTreeMap<u64, u64>,

    stats: DeviceStats,
    busy: Busy,
    /// The earliest of the three queues' next events (`Hdd::earliest`), kept by `submit`
    /// and `advance`, the only calls that change them, for `next_event_ns`.
    next_ev: Ns,
}

impl Hdd {
    pub fn new(name: &str, p: HddParams) -> Self {
        let geo = Geometry::new(&p);
        let seek = SeekCurve::fit(&p, geo.tracks);
        let qd = p.ncq_depth as usize;
        Self {
            name: name.to_string(),
            seg_bytes: p.segment_bytes(),
            write_part: p.write_part_bytes(),
            readahead: p.effective_readahead(),
            link_rate: p.link_rate_bps,
            overhead: p.command_overhead_ns,
            cmds: Vec::with_capacity(qd * 2),
            free: Vec::with_capacity(qd * 2),
            ctrl_free: 0,
            ctrl_q: VecDeque::with_capacity(qd * 2),
            link_free: 0,
            link_q: VecDeque::with_capacity(qd * 2),
            media_q: Vec::with_capacity(qd * 2),
            media_seq: 0,
            media_oldest: Ns::MAX,
            write_wait: VecDeque::with_capacity(qd),
            flush_wait: VecDeque::new(),
            head: Head::Idle,
            head_off: 0,
            head_trk: 0.0,
            head_next: Ns::MAX,
            stream: Stream {
                seg: 0,
                origin_off: 0,
                origin_trk: 0.0,
                origin_ns: 0,
                limit_off: 0,
                limit_ns: 0,
                waiters: Vec::with_capacity(qd * 2),
            },
            segs: vec![Seg::default(); p.cache_segments as usize],
            lru_clock: 0,
            lru: (0..p.cache_segments as usize).collect(),
            dirty: BTreeMap::new(),
            buf_used: 0,
            destaging: None,
            epoch: 0,
            epoch_counts: BTreeMap::new(),
            stats: DeviceStats::default(),
            busy: Busy::default(),
            next_ev: Ns::MAX,
            geo,
            seek_floor: std::array::from_fn(|j| {
                if seek.is_increasing() {
                    seek.ns(1u64 << j)
                } else {
                    0.0
                }
            }),
            seek,
            p,
        }
    }

    /// Number of (logical) tracks: capacity / mean track size.
    pub fn tracks(&self) -> f64 {
        self.geo.tracks
    }
    /// Time of one rotation.
    pub fn rotation_ns(&self) -> f64 {
        self.geo.trot
    }
    /// Seek time over `tracks` tracks (0 for none).
    pub fn seek_ns(&self, tracks: u64) -> f64 {
        self.seek.ns(tracks)
    }
    /// Seek time over a fraction `x` of the full stroke.
    pub fn seek_at_fraction_ns(&self, x: f64) -> f64 {
        self.seek.at_x(x)
    }
    /// Coefficients (a, b, c) of t(x) = a + b·√x + c·x, in ns.
    pub fn seek_coefficients(&self) -> (f64, f64, f64) {
        (self.seek.a, self.seek.b, self.seek.c)
    }
    /// Media transfer rate at `offset`, bytes/s.
    pub fn media_rate_at(&self, offset: u64) -> f64 {
        self.geo.rate_at(offset)
    }
    /// Dirty bytes in the write cache (not yet on media), including the one being destaged.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.iter().map(|(s, d)| d.end - s).sum::<u64>()
            + self.destaging.map_or(0, |(s, e, _)| e - s)
    }

    // ----- command slab -----

    fn alloc(&mut self, c: Cmd) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.cmds[i as usize] = c;
                i
            }
            None => {
                self.cmds.push(c);
                (self.cmds.len() - 1) as u32
            }
        }
    }

    fn complete(&mut self, t: Ns, idx: u32, done: &mut Vec<u64>) {
        let c = self.cmds[idx as usize];
        self.stats.count(c.op, c.len);
        self.busy.end(t);
        done.push(c.tag);
        self.free.push(idx);
    }

    fn link(&mut self, t: Ns, idx: u32, after: AfterLink) {
        let start = t.max(self.link_free);
        let end = start + transfer_ns(self.cmds[idx as usize].len, self.link_rate);
        self.link_free = end;
        self.link_q.push_back((end, idx, after));
    }

    // ----- the read-ahead stream -----

    /// First byte not yet read by the stream at `now`.
    #[inline]
    fn stream_reach(&self, now: Ns) -> u64 {
        let s = &self.stream;
        if now <= s.origin_ns {
            return s.origin_off;
        }
        let t = s.origin_trk + (now - s.origin_ns) as f64 * self.geo.inv_trot;
        (self.geo.offset_of(t) as u64).clamp(s.origin_off, s.limit_off)
    }

    /// When the stream will have read everything before `off`.
    #[inline]
    fn stream_time_to(&self, off: u64) -> Ns {
        let s = &self.stream;
        let dt = (self.geo.track_of(off) - s.origin_trk).max(0.0) * self.geo.trot;
        s.origin_ns + ceil_ns(dt)
    }

    fn set_stream_limit(&mut self, limit: u64) {
        self.stream.limit_off = limit.min(self.geo.cap);
        self.stream.limit_ns = self.stream_time_to(self.stream.limit_off);
    }

    fn refresh_head_next(&mut self) {
        self.head_next = match self.head {
            Head::Idle => Ns::MAX,
            Head::Write { end, .. } => end,
            Head::Stream => self
                .stream
                .waiters
                .iter()
                .map(|w| w.0)
                .min()
                .unwrap_or(self.stream.limit_ns),
        };
    }

    /// Stop the stream at `now`: its segment keeps what was read, the head stays there.
    fn stop_stream(&mut self, now: Ns) {
        let reach = self.stream_reach(now);
        let seg = &mut self.segs[self.stream.seg];
        seg.end = reach;
        seg.start = seg.start.max(reach.saturating_sub(self.seg_bytes));
        self.head_off = reach;
        self.head_trk = self.geo.track_of(reach);
        self.head = Head::Idle;
    }

    // ----- cache lookups -----

    /// Bytes of `[off, end)` available in the drive at `now`, from `off` on.
    fn cached_prefix(&mut self, off: u64, end: u64, now: Ns) -> u64 {
        let live = if self.head == Head::Stream {
            let reach = self.stream_reach(now);
            Some((
                self.stream.seg,
                self.segs[self.stream.seg]
                    .start
                    .max(reach.saturating_sub(self.seg_bytes)),
                reach,
            ))
        } else {
            None
        };
        // No live segment: an index past the last.
        let (li, ls, le) = live.unwrap_or((usize::MAX, 0, 0));
        let mut cur = off;
        loop {
            let before = cur;
            for (i, seg) in self.segs.iter_mut().enumerate() {
                let (s, e) = if i == li {
                    (ls, le)
                } else {
                    (seg.start, seg.end)
                };
                if s <= cur && cur < e {
                    cur = e;
                    self.lru_clock += 1;
                    seg.used = self.lru_clock;
                    // The most recently used now: last in `lru`.
                    if self.lru.back() != Some(&i) {
                        let at = self.lru.iter().position(|&x| x == i).expect("in lru");
                        self.lru.remove(at);
                        self.lru.push_back(i);
                    }
                }
            }
            if !self.dirty.is_empty() {
                if let Some((_, d)) = self.dirty.range(..=cur).next_back() {
                    if d.end > cur {
                        cur = d.end;
                    }
                }
            }
            if let Some((s, e, _)) = self.destaging {
                if s <= cur && cur < e {
                    cur = e;
                }
            }
            if cur >= end || cur == before {
                break;
            }
        }
        cur.min(end) - off
    }

    fn alloc_segment(&mut self, start: u64) -> usize {
        // The least recently used, the first of equals: the front of `lru` (every touch
        // sets `used` to a new clock value and moves the segment to the back).
        let best = self.lru.pop_front().expect("at least one segment");
        self.lru.push_back(best);
        debug_assert_eq!(
            Some(best),
            (self.segs.iter().enumerate())
                .min_by_key(|(i, s)| (s.used, *i))
                .map(|(i, _)| i),
            "the scan's choice"
        );
        self.lru_clock += 1;
        self.segs[best] = Seg {
            start,
            end: start,
            used: self.lru_clock,
        };
        best
    }

    // ----- write cache -----

    fn insert_dirty(&mut self, s: u64, e: u64) {
        let (mut ns, mut ne, mut ep) = (s, e, self.epoch);
        let mut removed = 0;
        while let Some((&ks, &d)) = self.dirty.range(..=ne).next_back() {
            if d.end < ns {
                break;
            }
            self.dirty.remove(&ks);
            removed += d.end - ks;
            ns = ns.min(ks);
            ne = ne.max(d.end);
            ep = ep.min(d.epoch);
            self.dec_epoch(d.epoch);
        }
        self.dirty.insert(ns, Dirty { end: ne, epoch: ep });
        *self.epoch_counts.entry(ep).or_insert(0) += 1;
        let added = (ne - ns) - removed;
        self.buf_used -= (e - s) - added;
    }

    fn dec_epoch(&mut self, ep: u64) {
        if let Some(n) = self.epoch_counts.get_mut(&ep) {
            *n -= 1;
            if *n == 0 {
                self.epoch_counts.remove(&ep);
            }
        }
    }

    /// Is any data written before flush epoch `ep` still only in the cache?
    fn dirty_up_to(&self, ep: u64) -> bool {
        self.epoch_counts.keys().next().is_some_and(|&k| k <= ep)
    }

    fn admit_waiting_writes(&mut self, t: Ns) {
        while let Some(&idx) = self.write_wait.front() {
            let len = self.cmds[idx as usize].len;
            if self.buf_used + len > self.write_part {
                break;
            }
            self.write_wait.pop_front();
            self.buf_used += len;
            self.link(t, idx, AfterLink::WriteCached);
        }
    }

    fn complete_flushes(&mut self, t: Ns, done: &mut Vec<u64>) {
        while let Some(&(ep, idx)) = self.flush_wait.front() {
            if self.dirty_up_to(ep) {
                break;
            }
            self.flush_wait.pop_front();
            self.complete(t, idx, done);
        }
    }

    // ----- event handlers -----

    fn on_accept(&mut self, t: Ns, idx: u32, done: &mut Vec<u64>) {
        let c = self.cmds[idx as usize];
        match c.op {
            Op::Read => self.accept_read(t, idx, done),
            Op::Write if c.len == 0 => self.complete(t, idx, done),
            Op::Write => {
                if !self.p.write_cache || c.fua || c.len > self.write_part {
                    self.link(t, idx, AfterLink::WriteMedia);
                } else if self.write_wait.is_empty() && self.buf_used + c.len <= self.write_part {
                    self.buf_used += c.len;
                    self.link(t, idx, AfterLink::WriteCached);
                } else {
                    self.write_wait.push_back(idx);
                    self.try_dispatch(t);
                }
            }
            Op::Flush => {
                if self.dirty_up_to(self.epoch) {
                    self.flush_wait.push_back((self.epoch, idx));
                    self.epoch += 1;
                    self.try_dispatch(t);
                } else {
                    self.complete(t, idx, done);
                }
            }
            Op::Trim => self.complete(t, idx, done),
        }
    }

    fn accept_read(&mut self, t: Ns, idx: u32, done: &mut Vec<u64>) {
        let c = self.cmds[idx as usize];
        if c.len == 0 {
            self.complete(t, idx, done);
            return;
        }
        let end = c.off.saturating_add(c.len);
        let media_end = end.min(self.geo.cap);
        let r = if c.off >= media_end {
            c.off
        } else {
            c.off + self.cached_prefix(c.off, media_end, t)
        };
        if r >= media_end {
            self.stats.cache_hits += 1;
            // A sequential hit inside the running read-ahead keeps it going: drives extend
            // their prefetch while the host keeps reading the stream.
            // (From the start of its segment: a resumed read-ahead's origin lies past the
            // data the host is still reading.)
            let s = &self.stream;
            let from = self.segs[s.seg].start.min(s.origin_off);
            if self.head == Head::Stream && c.off >= from && c.off <= s.limit_off {
                let limit = s.limit_off.max(media_end.saturating_add(self.readahead));
                self.set_stream_limit(limit);
                self.refresh_head_next();
            } else {
                self.resume_readahead(t, c.off, media_end);
            }
            self.link(t, idx, AfterLink::ReadDone);
            return;
        }
        let s = &self.stream;
        if self.head == Head::Stream
            && r >= s.origin_off
            && r <= s.limit_off
            && (self.media_q.is_empty() || media_end <= s.limit_off)
        {
            // The rest is ahead of the running read-ahead: wait for it, no seek.
            self.stats.cache_hits += 1;
            let ready = self.stream_time_to(media_end);
            self.stream.waiters.push((ready, idx));
            let limit = self
                .stream
                .limit_off
                .max(media_end.saturating_add(self.readahead));
            self.set_stream_limit(limit);
            self.refresh_head_next();
            return;
        }
        self.stats.cache_misses += 1;
        self.cmds[idx as usize].media_off = r;
        self.enqueue_media(idx, true);
        self.try_dispatch(t);
    }

    /// A sequential hit on the segment whose read-ahead stopped (it had filled its limit):
    /// the drive reads ahead again into the room the host's read frees, from where the
    /// read-ahead stopped, when the head has nothing else to do (module doc, "Resumed
    /// read-ahead"). The head is still on that track unless it moved since: it waits for
    /// the platter to bring the next sector round (or seeks back), in the background.
    fn resume_readahead(&mut self, t: Ns, off: u64, end: u64) {
        let seg = self.segs[self.stream.seg];
        if self.head != Head::Idle
            || !self.media_q.is_empty()
            || off < seg.start
            || end > seg.end
            || seg.end >= self.geo.cap
            || seg.end != self.stream.limit_off
        {
            return;
        }
        let trk = self.geo.track_of(seg.end);
        let pos = self.positioning(self.phase(t), self.head_trk as i64, trk);
        self.stream.origin_off = seg.end;
        self.stream.origin_trk = trk;
        self.stream.origin_ns = t + ceil_ns(pos);
        self.stream.waiters.clear();
        self.stream.limit_off = seg.end;
        self.set_stream_limit(end.saturating_add(self.readahead));
        self.head = Head::Stream;
        self.refresh_head_next();
    }

    fn on_link_done(&mut self, t: Ns, idx: u32, after: AfterLink, done: &mut Vec<u64>) {
        match after {
            AfterLink::ReadDone => self.complete(t, idx, done),
            AfterLink::WriteCached => {
                let c = self.cmds[idx as usize];
                let end = c.off.saturating_add(c.len).min(self.geo.cap);
                if c.off < end {
                    self.insert_dirty(c.off, end);
                } else {
                    self.buf_used -= c.len;
                }
                self.complete(t, idx, done);
                self.try_dispatch(t);
            }
            AfterLink::WriteMedia => {
                let c = &mut self.cmds[idx as usize];
                if c.off >= self.geo.cap {
                    self.complete(t, idx, done);
                    return;
                }
                c.media_off = c.off;
                self.enqueue_media(idx, false);
                self.try_dispatch(t);
            }
        }
    }

    fn on_head_event(&mut self, t: Ns, done: &mut Vec<u64>) {
        match self.head {
            Head::Idle => {}
            Head::Write { cmd, .. } => {
                self.head = Head::Idle;
                if cmd != NONE {
                    self.complete(t, cmd, done);
                } else if let Some((s, e, ep)) = self.destaging.take() {
                    self.buf_used -= e - s;
                    self.dec_epoch(ep);
                    self.complete_flushes(t, done);
                    self.admit_waiting_writes(t);
                }
                self.refresh_head_next();
                self.try_dispatch(t);
            }
            Head::Stream => {
                // Waiters whose data has been read go to the link, in ready order.
                while let Some((i, _)) = self
                    .stream
                    .waiters
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.0 <= t)
                    .min_by_key(|(_, w)| **w)
                {
                    let (_, idx) = self.stream.waiters.swap_remove(i);
                    self.link(t, idx, AfterLink::ReadDone);
                }
                if self.stream.waiters.is_empty() && t >= self.stream.limit_ns {
                    self.stop_stream(t);
                }
                self.refresh_head_next();
                self.try_dispatch(t);
            }
        }
    }

    fn enqueue_media(&mut self, idx: u32, read: bool) {
        let c = &mut self.cmds[idx as usize];
        let trk = self.geo.track_of(c.media_off);
        c.trk = trk;
        let ang = frac(trk);
        let at = self.media_q.partition_point(|q| q.ang <= ang);
        self.media_oldest = self.media_oldest.min(c.submit_ns);
        let seq = self.media_seq;
        self.media_seq += 1;
        self.media_q.insert(
            at,
            QEnt {
                trk,
                trk_i: trk as i64,
                ang,
                submit_ns: c.submit_ns,
                idx,
                read,
                seq,
            },
        );
    }

    /// The rotational position of the platter at `now`, in turns.
    #[inline]
    fn phase(&self, now: Ns) -> f64 {
        frac(now as f64 * self.geo.inv_trot)
    }

    /// The next event of the controller, the link or the head (`Ns::MAX`: none).
    fn earliest(&self) -> Ns {
        let mut t = self.head_next;
        if let Some(&(c, _)) = self.ctrl_q.front() {
            t = t.min(c);
        }
        if let Some(&(l, _, _)) = self.link_q.front() {
            t = t.min(l);
        }
        t
    }

    /// Positioning time (seek + rotational wait) from the head's track to track position `trk`.
    #[inline]
    fn positioning(&self, now_phase: f64, head_i: i64, trk: f64) -> f64 {
        let seek = self.seek.ns((trk as i64 - head_i).unsigned_abs());
        let arrive = now_phase + seek * self.geo.inv_trot;
        let mut w = frac(trk - arrive);
        if w > 1.0 - PHASE_EPS {
            w = 0.0;
        }
        seek + w * self.geo.trot
    }

    /// Candidate `qi` of `media_q` against the best so far (its positioning time, its
    /// index): it takes the place when sooner, or as soon and first in visiting order.
    #[inline(always)]
    fn consider(
        &self,
        now_phase: f64,
        head_i: i64,
        qi: usize,
        best_pos: &mut f64,
        best_q: &mut usize,
    ) {
        let q = &self.media_q;
        let pos = self.positioning(now_phase, head_i, q[qi].trk);
        if pos < *best_pos
            || (pos == *best_pos && q[qi].visit_rank(head_i) < q[*best_q].visit_rank(head_i))
        {
            *best_pos = pos;
            *best_q = qi;
        }
    }

    /// The queued command SPTF takes from a head on track `head_i` at phase `now_phase`:
    /// its positioning time and index in `media_q` (`usize::MAX` and infinity when the
    /// queue is empty). The least time, a tie going to the first in visiting order by seek
    /// distance (`QEnt::visit_rank`); candidates are visited by angle from the head, and
    /// the walk stops at the first whose angle alone reaches the best time found (module
    /// doc, SPTF's order).
    fn sptf_scan(&self, now_phase: f64, head_i: i64) -> (f64, usize) {
        let q = &self.media_q;
        let n = q.len();
        let trot = self.geo.trot;
        let mut best_pos = f64::INFINITY;
        let mut best_q = usize::MAX;
        let start = q.partition_point(|e| e.ang < now_phase);
        // From `start` to the end, then from the first to `start` (wrapping round).
        let mut visited = 0;
        'walk: for (lo, hi) in [(start, n), (0, start)] {
            for (k, e) in q[lo..hi].iter().enumerate() {
                let d = e.ang - now_phase;
                if angle_bound_passes(d, trot, best_pos) {
                    break 'walk;
                }
                visited += 1;
                // The turn bound: a seek past the sector's angle waits for it a turn later.
                let phi = if d < 0.0 { d + 1.0 } else { d };
                let dist = (e.trk_i - head_i).unsigned_abs();
                if dist > 0
                    && self.seek_floor[63 - dist.leading_zeros() as usize]
                        > (phi + ANGLE_MARGIN) * trot
                    && (phi + 1.0 - PHASE_EPS - ANGLE_MARGIN) * trot >= best_pos
                {
                    continue;
                }
                self.consider(now_phase, head_i, lo + k, &mut best_pos, &mut best_q);
            }
        }
        // The snap window: the last candidates in angle order, not visited yet.
        let mut back = n;
        while back > visited {
            let qi = if start + back - 1 < n {
                start + back - 1
            } else {
                start + back - 1 - n
            };
            let d = q[qi].ang - now_phase;
            let phi = if d < 0.0 { d + 1.0 } else { d };
            if phi < 1.0 - PHASE_EPS - ANGLE_MARGIN {
                break;
            }
            self.consider(now_phase, head_i, qi, &mut best_pos, &mut best_q);
            back -= 1;
        }
        (best_pos, best_q)
    }

    /// When the head is free, choose its next job (see the module doc).
    fn try_dispatch(&mut self, now: Ns) {
        let speculative = match self.head {
            Head::Idle => false,
            Head::Stream if self.stream.waiters.is_empty() => true,
            _ => return,
        };
        let urgent = !self.write_wait.is_empty() || !self.flush_wait.is_empty();
        let destage = !self.dirty.is_empty() && (urgent || !self.media_q.iter().any(|q| q.read));
        if self.media_q.is_empty() && (!destage || (speculative && !urgent)) {
            return;
        }
        if speculative {
            self.stop_stream(now);
        }
        let now_phase = self.phase(now);
        let head_i = self.head_trk as i64;

        // SPTF (module doc, SPTF's order): candidates in order of their angle from the head
        // now, until the angle alone reaches the best positioning time found; then those
        // within the snap window of a full turn, which the bound never skips.
        let trot = self.geo.trot;
        let (best_pos, best_q) = self.sptf_scan(now_phase, head_i);
        let mut best_pos = best_pos;
        let starving = self.media_oldest.saturating_add(STARVATION_NS) <= now;
        let mut best_d: Option<(f64, u64)> = None;
        if destage && !starving {
            let mut d_lim = if best_q < self.media_q.len() {
                self.seek.tracks_at_least(best_pos)
            } else {
                u64::MAX
            };
            let after = self.dirty.range(self.head_off..).take(DESTAGE_CANDIDATES);
            let before = self
                .dirty
                .range(..self.head_off)
                .rev()
                .take(DESTAGE_CANDIDATES);
            for (&s, _) in after.chain(before) {
                let trk = self.geo.track_of(s);
                if (trk as i64 - head_i).unsigned_abs() >= d_lim
                    || angle_bound_passes(frac(trk) - now_phase, trot, best_pos)
                {
                    continue;
                }
                let pos = self.positioning(now_phase, head_i, trk);
                if pos < best_pos {
                    best_pos = pos;
                    best_d = Some((pos, s));
                    d_lim = self.seek.tracks_at_least(pos);
                }
            }
        }
        if let Some((pos, s)) = best_d {
            self.start_destage(now, pos, s);
            return;
        }
        let (pos, qi) = if starving {
            // The first in track order of the oldest.
            let oldest = (self.media_q.iter().enumerate())
                .filter(|(_, q)| q.submit_ns == self.media_oldest)
                .min_by_key(|(_, q)| (q.trk_i, q.seq))
                .expect("media_oldest is a queued command's")
                .0;
            let q = &self.media_q[oldest];
            (self.positioning(now_phase, head_i, q.trk), oldest)
        } else if best_q < self.media_q.len() {
            (best_pos, best_q)
        } else {
            self.refresh_head_next();
            return;
        };
        let gone = self.media_q.remove(qi);
        if gone.submit_ns == self.media_oldest {
            self.media_oldest = self
                .media_q
                .iter()
                .map(|q| q.submit_ns)
                .min()
                .unwrap_or(Ns::MAX);
        }
        let idx = gone.idx;
        let c = self.cmds[idx as usize];
        let ready = now + ceil_ns(pos);
        let end = c.off.saturating_add(c.len).min(self.geo.cap);
        if c.op == Op::Read {
            let seg = self.alloc_segment(c.media_off);
            self.stream.seg = seg;
            self.stream.origin_off = c.media_off;
            self.stream.origin_trk = c.trk;
            self.stream.origin_ns = ready;
            self.stream.waiters.clear();
            let rdy = self.stream_time_to(end);
            self.stream.waiters.push((rdy, idx));
            self.stream.limit_off = end;
            self.set_stream_limit(end.saturating_add(self.readahead));
            self.head = Head::Stream;
        } else {
            self.start_write(ready, c.trk, end, idx);
        }
        self.refresh_head_next();
    }

    fn start_write(&mut self, ready: Ns, s_trk: f64, e: u64, cmd: u32) {
        let e_trk = self.geo.track_of(e);
        let end = ready + ceil_ns((e_trk - s_trk).max(0.0) * self.geo.trot);
        self.head_off = e;
        self.head_trk = e_trk;
        self.head = Head::Write { end, cmd };
    }

    fn start_destage(&mut self, now: Ns, pos: f64, s: u64) {
        let d = self.dirty.remove(&s).expect("destage candidate exists");
        let e = d.end.min(s + DESTAGE_MAX_BYTES);
        if e < d.end {
            self.dirty.insert(e, d);
            *self.epoch_counts.entry(d.epoch).or_insert(0) += 1;
        }
        self.destaging = Some((s, e, d.epoch));
        let trk = self.geo.track_of(s);
        self.start_write(now + ceil_ns(pos), trk, e, NONE);
        self.refresh_head_next();
    }
}

impl Device for Hdd {
    fn identity(&self) -> Identity<'_> {
        let p = &self.p;
        Identity::new(&self.name, &ENTRY, &p.profile, &p.values)
            .limits(p.capacity_bytes, p.ncq_depth)
    }

    fn submit(&mut self, now: Ns, cmd: DevCmd) {
        self.busy.start(now);
        let idx = self.alloc(Cmd {
            tag: cmd.tag,
            op: cmd.op,
            off: cmd.offset_bytes,
            len: cmd.len_bytes,
            fua: cmd.fua,
            submit_ns: now,
            media_off: cmd.offset_bytes,
            trk: 0.0,
        });
        let accept = now.max(self.ctrl_free) + self.overhead;
        self.ctrl_free = accept;
        self.ctrl_q.push_back((accept, idx));
        self.next_ev = self.next_ev.min(accept);
    }

    fn next_event_ns(&self) -> Option<Ns> {
        debug_assert_eq!(self.next_ev, self.earliest());
        (self.next_ev != Ns::MAX).then_some(self.next_ev)
    }

    fn advance(&mut self, now: Ns, done: &mut Vec<u64>) {
        loop {
            let link = self.link_q.front().map_or(Ns::MAX, |x| x.0);
            let ctrl = self.ctrl_q.front().map_or(Ns::MAX, |x| x.0);
            let head = self.head_next;
            let t = link.min(ctrl).min(head);
            if t > now {
                self.next_ev = t;
                break;
            }
            if link == t {
                let (_, idx, after) = self.link_q.pop_front().unwrap();
                self.on_link_done(t, idx, after, done);
            } else if head == t {
                self.on_head_event(t, done);
            } else {
                let (_, idx) = self.ctrl_q.pop_front().unwrap();
                self.on_accept(t, idx, done);
            }
        }
    }

    fn stats(&self, now: Ns) -> DeviceStats {
        self.stats.as_of(&self.busy, now)
    }

    fn params(&self) -> Vec<(String, String)> {
        let mut r = record(&self.p.profile, &self.p.values);
        // The read-ahead in effect: at most one segment.
        for (k, v) in r.iter_mut() {
            if k == "readahead" {
                *v = self.readahead.to_string();
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{closed_loop, one, typed_params};
    use super::*;
    use vmio_core::rng::Rng;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn hdd_with(src: &str) -> Hdd {
        Hdd::new(
            "sda",
            typed_params("sda", "hdd", src, HddParams::from_values).unwrap(),
        )
    }
    fn hdd() -> Hdd {
        hdd_with("")
    }

    fn close(got: f64, want: f64, tol: f64) -> bool {
        (got / want - 1.0).abs() <= tol
    }

    #[test]
    fn the_seek_curve_passes_through_its_three_anchor_points() {
        let d = hdd();
        assert!(close(d.seek_ns(1), 800e3, 1e-6), "{}", d.seek_ns(1));
        assert!(close(d.seek_at_fraction_ns(1.0 / 3.0), 8.5e6, 1e-9));
        assert!(close(d.seek_at_fraction_ns(1.0), 16e6, 1e-9));
        assert!(close(d.seek_ns(d.tracks() as u64 + 10), 16e6, 1e-9));
        assert_eq!(d.seek_ns(0), 0.0);
        let (a, b, c) = d.seek_coefficients();
        assert!(a > 0.0 && b > 0.0 && c > 0.0, "{a} {b} {c}");
        let mut last = 0.0;
        for i in 1..=1000 {
            let t = d.seek_at_fraction_ns(i as f64 / 1000.0);
            assert!(t > last);
            last = t;
        }
    }

    #[test]
    fn the_media_rate_falls_linearly_from_the_outer_to_the_inner_rate() {
        let d = hdd();
        let cap = d.capacity_bytes();
        assert!(close(d.media_rate_at(0), 220e6, 1e-9));
        assert!(close(d.media_rate_at(cap), 110e6, 1e-6));
        // Half the tracks hold more than half the bytes (outer tracks are longer).
        let mid = d.geo.offset_of(d.tracks() / 2.0);
        assert!(close(mid / cap as f64, (1.0 + 0.75) / 2.0 / 1.5, 1e-9));
        assert!(close(d.media_rate_at(mid as u64), 165e6, 1e-6));
        // ~1.45 million tracks of 0.9-1.8 MB for 2 TB.
        assert!((1.4e6..1.5e6).contains(&d.tracks()), "{}", d.tracks());
        for off in [0, 12345, GIB, cap / 3, cap - 1] {
            let t = d.geo.track_of(off);
            assert!((d.geo.offset_of(t) - off as f64).abs() < 1.0);
        }
    }

    #[test]
    fn mean_random_4k_read_at_qd1_is_seek_plus_half_a_rotation_plus_transfer() {
        let mut d = hdd();
        let cap = d.capacity_bytes();
        let mut rng = Rng::new(1);
        let n = 3000;
        let offs: Vec<u64> = (0..n).map(|_| rng.below(cap / 4096) * 4096).collect();
        let run = closed_loop(&mut d, 0, 1, n, |i| (Op::Read, offs[i], 4096));
        let (a, b, c) = d.seek_coefficients();
        // E[√x] = 8/15 and E[x] = 1/3 for the distance between two uniform points.
        let seek = a + b * 8.0 / 15.0 + c / 3.0;
        let expected = seek
            + d.rotation_ns() / 2.0
            + 4096.0 / 165e6 * 1e9
            + 50e3
            + transfer_ns(4096, 600_000_000) as f64;
        let got = run.mean_latency_ns();
        eprintln!("random 4k QD1: mean {got:.0} ns, closed form {expected:.0} ns (seek {seek:.0})");
        assert!(close(got, expected, 0.10), "{got} vs {expected}");
        assert_eq!(d.stats(Ns::MAX).read_ops, n as u64);
        assert!(d.stats(Ns::MAX).cache_misses as usize >= n - 5);
    }

    fn seq_rate(d: &mut Hdd, start: u64, bs: u64, total: u64) -> f64 {
        let n = (total / bs) as usize;
        let run = closed_loop(d, 0, 1, n, |i| (Op::Read, start + i as u64 * bs, bs));
        total as f64 / (run.elapsed_ns as f64 / 1e9)
    }

    #[test]
    fn sequential_1mib_reads_at_qd1_run_at_the_zone_rate() {
        let mut d = hdd();
        let outer = seq_rate(&mut d, 0, MIB, 128 * MIB);
        let mut d = hdd();
        let start = (d.capacity_bytes() - 128 * MIB) / MIB * MIB;
        let inner = seq_rate(&mut d, start, MIB, 128 * MIB);
        eprintln!("seq 1 MiB QD1: outer {outer:.3e} B/s, inner {inner:.3e} B/s");
        assert!(close(outer, 220e6, 0.10), "{outer}");
        assert!(close(inner, 110e6, 0.10), "{inner}");
    }

    #[test]
    fn sequential_32k_reads_at_qd1_are_served_from_the_read_ahead() {
        let mut d = hdd();
        let rate = seq_rate(&mut d, 0, 32 * KIB, 64 * MIB);
        let s = d.stats(Ns::MAX);
        let hit = s.cache_hits as f64 / (s.cache_hits + s.cache_misses) as f64;
        eprintln!("seq 32 KiB QD1: {rate:.3e} B/s, hit ratio {hit:.3}");
        assert!(hit >= 0.9, "{hit}");
        assert!(rate >= 0.9 * 220e6, "{rate}");
    }

    /// QD1 sequential reads of `bs` bytes from offset `start`, the first submitted at `t0`,
    /// each next one `gap` after the previous one completed (a host slower than the
    /// media); the latency of each, and when the host would submit the next.
    fn paced_seq_reads(
        d: &mut Hdd,
        t0: Ns,
        start: u64,
        bs: u64,
        n: usize,
        gap: Ns,
    ) -> (Vec<Ns>, Ns) {
        let mut lat = Vec::with_capacity(n);
        let mut done = Vec::new();
        let mut now = t0;
        for i in 0..n {
            // Let the drive run until the host's next submission.
            while let Some(t) = d.next_event_ns().filter(|&t| t <= now) {
                d.advance(t, &mut done);
            }
            let cmd = DevCmd {
                tag: i as u64,
                op: Op::Read,
                offset_bytes: start + i as u64 * bs,
                len_bytes: bs,
                fua: false,
            };
            d.submit(now, cmd);
            let submitted = now;
            done.clear();
            while done.is_empty() {
                let t = d.next_event_ns().expect("an outstanding read has an event");
                d.advance(t, &mut done);
                now = t;
            }
            lat.push(now - submitted);
            now += gap;
        }
        (lat, now)
    }

    #[test]
    fn a_sequential_reader_slower_than_the_media_waits_for_the_platter_only_on_its_first_read() {
        // 32 KiB every 32 KiB / 600 MB/s + 50 µs + 200 µs: about 107 MB/s, half the outer
        // zone's 220 MB/s. The read-ahead runs 2 MiB ahead, stops, and resumes on the next
        // sequential hit, so after the first read every read is a hit: command overhead
        // plus the link transfer, 50 µs + 54.6 µs.
        let mut d = hdd();
        let n = 2000;
        let (lat, _) = paced_seq_reads(&mut d, 0, 0, 32 * KIB, n, 200 * US);
        let s = d.stats(Ns::MAX);
        assert_eq!(s.cache_misses, 1);
        assert_eq!(s.cache_hits, n as u64 - 1);
        let hit_ns = 50 * US + transfer_ns(32 * KIB, 600_000_000);
        let worst = lat[1..].iter().max().copied().unwrap();
        assert!(worst <= hit_ns + 1, "{worst} > {hit_ns}");
    }

    #[test]
    fn a_sequential_reader_just_slower_than_the_media_is_served_from_the_read_ahead_throughout() {
        // 32 KiB every 104.6 µs + 80 µs: about 178 MB/s, 81 % of the outer zone's rate. The
        // hits on the resumed read-ahead's segment keep extending it (each resumption costs
        // up to a rotation, so a read-ahead that stopped 32 KiB after each resumption would
        // fall behind this reader).
        let mut d = hdd();
        let n = 4000;
        let (lat, _) = paced_seq_reads(&mut d, 0, 0, 32 * KIB, n, 80 * US);
        assert_eq!(d.stats(Ns::MAX).cache_misses, 1);
        let hit_ns = 50 * US + transfer_ns(32 * KIB, 600_000_000);
        let worst = lat[1..].iter().max().copied().unwrap();
        assert!(worst <= hit_ns + 1, "{worst} > {hit_ns}");
    }

    #[test]
    fn a_resumed_read_ahead_stops_again_when_the_host_reads_elsewhere() {
        // A random read after the paced stream finds the head free or reading ahead
        // speculatively: it is served from the media as without the resumed read-ahead.
        let mut d = hdd();
        let (_, t) = paced_seq_reads(&mut d, 0, 0, 32 * KIB, 300, 200 * US);
        let before = d.stats(Ns::MAX).cache_misses;
        let l = paced_seq_reads(&mut d, t, 500 * GIB, 32 * KIB, 1, 0).0[0];
        assert_eq!(d.stats(Ns::MAX).cache_misses, before + 1);
        // At most: overhead, a full stroke, a rotation, the media and link transfers.
        assert!(l <= 50 * US + 16 * MS + 8_334 * US + 2 * 150 * US, "{l}");
    }

    #[test]
    fn ncq_at_qd32_over_1gib_more_than_doubles_the_iops_of_qd1() {
        let mut rng = Rng::new(7);
        let n = 4000;
        let offs: Vec<u64> = (0..n).map(|_| rng.below(GIB / 4096) * 4096).collect();
        let mut d = hdd();
        let qd1 = closed_loop(&mut d, 0, 1, n, |i| (Op::Read, offs[i], 4096)).iops();
        let mut d = hdd();
        let qd32 = closed_loop(&mut d, 0, 32, n, |i| (Op::Read, offs[i], 4096)).iops();
        eprintln!("random 4k over 1 GiB: QD1 {qd1:.0} IOPS, QD32 {qd32:.0} IOPS");
        assert!(qd32 >= 2.0 * qd1, "{qd1} {qd32}");
    }

    #[test]
    fn ncq_over_the_whole_disk_gains_from_shortest_positioning_first() {
        let mut rng = Rng::new(9);
        let n = 3000;
        let mut d = hdd();
        let cap = d.capacity_bytes();
        let offs: Vec<u64> = (0..n).map(|_| rng.below(cap / 4096) * 4096).collect();
        let qd1 = closed_loop(&mut d, 0, 1, n, |i| (Op::Read, offs[i], 4096)).iops();
        let mut d = hdd();
        let qd32 = closed_loop(&mut d, 0, 32, n, |i| (Op::Read, offs[i], 4096)).iops();
        eprintln!("random 4k whole disk: QD1 {qd1:.0} IOPS, QD32 {qd32:.0} IOPS");
        assert!(qd32 > 1.8 * qd1, "{qd1} {qd32}");
    }

    #[test]
    fn a_candidate_is_never_positioned_sooner_than_its_sectors_angle_from_the_head() {
        // pos = s + trot·frac(trk − φ0 − s/trot) ≥ trot·frac(trk − φ0) (module doc), so a
        // candidate the angle bound skips is never one the full scan would take.
        let d = hdd();
        let trot = d.geo.trot;
        let mut rng = Rng::new(3);
        let tracks = d.tracks() as u64;
        let mut skipped = 0;
        for i in 0..200_000u64 {
            let now_phase = d.phase(rng.below(1 << 40));
            let head_i = rng.below(tracks) as i64;
            // Candidates near the head (short seeks) and anywhere; some on the head's track.
            let trk_i = match i % 3 {
                0 => head_i as u64,
                1 => (head_i as u64 + rng.below(64)).min(tracks - 1),
                _ => rng.below(tracks),
            };
            let trk = trk_i as f64 + rng.below(1 << 30) as f64 / (1u64 << 30) as f64;
            let pos = d.positioning(now_phase, head_i, trk);
            let best = rng.below(trot as u64 + 1) as f64;
            if angle_bound_passes(frac(trk) - now_phase, trot, best) {
                skipped += 1;
                assert!(pos >= best, "{trk} {head_i} {now_phase}: {pos} < {best}");
            }
            // The bound itself, within its margin, wherever the wait is not snapped.
            let phi = frac(trk - now_phase);
            if phi < 1.0 - PHASE_EPS - ANGLE_MARGIN {
                assert!(
                    pos >= (phi - ANGLE_MARGIN) * trot,
                    "{trk} {now_phase}: {pos}"
                );
            }
        }
        assert!(skipped > 50_000, "{skipped}");
    }

    /// The SPTF choice of the whole queue visited in track order outwards from the head
    /// (the first strictly smaller positioning time wins), with no bound: the reference
    /// `sptf_scan` must agree with.
    fn full_scan_by_track(d: &Hdd, now_phase: f64, head_i: i64) -> (f64, u64) {
        let mut by_trk: Vec<&QEnt> = d.media_q.iter().collect();
        by_trk.sort_by_key(|e| (e.trk_i, e.seq));
        let mut hi = by_trk.partition_point(|e| e.trk_i < head_i);
        let mut lo = hi;
        let (mut best, mut seq) = (f64::INFINITY, u64::MAX);
        loop {
            let dl = (lo > 0).then(|| (head_i - by_trk[lo - 1].trk_i).unsigned_abs());
            let dh = (hi < by_trk.len()).then(|| (by_trk[hi].trk_i - head_i).unsigned_abs());
            let e = match (dl, dh) {
                (Some(l), h) if h.is_none_or(|h| l < h) => {
                    lo -= 1;
                    by_trk[lo]
                }
                (_, Some(_)) => {
                    hi += 1;
                    by_trk[hi - 1]
                }
                _ => break,
            };
            let pos = d.positioning(now_phase, head_i, e.trk);
            if pos < best {
                (best, seq) = (pos, e.seq);
            }
        }
        (best, seq)
    }

    #[test]
    fn sptf_by_angle_takes_the_command_the_full_scan_by_track_takes() {
        let mut d = hdd();
        let tracks = d.tracks() as u64;
        let mut rng = Rng::new(11);
        let mut within_half_a_turn = 0;
        for round in 0..20_000u64 {
            d.media_q.clear();
            let head_i = rng.below(tracks) as i64;
            let now_phase = d.phase(rng.below(1 << 40));
            let n = 1 + rng.below(40);
            let band = [0, 8, 4096, tracks][round as usize % 4];
            let mut prev_trk = None;
            for k in 0..n {
                // Some on the head's track, some sharing another command's sector (ties),
                // some at the head's phase or just before it (the snap window).
                let trk = match rng.below(6) {
                    0 => head_i as f64 + rng.below(1 << 20) as f64 / (1u64 << 20) as f64,
                    1 => prev_trk.unwrap_or(head_i as f64 + 0.5),
                    2 => (head_i as u64 + rng.below(band + 1)).min(tracks - 1) as f64 + now_phase,
                    3 => {
                        let t = (head_i as u64).saturating_sub(rng.below(band + 1)) as f64;
                        t + frac(now_phase - 1e-6 * rng.below(20) as f64)
                    }
                    _ => {
                        let lo = (head_i as u64).saturating_sub(band);
                        let t = (lo + rng.below(2 * band + 1)).min(tracks - 1);
                        t as f64 + rng.below(1 << 30) as f64 / (1u64 << 30) as f64
                    }
                };
                prev_trk = Some(trk);
                let ang = frac(trk);
                let at = d.media_q.partition_point(|q| q.ang <= ang);
                d.media_q.insert(
                    at,
                    QEnt {
                        trk,
                        trk_i: trk as i64,
                        ang,
                        submit_ns: k,
                        idx: k as u32,
                        read: true,
                        seq: rng.below(4) * 100 + k,
                    },
                );
            }
            let (pos, qi) = d.sptf_scan(now_phase, head_i);
            let (want, seq) = full_scan_by_track(&d, now_phase, head_i);
            assert_eq!(
                (pos, d.media_q[qi].seq),
                (want, seq),
                "round {round}: head {head_i} phase {now_phase}"
            );
            within_half_a_turn += (pos < d.geo.trot * 0.5) as u32;
        }
        assert!(within_half_a_turn > 1000, "{within_half_a_turn}");
    }

    #[test]
    fn a_cached_write_is_fast_and_a_following_flush_waits_for_the_media() {
        let mut d = hdd();
        let w = one(&mut d, 0, 1, Op::Write, 1 << 40, 4096, false);
        assert!(w < MS, "write took {w} ns");
        assert!(d.dirty_bytes() > 0);
        let f = one(&mut d, w, 2, Op::Flush, 0, 0, false);
        eprintln!("cached write {w} ns, flush done at {f} ns");
        // The head must seek half the stroke and write: several ms.
        assert!(f - w > 2 * MS, "{}", f - w);
        assert_eq!(d.dirty_bytes(), 0);
        let s = d.stats(Ns::MAX);
        assert_eq!((s.write_ops, s.flush_ops, s.write_bytes), (1, 1, 4096));
    }

    #[test]
    fn a_flush_with_nothing_dirty_costs_only_the_command_overhead() {
        let mut d = hdd();
        assert_eq!(one(&mut d, 0, 1, Op::Flush, 0, 0, false), 50 * US);
    }

    #[test]
    fn without_write_cache_a_write_takes_media_time() {
        let mut d = hdd_with("write_cache = false");
        let w = one(&mut d, 0, 1, Op::Write, 1 << 40, 4096, false);
        assert!(w > 5 * MS, "write took {w} ns");
        assert_eq!(d.dirty_bytes(), 0);
        // A FUA write with the write cache on also goes to the media.
        let mut d = hdd();
        let w = one(&mut d, 0, 1, Op::Write, 1 << 40, 4096, true);
        assert!(w > 5 * MS, "FUA write took {w} ns");
        assert_eq!(d.dirty_bytes(), 0);
    }

    #[test]
    fn reads_of_dirty_data_hit_the_write_cache() {
        let mut d = hdd();
        let w = one(&mut d, 0, 1, Op::Write, 1 << 40, 64 * KIB, false);
        let r = one(&mut d, w, 2, Op::Read, (1 << 40) + 4096, 8192, false);
        assert!(r - w < MS, "{}", r - w);
        assert_eq!(d.stats(Ns::MAX).cache_hits, 1);
    }

    #[test]
    fn a_full_write_cache_makes_writes_wait_for_destaging() {
        let mut d = hdd_with("cache_size = \"1m\"");
        let cap = d.capacity_bytes();
        let mut rng = Rng::new(3);
        let n = 300;
        let offs: Vec<u64> = (0..n).map(|_| rng.below(cap / 65536) * 65536).collect();
        let run = closed_loop(&mut d, 0, 4, n, |i| (Op::Write, offs[i], 64 * KIB));
        // 512 KiB of write cache holds 8 writes; the rest are paced by random media writes.
        let per_write = run.elapsed_ns as f64 / n as f64;
        assert!(per_write > 3e6, "{per_write}");
        let f = one(&mut d, run.elapsed_ns, n as u64, Op::Flush, 0, 0, false);
        assert!(f > run.elapsed_ns);
        assert_eq!(d.dirty_bytes(), 0);
        assert_eq!(d.buf_used, 0);
    }

    #[test]
    fn sequential_cached_writes_destage_at_the_media_rate() {
        let mut d = hdd();
        let n = 2048; // 128 MiB in 64 KiB writes: fills and drains the write half.
        let run = closed_loop(&mut d, 0, 4, n, |i| {
            (Op::Write, i as u64 * 64 * KIB, 64 * KIB)
        });
        let f = one(&mut d, run.elapsed_ns, n as u64, Op::Flush, 0, 0, false);
        let rate = (n as u64 * 64 * KIB) as f64 / (f as f64 / 1e9);
        eprintln!("seq 64 KiB writes + flush: {rate:.3e} B/s");
        assert!(rate > 0.85 * 220e6 && rate < 1.05 * 220e6, "{rate}");
    }

    #[test]
    fn mixed_random_reads_and_writes_complete_and_stay_consistent() {
        let mut d = hdd();
        let cap = d.capacity_bytes();
        let mut rng = Rng::new(11);
        let n = 2000;
        let cmds: Vec<(Op, u64)> = (0..n)
            .map(|_| {
                let op = if rng.below(2) == 0 {
                    Op::Read
                } else {
                    Op::Write
                };
                (op, rng.below(cap / 32768) * 32768)
            })
            .collect();
        let run = closed_loop(&mut d, 0, 8, n, |i| (cmds[i].0, cmds[i].1, 32 * KIB));
        let s = d.stats(Ns::MAX);
        assert_eq!(s.read_ops + s.write_ops, n as u64);
        assert!(s.busy_ns <= run.elapsed_ns);
        let f = one(&mut d, run.elapsed_ns, n as u64, Op::Flush, 0, 0, false);
        assert!(f >= run.elapsed_ns);
        assert_eq!(d.dirty_bytes(), 0);
    }

    #[test]
    fn the_segment_order_kept_gives_the_least_recently_used_segment_the_scan_gives() {
        // Three segments, four interleaved sequential readers and random reads: segments
        // are hit (moved to most recent) and reused; every allocation is checked against
        // the scan by (used, index) in debug builds (`alloc_segment`), and the order kept
        // is checked against the segments' clocks at the end.
        let mut d = hdd_with("cache_segments = 3");
        let mut rng = Rng::new(5);
        let mut next = [0, GIB, 2 * GIB, 3 * GIB];
        let n = 3000;
        let cmds: Vec<u64> = (0..n)
            .map(|_| {
                if rng.below(5) == 0 {
                    rng.below(4 * GIB / 4096) * 4096
                } else {
                    let s = &mut next[rng.below(4) as usize];
                    *s += 64 * KIB;
                    *s
                }
            })
            .collect();
        let run = closed_loop(&mut d, 0, 4, n, |i| (Op::Read, cmds[i], 64 * KIB));
        assert_eq!(d.stats(run.elapsed_ns).read_ops, n as u64);
        assert!(d.stats(run.elapsed_ns).cache_hits > 0);
        let mut by_clock: Vec<usize> = (0..3).collect();
        by_clock.sort_by_key(|&i| (d.segs[i].used, i));
        assert_eq!(d.lru.iter().copied().collect::<Vec<_>>(), by_clock);
    }

    #[test]
    fn an_old_command_is_served_within_the_starvation_limit() {
        // No read-ahead, so the nearby reads keep the queue full instead of hitting the cache.
        let mut d = hdd_with("readahead = 0");
        let far = d.capacity_bytes() - MIB;
        let mut rng = Rng::new(5);
        let n = 3000;
        let offs: Vec<u64> = (0..n)
            .map(|i| {
                if i == 100 {
                    far
                } else {
                    rng.below(64 * MIB / 4096) * 4096 + 64 * MIB
                }
            })
            .collect();
        let run = closed_loop(&mut d, 0, 32, n, |i| (Op::Read, offs[i], 4096));
        let l = run.latencies_ns[100];
        assert!((SEC..SEC + 50 * MS).contains(&l), "far read waited {l} ns");
        assert!(run.elapsed_ns > 2 * SEC);
    }

    #[test]
    fn zero_length_and_out_of_range_commands_complete_without_panicking() {
        let mut d = hdd();
        let cap = d.capacity_bytes();
        let cases = [
            (Op::Read, 0, 0, false),
            (Op::Write, 4096, 0, false),
            (Op::Trim, 0, 1 << 30, false),
            (Op::Read, cap + MIB, 4096, false),
            (Op::Read, cap - 4096, 65536, false),
            (Op::Write, cap + MIB, 4096, false),
            (Op::Write, cap - 4096, 65536, true),
            (Op::Write, u64::MAX - 10, 4096, false),
            (Op::Read, u64::MAX - 10, 4096, false),
            (Op::Flush, 0, 0, true),
        ];
        let mut t = 0;
        for (i, &(op, off, len, fua)) in cases.iter().enumerate() {
            t = one(&mut d, t, i as u64, op, off, len, fua);
        }
        assert!(d.next_event_ns().is_none() || d.dirty_bytes() == 0);
        assert_eq!(d.dirty_bytes(), 0);
    }

    #[test]
    fn identical_runs_give_identical_timings() {
        let run = || {
            let mut d = hdd();
            let mut rng = Rng::new(42);
            let cmds: Vec<(Op, u64)> = (0..1000)
                .map(|_| {
                    let op = if rng.below(3) == 0 {
                        Op::Write
                    } else {
                        Op::Read
                    };
                    (op, rng.below(1 << 20) * 4096)
                })
                .collect();
            let r = closed_loop(&mut d, 0, 16, 1000, |i| (cmds[i].0, cmds[i].1, 16 * KIB));
            (r.elapsed_ns, r.latencies_ns, d.stats(Ns::MAX))
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn effective_parameters_clamp_the_readahead_to_a_segment() {
        let d = hdd_with("cache_size = \"16m\"\nreadahead = \"4m\"");
        let p: BTreeMap<String, String> = d.params().into_iter().collect();
        assert_eq!(p["readahead"], (512 * KIB).to_string());
        // The profile, and every parameter but `fua` at its default (device module).
        assert_eq!(p.len(), ENTRY.params.len());
    }

    /// Throughput of the model itself (not asserted; run with `--release --ignored --nocapture`).
    #[test]
    #[ignore]
    fn model_speed_for_random_4k_reads_at_qd32_on_two_disks() {
        let n = 1_000_000;
        let mut disks = [hdd(), hdd()];
        let cap = disks[0].capacity_bytes();
        let mut rng = Rng::new(1);
        let offs: Vec<u64> = (0..n).map(|_| rng.below(cap / 4096) * 4096).collect();
        let wall = std::time::Instant::now();
        let mut total = 0;
        let mut done = Vec::with_capacity(64);
        for d in disks.iter_mut() {
            let (mut now, mut issued, mut completed) = (0, 0, 0);
            let submit = |d: &mut Hdd, now: Ns, issued: &mut usize| {
                let cmd = DevCmd {
                    tag: *issued as u64,
                    op: Op::Read,
                    offset_bytes: offs[*issued],
                    len_bytes: 4096,
                    fua: false,
                };
                d.submit(now, cmd);
                *issued += 1;
            };
            while issued < 32 {
                submit(d, now, &mut issued);
            }
            while completed < n / 2 {
                now = d.next_event_ns().unwrap();
                done.clear();
                d.advance(now, &mut done);
                for _ in 0..done.len() {
                    completed += 1;
                    if issued < n {
                        submit(d, now, &mut issued);
                    }
                }
            }
            total += completed;
        }
        let s = wall.elapsed().as_secs_f64();
        eprintln!(
            "{total} I/Os in {s:.3} s wall: {:.0} I/Os per second",
            total as f64 / s
        );
    }
}
