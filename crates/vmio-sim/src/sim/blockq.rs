//! The block queue and the devices: a disk range is mapped through its volume to per-device
//! requests, which wait in each device's request queue ([`vmio_core::blockq::DeviceQueue`]:
//! the I/O scheduler, flushes bypassing it, the queue depth, the scheduler's wake-ups) until
//! the device has a free slot; a barrier counts the device requests of one host operation and
//! hands its continuation back to the host cache driver.
//!
//! Shared hardware (`[[device]] share`): every stack device keeps its own request queue, and
//! the queues of the devices that are regions of one hardware feed its one device model.
//! Linux has one request queue per disk (a partition's requests go to its disk's queue);
//! vmio serve has one per backing file, whose requests then reach the one disk under the
//! files through the host's filesystem. The simulator follows vmio serve: one queue per
//! stack device (the model's queue depth each), all of a hardware's queues dispatching into
//! its model, so that a raid0 over two files of one disk shares that disk's time.
//!
//! ```text
//! hardware h: one device model; members = its stack devices, the shared one first
//! device d:   a queue, its hardware h, its member index m, its region's start on h,
//!             its caps (the model's write_cache and fua)
//! submit_range(disk, op, off, len, b): submit_volume(its volume, disk offset + off, no FUA)
//! submit_volume(vol, op, off, len, b, fua): volume.map(off) → pieces; barrier b += pieces;
//!     each piece on its device d → prefetch hint, then by flush_seq(d.caps, op, fua):
//!         Issue { fua }   → queue.insert(piece with that FUA)
//!         DataThenFlush   → queue.insert_bypass(piece without FUA, tag b | POSTFLUSH)
//!     pump each touched device once
//! flush_volume(disk, cont): one barrier; per device d of the disk's volume, by
//!     flush_seq(d.caps, FLUSH):  Issue → queue.insert(FLUSH CACHE)
//!                                Done  → d.at_once += b; SchedWake(d) now (no command)
//! pump(d): queue.dispatch → model(h).submit(tag = m << 32 | slot, offset = start + offset);
//!     DevWake(h) at the model's next completion, SchedWake(d) at queue.wakeup_to_arm
//! DevWake(h): model completions → member tag >> 32, slot tag & (2^32 - 1) → queue.complete;
//!     every tag (merged requests too): with POSTFLUSH → queue.insert(FLUSH, tag b) on the
//!     same device (the post-flush), else barrier_done; pump every member of h
//! SchedWake(d): every tag of d.at_once → barrier_done; queue.woke; pump(d)
//! barrier_done(b): remaining -= 1; at 0 → host cache driver's barrier_continue(cont)
//! ```
//!
//! **FLUSH and FUA by the device's capabilities** (the rule is
//! [`vmio_core::blockq::flush_seq`], Linux's `block/blk-flush.c`): on a device without a
//! volatile write cache a FLUSH completes at once with no device command and FUA is dropped;
//! on one with a cache and no FUA a FUA write goes out as a plain write ahead of the
//! scheduler, a FLUSH follows its completion on the same device, and the request completes
//! after that flush. A completion the block layer makes without the device is handed back
//! through a SchedWake event at the same instant, not synchronously: the host cache driver
//! never sees an action complete while it carries out its actions (hostcache.rs).
//!
//! **RAID and the other layouts.** The policy applies per member device, where a volume's
//! pieces are addressed, as in Linux, where md and dm pass FLUSH and FUA down to the member
//! queues and each member's blk-flush decides: md's `md_flush_request` (drivers/md/md.c)
//! sends an empty `REQ_PREFLUSH` bio to every member (`submit_flushes`), then the data
//! without the flag; raid0 (drivers/md/raid0.c, `raid0_make_request`) splits a bio at chunk
//! boundaries and remaps the pieces to the members, each keeping `REQ_FUA`; md's own queue
//! advertises a write cache and FUA (`blk_queue_write_cache(q, true, true)`) so that nothing
//! is stripped above the members; dm (drivers/md/dm.c `__send_empty_flush`, dm-stripe's
//! `num_flush_bios` = stripes) sends an empty flush to every device of its targets.
//! Modelled: a FLUSH of a volume is one FLUSH per member, each member's policy applied
//! (flush_volume); a FUA write of a volume is one FUA piece per member it touches, each
//! piece through its member's policy: on members without FUA, one post-flush per piece.
//! Not modelled: blk-flush's merging of concurrent flushes into one (`blk_kick_flush` issues
//! one flush for every request pending when it starts), so two pieces of one FUA write on
//! the same member of a no-FUA device pay two post-flushes where Linux may pay one.
//!
//! A device without sharing is member 0 of its own hardware: its tags are its slots and its
//! offsets its own, as before sharing existed. A hardware's model may hold up to (members ×
//! queue depth) commands (each queue has the model's depth, as each backing file has
//! vmio serve's); the models accept more than their depth (device module).
//!
//! Sources: Linux block/blk-mq.c and block/blk-flush.c through [`vmio_core::blockq`], md/dm
//! for the volume layouts (the core crate's [`vmio_core::volume`]), the schedulers of
//! [`vmio_core::sched`]; block/partitions/core.c (`add_partition`: a partition is a
//! start and a length on its disk, its I/O the disk's, offset by the start).

