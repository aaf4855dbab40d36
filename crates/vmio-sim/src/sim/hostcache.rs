//! The host cache driver: the simulator's side of vmio-core's host-cache policy
//! ([`vmio_core::cache::HostCache`]: the Linux page cache under QEMU's cache modes,
//! [`vmio_core::cache::linux`], under PDC's journal bypass, [`vmio_core::cache::pdc`], when
//! a disk has `cache = "pdc"`). The policy decides; this file carries its actions out in
//! virtual time, in the order the policy emitted them.
//!
//! ```text
//! SubmitDone(r)        → policy.on_request(r)
//! HostDone(r)          → host_finish if the Copy completes r, else policy.on_copied(r)
//! WbTimer              → policy.on_timer
//! barrier of a token   → policy.on_done(token)      (every device piece of an Io or Flush)
//! actions:
//!   Io { disk, op, range, sync, token } → a barrier for token; submit_range (block queue);
//!                                         on a filesystem volume: the host filesystem
//!                                         driver (hostfs.rs), whose tokens come back there
//!   Flush { disk, token }               → flush_volume: FLUSH CACHE to the volume's devices
//!                                         (on a filesystem volume: its fdatasync, hostfs.rs)
//!   Copy { req, bytes, complete }       → HostDone at max(now, copy_busy) + bytes / copy_rate
//!   Complete { req }                    → host_finish (the VMM completes it to the guest)
//!   Timer { at }                        → WbTimer at `at`
//! ```
//!
//! Copies share the host's memory bus (`[page_cache] copy_rate`), so concurrent copies queue
//! behind each other. One action buffer is reused for every call: the policy never runs
//! while its actions are carried out (no action completes synchronously), so none is added
//! to the buffer while it is read.

use super::blockq::{Barrier, Cont};
use super::breakdown::DevTimes;
use super::event::Event;
use super::{Sim, SimError};
use vmio_core::cache::pdc::JournalDetector;
use vmio_core::cache::{self, Action, HostCacheStats, HostDisk, Request};
use vmio_core::stack::Stack;
use vmio_core::units::transfer_ns;
use vmio_core::Ns;

/// The host cache driver's state: the policy, the action buffer and the memory bus.
pub(super) struct HostCache {
    policy: Box<dyn cache::HostCache>,
    actions: Vec<Action>,
    /// Per request (engine slot): its copy in flight completes it (no policy call after).
    copy_completes: Vec<bool>,
    copy_rate: u64,
    copy_busy: Ns,
}

impl HostCache {
    /// The policy of the stack's `[page_cache]` (and `[pdc]` for `cache = "pdc"` disks) over
    /// the VM disks (in stack order).
    pub(super) fn new(stack: &Stack, disks: Vec<HostDisk>) -> Result<Self, SimError> {
        let spec = &stack.page_cache;
        let pdc = stack.pdc.clone().unwrap_or_default();
        let policy = cache::build_with(spec, &pdc, disks)
            .map_err(|e| SimError::Job(format!("{}: {e}", stack.file)))?;
        Ok(HostCache {
            policy,
            actions: Vec::new(),
            copy_completes: Vec::new(),
            copy_rate: spec.copy_rate_bps,
            copy_busy: 0,
        })
    }

    pub(super) fn stats(&self) -> HostCacheStats {
        self.policy.stats()
    }

    /// The journal detector of VM disk `disk` (stack order), if it is a PDC disk.
    pub(super) fn pdc(&self, disk: usize) -> Option<&JournalDetector> {
        self.policy.pdc(disk as u32)
    }
}

impl Sim {
    pub(super) fn host_start(&mut self, now: Ns, r: usize) {
        let v = self.guest.vreqs.get(r);
        let req = Request {
            id: r as u32,
            disk: v.disk as u32,
            op: v.op,
            offset: v.offset,
            len: v.host_len,
        };
        self.cache
            .policy
            .on_request(now, req, &mut self.cache.actions);
        self.host_act(now, None);
    }

    pub(super) fn after_copy(&mut self, now: Ns, r: usize) {
        if self.cache.copy_completes[r] {
            return self.host_finish(now, r);
        }
        self.cache
            .policy
            .on_copied(now, r as u32, &mut self.cache.actions);
        self.host_act(now, None);
    }

    pub(super) fn wb_timer(&mut self, now: Ns) {
        self.cache.policy.on_timer(now, &mut self.cache.actions);
        self.host_act(now, None);
    }

    /// All device requests of a barrier completed: hand its token back to the policy.
    /// `dev`: the times of the device request that completed the barrier (breakdown.rs).
    pub(super) fn barrier_continue(&mut self, now: Ns, cont: Cont, dev: Option<DevTimes>) {
        if vmio_core::hostfs::is_fs_token(cont) {
            return self.fs_done(now, cont, dev);
        }
        self.cache
            .policy
            .on_done(now, cont, &mut self.cache.actions);
        self.host_act(now, dev);
    }

