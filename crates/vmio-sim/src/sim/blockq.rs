//! The block queue and the devices: a disk range is mapped through its volume to per-device
//! requests, which wait in each device's request queue ([`vmio_core::blockq::DeviceQueue`]:
//! the I/O scheduler, flushes bypassing it, the queue depth, the scheduler's wake-ups) until
//! the device has a free slot; a barrier counts the device requests of one host operation and
//! hands its continuation back to the host cache driver.
//!
//! ```text
//! submit_range(disk, op, off, len, b): volume.map(disk offset + off) → pieces;
//!     barrier b += pieces; each piece → device prefetch hint, queue.insert;
//!     pump each touched device once
//! flush_volume(disk, cont): one FLUSH CACHE per device of the disk's volume (queue.insert),
//!     one barrier
//! pump(dev): queue.dispatch → device submit (the slot is the device tag);
//!     DevWake at the device's next completion, SchedWake at queue.wakeup_to_arm
//! DevWake: device completions → queue.complete; every tag (merged requests too) →
//!     barrier_done; pump
//! SchedWake: queue.woke; pump
//! barrier_done(b): remaining -= 1; at 0 → host cache driver's barrier_continue(cont)
//! ```
//!
//! Sources: Linux block/blk-mq.c and block/blk-flush.c through [`vmio_core::blockq`], md/dm
//! for the volume layouts (the core crate's [`vmio_core::volume`]), the schedulers of
//! [`vmio_core::sched`].

use super::event::Event;
use super::hostcache::Cont;
use super::{Sim, SimError};
use crate::device::{build_device_seeded, DevCmd, Device};
use vmio_core::blockq::DeviceQueue;
use vmio_core::request::{DevIo, Op};
use vmio_core::sched;
use vmio_core::slab::Slab;
use vmio_core::stack::Stack;
use vmio_core::volume::{self, Piece, VolumeLayout};
use vmio_core::Ns;

pub(super) struct DevState {
    pub(super) model: Box<dyn Device>,
    queue: DeviceQueue,
    /// The device completion a DevWake event is pushed for.
    wake_at: Option<Ns>,
}

pub(super) struct VolState {
    pub(super) name: String,
    pub(super) layout: Box<dyn VolumeLayout>,
    devices: Vec<usize>,
    pub(super) read_ahead_bytes: u64,
}

/// Device requests of one host operation still outstanding, and what to do after the last.
pub(super) struct Barrier {
    pub(super) remaining: u32,
    pub(super) cont: Cont,
}

/// The block layer's state: devices, volumes and the barriers in flight.
pub(super) struct BlockQueue {
    pub(super) devs: Vec<DevState>,
    pub(super) vols: Vec<VolState>,
    pub(super) barriers: Slab<Barrier>,
    pieces: Vec<Piece>,
    done: Vec<u64>,
}

impl BlockQueue {
    pub(super) fn new(devs: Vec<DevState>, vols: Vec<VolState>) -> Self {
        BlockQueue {
            devs,
            vols,
            barriers: Slab::new(),
            pieces: Vec::new(),
            done: Vec::new(),
        }
    }
}

/// The stack's devices, each seeded from the run seed and its name, with its scheduler.
pub(super) fn build_devices(stack: &Stack, seed: u64) -> Result<Vec<DevState>, SimError> {
    let weights: Vec<u32> = stack.vms.iter().map(|v| v.weight).collect();
    let mut devs = Vec::new();
    for d in &stack.devices {
        let dev_seed = vmio_core::rng::Rng::derive(seed, &format!("device/{}", d.name)).next_u64();
        let model =
            build_device_seeded(&d.name, &d.model, d.profile.as_deref(), &d.params, dev_seed)
                .map_err(|source| SimError::Device {
                    file: stack.file.clone(),
                    source,
                })?;
        let queue = DeviceQueue::new(
            sched::build(&stack.scheduler, &weights),
            model.queue_depth(),
        );
        devs.push(DevState {
            model,
            queue,
            wake_at: None,
        });
    }
    Ok(devs)
}

/// The stack's volumes over `devs`, with their read-ahead (the layout's default unless set).
pub(super) fn build_volumes(stack: &Stack, devs: &[DevState]) -> Result<Vec<VolState>, SimError> {
    let mut vols = Vec::new();
    for v in &stack.volumes {
        let caps: Vec<u64> = v
            .devices
            .iter()
            .map(|&i| devs[i].model.capacity_bytes())
            .collect();
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
        let owner = d.owner;
        let vol = &self.blockq.vols[d.volume];
        let mut pieces = std::mem::take(&mut self.blockq.pieces);
        pieces.clear();
        vol.layout.map(d.offset_bytes + off, len, &mut pieces);
        self.blockq.barriers.get(b).remaining += pieces.len() as u32;
        for p in &pieces {
            let dev = self.blockq.vols[self.disks[disk].volume].devices[p.device];
            let io = DevIo {
                tag: b as u64,
                op,
                offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
                fua: false,
                sync,
                owner,
                queued_ns: now,
                merged: Vec::new(),
            };
            let d = &mut self.blockq.devs[dev];
            d.model.prefetch(op, p.offset_bytes, p.len_bytes);
            d.queue.insert(now, io);
        }
        let vol = self.disks[disk].volume;
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
        let model = &mut d.model;
        d.queue.dispatch(now, |slot, io| {
            model.submit(
                now,
                DevCmd {
                    tag: slot as u64,
                    op: io.op,
                    offset_bytes: io.offset_bytes,
                    len_bytes: io.len_bytes,
                    fua: io.fua,
                },
            )
        });
        if let Some(t) = d.model.next_event_ns() {
            if d.wake_at.is_none_or(|w| t < w || w < now) {
                d.wake_at = Some(t);
                self.q.push(t, Event::DevWake(dev).pack());
            }
        }
        if let Some(t) = d.queue.wakeup_to_arm(now) {
            self.q.push(t, Event::SchedWake(dev).pack());
        }
    }

    pub(super) fn dev_wake(&mut self, now: Ns, dev: usize) {
        let mut done = std::mem::take(&mut self.blockq.done);
        done.clear();
        {
            let d = &mut self.blockq.devs[dev];
            if d.wake_at == Some(now) {
                d.wake_at = None;
            }
            d.model.advance(now, &mut done);
        }
        for &slot in &done {
            let io = self.blockq.devs[dev].queue.complete(now, slot as usize);
            for tag in io.tags() {
                self.barrier_done(now, tag as usize);
            }
        }
        self.blockq.done = done;
        self.pump(now, dev);
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
