//! The guest kernel driver: the simulator's side of vmio-core's guest policy
//! ([`vmio_core::guest::os::GuestOs`]: the VM's page cache, its ext4 filesystems and their
//! JBD2 journals). The policy decides; this file carries its actions out in virtual time, in
//! the order the policy emitted them. One guest per VM whose jobs need one (buffered block
//! I/O or files); direct block I/O on a disk without a filesystem never comes here.
//!
//! ```text
//! jobs.rs app_issue(op)   → an App slot; policy.on_app(app, op)
//! actions:
//!   Io { disk, op, range, token } → guest_issue on the VM's virtual disk (guest.rs), origin
//!                                   the guest: its completion → policy.on_done(token)
//!   Flush { disk, token }         → a FLUSH on the virtual disk, likewise
//!   Copy { req: app, bytes }      → GuestCopy at max(now, copy_busy) + bytes / copy_rate
//!                                   (the VM's memory bus) → policy.on_copied(app)
//!   Complete { req: app }         → jobs.rs app_done (statistics, the job's next step)
//!   Timer { at }                  → GuestTimer(vm) at `at` → policy.on_timer
//! ```
//!
//! The Io and Flush actions of one call are one plug of the guest's block layer (guest.rs,
//! vmio_core::guest::blk): a writeback pass, a read-ahead, a JBD2 commit's log writes are
//! each submitted under blk_start_plug in Linux. The plug is flushed before a Complete (the
//! application's call returns) and after the last action.

use super::breakdown::Parts;
use super::event::Event;
use super::guest::Origin;
use super::Sim;
use vmio_core::cache::{Action, Token};
use vmio_core::guest::os::{AppOp, GuestOs, GuestStats};
use vmio_core::request::Op;
use vmio_core::slab::Slab;
use vmio_core::units::transfer_ns;
use vmio_core::Ns;

/// An application operation in flight in a guest.
pub(super) struct App {
    pub(super) job: usize,
    pub(super) vm: u32,
    /// For the job's statistics: the direction (Flush for an fsync, None for an operation
    /// without data) and the bytes.
    pub(super) op: Option<Op>,
    pub(super) len: u64,
    pub(super) issue_ns: Ns,
    /// The workload thread of a file step.
    pub(super) tag: Option<u32>,
    /// The parts of the block request whose completion released it, in `Guests::below`
    /// (breakdown.rs; [`NO_PARTS`]: none did).
    pub(super) bd: u32,
}

/// An operation no block request released (yet).
pub(super) const NO_PARTS: u32 = u32::MAX;

/// One VM's guest.
pub(super) struct GuestVm {
    pub(super) os: GuestOs,
    copy_rate: u64,
    copy_busy: Ns,
}

impl GuestVm {
    pub(super) fn new(os: GuestOs, copy_rate: u64) -> Self {
        GuestVm {
            os,
            copy_rate,
            copy_busy: 0,
        }
    }
}

/// The guests of the VMs (None: the VM needs none) and the operations in flight.
#[derive(Default)]
pub(super) struct Guests {
    pub(super) vms: Vec<Option<GuestVm>>,
    pub(super) apps: Slab<App>,
    /// The parts of the block requests that released operations in flight (App::bd).
    below: Slab<Parts>,
    /// Action buffers: a completion carried out inside `guest_actions` may start the job's
    /// next operation, which needs a buffer of its own (a pool, so none is allocated per
    /// request).
    pool: Vec<Vec<Action>>,
}

impl Guests {
    pub(super) fn new(vms: Vec<Option<GuestVm>>) -> Self {
        Guests {
            vms,
            apps: Slab::new(),
            below: Slab::new(),
            pool: Vec::new(),
        }
    }

    pub(super) fn stats(&self) -> Vec<Option<GuestStats>> {
        self.vms
            .iter()
            .map(|g| g.as_ref().map(|g| g.os.stats()))
            .collect()
    }
}