use super::breakdown::DevTimes;
use super::event::Event;
use super::{Sim, SimError};
use crate::device::{build_device_seeded, Busy, DevCmd, Device, DeviceStats};
use vmio_core::blockq::{flush_seq, Caps, DeviceQueue, FlushSeq};
use vmio_core::cache::Token;
use vmio_core::request::{DevIo, Op};
use vmio_core::sched;
use vmio_core::slab::Slab;
use vmio_core::stack::Stack;
use vmio_core::volume::{self, Piece, VolumeLayout};
use vmio_core::Ns;

/// One device model: the hardware of a stack device and of the devices sharing it.
pub(super) struct Hardware {
    pub(super) model: Box<dyn Device>,
    /// The stack devices whose queues feed the model, the shared one first: a command's tag
    /// is (member index) << [`MEMBER_SHIFT`] | its queue slot.
    members: Vec<usize>,
    /// The device completion a DevWake event is pushed for.
    wake_at: Option<Ns>,
}

/// A model tag: member index << MEMBER_SHIFT | slot (slots are below the queue depth).
const MEMBER_SHIFT: u32 = 32;
const SLOT_MASK: u64 = (1 << MEMBER_SHIFT) - 1;

/// A device request's tag (a barrier) with this bit: the data of a flush sequence, whose
/// completion sends the post-flush that completes the barrier.
const POSTFLUSH: u64 = 1 << 63;

/// A stack device: its request queue and its place on its hardware.
pub(super) struct DevState {
    pub(super) name: String,
    queue: DeviceQueue,
    /// Its hardware (an index into [`BlockQueue::hws`]).
    pub(super) hw: usize,
    /// Its member index on the hardware, shifted: the high bits of its commands' tags.
    tag_base: u64,
    /// Where its region begins on the hardware, and its size (the volume's device capacity).
    pub(super) start_bytes: u64,
    pub(super) capacity_bytes: u64,
    /// What its queue sent, counted at completion (a sharing device's report).
    pub(super) sent: DeviceStats,
    pub(super) sent_busy: Busy,
    /// What its hardware tells the block layer about its cache.
    caps: Caps,
    /// Barriers of requests the block layer completed without the device, handed back at
    /// the next SchedWake.
    at_once: Vec<u64>,
    /// When the request in each queue slot was dispatched to the device (breakdown.rs).
    dispatched: Vec<Ns>,
}

impl DevState {
    /// The device is a region of another device's hardware (not its model's first member).
    pub(super) fn shares(&self) -> bool {
        self.tag_base != 0
    }
}

pub(super) struct VolState {
    pub(super) name: String,
    pub(super) layout: Box<dyn VolumeLayout>,
    devices: Vec<usize>,
    pub(super) read_ahead_bytes: u64,
}

