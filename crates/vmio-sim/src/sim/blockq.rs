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
//! device d:   a queue, its hardware h, its member index m, its region's start on h
//! submit_range(disk, op, off, len, b): volume.map(disk offset + off) → pieces;
//!     barrier b += pieces; each piece → prefetch hint, queue.insert;
//!     pump each touched device once
//! flush_volume(disk, cont): one FLUSH CACHE per device of the disk's volume (queue.insert),
//!     one barrier
//! pump(d): queue.dispatch → model(h).submit(tag = m << 32 | slot, offset = start + offset);
//!     DevWake(h) at the model's next completion, SchedWake(d) at queue.wakeup_to_arm
//! DevWake(h): model completions → member tag >> 32, slot tag & (2^32 - 1) → queue.complete;
//!     every tag (merged requests too) → barrier_done; pump every member of h
//! SchedWake(d): queue.woke; pump(d)
//! barrier_done(b): remaining -= 1; at 0 → host cache driver's barrier_continue(cont)
//! ```
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

use super::event::Event;
use super::{Sim, SimError};
use crate::device::{build_device_seeded, Busy, DevCmd, Device, DeviceStats};
use vmio_core::blockq::DeviceQueue;
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
        });
    }
    Ok((hws, devs))
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
            let io = DevIo {
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
            d.queue.insert(now, io);
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

    /// FLUSH CACHE to every device of the disk's volume, then continue with `cont`.
    pub(super) fn flush_volume(&mut self, now: Ns, disk: usize, cont: Cont) {
        let vol = self.disks[disk].volume;
        let devices = self.blockq.vols[vol].devices.clone();
        let b = self.blockq.barriers.insert(Barrier {
            remaining: devices.len() as u32,
            cont,
        });
        for dev in devices {
            self.blockq.devs[dev].queue.insert(
                now,
                DevIo {
                    tag: b as u64,
                    op: Op::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                    fua: false,
                    sync: true,
                    owner: self.disks[disk].owner,
                    queued_ns: now,
                    merged: Vec::new(),
                },
            );
            self.pump(now, dev);
        }
    }

    pub(super) fn pump(&mut self, now: Ns, dev: usize) {
        let d = &mut self.blockq.devs[dev];
        let h = &mut self.blockq.hws[d.hw];
        let model = &mut h.model;
        let (tag_base, start, busy) = (d.tag_base, d.start_bytes, &mut d.sent_busy);
        d.queue.dispatch(now, |slot, io| {
            busy.start(now);
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
        }
        if let Some(t) = d.queue.wakeup_to_arm(now) {
            self.q.push(t, Event::SchedWake(dev).pack());
        }
    }

    /// Hardware `hw` has completions due: each goes back to its device's queue, then every
    /// queue of the hardware may dispatch.
    pub(super) fn dev_wake(&mut self, now: Ns, hw: usize) {
        let mut done = std::mem::take(&mut self.blockq.done);
        done.clear();
        {
            let h = &mut self.blockq.hws[hw];
            if h.wake_at == Some(now) {
                h.wake_at = None;
            }
            h.model.advance(now, &mut done);
        }
        for &tag in &done {
            let dev = self.blockq.hws[hw].members[(tag >> MEMBER_SHIFT) as usize];
            let d = &mut self.blockq.devs[dev];
            let io = d.queue.complete(now, (tag & SLOT_MASK) as usize);
            d.sent.count(io.op, io.len_bytes);
            d.sent_busy.end(now);
            for tag in io.tags() {
                self.barrier_done(now, tag as usize);
            }
        }
        self.blockq.done = done;
        for m in 0..self.blockq.hws[hw].members.len() {
            let dev = self.blockq.hws[hw].members[m];
            self.pump(now, dev);
        }
    }

    pub(super) fn sched_wake(&mut self, now: Ns, dev: usize) {
        self.blockq.devs[dev].queue.woke(now);
        self.pump(now, dev)
    }

    pub(super) fn barrier_done(&mut self, now: Ns, b: usize) {
        let bar = self.blockq.barriers.get(b);
        bar.remaining -= 1;
        if bar.remaining > 0 {
            return;
        }
        let cont = self.blockq.barriers.remove(b).cont;
        self.barrier_continue(now, cont);
    }
}