impl Sim {
    /// Call VM `vm`'s guest with an action buffer from the pool, then carry out its actions.
    /// `below`: the parts of the block request whose completion the guest answers.
    fn drive(
        &mut self,
        now: Ns,
        vm: usize,
        below: Option<&Parts>,
        call: impl FnOnce(&mut GuestOs, &mut Vec<Action>),
    ) {
        let mut out = self.guests.pool.pop().unwrap_or_default();
        let g = self.guests.vms[vm].as_mut().expect("the VM has a guest");
        call(&mut g.os, &mut out);
        self.guest_actions(now, vm, &mut out, below);
        self.guests.pool.push(out);
    }

    /// Job `j` asks its VM's guest for `op`.
    pub(super) fn app_issue(&mut self, now: Ns, app: App, op: AppOp) {
        let vm = app.vm as usize;
        let id = self.guests.apps.insert(app) as u32;
        self.drive(now, vm, None, |os, out| os.on_app(now, id, op, out));
    }

    /// A virtual-disk request the guest asked for completed.
    pub(super) fn guest_os_done(&mut self, now: Ns, vm: usize, token: Token, parts: &Parts) {
        self.drive(now, vm, Some(parts), |os, out| os.on_done(now, token, out));
    }

    pub(super) fn guest_copy_done(&mut self, now: Ns, app: usize) {
        let vm = self.guests.apps.get(app).vm as usize;
        self.drive(now, vm, None, |os, out| os.on_copied(now, app as u32, out));
    }

    pub(super) fn guest_timer(&mut self, now: Ns, vm: usize) {
        self.drive(now, vm, None, |os, out| os.on_timer(now, out));
    }

    /// Carry out the guest's actions (the buffer is empty afterwards): the requests of one
    /// call are one plug (guest.rs), flushed before an operation completes and at the end.
    /// `below`: the parts an operation completed or copied now takes (breakdown.rs).
    fn guest_actions(&mut self, now: Ns, vm: usize, out: &mut Vec<Action>, below: Option<&Parts>) {
        let base = self.disk_base[vm];
        self.plug_start();
        for a in out.drain(..) {
            match a {
                Action::Io {
                    disk,
                    op,
                    offset,
                    len,
                    token,
                    ..
                } => self.guest_issue(
                    now,
                    Origin::Guest {
                        vm: vm as u32,
                        token,
                    },
                    base + disk as usize,
                    op,
                    offset,
                    len,
                ),
                Action::Flush { disk, token } => self.guest_issue(
                    now,
                    Origin::Guest {
                        vm: vm as u32,
                        token,
                    },
                    base + disk as usize,
                    Op::Flush,
                    0,
                    0,
                ),
                Action::Copy { req, bytes, .. } => {
                    if let Some(p) = below {
                        let g = &mut self.guests;
                        let app = g.apps.get(req as usize);
                        match app.bd {
                            NO_PARTS => app.bd = g.below.insert(*p) as u32,
                            i => *g.below.get(i as usize) = *p,
                        }
                    }
                    let g = self.guests.vms[vm].as_mut().expect("the VM has a guest");
                    let t = now.max(g.copy_busy) + transfer_ns(bytes, g.copy_rate);
                    g.copy_busy = t;
                    self.q.push(t, Event::GuestCopy(req as usize).pack());
                }
                Action::Complete { req } => {
                    // The application's call returns: blk_finish_plug. What it does next
                    // is a submission of its own.
                    self.plug_finish(now);
                    let app = self.guests.apps.remove(req as usize);
                    let copied = match app.bd {
                        NO_PARTS => None,
                        i => Some(self.guests.below.remove(i as usize)),
                    };
                    self.app_done(now, app, below.or(copied.as_ref()));
                    self.plug_start();
                }
                Action::Timer { at } => {
                    self.q.push(at.max(now), Event::GuestTimer(vm).pack());
                }
            }
        }
        self.plug_finish(now);
    }
}