/// What a barrier hands back to the host-cache policy when its device requests completed
/// (`Sim::barrier_continue`).
pub(super) type Cont = Token;

/// Device requests of one host operation still outstanding, and what to do after the last.
pub(super) struct Barrier {
    pub(super) remaining: u32,
    pub(super) cont: Cont,
}

/// The block layer's state: hardware, devices, volumes and the barriers in flight.
pub(super) struct BlockQueue {
    pub(super) hws: Vec<Hardware>,
    pub(super) devs: Vec<DevState>,
    pub(super) vols: Vec<VolState>,
    pub(super) barriers: Slab<Barrier>,
    pieces: Vec<Piece>,
    done: Vec<u64>,
}

impl BlockQueue {
    /// The engine's initial state: `[voff, voff + len)` of volume `vol` holds nothing yet;
    /// each of its pieces is unprovisioned on its device's hardware (a thin model clears the
    /// blocks a piece covers whole, [`crate::device::thin`]; a thick one ignores it). Mapped
    /// a gigabyte at a time, so that a large range's pieces stay few in memory.
    pub(super) fn unprovision(&mut self, vol: usize, voff: u64, len: u64) {
        const WINDOW: u64 = 1 << 30;
        let v = &self.vols[vol];
        let mut pieces = Vec::new();
        let mut at = voff;
        while at < voff + len {
            let n = WINDOW.min(voff + len - at);
            pieces.clear();
            v.layout.map(at, n, &mut pieces);
            for p in &pieces {
                let d = &self.devs[v.devices[p.device]];
                self.hws[d.hw]
                    .model
                    .unprovision(d.start_bytes + p.offset_bytes, p.len_bytes);
            }
            at += n;
        }
    }

    pub(super) fn new((hws, devs): (Vec<Hardware>, Vec<DevState>), vols: Vec<VolState>) -> Self {
        BlockQueue {
            hws,
            devs,
            vols,
            barriers: Slab::new(),
            pieces: Vec::new(),
            done: Vec::new(),
        }
    }
}

/// The stack's hardware (a model for each device that does not share, seeded from the run
/// seed and its name) and its devices (each with its scheduler, its region and its place
/// among its hardware's members).
pub(super) fn build_devices(
    stack: &Stack,
    seed: u64,
) -> Result<(Vec<Hardware>, Vec<DevState>), SimError> {
    let weights: Vec<u32> = stack.vms.iter().map(|v| v.weight).collect();
    let mut hws: Vec<Hardware> = Vec::new();
    // Each device's hardware index, and each hardware's capacity by device.
    let mut hw_of = Vec::with_capacity(stack.devices.len());
    let mut hardware_bytes = Vec::with_capacity(stack.devices.len());
    for (i, d) in stack.devices.iter().enumerate() {
        if let Some(s) = &d.share {
            hw_of.push(hw_of[s.device]);
            hardware_bytes.push(0);
            continue;
        }
        let dev_seed = vmio_core::rng::Rng::derive(seed, &format!("device/{}", d.name)).next_u64();
        let model =
            build_device_seeded(&d.name, &d.model, d.profile.as_deref(), &d.params, dev_seed)
                .map_err(|source| SimError::Device {
                    file: stack.file.clone(),
                    source,
                })?;
        hw_of.push(hws.len());
        hardware_bytes.push(model.capacity_bytes());
        hws.push(Hardware {
            model,
            members: vec![i],
            wake_at: None,
        });
    }
    let regions = stack.regions(&hardware_bytes)?;
    let mut devs = Vec::with_capacity(stack.devices.len());
    for (i, d) in stack.devices.iter().enumerate() {
        let hw = &mut hws[hw_of[i]];
        let member = match hw.members.iter().position(|&m| m == i) {
            Some(m) => m,
            None => {
                hw.members.push(i);
                hw.members.len() - 1
            }
        };
        let (start_bytes, capacity_bytes) = match regions[i] {
            Some(r) => (r.start_bytes, r.capacity_bytes),
            None => (0, hw.model.capacity_bytes()),
        };
        devs.push(DevState {
            name: d.name.clone(),
            queue: DeviceQueue::new(
                sched::build(&stack.scheduler, &weights),
                hw.model.queue_depth(),
            ),
            hw: hw_of[i],
            tag_base: (member as u64) << MEMBER_SHIFT,
            start_bytes,
            capacity_bytes,
            sent: DeviceStats::default(),
            sent_busy: Busy::default(),
            caps: hw.model.caps(),
            at_once: Vec::new(),
            dispatched: vec![0; hw.model.queue_depth().max(1)],
        });
    }
    Ok((hws, devs))
}