    /// Carry out the policy's actions in order, then empty the buffer for the next call.
    /// `dev`: the device times of the barrier whose completion the policy answered, given to
    /// each request it completes or copies (breakdown.rs).
    #[inline(always)]
    fn host_act(&mut self, now: Ns, dev: Option<DevTimes>) {
        let mut i = 0;
        while let Some(&a) = self.cache.actions.get(i) {
            match a {
                Action::Io {
                    disk,
                    op,
                    offset,
                    len,
                    sync,
                    token,
                } => {
                    if self.hostfs.on_fs(disk as usize) {
                        self.fs_io(now, disk, op, offset, len, sync, token);
                    } else {
                        let b = self.blockq.barriers.insert(Barrier {
                            remaining: 0,
                            cont: token,
                        });
                        self.submit_range(now, disk as usize, op, offset, len, b, sync);
                    }
                }
                Action::Flush { disk, token } => {
                    if self.hostfs.on_fs(disk as usize) {
                        self.fs_flush(now, disk, token);
                    } else {
                        self.flush_volume(now, disk as usize, token);
                    }
                }
                Action::Copy {
                    req,
                    bytes,
                    complete,
                } => {
                    let r = req as usize;
                    if let Some(d) = dev {
                        self.guest.vreqs.get(r).bd.device(d);
                    }
                    if self.cache.copy_completes.len() <= r {
                        self.cache.copy_completes.resize(r + 1, false);
                    }
                    self.cache.copy_completes[r] = complete;
                    let t = self.copy_done(now, bytes);
                    self.q.push(t, Event::HostDone(req as usize).pack());
                }
                Action::Complete { req } => {
                    if let Some(d) = dev {
                        self.guest.vreqs.get(req as usize).bd.device(d);
                    }
                    self.host_finish(now, req as usize)
                }
                Action::Timer { at } => self.q.push(at, Event::WbTimer.pack()),
            }
            i += 1;
        }
        self.cache.actions.clear();
    }

    /// A copy between the page cache and guest memory: the host's memory bus moves
    /// `copy_rate` bytes/s in all, so concurrent copies queue behind each other.
    fn copy_done(&mut self, now: Ns, len: u64) -> Ns {
        let t = now.max(self.cache.copy_busy) + transfer_ns(len, self.cache.copy_rate);
        self.cache.copy_busy = t;
        t
    }
}

#[cfg(test)]
mod tests {
    use crate::run::{run, run_json, RunInput};

    /// A RAM disk behind a 4 MiB page cache (1024 pages).
    fn stack(eviction: &str) -> String {
        format!(
            "[[device]]\nname = \"ram\"\nmodel = \"ram\"\n[[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"ram\"]\n\
             [page_cache]\nmemory = \"4m\"\neviction = \"{eviction}\"\n\
             [[vm]]\nname = \"vm\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\nsize = \"1g\"\ncache = \"writeback\"\n"
        )
    }

    /// Uniform random 4 KiB reads over 8 MiB (2048 pages): twice the cache. norandommap:
    /// independent draws (fio's random map would read each block once per pass).
    const RANDREAD: &str = "[j]\nrw=randread\nnorandommap=1\nbs=4k\nioengine=libaio\ndirect=1\niodepth=4\nsize=8m\nruntime=1\ntime_based\n";

    fn input<'a>(stack_text: &'a str) -> RunInput<'a> {
        RunInput::texts(stack_text, RANDREAD, 3)
    }

    #[test]
    fn lru_and_clock_both_hit_the_cached_share_of_uniform_random_reads_but_evict_differently() {
        // Under uniform random references every demand-paging policy hits C/N of the reads in
        // steady state (here 1024 / 2048 = 1/2); the pages they keep differ.
        let mut hits = Vec::new();
        for eviction in ["clock", "lru"] {
            let s = stack(eviction);
            let pc = run(&input(&s)).unwrap().report.page_cache;
            let ratio = pc.hit_pages as f64 / (pc.hit_pages + pc.miss_pages) as f64;
            assert!((ratio - 0.5).abs() < 0.05, "{eviction}: hit ratio {ratio}");
            assert!(pc.evicted_pages > 20_000, "{eviction}: {pc:?}");
            hits.push(pc.hit_pages);
        }
        assert_ne!(hits[0], hits[1]);
    }

    #[test]
    fn a_vmio_sim_run_with_lru_shows_it_in_the_effective_stack() {
        let s = stack("lru");
        let j = run_json(&input(&s)).unwrap();
        assert!(j.contains("\"eviction\": \"lru\""), "{j}");
        let s = stack("clock");
        assert!(!run_json(&input(&s)).unwrap().contains("\"eviction\""));
    }

    #[test]
    fn an_unknown_eviction_policy_is_refused_with_the_accepted_names() {
        let s = stack("fifo");
        let e = run(&input(&s)).err().unwrap().to_string();
        assert_eq!(
            e,
            "stack.toml: page_cache.eviction: 'fifo' is not valid; accepted: clock, lru"
        );
    }
}