/// A FLUSH CACHE request completing barrier `b`.
fn flush_io(b: u64, owner: u32, now: Ns) -> DevIo {
    DevIo {
        tag: b,
        op: Op::Flush,
        offset_bytes: 0,
        len_bytes: 0,
        fua: false,
        sync: true,
        owner,
        queued_ns: now,
        merged: Vec::new(),
    }
}

/// The stack's volumes over `devs`, with their read-ahead (the layout's default unless set).
pub(super) fn build_volumes(stack: &Stack, devs: &[DevState]) -> Result<Vec<VolState>, SimError> {
    let mut vols = Vec::new();
    for v in &stack.volumes {
        let caps: Vec<u64> = v.devices.iter().map(|&i| devs[i].capacity_bytes).collect();
        let layout = volume::build(&v.name, v.layout, &caps, &v.params).map_err(|source| {
            SimError::Volume {
                file: stack.file.clone(),
                source,
            }
        })?;
        let ra = v
            .read_ahead_kb
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| layout.default_read_ahead_bytes());
        vols.push(VolState {
            name: v.name.clone(),
            layout,
            devices: v.devices.clone(),
            read_ahead_bytes: ra,
        });
    }
    Ok(vols)
}

impl Sim {
    /// Map `[off, off+len)` of a disk through its volume and queue one device request per
    /// piece, all completing barrier `b`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit_range(
        &mut self,
        now: Ns,
        disk: usize,
        op: Op,
        off: u64,
        len: u64,
        b: usize,
        sync: bool,
    ) {
        let d = &self.disks[disk];
        let (vol, owner, voff) = (d.volume, d.owner, d.offset_bytes + off);
        self.submit_volume(now, vol, owner, op, voff, len, b, sync, false);
    }

    /// Queue `[voff, voff+len)` of volume `vol` as device requests completing barrier `b`
    /// (`fua`: each with Force Unit Access), for `owner`'s scheduling.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit_volume(
        &mut self,
        now: Ns,
        vol: usize,
        owner: u32,
        op: Op,
        voff: u64,
        len: u64,
        b: usize,
        sync: bool,
        fua: bool,
    ) {
        let mut pieces = std::mem::take(&mut self.blockq.pieces);
        pieces.clear();
        self.blockq.vols[vol].layout.map(voff, len, &mut pieces);
        self.blockq.barriers.get(b).remaining += pieces.len() as u32;
        for p in &pieces {
            let dev = self.blockq.vols[vol].devices[p.device];
            let mut io = DevIo {
                tag: b as u64,
                op,
                offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
                fua,
                sync,
                owner,
                queued_ns: now,
                merged: Vec::new(),
            };
            let d = &mut self.blockq.devs[dev];
            self.blockq.hws[d.hw]
                .model
                .prefetch(op, d.start_bytes + p.offset_bytes, p.len_bytes);
            match flush_seq(d.caps, op, fua) {
                FlushSeq::Issue { fua } => {
                    io.fua = fua;
                    d.queue.insert(now, io);
                }
                FlushSeq::DataThenFlush => {
                    io.fua = false;
                    io.tag |= POSTFLUSH;
                    d.queue.insert_bypass(io);
                }
                // Only an empty FLUSH completes without the device (not a piece of data).
                FlushSeq::Done => {
                    d.at_once.push(b as u64);
                    self.q.push(now, Event::SchedWake(dev).pack());
                }
            }
        }
        // Pump each touched device once (pieces of one request are few; no allocation).
        for (i, p) in pieces.iter().enumerate() {
            if pieces[..i].iter().all(|q| q.device != p.device) {
                let dev = self.blockq.vols[vol].devices[p.device];
                self.pump(now, dev);
            }
        }
        self.blockq.pieces = pieces;
    }

    /// FLUSH CACHE to every device of the disk's volume, then continue with `cont`: a
    /// device without a volatile write cache gets none, its part done at once (module doc).
    pub(super) fn flush_volume(&mut self, now: Ns, disk: usize, cont: Cont) {
        let vol = self.disks[disk].volume;
        let devices = self.blockq.vols[vol].devices.clone();
        let b = self.blockq.barriers.insert(Barrier {
            remaining: devices.len() as u32,
            cont,
        });
        let owner = self.disks[disk].owner;
        for dev in devices {
            let d = &mut self.blockq.devs[dev];
            if flush_seq(d.caps, Op::Flush, false) == FlushSeq::Done {
                d.at_once.push(b as u64);
                self.q.push(now, Event::SchedWake(dev).pack());
                continue;
            }
            d.queue.insert(now, flush_io(b as u64, owner, now));
            self.pump(now, dev);
        }
    }

    pub(super) fn pump(&mut self, now: Ns, dev: usize) {
        let d = &mut self.blockq.devs[dev];
        let h = &mut self.blockq.hws[d.hw];
        let model = &mut h.model;
        let (tag_base, start, busy) = (d.tag_base, d.start_bytes, &mut d.sent_busy);
        let dispatched = &mut d.dispatched;
        d.queue.dispatch(now, |slot, io| {
            busy.start(now);
            if slot >= dispatched.len() {
                dispatched.resize(slot + 1, 0);
            }
            dispatched[slot] = now;
            model.submit(
                now,
                DevCmd {
                    tag: tag_base | slot as u64,
                    op: io.op,
                    offset_bytes: start + io.offset_bytes,
                    len_bytes: io.len_bytes,
                    fua: io.fua,
                },
            )
        });
        if let Some(t) = h.model.next_event_ns() {
            if h.wake_at.is_none_or(|w| t < w || w < now) {
                h.wake_at = Some(t);
                self.q.push(t, Event::DevWake(d.hw).pack());
            }
        } else if d.queue.in_flight() > 0 {
            return self.device_lost(now, dev);
        }
        if let Some(t) = d.queue.wakeup_to_arm(now) {
            self.q.push(t, Event::SchedWake(dev).pack());
        }
    }

    /// Device `dev` holds commands and has no event to come: nothing would ever complete
    /// them, so the run ends (at this event) with [`super::SimError::Internal`] rather than
    /// waiting for ever.
    #[cold]
    fn device_lost(&mut self, now: Ns, dev: usize) {
        let d = &self.blockq.devs[dev];
        self.fault = Some(format!(
            "device '{}' holds {} commands with nothing scheduled to complete them at {:.6} s of simulated time (its model lost them)",
            d.name,
            d.queue.in_flight(),
            now as f64 / 1e9
        ));
    }

    /// Hardware `hw` has completions due: each goes back to its device's queue, then every
    /// queue of the hardware may dispatch.
    pub(super) fn dev_wake(&mut self, now: Ns, hw: usize) {
        // `done` is read in place: it is private to this module and only this handler, which
        // only the event loop calls, touches it; the continuations below (submissions,
        // flushes, synchronous devices) queue events or use other buffers.
        {
            let b = &mut self.blockq;
            b.done.clear();
            let h = &mut b.hws[hw];
            if h.wake_at == Some(now) {
                h.wake_at = None;
            }
            h.model.advance(now, &mut b.done);
        }
        let mut i = 0;
        while let Some(&tag) = self.blockq.done.get(i) {
            i += 1;
            let dev = self.blockq.hws[hw].members[(tag >> MEMBER_SHIFT) as usize];
            let d = &mut self.blockq.devs[dev];
            let slot = (tag & SLOT_MASK) as usize;
            let io = d.queue.complete(now, slot);
            let times = DevTimes {
                queued: io.queued_ns,
                dispatched: d.dispatched[slot],
                done: now,
            };
            d.sent.count(io.op, io.len_bytes);
            d.sent_busy.end(now);
            for tag in io.tags() {
                if tag & POSTFLUSH != 0 {
                    // The data of a flush sequence is done: its post-flush, on this device,
                    // completes the barrier (dispatched by the pumps below).
                    let flush = flush_io(tag & !POSTFLUSH, io.owner, now);
                    self.blockq.devs[dev].queue.insert(now, flush);
                } else {
                    self.barrier_done(now, tag as usize, Some(times));
                }
            }
        }
        for m in 0..self.blockq.hws[hw].members.len() {
            let dev = self.blockq.hws[hw].members[m];
            self.pump(now, dev);
        }
    }

    /// A device's queue wakes: the requests the block layer completed without the device
    /// are handed back, then its scheduler may dispatch.
    pub(super) fn sched_wake(&mut self, now: Ns, dev: usize) {
        let done = std::mem::take(&mut self.blockq.devs[dev].at_once);
        for &b in &done {
            self.barrier_done(now, b as usize, None);
        }
        self.blockq.devs[dev].queue.woke(now);
        self.pump(now, dev)
    }

    /// One device request of barrier `b` is done (`dev`: its times; None: done without the
    /// device); the last continues the barrier's operation with its times.
    pub(super) fn barrier_done(&mut self, now: Ns, b: usize, dev: Option<DevTimes>) {
        let bar = self.blockq.barriers.get(b);
        bar.remaining -= 1;
        if bar.remaining > 0 {
            return;
        }
        let cont = self.blockq.barriers.remove(b).cont;
        self.barrier_continue(now, cont, dev);
    }
}

#[cfg(test)]
mod tests {
    use crate::output::RunOutput;
    use crate::run::{run, RunInput};
    use vmio_core::{Ns, US};

    /// The flash model's FLUSH cost here (no command processor: a FLUSH is this alone).
    const FLUSH_LATENCY: Ns = 50 * US;
    /// Writes of the job, each followed by an fdatasync.
    const WRITES: u64 = 512;
    /// 512 sequential O_DIRECT writes of 4 KiB, each followed by an fdatasync.
    const JOB: &str = "[w]\nrw=write\nbs=4k\nioengine=psync\ndirect=1\nsize=2m\nfdatasync=1\n";

    /// `devices` flash devices (`flush_latency` 50 us and `caps`, e.g. "fua = false") under a
    /// `layout` volume, with `filesystem` ("" or an ext4 line) and one 256 MiB disk whose
    /// image has `preallocation`.
    fn stack(devices: usize, layout: &str, caps: &str, filesystem: &str, prealloc: &str) -> String {
        let mut s = String::new();
        for i in 0..devices {
            s += &format!(
                "[[device]]\nname = \"nv{i}\"\nmodel = \"flash\"\ncapacity = \"16g\"\n\
                 flush_latency = \"50us\"\n{caps}\n"
            );
        }
        let names: Vec<String> = (0..devices).map(|i| format!("\"nv{i}\"")).collect();
        s += &format!(
            "[[volume]]\nname = \"v\"\nlayout = \"{layout}\"\ndevices = [{}]\n{filesystem}\n\
             [[vm]]\nname = \"vm\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\n\
             offset = \"64m\"\nsize = \"256m\"\ncache = \"none\"\n\
             [vm.disk.image]\npreallocation = \"{prealloc}\"\n\
             [vm.disk.queue]\nwake_spread = 0\n",
            names.join(", ")
        );
        s
    }

    const EXT4: &str = "filesystem = \"ext4\"";

    fn sim(stack_text: &str) -> RunOutput {
        run(&RunInput::texts(stack_text, JOB, 1)).unwrap_or_else(|e| panic!("{e}\n{stack_text}"))
    }

    /// (write commands, FLUSH commands) the devices served, summed.
    fn commands(o: &RunOutput) -> (u64, u64) {
        let d = &o.report.devices;
        let writes = d.iter().map(|d| d.stats.write_ops).sum();
        (writes, d.iter().map(|d| d.stats.flush_ops).sum())
    }

    fn runtime(o: &RunOutput) -> Ns {
        o.report.jobs[0].runtime_ns
    }

    #[test]
    fn a_fua_write_on_a_device_with_a_write_cache_and_no_fua_costs_the_write_and_a_flush() {
        // Each fdatasync of a first write commits the host journal, whose commit block is a
        // FUA 4 KiB write: on a FUA device a_w + t; without FUA the block layer sends it
        // as the write then a FLUSH, a_w + t + flush_latency (flash.rs, closed forms).
        let fua = sim(&stack(1, "single", "", EXT4, "off"));
        let no_fua = sim(&stack(1, "single", "fua = false", EXT4, "off"));
        let commits = no_fua.report.host_fs[0].stats.journal_commits;
        assert_eq!(commits, WRITES);
        assert_eq!(fua.report.host_fs[0].stats.journal_commits, commits);
        let ((w1, f1), (w2, f2)) = (commands(&fua), commands(&no_fua));
        assert_eq!(w1, w2);
        assert_eq!(f2 - f1, commits);
        assert_eq!(runtime(&no_fua) - runtime(&fua), commits * FLUSH_LATENCY);
    }

    #[test]
    fn the_host_journals_commit_on_a_device_without_fua_costs_two_flushes_per_commit() {
        // The commit block's PREFLUSH, then its FUA as a post-flush; an overwrite's
        // fdatasync (no commit) stays one FLUSH.
        let first = sim(&stack(1, "single", "fua = false", EXT4, "off"));
        let over = sim(&stack(1, "single", "fua = false", EXT4, "full"));
        assert_eq!(first.report.host_fs[0].stats.journal_commits, WRITES);
        assert_eq!(over.report.host_fs[0].stats.journal_commits, 0);
        assert_eq!(commands(&first).1, 2 * WRITES);
        assert_eq!(commands(&over).1, WRITES);
    }

    #[test]
    fn without_a_write_cache_an_fdatasync_heavy_job_sends_no_flush_to_the_device() {
        // A block device: each fdatasync is a FLUSH the block layer completes at once.
        let cached = sim(&stack(1, "single", "", "", "off"));
        let through = sim(&stack(1, "single", "write_cache = false", "", "off"));
        assert_eq!(commands(&cached), (WRITES, WRITES));
        assert_eq!(commands(&through), (WRITES, 0));
        assert_eq!(runtime(&cached) - runtime(&through), WRITES * FLUSH_LATENCY);
        // An image on ext4: the journal commits, their PREFLUSH and FUA dropped as well.
        let fs = sim(&stack(1, "single", "write_cache = false", EXT4, "off"));
        assert_eq!(fs.report.host_fs[0].stats.journal_commits, WRITES);
        assert_eq!(commands(&fs).1, 0);
    }

    #[test]
    fn a_fua_write_on_raid0_pays_the_post_flush_on_the_member_it_lands_on() {
        // md raid0: the PREFLUSH goes to both members, the FUA commit block to the one
        // member its chunk maps to, which without FUA adds one post-flush.
        let fua = sim(&stack(2, "raid0", "", EXT4, "off"));
        let no_fua = sim(&stack(2, "raid0", "fua = false", EXT4, "off"));
        let commits = no_fua.report.host_fs[0].stats.journal_commits;
        assert_eq!(commits, WRITES);
        assert_eq!(commands(&fua).1, 2 * commits);
        assert_eq!(commands(&no_fua).1, 3 * commits);
        assert_eq!(commands(&fua).0, commands(&no_fua).0);
        assert_eq!(runtime(&no_fua) - runtime(&fua), commits * FLUSH_LATENCY);
    }
}
