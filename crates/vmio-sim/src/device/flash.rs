//! A generic flash/NVMe block device as the host sees it: `units` parallel units (dies,
//! channels or a backend's servers) that each serve one command at a time, a data pipe per
//! direction (the controller's read and write bandwidth) or one pipe for both (`duplex =
//! "half"`), a fixed set-up per command on its pipe (`transfer_overhead`), one host link
//! shared by both directions, and an optional write buffer that acknowledges writes before
//! their unit work.
//! No FTL, no garbage collection: the few parameters are what `vmio calibrate` fits from fio
//! measurements of a real disk (docs/validation.md), so every figure has a closed form.
//!
//! **Sources.** Defaults (profile `datacenter-nvme`): round figures of the Intel SSD DC
//! P4510 2 TB (U.2, PCIe 3.1 x4, NVMe; Intel's product brief, 2018, as recalled: not checked
//! against a stored copy): sequential read up to
//! 3,200 MB/s and write up to 2,000 MB/s (`read_rate` 3 GB/s, `write_rate` 2 GB/s), typical
//! 4 KiB QD1 latency 77 µs read and 18 µs write (`read_latency` 80 µs, `write_latency`
//! 20 µs; a write's latency is a program into the drive's power-protected DRAM, hence the
//! short figure), 4 KiB random read up to 637k IOPS (`units` = 637,000 × 80 µs ≈ 51,
//! rounded to 50: an estimate of the parallelism that gives the datasheet's random-read
//! rate; the datasheet's 81.5k random-write IOPS is a steady state under garbage
//! collection, which this model does not have). `link_rate`: PCIe 3.0 x4, 8 GT/s × 4 lanes
//! × 128/130 = 3.94 GB/s, rounded to 4 GB/s (TLP overhead ignored). `capacity` 256 GiB,
//! `queue_depth` 128 (BLKDEV_DEFAULT_RQ, as the RAM disk), `flush_latency` 20 µs (an estimate:
//! one command's round trip through the controller, as a write's), `write_buffer` 0 (the
//! drive's DRAM is what `write_latency` already stands for), `write_cache` and `fua` true (a
//! volatile write cache, as Linux's NVMe driver then advertises FUA with it; a drive with
//! power-loss protection such as the P4510 reports no volatile cache, as recalled, and is
//! `write_cache = false`: the block layer then sends it no FLUSH, and a `write_buffer` stands
//! for power-protected memory). `vmio calibrate` writes both from the target's sysfs. Command semantics follow NVM
//! Express Base Specification 2.0: FLUSH commits the volatile write cache's data of writes
//! completed before it (section 7.1, "Flush command"); a write with FUA completes only once
//! its data is on non-volatile media ("Force Unit Access" of the Write command); Linux sets
//! these in drivers/nvme/host/core.c (`nvme_setup_flush`, `nvme_setup_rw`: REQ_FUA →
//! NVME_RW_FUA, `nvme_setup_discard`: a TRIM becomes a Dataset Management deallocate).
//!
//! `duplex` (default `full`: the datasheet's read and write rates are separate figures, and
//! a PCIe link is full duplex) and `transfer_overhead` (default 0) are there for what `vmio
//! calibrate` measures. `half`: reads and writes share one data pipe, a read holding it
//! `L / read_rate`, a write `L / write_rate`, as on media where a die either reads or
//! programs (ONFI 4.x: a LUN executes one array operation at a time, and a channel's data bus
//! carries one direction at a time; as recalled, not checked against a stored copy) or
//! behind a network block backend whose per-volume bandwidth budget counts reads and writes
//! together. `transfer_overhead`: each command's fixed set-up on its pipe before its bytes
//! move: the host's mapping of a request to a PRP list or SGL and its DMA set-up
//! (drivers/nvme/host/pci.c `nvme_map_data`; a virtio disk's descriptor chain,
//! drivers/block/virtio_blk.c `virtblk_add_req`) and the device's fetch of that list, or a
//! backend request's fixed cost; it caps a pipe at `1 / (c + L / rate)` commands a second,
//! which the rates alone (fitted on large requests) do not see at mid sizes. `turnaround`
//! (default 0; half duplex only): a busy pipe, after a transfer, waits this long before a
//! transfer in the other direction (an idle pipe has turned meanwhile), as a bus turnaround
//! or a die switching between reading and programming (an estimate of the mechanism; `vmio
//! calibrate` fitted it once from mixed loads and no longer does: FIFO turns on 2 p (1 - p)
//! of a saturated mix's commands overstated what this machine's disk lost at depth).
//!
//! `batch_overhead` and `command_overhead` (both default 0: no processor) put a serial
//! command processor in front of everything: it takes every command waiting for it as one
//! batch and is busy `batch_overhead + k × command_overhead` for a batch of k, after which
//! the batch's commands go on, in order. This is how a queue is served when notifications
//! are suppressed while the other side is busy: the virtio driver does not kick while the
//! device has not consumed what it was given, and the device processes every available
//! descriptor per notification (virtio 1.1, section 2.6.7 "Used Buffer Notification
//! Suppression" and 2.6.10 "Available Buffer Notification Suppression"; QEMU's
//! hw/block/virtio-blk.c `virtio_blk_handle_vq` pops requests until the queue is empty, with
//! notifications off meanwhile: `virtio_queue_set_notification(vq, 0)`; Linux's
//! drivers/block/virtio_blk.c `virtio_queue_rqs` adds a plug's requests then kicks once);
//! an NVMe controller fetches every submission entry up to the doorbell it is rung with, and
//! interrupt coalescing (NVM Express Base 2.0, Feature 08h "Interrupt Coalescing") completes
//! several commands per interrupt. The batch's fixed cost is the notification, VM exit and
//! interrupt; the per-command cost is the descriptor's processing. What `vmio calibrate`
//! measured on a cloud disk here motivates it: 4 KiB random read latency grew from QD 1 on
//! (61 µs at QD1, 89 at QD2, 132 at QD4) while throughput kept rising to QD 32, which
//! parallel units behind a fixed per-command cost (a sharp knee) cannot give.
//!
//! **The processor's passes** (`batching`, default `snapshot`: the batch above, the
//! commands waiting when the processor starts, later ones waiting for the next batch). With
//! `drain`, the processor pops commands until its queue is empty: a command arriving during
//! a pass joins it, each command costs command_overhead and its transfer t(L, d) in the pass
//! (the pass moves the data of reads and of writes without a buffer: the pipes are the
//! pass), and the pass's commands all go on at its end to their units, then are done. This is
//! a synchronous VMM block engine, which serves every available descriptor with a blocking
//! read or write of the backing file, one after the other, and then signals the used ring
//! once (Firecracker's default `Sync` io_engine, docs/api_requests/block-io-engine.md: a
//! synchronous engine "based on blocking system calls", as read in a stored copy; the loop
//! itself: "Each direction's command cost" below), and QEMU's virtio-blk loop (hw/block/virtio-blk.c
//! `virtio_blk_handle_vq`: with notifications off it pops requests until
//! `virtio_queue_empty`). In a closed loop the q commands go round together, each pass
//! holding all of them, so the latency grows by k + t for every command in flight from the
//! first, where a pipe behind units (the snapshot's) queues only past the knee q = R0 / t.
//! A command's stream (below) starts as it arrives.
//!
//! ```text
//! a pass started at s by m commands:  ends at s + B + sum (k + t_i);  at its end, commands
//!     arrived meanwhile?  it goes on for the sum of their (k + t_j);  none: each command
//!     takes its unit (read: unit(end, a) -> done; write: unit(end, a_w) -> done)
//! closed loop (units >= q):  R(q) = B + q (k + t) + a + z + h,
//!     X = min(N / (a + z), q / (B + q (k + t) + a + z + h), q / (L / s + z + h))
//!     (a mix: the mean a and t; the last term only with a stream rate s)
//! ```
//!
//! What it answers for: a cloud virtual disk measured here (docs/validation.md), a
//! Firecracker guest's virtio disk, read 4 KiB at random in R(q) = 45 + 10.7 q us from QD 1
//! to QD 32 (within 6 %), and 16 KiB at about 15.9 us more per command in flight (QD 8 to 32):
//! a ramp from the first command whose slope grows with the size at about the read rate, which
//! a processor in front of units and pipes cannot give (its commands desynchronise: a knee).
//!
//! **Each direction's command cost** (`write_command_overhead` k_w, default: unset, a write
//! then costs `command_overhead` k as every other command). A write costs k_w on the
//! processor (in a batch, or in a pass besides its transfer), a read, a FLUSH or a TRIM k.
//! Source: Firecracker's virtio block device, as read in stored copies
//! (src/vmm/src/devices/virtio/block/virtio/worker.rs `process_queue`, request.rs
//! `Request::process`, io/sync_io.rs): one thread pops every available descriptor chain
//! (`pop_or_enable_notification`, which re-enables the notification only once the ring is
//! empty, so a request made available meanwhile is popped in the same loop), parses it and
//! serves it with the engine before popping the next; the default `Sync` engine serves a read
//! with a seek and a buffered `read_exact_volatile` of the backing file into guest memory and
//! a write with a seek and `write_all_volatile`, buffered or on the O_DIRECT file when the
//! buffer and offset are aligned (`direct_io_eligible`): two system calls down two
//! different host paths (a read finds its page in the host's page cache or reads it; a
//! write dirties it), so the per-command part of the pass differs by direction as its
//! per-byte part (`read_rate`, `write_rate`) does. Each served request is `add_used`, the
//! used ring's index is published once after the loop (`advance_used_ring_idx`: "Should
//! be called once after number of `add_used` calls") and one interrupt is raised for the
//! whole pass (`prepare_kick`, then `trigger`): the pass's commands complete together at its
//! end, which is what the draining pass above does (its commands go on together at its
//! end). `vmio calibrate` fits k from the loaded reads and k_w from the loaded writes
//! (python/vmio/real/calibrate.py, "write_command_overhead").
//!
//! ```text
//! process_queue():                                  (one thread, one pass)
//!     while head = pop_or_enable_notification():    (arrivals during the pass join it)
//!         read:  seek; read_exact_volatile(L)        k   + c + L / read_rate
//!         write: seek; write_all_volatile(L)         k_w + c + L / write_rate
//!         add_used(head)
//!     advance_used_ring_idx(); one interrupt         (the pass's commands go on together)
//! closed loop of one direction d, drain:  R(q) = B + q (k_d + t_d) + a_d + z + h
//! a mix of read share p:  k_m = p k + (1 - p) k_w   (as a_m and t_m)
//! ```
//!
//! **Reads first** (`read_priority`, default false: one FIFO for both directions). Commands
//! waiting for the ring's descriptors enter it reads first ("The ring"), and the command
//! processor serves the reads waiting for it before the writes: a batch (a pass)
//! takes only the waiting reads while any wait, and a draining pass of writes ends as soon as
//! a read waits, its writes going on while the reads' pass runs. Sources: MQSim's transaction
//! scheduling unit (CMU-SAFARI/MQSim, src/ssd/TSU_OutofOrder.cpp, `Schedule`: for each idle
//! chip, `service_read_transaction`, and only when it serves nothing
//! `service_write_transaction`, as read in a stored copy), the read-first scheduling of SSD
//! firmware it models; Linux's mq-deadline (block/mq-deadline.c: reads are dispatched ahead
//! of writes until writes have been starved `writes_starved` times), which a guest applies
//! whenever its virtio ring is full and requests wait in the scheduler (a virtio-blk device
//! without VIRTIO_RING_F_INDIRECT_DESC takes one ring descriptor per data segment, and
//! Linux's drivers/block/virtio_blk.c `virtblk_probe` halves the queue depth then: this
//! machine's disk has 128 tags and max_segments 254 for a ring of 256, so a request of a few
//! hundred KiB fills it).
//!
//! ```text
//! a batch starts:  reads wait?  take the waiting reads (in order), the rest wait on
//!                  no:          take everything waiting (as without read_priority)
//! a draining pass of reads ends:   reads arrived meanwhile join it; writes wait
//! a draining pass of writes ends:  a read waits?  the pass ends (its writes go on)
//!                                  no:            what arrived joins it (all writes)
//! a write W at the head of a pass, a write W' and a read R arriving during it (drain):
//!     R done at  T1 + B + k + t_r + a_r,  T1 = B + k + t_w (W's pass alone)
//!     W' done at T1 + B + k + t_r + B + k + t_w + a_w   (FIFO: both at T1 + 2 k + t_w + t_r + a)
//! ```
//!
//! A closed loop's throughput and its mean latency over both directions are the order's
//! business only through the overlap it leaves (Little's law); what it moves is each
//! direction's latency, which the closed forms do not give: `vmio calibrate` chooses it by
//! simulating the battery's mixed points.
//!
//! **The ring** (`ring_descriptors` R, default 0: no limit; `segment_size` S, default 4
//! KiB). A virtio disk's requests sit in a ring of R descriptors: a request takes one for
//! its header, one for its status and one per data segment (virtio 1.1, section 5.2.6, the
//! block request's layout; without VIRTIO_RING_F_INDIRECT_DESC each segment is a ring
//! descriptor, section 2.6.5); a guest's buffer pages are not contiguous in guest memory, so
//! a segment is a page (Linux's drivers/block/virtio_blk.c `virtblk_probe` then also halves
//! the queue depth, and limits a request to R - 2 segments). A request the ring cannot hold
//! stays with the guest (`virtio_queue_rq`: `virtblk_add_req` fails with -ENOSPC and the
//! request is returned with BLK_STS_DEV_RESOURCE; blk-mq keeps it at the head of its
//! dispatch list and runs the queue again when a completion frees descriptors); the ones
//! behind it wait in the I/O scheduler, whose mq-deadline dispatches reads first
//! (`read_priority`: the next to enter is the first waiting read). As read from sysfs on this
//! machine's disk: 128 tags, max_segments 254, no feature bit 28 (INDIRECT_DESC): R = 256, so
//! one 1 MiB request fills the ring, where 40 requests of 4 KiB fit.
//!
//! ```text
//! need(cmd) = min(2 + ceil(L / S), R)
//! submit:   wait in line; admit
//! complete: free += need(cmd); admit
//! admit:    loop: cmd = the head that found too few before, else the first waiting read
//!           (read_priority) or the first waiting command; need(cmd) > free? it becomes the
//!           head, stop; else free -= need(cmd) and it enters the device (processor, units)
//! ```
//!
//! `ring_scheduler = "mq-deadline"` (default `fifo`: the line above) puts blk-mq and the
//! guest's mq-deadline in front of the ring: vmio-core's `sched::mq_deadline` (Linux's
//! block/mq-deadline.c, `dd_dispatch_request`: a batch goes on in sector order up to
//! `fifo_batch` 16; a new batch takes reads unless writes wait and were passed over
//! `writes_starved` 2 times, from the direction's FIFO head when it expired, `read_expire`
//! 500 ms, `write_expire` 5 s), the commands inserted unmerged (they were issued apart), and
//! blk-mq's hardware queue (block/blk-mq-sched.c `__blk_mq_sched_dispatch_requests`,
//! `__blk_mq_do_dispatch_sched`; block/blk-mq.c `blk_mq_dispatch_rq_list`,
//! `blk_mq_update_dispatch_busy`; drivers/block/virtio_blk.c `virtio_queue_rq` stops the
//! queue on -ENOSPC, `virtblk_done` restarts it). A FLUSH bypasses the scheduler to the
//! dispatch list (block/blk-flush.c).
//!
//! ```text
//! submit:    insert in mq-deadline (a FLUSH: the dispatch list's tail); run
//! complete:  free += need(cmd) for each; the queue restarts; run
//! run:       stopped? nothing. dispatch list non-empty? send it; not all entered: stop
//!            loop: take from mq-deadline 1 request (busy > 0) or up to nr_requests 256
//!                  (busy = 0), each its next dispatch; none: stop; send them; not all: stop
//! send list: each in order: need > free? the queue stops, it and the rest go to the
//!            dispatch list's tail, busy = (7 busy + 16) / 8, false; else it enters
//!            all entered: busy = 7 busy / 8, true
//! ```
//!
//! While requests keep finding the ring full `busy` stays above 0 and the order is
//! mq-deadline's one request at a time; once two dispatches in a row find room (busy 2 -> 1
//! -> 0) everything the scheduler holds goes to the dispatch list at once, whose order is
//! then fixed, later arrivals waiting behind it whatever their direction. `read_priority`
//! still orders the command processor's passes.
//!
//! `ring_dispatch_position` (default false) is the guest kernel's choice of the next request
//! in a batch: false, Linux before 6.5, the request after the one dispatched, fixed when that
//! was dispatched (a request queued later never continues the batch); true, Linux 6.5 on,
//! the first waiting at or above the start of the direction's last dispatched request,
//! looked up at each dispatch (block/mq-deadline.c `deadline_next_request` ->
//! `deadline_from_pos` with `latest_pos`, set by `dd_start_request`; vmio-core's
//! `MqDeadline::tracking_position`). A sequential stream behind a full ring then keeps its
//! batch going with each request it queues, up to `fifo_batch`, where before 6.5 the batch
//! ended with the requests there were, and every new batch counts towards writes_starved.
//!
//! **The ring's requests** (`max_segments` M, default 0: a command is one request;
//! `ring_merges`, default false; both with the ring). What the guest's block layer makes of a
//! command before the ring, from the segments of its pages:
//!
//! - *Splits.* A direct I/O goes down as bios of at most `BIO_MAX_VECS` (256) segments
//!   (fs/iomap/direct-io.c `iomap_dio_bio_iter`: each bio is allocated for
//!   `bio_iov_vecs_to_alloc(iter, BIO_MAX_VECS)` vectors, as read in stored copies; a block
//!   device's direct I/O, block/fops.c, alike, as recalled), and a bio of more than the
//!   queue's `max_segments` segments is split at that count (block/blk-merge.c: 4.x's
//!   `blk_bio_segment_split`, `if (nsegs == queue_max_segments(q)) goto split`, as read in a
//!   stored copy; 6.x's `bio_split_rw` keeps the rule, as recalled), each part a request of its own with
//!   its own descriptors; the command completes with its last part (the split bios are
//!   chained to their parent, `bio_chain`). This machine's disk has max_segments 254: a 1 MiB
//!   command of 256 pages goes as 1016 + 8 KiB, 2 MiB as 1016 + 8 + 1016 + 8 KiB, and each
//!   1016 KiB part takes the whole ring of 256 (2 + 254).
//! - *Merges* (`ring_merges`, with `ring_scheduler = "mq-deadline"`). While the ring is full
//!   requests wait in mq-deadline, and a bio arriving then merges into a waiting request of
//!   its direction that ends where it starts (back) or starts where it ends (front), while
//!   the merged request keeps to `max_segments` segments and `max_sectors_kb`
//!   (block/blk-merge.c `ll_back_merge_fn`, `ll_front_merge_fn` -> `ll_new_hw_segment`:
//!   `req->nr_phys_segments + nr_phys_segs > queue_max_segments(q)` refuses the merge;
//!   mq-deadline's `bio_merge` hook -> `blk_mq_sched_try_merge` -> `elv_merge`). A merged
//!   request is one virtio request (one header, one status, a descriptor per segment) and
//!   completes every bio in it at once. A request that finds room enters alone: fio's libaio
//!   engine submits each io_u by its own `io_submit` (`iodepth_batch_submit` 1 by default,
//!   fio's HOWTO, as recalled), which plugs only batches of more than 2 (fs/aio.c
//!   `AIO_PLUG_THRESHOLD`, as recalled), so nothing
//!   merges before the scheduler. A sequential stream at depth behind a full ring thus reaches
//!   the device as requests of up to M pages; random requests never merge. The limit is
//!   min(M, R - 2) segments of `segment_size` (max_sectors_kb, 4096 here, is above it).
//! - *Segments.* `blk_rq_map_sg` (block/blk-merge.c `__blk_segment_map_sg`) makes one scatter
//!   entry of physically contiguous pages up to `max_segment_size` (unlimited here:
//!   4294967295), and virtio_blk one descriptor per entry, so a segment is a page only when
//!   the buffer's pages are apart. Measured on this machine (29 Nov 2026): a program that
//!   allocates as fio does (one `malloc` of depth x bs, page-aligned, each io_u's pages
//!   touched in order) and reads its frames from /proc/self/pagemap found 1.00-1.18 pages
//!   per physically contiguous run for 4 KiB to 2 MiB buffers: transparent huge pages are
//!   `madvise` (fio's malloc'd buffers get none) and the page allocator hands out the free
//!   lists' scattered order-0 pages first (mm/page_alloc.c `__rmqueue_smallest`; its
//!   `rmqueue_bulk` keeps split buddies in physical order "for IO devices that can merge IO
//!   requests", which would make runs only from a fresh high-order block). `segment_size` 4
//!   KiB stands.
//!
//! ```text
//! submit(cmd of n = ceil(L / S) segments):  max_segments M > 0 and n > min(M, 256)?
//!     bios of 256 segments (the last n mod 256), each cut into requests of M segments:
//!     part lengths in order  min(rest, 256 S - at mod 256 S, M S); each waits for the ring
//! waiting (ring_merges):  insert into mq-deadline, merged with a waiting request of its
//!     direction it adjoins when the sum <= min(M or R - 2, R - 2) S
//! a request completes:  each command merged in it; a part: its command once its last is done
//! ```
//!
//! **Freezes** (`freeze_interval` I, `freeze_time` D, both default 0: none; a device without
//! them books nothing new). The whole device stops for D at times of one a mean I apart:
//! every command in flight, on a unit, a pipe or the processor, and every command arriving
//! meanwhile, waits until the freeze ends, then carries on where it was. A VMM's I/O thread
//! descheduled on a busy host (its vCPUs and the other tenants' threads share the host's
//! cores; Linux's EEVDF scheduler gives a task a slice of `base_slice_ns`, 0.75 ms by
//! default, kernel/sched/fair.c, as recalled), a backend's throttle or a host's writeback
//! pause stops every request at once, where a stall ("Stalls") holds one unit. The k-th
//! freeze starts at real time `max((k + u_k) I, the (k-1)-th's end)`, u_k uniform from the
//! device's stream "flash/freeze" (stratified, as the stalls): the device keeps its own
//! clock, which stops during a freeze, and converts at its edges:
//!
//! ```text
//! device clock at real time r:  r - k D,  k = the freezes ended by r;  during one: its start
//! real time of device time d:   d + k D,  k = the freezes started (on the device's clock) before d
//! a closed loop: X = X0 (1 - D / I)  (the device runs 1 - D / I of the time); a share
//!     R / I of its commands are in flight when a freeze starts (Little: q in flight, q / R
//!     done a second) and wait D more: quantile P of a latency is the body's below
//!     1 - R / I and about its median + D above
//! ```
//!
//! What it answers for: this machine's virtio disk (docs/validation.md) had a p99.9 of 2-3
//! ms at 4-8 KiB and QD 12-24, 10-15 times its p99, where a stall on one unit (fitted at
//! QD1) gave 0.2 ms; the batteries' tails at every depth and size fit freezes of 1.3-1.5 ms
//! every 75-177 ms (two batteries twenty minutes apart).
//!
//! **Freezes started by commands** (`freeze_trigger = "command"`, default `clock`: the
//! freezes above; with `command`, `read_freeze_probability` p_r, `write_freeze_probability`
//! p_w and `freeze_time` D; `freeze_interval` unused). A synchronous VMM block engine serves
//! the ring in one thread: Firecracker's block worker
//! (src/vmm/src/devices/virtio/block/virtio/worker.rs `process_queue`, as read in a stored
//! copy) pops every available descriptor chain and processes each in turn, then signals the
//! used ring once; its default `Sync` engine (virtio/io/sync_io.rs `SyncFileEngine::read`,
//! `write`) reads a request with a blocking, buffered `read_exact_volatile` of the backing
//! file and writes it with a buffered `write_all_volatile` (O_DIRECT only with
//! `direct_write`; docs/api_requests/block-io-engine.md). A read the host's page cache
//! holds is a copy; one it misses blocks the thread for the host disk's read. A buffered
//! write blocks when the host throttles its dirtier (Linux's mm/page-writeback.c
//! `balance_dirty_pages`: a task dirtying pages past the dirty limits is paused, up to
//! `MAX_PAUSE` = HZ / 5, as read in a stored copy), more rarely. Either way every command
//! behind it in the ring waits. A small read that misses is read as it is, its missing
//! pages in one request (Linux's mm/readahead.c `page_cache_sync_ra`: a "standalone, small
//! random read" goes to `do_page_cache_ra` for its own range, as recalled), so a wait is
//! counted per command, not per page; the battery agrees (at QD 8 the share of this
//! machine's 4 KiB and 64 KiB reads past 1 ms is alike, about 0.1 %, where per page it
//! would be 16 times as large at 64 KiB). The model: each read (write) the serial command
//! processor takes into a batch or a pass blocks with probability p_r (p_w), stratified in
//! blocks of 1 / p per direction as the stalls (streams "flash/read-freeze",
//! "flash/write-freeze"), and the processor is then busy D more; the units and pipes go on
//! (what already left the processor is past the engine's thread). A device without a
//! processor has no thread to stop: `freeze_trigger = "command"` needs `batch_overhead` or
//! `command_overhead`.
//!
//! ```text
//! a batch or pass takes command c:  its direction's stratified draw hits?  its cost += D
//!     (a draining pass: its end moves D later, every command in it and joining it waits)
//! QD1 reads:        a share p_r wait D (each its own block); writes: p_w
//! q commands, drain, read share f:  the q go round in one pass, so one blocking delays the
//!     q commands of its pass: a share q (f p_r + (1 - f) p_w) waits about D (when below
//!     1; independent draws: 1 - (1 - p)^q), a mix's writes as its reads
//! p_w = 0:          writes alone never wait
//! closed forms:     a command's processor cost k grows by its mean (f p_r + (1 - f) p_w) D
//! ```
//!
//! What it answers for: this machine's disk is a Firecracker virtio-blk device (PID 1
//! `/process_api --firecracker-init`, a `-fc` kernel, one hardware queue), and on its
//! batteries the share of 4 KiB reads beyond 1 ms grew with the depth (at most 0.01 % at
//! QD1, 0.5-1 % at QD 32), writes alone had a few times fewer (randwrite-4k QD 8: p99.9 0.2
//! ms against 3.1 ms for reads), and a 70 % read mix at QD 8 gave its writes the reads'
//! p99.9 (2.3 ms both): the thread that stops is shared, and reads start most stops. A
//! clock's freezes catch a share R / I of every point's commands whatever its direction.
//!
//! **Service times.** A unit's time for a command is `read_latency` (`write_latency`) by
//! default, the same for every command: at QD1 every percentile equals the mean. With
//! `read_spread` s > 0 (`write_spread` for writes) it is drawn, per command, from a shifted
//! log-logistic distribution of mean a = `read_latency`, whose least value is f a (f =
//! `read_floor`, the share of the time every command has: the media's own read or
//! program) and whose part above it has shape beta = 1 / s:
//!
//! ```text
//! m(s)  = pi s / sin(pi s)                   (the log-logistic's mean over its scale; 1 at 0)
//! Q(p)  = a (f + (1 - f) (p / (1 - p))^s / m(s))       quantile p of the unit time
//! draw  = Q(u), u uniform from the device's RNG, cut to [U_CUT, 1 - U_CUT] (1e-6)
//! mean  = a (exactly, before the cut; the cut moves it by less than 0.1 % for s <= 1/2)
//! p50   = a (f + (1 - f) / m(s));  Q(0.99) / Q(0.5) = 99^s when f = 0;  0.999: 999^s
//! ```
//!
//! Why this distribution: its quantile function is closed form (so a draw is one uniform
//! and one power, and `vmio calibrate` fits s and f from measured percentiles by algebra,
//! not by simulation), and so is its mean (so `read_latency` keeps its meaning and the
//! closed forms below, which are means, hold unchanged); its right tail is a power law
//! (P(X > x) ~ x^-beta), the shape of storage latency tails built by retries, queueing
//! behind background work and a backend's servers (Dean and Barroso, "The Tail at Scale",
//! CACM 56(2), 2013: the tail of a service's latency is set by rare slow events, as
//! recalled); a log-normal's needs the normal quantile, which has no closed form. The
//! log-logistic (Fisk) distribution: F(x) = 1 / (1 + (x / alpha)^-beta), mean alpha pi /
//! beta / sin(pi / beta) for beta > 1, quantile alpha (p / (1 - p))^(1 / beta) (Johnson,
//! Kotz and Balakrishnan, "Continuous Univariate Distributions", vol. 2, 2nd ed., 1995,
//! as recalled). s <= 1/2 (beta >= 2) keeps the variance finite enough for a simulation's
//! averages. Draws come from the device's own stream (vmio_core::rng, label
//! "flash/service") of the seed its run derives for it; a device without a spread draws
//! nothing, so its figures are the constant model's to the nanosecond.
//!
//! **Stalls.** With `stall_probability` p > 0 and `stall_time` D > 0, each read or write
//! (not a FLUSH or a TRIM) stalls with probability p: its unit time grows by a draw of the
//! stall's duration, a shifted log-logistic of mean D (`stall_spread`, `stall_floor`, as the
//! unit times'), and the unit is held meanwhile (a backend server that stalls on one request
//! serves the requests queued behind it late too: head-of-line blocking), the pipes are not.
//! A lone command's latency is then a mixture: the body (the device's own service) with
//! probability 1 - p and body plus stall with probability p; at depth, commands queued on a
//! stalled unit wait for it. Which commands stall is stratified (systematic sampling with a
//! random start in every stratum: Cochran, "Sampling Techniques", 3rd ed., 1977, ch. 8, as
//! recalled): the data commands, counted in the order their unit work starts (a buffered
//! write: at its acknowledgement, which it delays, and not again on its unit), fall in
//! blocks of 1 / p, and exactly one command of each block stalls, at a position drawn
//! uniformly in it from a stream of its own ("flash/stall"); the k-th stall's duration is
//! quantile v_k of the stall's distribution, v_k = frac(v_0 + k (sqrt(5) - 1) / 2) (the
//! golden-ratio additive recurrence, equidistributed in [0, 1): Weyl 1916; Kuipers and
//! Niederreiter, "Uniform Distribution of Sequences", 1974, as recalled), v_0 drawn once.
//! Each command still stalls with probability p and each stall's duration still follows
//! the stall's distribution, but n commands hold n p stalls within one and their durations'
//! mean converges to D at the rate of a low-discrepancy sequence, where independent draws
//! left a run of a few seconds with a Poisson count of rare stalls: a 0.5 s simulation of
//! a stall of 36.7 ms with p = 9e-5 (a calibration of a RAM-backed file on a loaded
//! machine) holds about 11, and its throughput moved by -23 % to +23 % from one seed to the
//! next, away from the closed forms' a + p D:
//!
//! ```text
//! stratum k = the data commands [k / p, (k + 1) / p)  (counted from 0)
//! the stalled one: floor((k + u_k) / p), u_k uniform (one draw per stratum; the next
//!     command when that falls on one already counted)
//! its stall = Q_stall(v_k)                       (Q_stall: "Service times"' quantile, mean D)
//! quantile P of a QD1 latency, a constant body B:  B                   for P < 1 - p
//!                                                  B + Q_stall((P - (1 - p)) / p)  above
//! mean latency: + p D;  the closed forms: the unit time a + p D, R0 = a + t + p D
//! ```
//!
//! Why: on a cloud virtual disk measured here (docs/validation.md) 0.1-2 % of the I/Os take
//! 5-35 ms at every size and depth (p99 25-30 ms at 48-96 KiB and QD 4-16, 15-40x their
//! p50; p99.9 15-32 ms at 4-24 KiB, whose p50 is 0.1-0.5 ms): a mode of its own, not the power-law
//! tail of one service time, which the unit times' spread alone could only approach at its
//! bound (s = 1/2) while slowing every command's body. Dean and Barroso ("The Tail at
//! Scale", CACM 56(2), 2013, as recalled) name such rare slow requests (a server's
//! background work, queueing at a shared resource, a throttle) as what sets a distributed
//! service's tail; a replicated block backend that waits for its slowest replica sees them
//! per request. Each stall is independent of the load here: a provider's token-bucket
//! throttle, which would stall every command in flight at once when its bucket empties, is
//! not modelled. A stall holding nothing (completion alone delayed) was tried on the same
//! measurements: the held-out bandwidth errors grew at small sizes and depth, where it left
//! nothing to cap the unit's throughput (docs/validation.md).
//! Devices without stalls make no draw: their figures are unchanged to the nanosecond.
//!
//! **Streams and the cache's drain** (all default 0: off, and a device without them books
//! nothing new: its figures are unchanged to the nanosecond).
//!
//! `read_stream_rate` s_r (`write_stream_rate` s_w, devices without a write buffer): one
//! command's own data rate. A read streams its L bytes at s_r from the moment its unit work
//! starts, concurrently with that unit work and its pipe transfer, and completes at the later
//! of its usual end and the stream's end; the stream holds nothing (another command's stream
//! runs beside it), so it is a ceiling on one command, not on the device. A write's stream
//! starts with its transfer; behind a draining pass, which moves the data itself ("The
//! processor's passes"), a command's stream starts as it arrives. At QD1 without a processor
//! a read then takes
//!
//! ```text
//! max(a + c + L / rate, L / s)      (stream start = unit start; done = max(usual end, start + L / s))
//! ```
//!
//! a fast pipelined path for small requests (the device moves a command's data while its
//! media work runs: the NVMe controller writes a read's data to host memory page by page as
//! its PRP list names them, drivers/nvme/host/pci.c `nvme_pci_setup_prps`, so a command's
//! transfer overlaps its media reads) and a per-command bandwidth ceiling for large ones that
//! overlaps the unit time instead of adding to it (one command is served by one stream: a
//! die's or channel's data path in a drive, or in a VMM whose synchronous block engine serves
//! a request with one blocking read or write of the backing file, Firecracker's default
//! `Sync` io_engine (docs/api_requests/block-io-engine.md), the host's single-request rate,
//! where several requests in flight share the host disk's full rate). What it answers for:
//! a cloud virtual disk measured here read at QD1 4k, 16k, 64k, 256k and 1m in 56, 62, 74,
//! 248 and 896 us, which max(a + L / r1, L / r2) fits within 10 % (r1 3.3, r2 1.15 GB/s) and
//! a + c + L / rate (a sum, store and forward) cannot: it gave 54, 61, 88, 196 and 631 us,
//! while the same disk moved 1.7-2.0 GB/s at depth (docs/validation.md).
//!
//! `flush_rate` F (devices without a write buffer): the write cache's content is committed by
//! a FLUSH (NVM Express Base 2.0, section 7.1: the data of the writes completed before it; a
//! device commits what its volatile cache holds), so a FLUSH behind writes costs their
//! bytes' drain to the media besides its fixed `flush_latency`. The device counts the bytes of
//! the writes dispatched to it since the last FLUSH (what its cache accepted), and a FLUSH
//! drains them at F, one FLUSH at a time (a cache has one drain; QEMU's block layer likewise
//! runs one flush at a time and skips one that has nothing new to commit, block/io.c
//! `bdrv_co_flush`: `flush_started_gen`, `flushed_gen`, `write_gen`, as read in a stored
//! copy). A VMM whose writeback cache keeps a guest's writes in the host's page cache
//! (Firecracker's `cache_type = "Writeback"`, as recalled) turns a guest FLUSH into an fsync
//! of the backing file, whose cost is the dirty pages written since:
//!
//! ```text
//! dirty  += L              at each write's dispatch (past the processor)
//! FLUSH at now:  start = max(now, the previous FLUSH's end)
//!                done  = start + flush_latency + dirty / F;  dirty = 0
//! after k writes of L dispatched since the last FLUSH, an idle drain:  flush_latency + k L / F
//! the battery's fdatasync point (one write of L, then the FLUSH):      flush_latency + L / F
//! ```
//!
//! **Rules.** Every resource is FIFO in the order commands become ready for it: the model
//! keeps its own time-ordered stages (a read's unit work ending, a write's data arriving, a
//! buffered write's unit work ending) and books each resource when a command reaches it,
//! so a resource sees its commands in the order they became ready. With
//! `c = transfer_overhead` and `t(L, d) = c + L / min(rate_d, link_rate)`:
//!
//! ```text
//! pipe(d) = the pipe of direction d (duplex = "full"); the one pipe (duplex = "half")
//! transfer(ready, L, d): start = max(ready, pipe(d) free [+ turnaround if pipe(d) is busy
//!                                   at ready and its last transfer was of the other
//!                                   direction], link free)
//!                        pipe(d) free = start + c + L/rate_d; link free = start + L/link_rate
//!                        -> start + t(L, d)
//! unit(ready, a):        the unit free first: start = max(ready, its free time); busy a
//! submit (with a processor): wait for it; an idle processor takes every waiting command
//!         as one batch of k, busy batch_overhead + k × command_overhead; at the batch's
//!         end its commands go on below in order, "now" being that end
//! read:   unit(now, read service time) -> transfer(unit end, L, read)     -> done
//!         (the service time: read_latency, or a draw with a read_spread: "Service times";
//!         with a read_stream_rate s: done = max(done, now + L / s))
//! write, write_buffer = 0:
//!         transfer(now, L, write) -> unit(transfer end, write_latency)    -> done
//!         (with a write_stream_rate s: done = max(done, now + L / s))
//! write, write_buffer = B > 0: needs n = min(L, B) bytes of buffer (a write larger than
//!         the buffer waits for it to be empty); writes wait FIFO for space; space taken
//!         when the transfer is booked, at admission
//!         transfer(admission, L, write) -> done (acknowledged) at its end, unless FUA
//!         unit(transfer end, write_latency) -> n bytes freed; a FUA write is done here
//! flush:  done = max(now, when every buffered write submitted before it has finished its
//!         unit work) + flush_latency             (no unit; write_buffer = 0: now + ...;
//!         with a flush_rate: "Streams and the cache's drain")
//! trim:   done = now + flush_latency             (no unit, no data: a command round trip)
//! ```
//!
//! Closed forms (one kind of request, size L, q outstanding in a closed loop, N units,
//! a = the op's latency, t = t(L, d) = c + L / min(rate_d, link_rate), no buffer): latency
//! at q = 1 is `a + t`; throughput `X(q) = min(q / (a + t), N / a, 1 / t)` requests per
//! second; mean latency `q / X(q)`. Reads and writes together move at most `link_rate`
//! bytes per second. `duplex = "full"`: each direction at most `1 / (c + L / rate_d)`
//! commands a second on its own pipe, so a mix adds both; `"half"`: a mix with a read
//! fraction p of the commands at most `1 / (c + p L / read_rate + (1 - p) L / write_rate)`
//! commands a second in all (the one pipe's time per command), and with `turnaround` s and
//! directions drawn independently (fio's rwmixread) `1 / (c + p L / read_rate + (1 - p) L /
//! write_rate + 2 p (1 - p) s)`: a saturated pipe turns on 2 p (1 - p) of its commands. With a buffer, a write at QD1 on an idle device takes `t`; once the
//! buffer is full, acknowledgements come at the drain rate `N / write_latency` per command.
//! With a processor (B = batch_overhead, c = command_overhead), a lone command adds B + c to
//! its latency; k commands submitted together while it is idle go as a batch of one and then
//! one of k - 1; at depth, batches grow and the processor's bound tends to `1 / c` commands
//! a second (a saturated processor with batches of k moves k / (B + k c)).
//!
//! [`ClosedForm`] computes these figures (what `vmio calibrate` fits, through `vmio._native`),
//! in real numbers, with the processor's mean-value approximation ([`processor_x`]) and a
//! mix's mean unit time:
//!
//! ```text
//! one direction d:  X = min(N / (a + z), P(q, u + z + h, 1 / t)),  u = a + t, or with a
//!     stream rate s_d, u = max(a + t, L / s_d) (a lone command's time past the processor),
//!     z = stall_probability
//!     x stall_time (a unit holds a command's stall), h = the loop's `path_ns`: the time a
//!     request spends outside the device on each round trip, in no resource (a native
//!     host's submission, vdisk's `host` interface: 1.5 us of fio's slat), 0 for the device
//!     alone
//! a mix, p = rwmixread / 100:  a_m = p a_r + (1-p) a_w,  t_m = p t_r + (1-p) t_w,
//!     X = min(N / (a_m + z), P(q, u_m + z + h, min(the pipes, link_rate / L))),
//!     u_m = a_m + t_m, or with a stream rate p u_r + (1-p) u_w
//!     the pipes, "full": 1 / (p (c + L / read_rate)), 1 / ((1-p) (c + L / write_rate))
//!     the pipes, "half": 1 / (c + p L / read_rate + (1-p) L / write_rate + 2 p (1-p) s)
//! bytes per second X L; mean latency q / X; a FLUSH (no buffer, idle): B + k + flush_latency,
//!     after one write of L with a flush_rate F: B + k + flush_latency + L / F
//! a FUA write of L at QD1 on `fua = false` (the block layer's write, then FLUSH):
//!     B + k + a_w + t(L, write) + B + k + flush_latency
//! P(q, R0, cap), B = batch_overhead, k = command_overhead (`batching = "drain"`: "The
//!     processor's passes", [`drain_x`] with k + t a command); without a processor
//!     min(q / R0, cap); with one, X solves X = min(cap, 1 / k, q / (W(X) + R0)): a
//!     saturated processor's batches hold n = X T commands and last T = B / (1 - k X) (a
//!     batch of one, T = B + k, when n < 1);
//!     it is busy a share rho = min(1, X T / n) (q - 1) / q of the time (what the other
//!     q - 1 commands see: the arrival theorem of mean-value analysis); a command waits
//!     half a batch when it finds one running, then its own: W = T (1 + rho / 2).
//!     Solved by bisection (W grows with X, so they meet once).
//! ```
//!
//! Reiser and Lavenberg, "Mean-Value Analysis of Closed Multichain Queuing Networks" (J. ACM
//! 27(2), 1980; as recalled) for the arrival theorem (a customer of a closed network sees
//! it as in equilibrium with itself removed). The approximation is exact at q = 1
//! (B + k + a + t) and tends to 1 / k at depth, as the model does; between, it is within
//! 10 % of the simulation on the tests' device (-6.5 % at q = 2, +9.6 % at q = 8).
//!
//! Out-of-range commands are served like in-range ones (the engine validates ranges).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::OnceLock;

use vmio_core::params::{Entry, Kind, ParamError, ParamSpec, Value, Values};
use vmio_core::request::{DevIo, Op};
use vmio_core::rng::Rng;
use vmio_core::sched::mq_deadline::MqDeadline;
use vmio_core::sched::IoScheduler;
use vmio_core::units::transfer_ns;
use vmio_core::{Ns, US};

use super::{
    capacity, fua, Busy, Completions, DevCmd, Device, DeviceStats, Identity, ModelBuild,
    ModelEntry, BLK_MQ_QUEUE_DEPTH, DURATION, WRITE_CACHE,
};
use crate::engine::MinHeap;

/// The largest `read_spread`/`write_spread`: s = 1 / beta <= 1/2 keeps the log-logistic's
/// variance finite (beta > 2; module doc, "Service times").
pub const MAX_SPREAD: f64 = 0.5;
/// A spread: a fraction from 0 (no spread) to [`MAX_SPREAD`].
const SPREAD: Kind = Kind::Fraction {
    min: 0.0,
    max: MAX_SPREAD,
};
/// A floor: a share of the mean, 0 to 1.
const FLOOR: Kind = Kind::Fraction { min: 0.0, max: 1.0 };
/// The largest `stall_probability`: a stall is a rare event beside the commands' own
/// service (module doc, "Stalls"); one command in ten is already the body, not a tail.
pub const MAX_STALL_PROBABILITY: f64 = 0.1;
const STALL_PROBABILITY: Kind = Kind::Fraction {
    min: 0.0,
    max: MAX_STALL_PROBABILITY,
};
/// Draws are cut at the quantiles `U_CUT` and `1 - U_CUT` (module doc, "Service times").
pub const U_CUT: f64 = 1e-6;
/// The seed of a device built without a run seed ([`Flash::new`]); a run's devices get one
/// derived from the run seed (`build_device_seeded`).
pub const FLASH_SEED: u64 = 0xF1A5_0001;

pub const ENTRY: ModelEntry = Entry {
    name: "flash",
    help: "generic flash/NVMe device: parallel units, data pipes (one per direction, or one shared: duplex), a shared link, optional write buffer (what vmio calibrate fits)",
    // Defaults: profile `datacenter-nvme` (see the module doc).
    params: &[
        capacity(256 << 30),
        ParamSpec {
            name: "units",
            kind: Kind::Count { min: 1, max: 4096 },
            default: Value::Int(50),
            unit: "",
            help: "parallel units (dies/channels/backend servers), one command each at a time",
        },
        ParamSpec {
            name: "read_latency",
            kind: DURATION,
            default: Value::Int(80 * US),
            unit: "ns",
            help: "a read's time on its unit",
        },
        ParamSpec {
            name: "write_latency",
            kind: DURATION,
            default: Value::Int(20 * US),
            unit: "ns",
            help: "a write's time on its unit (a program into the device's cache)",
        },
        ParamSpec {
            name: "read_spread",
            kind: SPREAD,
            default: Value::Float(0.0),
            unit: "",
            help: "the spread s = 1 / beta of a read's unit time, a shifted log-logistic of mean read_latency (0: every read takes read_latency)",
        },
        ParamSpec {
            name: "read_floor",
            kind: FLOOR,
            default: Value::Float(0.0),
            unit: "",
            help: "the share of read_latency every read's unit time has (the log-logistic's shift: its least value floor x read_latency)",
        },
        ParamSpec {
            name: "write_spread",
            kind: SPREAD,
            default: Value::Float(0.0),
            unit: "",
            help: "the spread of a write's unit time, as read_spread (0: every write takes write_latency)",
        },
        ParamSpec {
            name: "write_floor",
            kind: FLOOR,
            default: Value::Float(0.0),
            unit: "",
            help: "the share of write_latency every write's unit time has, as read_floor",
        },
        ParamSpec {
            name: "stall_probability",
            kind: STALL_PROBABILITY,
            default: Value::Float(0.0),
            unit: "",
            help: "the probability that a read or write stalls: its unit time grows by a draw of the stall's duration, the unit held meanwhile (0: no stalls)",
        },
        ParamSpec {
            name: "stall_time",
            kind: DURATION,
            default: Value::Int(0),
            unit: "ns",
            help: "a stall's mean duration (a shifted log-logistic with stall_spread and stall_floor)",
        },
        ParamSpec {
            name: "stall_spread",
            kind: SPREAD,
            default: Value::Float(0.0),
            unit: "",
            help: "the spread s = 1 / beta of a stall's duration, as read_spread (0: every stall takes stall_time)",
        },
        ParamSpec {
            name: "stall_floor",
            kind: FLOOR,
            default: Value::Float(0.0),
            unit: "",
            help: "the share of stall_time every stall takes, as read_floor",
        },
        ParamSpec {
            name: "freeze_interval",
            kind: DURATION,
            default: Value::Int(0),
            unit: "ns",
            help: "the mean time between device-wide freezes, during which nothing in the device moves and every command in flight waits (a host's or backend's hiccup; 0: none)",
        },
        ParamSpec {
            name: "freeze_time",
            kind: DURATION,
            default: Value::Int(0),
            unit: "ns",
            help: "a device-wide freeze's duration (0: none)",
        },
        ParamSpec {
            name: "freeze_trigger",
            kind: Kind::Choice(FreezeTrigger::NAMES),
            default: Value::Choice("clock"),
            unit: "",
            help: "what starts a freeze: clock (device-wide, one every freeze_interval on average) or command (a read or write the command processor takes blocks it for freeze_time with read_freeze_probability or write_freeze_probability: a synchronous VMM engine's read missing the host's page cache, its write throttled)",
        },
        ParamSpec {
            name: "read_freeze_probability",
            kind: STALL_PROBABILITY,
            default: Value::Float(0.0),
            unit: "",
            help: "freeze_trigger = command: the share of read commands that stop the command processor for freeze_time (0: none)",
        },
        ParamSpec {
            name: "write_freeze_probability",
            kind: STALL_PROBABILITY,
            default: Value::Float(0.0),
            unit: "",
            help: "freeze_trigger = command: the share of write commands that stop the command processor for freeze_time (0: none)",
        },
        ParamSpec {
            name: "read_rate",
            kind: Kind::Rate,
            default: Value::Int(3_000_000_000),
            unit: "bps",
            help: "read data bandwidth, shared by all reads",
        },
        ParamSpec {
            name: "write_rate",
            kind: Kind::Rate,
            default: Value::Int(2_000_000_000),
            unit: "bps",
            help: "write data bandwidth, shared by all writes",
        },
        ParamSpec {
            name: "link_rate",
            kind: Kind::Rate,
            default: Value::Int(4_000_000_000),
            unit: "bps",
            help: "the host link, shared by reads and writes (PCIe 3.0 x4)",
        },
        ParamSpec {
            name: "duplex",
            kind: Kind::Choice(Duplex::NAMES),
            default: Value::Choice("full"),
            unit: "",
            help: "full: a data pipe per direction; half: reads and writes share one pipe (a die reads or programs; a backend's one bandwidth budget)",
        },
        ParamSpec {
            name: "transfer_overhead",
            kind: DURATION,
            default: Value::Int(0),
            unit: "ns",
            help: "a command's set-up on its data pipe before its bytes (PRP/SGL and DMA set-up; a backend request's fixed cost)",
        },
        ParamSpec {
            name: "turnaround",
            kind: DURATION,
            default: Value::Int(0),
            unit: "ns",
            help: "duplex = half: how long the one pipe, after a transfer, waits before one in the other direction (a die's switch between reading and programming; a backend's change of direction); unused with full",
        },
        ParamSpec {
            name: "batch_overhead",
            kind: DURATION,
            default: Value::Int(0),
            unit: "ns",
            help: "a batch's fixed cost on the serial command processor, which takes every waiting command at once (a doorbell or notification, a VM exit, an interrupt); 0 with command_overhead 0: no processor",
        },
        ParamSpec {
            name: "command_overhead",
            kind: DURATION,
            default: Value::Int(0),
            unit: "ns",
            help: "each command's cost on the serial command processor, within its batch (a write's: write_command_overhead)",
        },
        ParamSpec {
            name: "write_command_overhead",
            kind: DURATION,
            default: Value::Computed("command_overhead"),
            unit: "ns",
            help: "a write's cost on the serial command processor in place of command_overhead (a VMM's write path to its backing file differs from its read path)",
        },
        ParamSpec {
            name: "batching",
            kind: Kind::Choice(Batching::NAMES),
            default: Value::Choice("snapshot"),
            unit: "",
            help: "the command processor's batch: snapshot (the commands waiting when it starts; later ones wait for the next) or drain (it pops until its queue is empty: commands arriving meanwhile join the pass, each command_overhead plus its transfer, the pass moving the data, and all go on to their units at the pass's end)",
        },
        ParamSpec {
            name: "ring_descriptors",
            kind: Kind::Count { min: 0, max: 1 << 20 },
            default: Value::Int(0),
            unit: "",
            help: "the descriptors of the device's virtqueue (0: no limit): a command takes 2 + one per segment_size of its data (the whole ring at most) until it completes, and waits to enter while they are short (a virtio disk without indirect descriptors)",
        },
        ParamSpec {
            name: "segment_size",
            kind: Kind::POSITIVE_SIZE,
            default: Value::Int(4096),
            unit: "bytes",
            help: "ring_descriptors > 0: the data a descriptor carries (a guest page: its buffers are not contiguous in guest memory)",
        },
        ParamSpec {
            name: "ring_scheduler",
            kind: Kind::Choice(RingScheduler::NAMES),
            default: Value::Choice("fifo"),
            unit: "",
            help: "ring_descriptors > 0: the order commands waiting for descriptors enter the ring: fifo (arrival; reads first with read_priority) or mq-deadline (the guest's I/O scheduler: batches of up to 16 in sector order, reads preferred, writes after 2 read batches, FIFO deadlines 500 ms / 5 s)",
        },
        ParamSpec {
            name: "max_segments",
            kind: Kind::Count { min: 0, max: 1 << 20 },
            default: Value::Int(0),
            unit: "",
            help: "ring_descriptors > 0: the guest queue's max_segments (0: no split): a command is cut into bios of at most 256 segments (BIO_MAX_VECS), each split into requests of at most max_segments, each its own entry in the ring; the command completes with its last part",
        },
        ParamSpec {
            name: "ring_merges",
            kind: Kind::Bool,
            default: Value::Bool(false),
            unit: "",
            help: "ring_scheduler = mq-deadline: a command waiting for the ring merges with an adjacent waiting one of its direction (back or front) while the merged request has at most max_segments segments (0: ring_descriptors - 2); the merged request completes all of them (false: the waiting commands stay apart)",
        },
        ParamSpec {
            name: "ring_dispatch_position",
            kind: Kind::Bool,
            default: Value::Bool(false),
            unit: "",
            help: "ring_scheduler = mq-deadline: a direction's next request is the first waiting at or above the start of its last dispatched one (the guest's Linux 6.5 on) rather than the one after it when that was dispatched (false: before 6.5)",
        },
        ParamSpec {
            name: "read_priority",
            kind: Kind::Bool,
            default: Value::Bool(false),
            unit: "",
            help: "the command processor serves waiting reads before waiting writes: a pass (batch) holds reads only while any wait, and a draining pass of writes ends when a read arrives (false: one FIFO for both)",
        },
        ParamSpec {
            name: "write_buffer",
            kind: Kind::SIZE,
            default: Value::Int(0),
            unit: "bytes",
            help: "bytes of writes acknowledged before their unit work (0: none)",
        },
        ParamSpec {
            name: "flush_latency",
            kind: DURATION,
            default: Value::Int(20 * US),
            unit: "ns",
            help: "a FLUSH's cost once the buffer is empty (also a TRIM's cost)",
        },
        ParamSpec {
            name: "flush_rate",
            kind: Kind::SIZE,
            default: Value::Int(0),
            unit: "bps",
            help: "write_buffer = 0: a FLUSH also drains the bytes written since the last one at this rate, flushes one at a time (0: off)",
        },
        ParamSpec {
            name: "read_stream_rate",
            kind: Kind::SIZE,
            default: Value::Int(0),
            unit: "bps",
            help: "one read's own data rate from its unit's start (behind a draining pass: its arrival), overlapping its unit time and transfer: it completes no earlier than L / read_stream_rate after (0: off)",
        },
        ParamSpec {
            name: "write_stream_rate",
            kind: Kind::SIZE,
            default: Value::Int(0),
            unit: "bps",
            help: "write_buffer = 0: one write's own data rate from its transfer's start, as read_stream_rate (0: off)",
        },
        BLK_MQ_QUEUE_DEPTH,
        WRITE_CACHE,
        fua(true),
    ],
    build: ModelBuild {
        profiles: &["datacenter-nvme"],
        new,
        memory,
    },
};

fn new(name: &str, profile: &str, v: &Values, seed: u64) -> Result<Box<dyn Device>, ParamError> {
    let p = FlashParams::from_values(profile, v);
    if p.command_freezes() && !p.processor() {
        // Commands stop the command processor: without one there is nothing to stop.
        return Err(ParamError::OnlyFor {
            key: "freeze_trigger = \"command\"".to_string(),
            valid_with: "a command processor (batch_overhead or command_overhead > 0)".to_string(),
        });
    }
    Ok(Box::new(Flash::new_seeded(name, p, seed)))
}

/// A unit's service time (module doc, "Service times"): a shifted log-logistic of mean
/// `mean_ns`, least value `floor × mean_ns`, spread `s = 1 / beta`; constant `mean_ns` when
/// `spread` is 0 or `floor` is 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServiceTime {
    pub mean_ns: f64,
    pub floor: f64,
    pub spread: f64,
}

/// The log-logistic's mean over its scale, `pi s / sin(pi s)` (1 at s = 0).
pub fn log_logistic_mean(spread: f64) -> f64 {
    if spread <= 0.0 {
        return 1.0;
    }
    let x = std::f64::consts::PI * spread;
    x / x.sin()
}

impl ServiceTime {
    /// Whether every command takes `mean_ns` (no draw is made).
    pub fn constant(&self) -> bool {
        self.spread <= 0.0 || self.floor >= 1.0
    }

    /// The service time of quantile `p` in ns:
    /// `mean (floor + (1 - floor) (p / (1 - p))^s / m(s))`, p cut to [U_CUT, 1 - U_CUT].
    pub fn quantile_ns(&self, p: f64) -> f64 {
        if self.constant() {
            return self.mean_ns;
        }
        let p = p.clamp(U_CUT, 1.0 - U_CUT);
        let w = (p / (1.0 - p)).powf(self.spread) / log_logistic_mean(self.spread);
        self.mean_ns * (self.floor + (1.0 - self.floor) * w)
    }
}

/// The model's state does not grow with the capacity: no memory, and the capacity.
fn memory(v: &Values) -> Result<(u64, u64), ParamError> {
    Ok((0, FlashParams::from_values("", v).capacity_bytes))
}

/// Whether reads and writes have a data pipe each or share one (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duplex {
    Full,
    Half,
}

impl Duplex {
    pub const NAMES: &'static [&'static str] = &["full", "half"];

    /// The pipe a command of direction `op` uses (an index into the model's pipes).
    fn pipe(self, op: Op) -> usize {
        match (self, op) {
            (Duplex::Full, Op::Read) | (Duplex::Half, _) => 0,
            (Duplex::Full, _) => 1,
        }
    }
}

/// How the command processor forms its batches (module doc, "The processor's passes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    Snapshot,
    Drain,
}

impl Batching {
    pub const NAMES: &'static [&'static str] = &["snapshot", "drain"];
}

/// What starts a freeze (module doc, "Freezes" and "Freezes started by commands").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezeTrigger {
    Clock,
    Command,
}

impl FreezeTrigger {
    pub const NAMES: &'static [&'static str] = &["clock", "command"];
}

/// The order of the commands waiting for the ring's descriptors (module doc, "The ring").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingScheduler {
    Fifo,
    MqDeadline,
}

impl RingScheduler {
    pub const NAMES: &'static [&'static str] = &["fifo", "mq-deadline"];
}

#[derive(Clone, Debug, PartialEq)]
pub struct FlashParams {
    pub profile: String,
    /// The values it was read from, in declaration order (the result record lists them).
    pub values: Values,
    pub capacity_bytes: u64,
    pub units: u64,
    pub read_latency_ns: Ns,
    pub write_latency_ns: Ns,
    /// The unit times' spreads and floors (module doc, "Service times").
    pub read_spread: f64,
    pub read_floor: f64,
    pub write_spread: f64,
    pub write_floor: f64,
    /// The stall component (module doc, "Stalls").
    pub stall_probability: f64,
    pub stall_time_ns: Ns,
    pub stall_spread: f64,
    pub stall_floor: f64,
    /// Device-wide freezes (module doc, "Freezes"); 0: none.
    pub freeze_interval_ns: Ns,
    pub freeze_time_ns: Ns,
    /// What starts them, and with commands each direction's probability (module doc,
    /// "Freezes started by commands").
    pub freeze_trigger: FreezeTrigger,
    pub read_freeze_probability: f64,
    pub write_freeze_probability: f64,
    pub read_rate_bps: u64,
    pub write_rate_bps: u64,
    pub link_rate_bps: u64,
    pub duplex: Duplex,
    pub transfer_overhead_ns: Ns,
    pub turnaround_ns: Ns,
    pub batch_overhead_ns: Ns,
    pub command_overhead_ns: Ns,
    /// A write's cost on the processor (module doc, "Each direction's command cost"):
    /// `write_command_overhead`, or command_overhead when it is not set.
    pub write_command_overhead_ns: Ns,
    pub batching: Batching,
    /// Reads ahead of writes at the command processor (module doc, "Reads first").
    pub read_priority: bool,
    /// The virtqueue's descriptors and a descriptor's data (module doc, "The ring"); 0: none.
    pub ring_descriptors: u64,
    pub segment_bytes: u64,
    pub ring_scheduler: RingScheduler,
    /// The guest queue's split and merge limits in front of the ring (module doc, "The
    /// ring's requests"); 0 and false: none.
    pub max_segments: u64,
    pub ring_merges: bool,
    /// The ring's mq-deadline tracks each direction's dispatch position (Linux 6.5 on).
    pub ring_dispatch_position: bool,
    pub write_buffer_bytes: u64,
    pub flush_latency_ns: Ns,
    /// The cache's drain behind a FLUSH and each command's own stream (module doc,
    /// "Streams and the cache's drain"); 0: off.
    pub flush_rate_bps: u64,
    pub read_stream_bps: u64,
    pub write_stream_bps: u64,
    pub queue_depth: u64,
}

impl FlashParams {
    /// The parameters of profile `profile` from their declared values (each parameter's
    /// kind is its whole check: no rule relates two of them).
    pub fn from_values(profile: &str, v: &Values) -> Self {
        Self {
            profile: profile.to_string(),
            values: v.clone(),
            capacity_bytes: v.int("capacity"),
            units: v.int("units"),
            read_latency_ns: v.int("read_latency"),
            write_latency_ns: v.int("write_latency"),
            read_spread: v.float("read_spread"),
            read_floor: v.float("read_floor"),
            write_spread: v.float("write_spread"),
            write_floor: v.float("write_floor"),
            stall_probability: v.float("stall_probability"),
            stall_time_ns: v.int("stall_time"),
            stall_spread: v.float("stall_spread"),
            stall_floor: v.float("stall_floor"),
            freeze_interval_ns: v.int("freeze_interval"),
            freeze_time_ns: v.int("freeze_time"),
            freeze_trigger: match v.choice("freeze_trigger") {
                "command" => FreezeTrigger::Command,
                _ => FreezeTrigger::Clock,
            },
            read_freeze_probability: v.float("read_freeze_probability"),
            write_freeze_probability: v.float("write_freeze_probability"),
            read_rate_bps: v.int("read_rate"),
            write_rate_bps: v.int("write_rate"),
            link_rate_bps: v.int("link_rate"),
            duplex: match v.choice("duplex") {
                "half" => Duplex::Half,
                _ => Duplex::Full,
            },
            transfer_overhead_ns: v.int("transfer_overhead"),
            turnaround_ns: v.int("turnaround"),
            batch_overhead_ns: v.int("batch_overhead"),
            command_overhead_ns: v.int("command_overhead"),
            write_command_overhead_ns: v
                .int_or("write_command_overhead", v.int("command_overhead")),
            batching: match v.choice("batching") {
                "drain" => Batching::Drain,
                _ => Batching::Snapshot,
            },
            read_priority: v.flag("read_priority"),
            ring_descriptors: v.int("ring_descriptors"),
            segment_bytes: v.int("segment_size"),
            ring_scheduler: match v.choice("ring_scheduler") {
                "mq-deadline" => RingScheduler::MqDeadline,
                _ => RingScheduler::Fifo,
            },
            max_segments: v.int("max_segments"),
            ring_merges: v.flag("ring_merges"),
            ring_dispatch_position: v.flag("ring_dispatch_position"),
            write_buffer_bytes: v.int("write_buffer"),
            flush_latency_ns: v.int("flush_latency"),
            flush_rate_bps: v.int("flush_rate"),
            read_stream_bps: v.int("read_stream_rate"),
            write_stream_bps: v.int("write_stream_rate"),
            queue_depth: v.int("queue_depth"),
        }
    }

    /// The service time of a read (`Op::Read`) or a write (any other op) on its unit.
    pub fn service(&self, op: Op) -> ServiceTime {
        match op {
            Op::Read => ServiceTime {
                mean_ns: self.read_latency_ns as f64,
                floor: self.read_floor,
                spread: self.read_spread,
            },
            _ => ServiceTime {
                mean_ns: self.write_latency_ns as f64,
                floor: self.write_floor,
                spread: self.write_spread,
            },
        }
    }

    /// A command's cost on the processor: a write's `write_command_overhead`, any other
    /// command's `command_overhead` (module doc, "Each direction's command cost").
    pub fn command_ns(&self, op: Op) -> Ns {
        match op {
            Op::Write => self.write_command_overhead_ns,
            _ => self.command_overhead_ns,
        }
    }

    /// The stall's duration distribution (module doc, "Stalls").
    pub fn stall(&self) -> ServiceTime {
        ServiceTime {
            mean_ns: self.stall_time_ns as f64,
            floor: self.stall_floor,
            spread: self.stall_spread,
        }
    }

    /// Whether the device freezes by the clock (an interval and a duration above 0).
    pub fn freezes(&self) -> bool {
        self.freeze_trigger == FreezeTrigger::Clock
            && self.freeze_interval_ns > 0
            && self.freeze_time_ns > 0
    }

    /// Whether commands stop the command processor (module doc, "Freezes started by
    /// commands": the command trigger, a probability and a duration above 0).
    pub fn command_freezes(&self) -> bool {
        self.freeze_trigger == FreezeTrigger::Command
            && self.freeze_time_ns > 0
            && (self.read_freeze_probability > 0.0 || self.write_freeze_probability > 0.0)
    }

    /// Whether commands pass the serial command processor (module doc).
    pub fn processor(&self) -> bool {
        self.batch_overhead_ns > 0
            || self.command_overhead_ns > 0
            || self.write_command_overhead_ns > 0
    }

    /// Whether commands may stall (a probability and a duration above 0).
    pub fn stalls(&self) -> bool {
        self.stall_probability > 0.0 && self.stall_time_ns > 0
    }

    /// The stream rate of a command of direction `op` (0: none; a buffered write has none).
    pub fn stream_bps(&self, op: Op) -> u64 {
        match op {
            Op::Read => self.read_stream_bps,
            Op::Write if self.write_buffer_bytes == 0 => self.write_stream_bps,
            _ => 0,
        }
    }
}

/// The closed forms' view of the parameters (module doc, "Closed forms"): each figure a
/// real number in its parameter's unit (ns, bytes/s), not rounded to the nanosecond or the
/// byte as the simulation's are, so that a fit (`vmio calibrate`) can move them
/// continuously. `capacity`, `write_buffer` and `queue_depth` do not enter (the closed
/// forms are those of a device without a write buffer).
#[derive(Clone, Debug, PartialEq)]
pub struct ClosedForm {
    pub units: f64,
    pub read_latency_ns: f64,
    pub write_latency_ns: f64,
    pub read_rate_bps: f64,
    pub write_rate_bps: f64,
    pub link_rate_bps: f64,
    pub duplex: Duplex,
    pub transfer_overhead_ns: f64,
    pub turnaround_ns: f64,
    pub batch_overhead_ns: f64,
    pub command_overhead_ns: f64,
    /// A write's cost on the processor; None: command_overhead's (module doc, "Each
    /// direction's command cost").
    pub write_command_overhead_ns: Option<f64>,
    pub batching: Batching,
    pub flush_latency_ns: f64,
    /// The stall component's probability and mean duration: a command's mean stall is
    /// their product (module doc, "Stalls").
    pub stall_probability: f64,
    pub stall_time_ns: f64,
    /// Device-wide freezes: the mean time between them and their duration, ns (0: none).
    pub freeze_interval_ns: f64,
    pub freeze_time_ns: f64,
    /// What starts a freeze; with commands, each direction's probability of stopping the
    /// processor for `freeze_time` (module doc, "Freezes started by commands").
    pub freeze_trigger: FreezeTrigger,
    pub read_freeze_probability: f64,
    pub write_freeze_probability: f64,
    /// Each command's own stream and the cache's drain behind a FLUSH, bytes/s (0: off;
    /// module doc, "Streams and the cache's drain").
    pub read_stream_bps: f64,
    pub write_stream_bps: f64,
    pub flush_rate_bps: f64,
}

/// A parameter's value given to [`ClosedForm::from_figures`]: a number in the unit of its
/// [`ParamSpec`] (ns, bytes/s, bytes, a count), or a text as the stack file writes it
/// (`"80us"`, `"3g"`, `"half"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Figure<'a> {
    Number(f64),
    Text(&'a str),
}

/// What a closed loop keeps outstanding: `iodepth` requests of `bs` bytes, each replaced
/// by the next as it completes (fio's `iodepth` with libaio); `path_ns`, the time each
/// request spends on its round trip outside the device and its queue, occupying nothing
/// (the host's submission, a delay in the loop: module doc, "Closed forms").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClosedLoop {
    pub load: Load,
    pub bs: u64,
    pub iodepth: u64,
    pub path_ns: f64,
}

/// The requests of a closed loop: reads, writes, or each a read with probability
/// `read_percent / 100` (fio's `rwmixread`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    Read,
    Write,
    Mixed { read_percent: u32 },
}

/// Python's `min(a, b)`: `a` unless `b` is smaller (NaN never wins, a tie keeps `a`), so
/// that `vmio calibrate`'s fit, written with Python's, sees the same figures to the last bit.
fn least(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// Bisection steps of [`processor_x`]: 2^-30 of X.
pub const PROCESSOR_ITERATIONS: u32 = 30;

/// Requests per second of a closed loop of `q` commands through the command processor (a
/// batch of k costs `b_s + k c_s` seconds) and then `r0_s` seconds more each, at most `cap`:
/// the mean-value approximation of the module doc ("Closed forms"), solved by bisection
/// ([`PROCESSOR_ITERATIONS`] steps). Without a processor (`b_s`, `c_s` <= 0),
/// `min(q / r0_s, cap)`.
pub fn processor_x(q: u64, b_s: f64, c_s: f64, r0_s: f64, cap: f64) -> f64 {
    let qf = q as f64;
    if b_s <= 0.0 && c_s <= 0.0 {
        return least(qf / r0_s, cap);
    }
    // q / R(x): the loop's rate if the processor saw x commands a second.
    let through = |x: f64| {
        let mut busy = if c_s * x < 1.0 {
            b_s / (1.0 - c_s * x)
        } else {
            f64::INFINITY
        };
        let mut k = x * busy;
        if k < 1.0 {
            (k, busy) = (1.0, b_s + c_s);
        }
        let rho = least(1.0, x / k * busy) * (qf - 1.0) / qf;
        qf / (busy * (1.0 + rho / 2.0) + r0_s)
    };
    // through() falls as x grows: X is where it meets x, or the cap (and 1 / c) below that.
    let per_command = if c_s > 0.0 { 1.0 / c_s } else { f64::INFINITY };
    let mut hi = least(least(cap, per_command), qf / (b_s + c_s + r0_s));
    let mut lo = 0.0;
    if through(hi) >= hi {
        return hi;
    }
    for _ in 0..PROCESSOR_ITERATIONS {
        let mid = (lo + hi) / 2.0;
        if through(mid) >= mid {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Requests per second of a closed loop of `q` commands through a draining processor
/// (module doc, "The processor's passes"): the q commands go round together, a pass of all
/// of them costs `b_s + q c_s`, then `r0_s` more each: `min(q / (b_s + q c_s + r0_s), cap)`.
pub fn drain_x(q: u64, b_s: f64, c_s: f64, r0_s: f64, cap: f64) -> f64 {
    let qf = q as f64;
    least(qf / (b_s + qf * c_s + r0_s), cap)
}

impl From<&FlashParams> for ClosedForm {
    fn from(p: &FlashParams) -> Self {
        Self {
            units: p.units as f64,
            read_latency_ns: p.read_latency_ns as f64,
            write_latency_ns: p.write_latency_ns as f64,
            read_rate_bps: p.read_rate_bps as f64,
            write_rate_bps: p.write_rate_bps as f64,
            link_rate_bps: p.link_rate_bps as f64,
            duplex: p.duplex,
            transfer_overhead_ns: p.transfer_overhead_ns as f64,
            turnaround_ns: p.turnaround_ns as f64,
            batch_overhead_ns: p.batch_overhead_ns as f64,
            command_overhead_ns: p.command_overhead_ns as f64,
            // Only when the table set it: unset, it follows command_overhead.
            write_command_overhead_ns: p
                .values
                .iter()
                .any(|(s, v)| s.name == "write_command_overhead" && matches!(v, Value::Int(_)))
                .then_some(p.write_command_overhead_ns as f64),
            batching: p.batching,
            flush_latency_ns: p.flush_latency_ns as f64,
            stall_probability: p.stall_probability,
            stall_time_ns: p.stall_time_ns as f64,
            freeze_interval_ns: p.freeze_interval_ns as f64,
            freeze_time_ns: p.freeze_time_ns as f64,
            freeze_trigger: p.freeze_trigger,
            read_freeze_probability: p.read_freeze_probability,
            write_freeze_probability: p.write_freeze_probability,
            read_stream_bps: p.read_stream_bps as f64,
            write_stream_bps: p.write_stream_bps as f64,
            flush_rate_bps: p.flush_rate_bps as f64,
        }
    }
}

impl ClosedForm {
    /// The closed forms of parameters given by their stack-file names ([`ENTRY`]'s specs),
    /// each missing one at its declared default. A number is taken as it is, in its
    /// spec's unit, after the checks of its kind that hold for real numbers (finite, not
    /// negative; a rate or a count of at least 1, a count at most its maximum); a text is
    /// parsed as the stack file's value is. An undeclared name or a bad value is a
    /// [`ParamError`] naming it.
    pub fn from_figures<'a>(
        figures: impl IntoIterator<Item = (&'a str, Figure<'a>)>,
    ) -> Result<Self, ParamError> {
        // The defaults once per process: a fit builds the closed forms for every trial.
        static DEFAULTS: OnceLock<ClosedForm> = OnceLock::new();
        let mut form = DEFAULTS
            .get_or_init(|| {
                let values = Values::defaults(ENTRY.params.iter());
                ClosedForm::from(&FlashParams::from_values(ENTRY.build.profiles[0], &values))
            })
            .clone();
        for (key, figure) in figures {
            let Some(spec) = ENTRY.params.iter().find(|s| s.name == key) else {
                return Err(ParamError::Unknown {
                    key: key.to_string(),
                    accepted: ENTRY
                        .params
                        .iter()
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            let x = match figure {
                Figure::Number(x) => number(spec, x)?,
                Figure::Text(s) => match spec.parse(&toml::Value::String(s.to_string()))? {
                    Value::Choice("half") => {
                        form.duplex = Duplex::Half;
                        continue;
                    }
                    Value::Choice("drain") => {
                        form.batching = Batching::Drain;
                        continue;
                    }
                    Value::Choice("snapshot") => {
                        form.batching = Batching::Snapshot;
                        continue;
                    }
                    // The ring's order moves each direction's latency, not a loop's
                    // throughput or mean latency over both (as read_priority).
                    Value::Choice("fifo" | "mq-deadline") if spec.name == "ring_scheduler" => {
                        continue;
                    }
                    Value::Choice(trigger) if spec.name == "freeze_trigger" => {
                        form.freeze_trigger = match trigger {
                            "command" => FreezeTrigger::Command,
                            _ => FreezeTrigger::Clock,
                        };
                        continue;
                    }
                    Value::Choice(_) => {
                        form.duplex = Duplex::Full;
                        continue;
                    }
                    Value::Int(n) => n as f64,
                    Value::Float(x) => x,
                    // The order reads and writes are served in moves neither a loop's
                    // throughput nor its mean latency over both (Little's law).
                    Value::Bool(_) if spec.name == "read_priority" => continue,
                    // Merging what waits for the ring moves the requests the ring sees,
                    // which the closed forms (no ring) do not model.
                    Value::Bool(_) if spec.name == "ring_merges" => continue,
                    // Which request mq-deadline takes next, as read_priority.
                    Value::Bool(_) if spec.name == "ring_dispatch_position" => continue,
                    Value::Bool(_) | Value::Computed(_) => {
                        return Err(ParamError::Bad {
                            key: spec.name.to_string(),
                            value: format!("\"{s}\""),
                            expected: spec.kind.expected(),
                        })
                    }
                },
            };
            if spec.name == "write_command_overhead" {
                form.write_command_overhead_ns = Some(x);
            } else if let Some(slot) = form.slot(spec.name) {
                *slot = x;
            }
        }
        Ok(form)
    }

    /// The figure of parameter `name` (None: one the closed forms do not use, as
    /// `capacity`, or `duplex`).
    fn slot(&mut self, name: &str) -> Option<&mut f64> {
        Some(match name {
            "units" => &mut self.units,
            "read_latency" => &mut self.read_latency_ns,
            "write_latency" => &mut self.write_latency_ns,
            "read_rate" => &mut self.read_rate_bps,
            "write_rate" => &mut self.write_rate_bps,
            "link_rate" => &mut self.link_rate_bps,
            "transfer_overhead" => &mut self.transfer_overhead_ns,
            "turnaround" => &mut self.turnaround_ns,
            "batch_overhead" => &mut self.batch_overhead_ns,
            "command_overhead" => &mut self.command_overhead_ns,
            "flush_latency" => &mut self.flush_latency_ns,
            "stall_probability" => &mut self.stall_probability,
            "stall_time" => &mut self.stall_time_ns,
            "freeze_interval" => &mut self.freeze_interval_ns,
            "freeze_time" => &mut self.freeze_time_ns,
            "read_freeze_probability" => &mut self.read_freeze_probability,
            "write_freeze_probability" => &mut self.write_freeze_probability,
            "read_stream_rate" => &mut self.read_stream_bps,
            "write_stream_rate" => &mut self.write_stream_bps,
            "flush_rate" => &mut self.flush_rate_bps,
            _ => return None,
        })
    }

    /// `(a, X')` of a closed loop: a = its requests' unit time in seconds (a mix: the mean
    /// `a_m`), X' = its requests per second bounded by everything but the units (the loop
    /// through the processor, the pipes, the link); X = min(N / a, X')
    /// ([`Self::requests_per_s`]). A fit that varies only N computes this once.
    pub fn bounds(&self, job: &ClosedLoop) -> (f64, f64) {
        let (q, link, len) = (job.iodepth, self.link_rate_bps, job.bs as f64);
        let c = self.transfer_overhead_ns / 1e9;
        let b = self.batch_overhead_ns / 1e9;
        // Each direction's command cost (a mix: their mean, as a and t), and with freezes
        // started by commands its mean share of the processor stopped, p_d D (module doc,
        // "Freezes started by commands").
        let (k_r, k_w) = (
            self.command_overhead_ns / 1e9,
            self.write_command_ns() / 1e9,
        );
        let (f_r, f_w) = self.command_freeze_s(b > 0.0 || k_r > 0.0 || k_w > 0.0);
        let (k_r, k_w) = (k_r + f_r, k_w + f_w);
        let (a_r, a_w) = (self.read_latency_ns / 1e9, self.write_latency_ns / 1e9);
        // A command's mean stall: on its unit, away from the processor and its pipe; the
        // path's delay is part of every round trip, in no resource.
        let z = self.stall_probability * self.stall_time_ns / 1e9;
        let h = job.path_ns / 1e9;
        // t(L, d) = c + L / min(rate_d, link_rate): a request's time on its pipe.
        let t_r = c + len / least(self.read_rate_bps, link);
        let t_w = c + len / least(self.write_rate_bps, link);
        // A lone command's time past the processor, a + t, or its own stream's L / s when
        // that is longer (module doc, "Streams and the cache's drain").
        let (u_r, u_w) = (
            streamed(a_r + t_r, len, self.read_stream_bps),
            streamed(a_w + t_w, len, self.write_stream_bps),
        );
        let f = match job.load {
            Load::Read => 1.0,
            Load::Write => 0.0,
            Load::Mixed { read_percent } => read_percent as f64 / 100.0,
        };
        let k = f * k_r + (1.0 - f) * k_w;
        if self.batching == Batching::Drain && (b > 0.0 || k_r > 0.0 || k_w > 0.0) {
            // A draining pass moves its commands' data: each costs k + t in it, then its
            // unit (module doc, "The processor's passes").
            let a = f * a_r + (1.0 - f) * a_w;
            let t = f * t_r + (1.0 - f) * t_w;
            let (s_r, s_w) = (self.read_stream_bps, self.write_stream_bps);
            let stream = f * streamed(0.0, len, s_r) + (1.0 - f) * streamed(0.0, len, s_w);
            let r0 = a + z + h;
            let x = drain_x(q, b, k + t, r0, f64::INFINITY);
            // A lone command's stream, from its arrival, when it outlasts the pass and unit.
            let x = least(x, q as f64 / (stream + z + h));
            return (a + z, x);
        }
        let through = |r0: f64, cap: f64| processor_x(q, b, k, r0, cap);
        match job.load {
            Load::Read => return (a_r + z, through(u_r + z + h, 1.0 / t_r)),
            Load::Write => return (a_w + z, through(u_w + z + h, 1.0 / t_w)),
            Load::Mixed { .. } => {}
        }
        let a = f * a_r + (1.0 - f) * a_w;
        let t = f * t_r + (1.0 - f) * t_w;
        let lone = if self.read_stream_bps > 0.0 || self.write_stream_bps > 0.0 {
            f * u_r + (1.0 - f) * u_w
        } else {
            a + t
        };
        let (pipe_r, pipe_w) = (c + len / self.read_rate_bps, c + len / self.write_rate_bps);
        let pipes = match self.duplex {
            Duplex::Half => {
                let turns = 2.0 * f * (1.0 - f) * self.turnaround_ns / 1e9;
                1.0 / (f * pipe_r + (1.0 - f) * pipe_w + turns)
            }
            Duplex::Full => {
                let r = if f > 0.0 {
                    1.0 / (f * pipe_r)
                } else {
                    f64::INFINITY
                };
                let w = if f < 1.0 {
                    1.0 / ((1.0 - f) * pipe_w)
                } else {
                    f64::INFINITY
                };
                least(r, w)
            }
        };
        (a + z, through(lone + z + h, least(pipes, link / len)))
    }

    /// X(q): requests per second of the closed loop, `min(N / a, X')` ([`Self::bounds`]),
    /// times the share of the time the device is not frozen, `1 - D / I` (module doc,
    /// "Freezes").
    pub fn requests_per_s(&self, job: &ClosedLoop) -> f64 {
        let (a, rest) = self.bounds(job);
        least(self.units / a, rest) * self.running_share()
    }

    /// A read's and a write's mean time of the processor stopped by commands in seconds,
    /// `(p_r D, p_w D)` (module doc, "Freezes started by commands"; a loop of read share f
    /// pays `f p_r D + (1 - f) p_w D` a command); 0 with the clock's freezes or without a
    /// processor (`processor`).
    fn command_freeze_s(&self, processor: bool) -> (f64, f64) {
        if self.freeze_trigger != FreezeTrigger::Command || !processor {
            return (0.0, 0.0);
        }
        let d = self.freeze_time_ns / 1e9;
        (
            self.read_freeze_probability * d,
            self.write_freeze_probability * d,
        )
    }

    /// A write's cost on the processor in ns: `write_command_overhead`, or command_overhead
    /// when it is not set.
    pub fn write_command_ns(&self) -> f64 {
        self.write_command_overhead_ns
            .unwrap_or(self.command_overhead_ns)
    }

    /// The share of the time the device is not frozen: `1 - D / I` (1 without freezes, or
    /// with freezes started by commands, which stop the processor alone).
    pub fn running_share(&self) -> f64 {
        if self.freeze_trigger == FreezeTrigger::Clock
            && self.freeze_interval_ns > 0.0
            && self.freeze_time_ns > 0.0
        {
            (1.0 - self.freeze_time_ns / self.freeze_interval_ns).max(0.0)
        } else {
            1.0
        }
    }

    /// `(requests per second, mean latency in ns)` of the closed loop: X and `q / X`
    /// (bytes per second: `X L`).
    pub fn closed_loop(&self, job: &ClosedLoop) -> (f64, f64) {
        let x = self.requests_per_s(job);
        (x, job.iodepth as f64 / x * 1e9)
    }

    /// A FLUSH's latency on a device without a write buffer, in ns: through the processor
    /// as a batch of one (`batch_overhead + command_overhead`), then `flush_latency` (the
    /// figure fio's `fdatasync=1` at QD1 times).
    pub fn flush_ns(&self) -> f64 {
        self.flush_latency_ns + (self.batch_overhead_ns + self.command_overhead_ns)
    }

    /// A FLUSH's latency after one write of `len` bytes on an idle device without a write
    /// buffer (fio's `fdatasync=1` at QD1), in ns: [`Self::flush_ns`] plus the drain of those
    /// bytes at `flush_rate` (none when it is 0).
    pub fn flush_after_ns(&self, len: u64) -> f64 {
        let drain = if self.flush_rate_bps > 0.0 {
            len as f64 / self.flush_rate_bps * 1e9
        } else {
            0.0
        };
        self.flush_ns() + drain
    }
}

/// `lone_s`, or a stream's `len / rate` seconds when that is longer (rate 0: no stream).
fn streamed(lone_s: f64, len: f64, rate: f64) -> f64 {
    if rate > 0.0 {
        lone_s.max(len / rate)
    } else {
        lone_s
    }
}

/// A number for parameter `spec` of the closed forms: finite and not negative; a rate at
/// least 1 byte/s; a count within its bounds; a positive duration not 0; a size within its
/// bounds (as the stack file's checks, but without rounding).
fn number(spec: &ParamSpec, x: f64) -> Result<f64, ParamError> {
    let ok = x.is_finite()
        && x >= 0.0
        && match spec.kind {
            Kind::Rate => x >= 1.0,
            Kind::Count { min, max } | Kind::Size { min, max, .. } => {
                (min as f64..=max as f64).contains(&x)
            }
            Kind::Duration { positive, .. } => !positive || x > 0.0,
            Kind::Fraction { min, max } => (min..=max).contains(&x),
            Kind::Choice(_) | Kind::Bool => false,
        };
    if ok {
        Ok(x)
    } else {
        Err(ParamError::Bad {
            key: spec.name.to_string(),
            value: x.to_string(),
            expected: spec.kind.expected(),
        })
    }
}

/// A command's next step, due at the stage's time.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// A read's unit work ended: its data moves to the host.
    ReadData(DevCmd),
    /// An unbuffered write's data arrived: its unit work follows, then it is done.
    WriteUnit(DevCmd),
    /// A buffered write's data arrived: its unit work is queued.
    BufferedUnit(DevCmd),
    /// A buffered write's unit work ended: it leaves the buffer (done now if FUA).
    Drained(DevCmd),
    /// The command processor finished its batch: its commands go on to units and pipes.
    BatchEnd,
}

pub struct Flash {
    name: String,
    p: FlashParams,
    /// When each unit is next free (a min-heap of `units` times).
    unit_free: BinaryHeap<Reverse<Ns>>,
    /// When each data pipe is next free (`Duplex::pipe` indexes them), and the direction of
    /// its last transfer (true: read).
    pipe_free: [Ns; 2],
    pipe_read: [Option<bool>; 2],
    link_free: Ns,
    /// Internal steps keyed by (time, order booked).
    stages: MinHeap<Stage>,
    seq: u64,
    /// Write buffer: bytes held, writes waiting for space (FIFO), buffered writes submitted
    /// and drained so far, flushes waiting for the drain (the count they need, the command).
    buf_used: u64,
    waiting: VecDeque<DevCmd>,
    buffered: u64,
    drained: u64,
    flushes: VecDeque<(u64, DevCmd)>,
    /// The command processor (with a batch or command overhead): commands waiting for the
    /// next batch, and the batch being processed (empty: the processor is idle).
    pending: Vec<DevCmd>,
    batch: Vec<DevCmd>,
    /// Where the commands that last joined a draining pass start in `batch`.
    joined: usize,
    done: Completions,
    stats: DeviceStats,
    busy: Busy,
    /// The unit times' draws (used only with a spread).
    rng: Rng,
    /// The stalls' strata over the data commands (module doc, "Stalls"; None without
    /// stalls), on a stream of their own ("flash/stall", so that adding stalls leaves the
    /// unit times' draws as they were), and the next stall's duration quantile v_k.
    stall: Option<Strata>,
    stall_v: f64,
    /// Streams (module doc, "Streams and the cache's drain"): each streaming command's
    /// earliest completion by its tag (empty without a stream rate).
    stream_end: std::collections::HashMap<u64, Ns>,
    /// Whether either direction streams (a device without streams checks only this).
    streams: bool,
    /// The cache's drain (with a flush_rate): bytes of writes dispatched since the last
    /// FLUSH, and when the last FLUSH's drain ends.
    dirty_bytes: u64,
    flush_free: Ns,
    /// Device-wide freezes (None: none; its clock is then real time).
    freeze: Option<Freezes>,
    /// The reads and the writes that stop the command processor (module doc, "Freezes
    /// started by commands"; None: none).
    read_freeze: Option<Strata>,
    write_freeze: Option<Strata>,
    /// The ring (module doc, "The ring"): descriptors free, commands waiting for them (the
    /// one that found too few first), and the descriptors each command in it holds by tag.
    ring_free: u64,
    ring_head: Option<DevCmd>,
    ring_wait: VecDeque<DevCmd>,
    /// With `ring_scheduler = "mq-deadline"`: the waiting commands in vmio-core's
    /// mq-deadline (instead of `ring_wait`).
    ring_sched: Option<MqDeadline>,
    /// blk-mq's hardware queue in front of the ring (with `ring_sched`): stopped by a
    /// request the ring turned back until a completion, and its `dispatch_busy` average.
    hw_stopped: bool,
    dispatch_busy: u32,
    ring_held: std::collections::HashMap<u64, u64>,
    /// The guest queue's splits and merges (module doc, "The ring's requests"): a part's
    /// tag -> its command's, a split command's parts still in flight, a merged request's
    /// other commands, and the next part's tag (counting down from u64::MAX).
    part_of: std::collections::HashMap<u64, u64>,
    parts_left: std::collections::HashMap<u64, u32>,
    merged: std::collections::HashMap<u64, Vec<u64>>,
    next_part: u64,
}

/// Device-wide freezes (module doc, "Freezes"): the k-th starts at real time
/// `max((k + u_k) I, the previous one's end)` and lasts D; the device's own clock stops
/// meanwhile. Kept as the freezes' starts on both clocks, generated as far as asked.
struct Freezes {
    interval: Ns,
    time: Ns,
    rng: Rng,
    /// Each freeze's start in real time and on the device's clock (`real - k D`).
    real: Vec<Ns>,
    device: Vec<Ns>,
}

impl Freezes {
    fn new(interval: Ns, time: Ns, seed: u64) -> Self {
        Self {
            interval,
            time,
            rng: Rng::derive(seed, "flash/freeze"),
            real: Vec::new(),
            device: Vec::new(),
        }
    }

    /// The next freeze: one start drawn uniformly in its interval, after the last's end.
    fn push(&mut self) {
        let k = self.real.len() as u64;
        let at = ((k as f64 + self.rng.unit()) * self.interval as f64) as Ns;
        let at = match self.real.last() {
            Some(&last) => at.max(last + self.time),
            None => at,
        };
        self.real.push(at);
        self.device.push(at - k * self.time);
    }

    /// Freezes generated past device time `dev` (what [`Self::to_real`] needs).
    fn cover_device(&mut self, dev: Ns) {
        while self.device.last().is_none_or(|&d| d <= dev) {
            self.push();
        }
    }

    /// The device's clock at real time `real`: real less the freezes ended by then; during
    /// a freeze, its start.
    fn device_time(&mut self, real: Ns) -> Ns {
        while self.real.last().is_none_or(|&r| r <= real) {
            self.push();
        }
        let k = self.real.partition_point(|&r| r <= real);
        if k == 0 {
            return real;
        }
        let start = self.real[k - 1];
        if real < start + self.time {
            self.device[k - 1]
        } else {
            real - k as u64 * self.time
        }
    }

    /// The real start of the k-th freeze.
    #[cfg(test)]
    fn real_start(&mut self, k: usize) -> Ns {
        while self.real.len() <= k {
            self.push();
        }
        self.real[k]
    }

    /// The real time of device time `dev` (generated by [`Self::cover_device`]): dev plus
    /// the freezes that started before it.
    fn to_real(&self, dev: Ns) -> Ns {
        let k = self.device.partition_point(|&d| d < dev);
        dev + k as u64 * self.time
    }
}

/// Stratified draws of a share p of the events counted (module doc, "Stalls"): the events
/// fall in blocks of 1 / p and one of each block is hit, at a position drawn uniformly in it
/// (the next event when that falls on one already counted). The stalls' and the commands'
/// freezes both draw with it, each on its own stream.
struct Strata {
    p: f64,
    rng: Rng,
    seen: u64,
    k: u64,
    next: u64,
}

impl Strata {
    fn new(p: f64, mut rng: Rng) -> Self {
        let next = (rng.unit() / p) as u64;
        Self {
            p,
            rng,
            seen: 0,
            k: 0,
            next,
        }
    }

    /// Whether the next event is hit.
    fn hit(&mut self) -> bool {
        let i = self.seen;
        self.seen += 1;
        if i != self.next {
            return false;
        }
        self.k += 1;
        let at = ((self.k as f64 + self.rng.unit()) / self.p) as u64;
        self.next = at.max(i + 1);
        true
    }
}

/// The step of the stalls' duration quantiles: the golden ratio's fractional part,
/// (sqrt(5) - 1) / 2 (module doc, "Stalls").
const GOLDEN_STEP: f64 = 0.618_033_988_749_894_9;

impl Flash {
    /// A device whose unit times (with a spread) are drawn from [`FLASH_SEED`].
    pub fn new(name: &str, p: FlashParams) -> Self {
        Self::new_seeded(name, p, FLASH_SEED)
    }

    /// A device whose unit times (with a spread) are drawn from `seed` (a run's devices:
    /// derived from the run seed).
    pub fn new_seeded(name: &str, p: FlashParams, seed: u64) -> Self {
        // The first stratum's stall, then the durations' start (none without stalls).
        let (stall, stall_v) = if p.stalls() {
            let mut strata = Strata::new(p.stall_probability, Rng::derive(seed, "flash/stall"));
            let v = strata.rng.unit();
            (Some(strata), v)
        } else {
            (None, 0.0)
        };
        Self {
            rng: Rng::derive(seed, "flash/service"),
            stall,
            stall_v,
            stream_end: std::collections::HashMap::new(),
            streams: p.read_stream_bps > 0 || p.write_stream_bps > 0,
            dirty_bytes: 0,
            flush_free: 0,
            ring_free: p.ring_descriptors,
            ring_head: None,
            ring_wait: VecDeque::new(),
            ring_sched: (p.ring_scheduler == RingScheduler::MqDeadline).then(|| {
                let s = MqDeadline::new(
                    GUEST_READ_EXPIRE_NS,
                    GUEST_WRITE_EXPIRE_NS,
                    p.merge_limit_bytes(),
                );
                match p.ring_dispatch_position {
                    true => s.tracking_position(),
                    false => s,
                }
            }),
            ring_held: std::collections::HashMap::new(),
            part_of: std::collections::HashMap::new(),
            parts_left: std::collections::HashMap::new(),
            merged: std::collections::HashMap::new(),
            next_part: u64::MAX,
            hw_stopped: false,
            dispatch_busy: 0,
            freeze: p
                .freezes()
                .then(|| Freezes::new(p.freeze_interval_ns, p.freeze_time_ns, seed)),
            read_freeze: (p.command_freezes() && p.read_freeze_probability > 0.0).then(|| {
                Strata::new(
                    p.read_freeze_probability,
                    Rng::derive(seed, "flash/read-freeze"),
                )
            }),
            write_freeze: (p.command_freezes() && p.write_freeze_probability > 0.0).then(|| {
                Strata::new(
                    p.write_freeze_probability,
                    Rng::derive(seed, "flash/write-freeze"),
                )
            }),
            name: name.to_string(),
            unit_free: (0..p.units).map(|_| Reverse(0)).collect(),
            pipe_free: [0; 2],
            pipe_read: [None; 2],
            link_free: 0,
            stages: MinHeap::with_capacity(p.queue_depth as usize * 2),
            seq: 0,
            buf_used: 0,
            waiting: VecDeque::new(),
            buffered: 0,
            drained: 0,
            flushes: VecDeque::new(),
            pending: Vec::new(),
            batch: Vec::new(),
            joined: 0,
            done: Completions::with_capacity(p.queue_depth as usize * 2),
            stats: DeviceStats::default(),
            busy: Busy::default(),
            p,
        }
    }

    fn stage(&mut self, at: Ns, s: Stage) {
        if let Some(f) = self.freeze.as_mut() {
            f.cover_device(at);
        }
        self.seq += 1;
        self.stages.push((at, self.seq), s);
    }

    /// `cmd` completes at device time `end` (with freezes: at its real time).
    #[inline]
    fn complete(&mut self, end: Ns, cmd: &DevCmd) {
        let end = match self.freeze.as_mut() {
            Some(f) => {
                f.cover_device(end);
                f.to_real(end)
            }
            None => end,
        };
        self.done.push(end, cmd);
    }

    /// The device's clock at real time `now` (module doc, "Freezes"): `now` without freezes.
    #[inline]
    fn clock(&mut self, now: Ns) -> Ns {
        match self.freeze.as_mut() {
            Some(f) => f.device_time(now),
            None => now,
        }
    }

    /// Move `len` bytes in direction `op` from `ready`; returns when the last byte arrives.
    fn transfer(&mut self, ready: Ns, op: Op, len: u64) -> Ns {
        let rate = match op {
            Op::Read => self.p.read_rate_bps,
            _ => self.p.write_rate_bps,
        };
        let c = self.p.transfer_overhead_ns;
        let i = self.p.duplex.pipe(op);
        let read = matches!(op, Op::Read);
        // A busy pipe turning to the other direction waits `turnaround` after its last
        // transfer (only the half-duplex pipe ever carries both; an idle one has turned).
        let turn = match self.pipe_read[i] {
            Some(last) if last != read && self.pipe_free[i] > ready => self.p.turnaround_ns,
            _ => 0,
        };
        self.pipe_read[i] = Some(read);
        let start = ready.max(self.pipe_free[i] + turn).max(self.link_free);
        self.pipe_free[i] = start + c + transfer_ns(len, rate);
        self.link_free = start + transfer_ns(len, self.p.link_rate_bps);
        start + c + transfer_ns(len, rate.min(self.p.link_rate_bps))
    }

    /// A unit time of `op`: its latency, or a draw of its distribution with a spread.
    fn service_ns(&mut self, op: Op) -> Ns {
        let st = self.p.service(op);
        if st.constant() {
            return st.mean_ns as Ns;
        }
        st.quantile_ns(self.rng.unit()).round() as Ns
    }

    /// A data command's stall (module doc, "Stalls"): 0 without stalls (no draw is made);
    /// else the stalled command of its stratum takes Q_stall(v_k), and the next stratum's is
    /// drawn; every other command, 0.
    fn stall_ns(&mut self) -> Ns {
        if !self.stall.as_mut().is_some_and(Strata::hit) {
            return 0;
        }
        let v = self.stall_v;
        self.stall_v = (v + GOLDEN_STEP).fract();
        self.p.stall().quantile_ns(v).round() as Ns
    }

    /// Unit work of `busy_ns` ready at `ready`, on the unit free first; returns its end.
    fn unit(&mut self, ready: Ns, busy_ns: Ns) -> Ns {
        let mut first = self
            .unit_free
            .peek_mut()
            .expect("units >= 1 (its kind's minimum)");
        let end = ready.max(first.0) + busy_ns;
        *first = Reverse(end);
        end
    }

    /// Buffer bytes a write holds: all of it, or the whole buffer if it is larger.
    fn need(&self, cmd: &DevCmd) -> u64 {
        cmd.len_bytes.min(self.p.write_buffer_bytes)
    }

    /// Admit waiting writes, first come first served, while the buffer has room.
    fn admit(&mut self, now: Ns) {
        while let Some(cmd) = self.waiting.front().copied() {
            let need = self.need(&cmd);
            if self.buf_used + need > self.p.write_buffer_bytes {
                break;
            }
            self.waiting.pop_front();
            self.buf_used += need;
            let end = self.transfer(now, Op::Write, cmd.len_bytes);
            if !cmd.fua {
                let stall = self.stall_ns();
                self.complete(end + stall, &cmd);
            }
            self.stage(end, Stage::BufferedUnit(cmd));
        }
    }

    /// Process the internal steps due at or before `now`, in time order.
    fn run(&mut self, now: Ns) {
        while let Some((t, _)) = self.stages.peek_key() {
            if t > now {
                break;
            }
            let Some((_, s)) = self.stages.pop() else {
                break;
            };
            match s {
                Stage::ReadData(cmd) => {
                    let end = self.transfer(t, Op::Read, cmd.len_bytes);
                    let end = self.streamed(end, &cmd);
                    self.complete(end, &cmd);
                }
                Stage::WriteUnit(cmd) => {
                    let busy = self.service_ns(Op::Write) + self.stall_ns();
                    let end = self.unit(t, busy);
                    let end = self.streamed(end, &cmd);
                    self.complete(end, &cmd);
                }
                Stage::BufferedUnit(cmd) => {
                    let busy = self.service_ns(Op::Write);
                    let end = self.unit(t, busy);
                    self.stage(end, Stage::Drained(cmd));
                }
                Stage::Drained(cmd) => {
                    self.buf_used -= self.need(&cmd);
                    self.drained += 1;
                    if cmd.fua {
                        let stall = self.stall_ns();
                        self.complete(t + stall, &cmd);
                    }
                    while let Some(&(target, f)) = self.flushes.front() {
                        if target > self.drained {
                            break;
                        }
                        self.flushes.pop_front();
                        self.complete(t + self.p.flush_latency_ns, &f);
                    }
                    self.admit(t);
                }
                Stage::BatchEnd if self.p.batching == Batching::Drain && self.join_pass() => {
                    // A draining pass pops what arrived meanwhile, each its command_overhead
                    // and transfer, before its commands go on (module doc, "The processor's
                    // passes").
                    let more = self.pass_cost(self.joined) + self.command_freeze_ns(self.joined);
                    self.stage(t + more, Stage::BatchEnd);
                }
                Stage::BatchEnd => {
                    let batch = std::mem::take(&mut self.batch);
                    for cmd in &batch {
                        match self.p.batching {
                            Batching::Snapshot => self.dispatch(t, *cmd),
                            Batching::Drain => self.dispatch_drained(t, *cmd),
                        }
                    }
                    // Reuse the batch's allocation for the next one.
                    self.batch = batch;
                    self.batch.clear();
                    self.start_batch(t);
                }
            }
        }
    }

    /// A streaming command's stream starts `now`: its earliest completion is kept by tag
    /// (module doc, "Streams and the cache's drain"); nothing without a stream rate.
    #[inline]
    fn stream_from(&mut self, now: Ns, cmd: &DevCmd) {
        if !self.streams {
            return;
        }
        let rate = self.p.stream_bps(cmd.op);
        if rate > 0 {
            let end = now + transfer_ns(cmd.len_bytes, rate);
            self.stream_end.insert(cmd.tag, end);
        }
    }

    /// `end`, or the command's stream's end when that is later.
    #[inline]
    fn streamed(&mut self, end: Ns, cmd: &DevCmd) -> Ns {
        if !self.streams || self.p.stream_bps(cmd.op) == 0 {
            return end;
        }
        self.stream_end.remove(&cmd.tag).map_or(end, |s| end.max(s))
    }

    /// A FLUSH dispatched `now` on a device without a write buffer: `flush_latency`, and
    /// with a `flush_rate` the drain of the bytes written since the last FLUSH, after that
    /// one's drain (module doc, "Streams and the cache's drain").
    fn flush_done(&mut self, now: Ns) -> Ns {
        let rate = self.p.flush_rate_bps;
        if rate == 0 {
            return now + self.p.flush_latency_ns;
        }
        let start = now.max(self.flush_free);
        let drain = transfer_ns(std::mem::take(&mut self.dirty_bytes), rate);
        self.flush_free = start + self.p.flush_latency_ns + drain;
        self.flush_free
    }

    /// Whether commands pass the serial command processor (module doc).
    fn processor(&self) -> bool {
        self.p.processor()
    }

    /// The processor's time stopped by the batch's commands from index `from` on (module
    /// doc, "Freezes started by commands"): `freeze_time` for each read or write its
    /// direction's stratified draw hits, each direction counted in the order the processor
    /// takes its commands; 0 without such freezes (no draw).
    fn command_freeze_ns(&mut self, from: usize) -> Ns {
        if self.read_freeze.is_none() && self.write_freeze.is_none() {
            return 0;
        }
        let (reads, writes) = (&mut self.read_freeze, &mut self.write_freeze);
        let hits = self.batch[from..]
            .iter()
            .filter(|c| {
                let strata = match c.op {
                    Op::Read => reads.as_mut(),
                    Op::Write => writes.as_mut(),
                    _ => None,
                };
                strata.is_some_and(Strata::hit)
            })
            .count() as u64;
        hits * self.p.freeze_time_ns
    }

    /// An idle processor takes every waiting command as one batch, busy for
    /// `batch_overhead + k * command_overhead`.
    fn start_batch(&mut self, now: Ns) {
        if !self.batch.is_empty() || self.pending.is_empty() {
            return;
        }
        if self.p.read_priority && self.pending.iter().any(|c| c.op == Op::Read) {
            // Reads first: a batch of the waiting reads, the rest waiting for the next
            // (module doc, "Reads first").
            self.batch
                .extend(self.pending.iter().filter(|c| c.op == Op::Read));
            self.pending.retain(|c| c.op != Op::Read);
        } else {
            std::mem::swap(&mut self.batch, &mut self.pending);
        }
        let cost = match self.p.batching {
            Batching::Snapshot => self.batch.iter().map(|c| self.p.command_ns(c.op)).sum(),
            Batching::Drain => self.pass_cost(0),
        };
        let end = now + self.p.batch_overhead_ns + cost + self.command_freeze_ns(0);
        self.stage(end, Stage::BatchEnd);
    }

    /// Whether commands waiting at a draining pass's end join it (module doc, "The
    /// processor's passes"), moving them into the batch and keeping where they start in
    /// `joined`: all of them; with `read_priority`, a pass of reads takes only the reads, and
    /// a pass of writes ends when a read waits ("Reads first").
    fn join_pass(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        self.joined = self.batch.len();
        if !self.p.read_priority {
            self.batch.append(&mut self.pending);
            return true;
        }
        let reading = self.batch.iter().any(|c| c.op == Op::Read);
        let read_waits = self.pending.iter().any(|c| c.op == Op::Read);
        match (reading, read_waits) {
            (true, true) => {
                self.batch
                    .extend(self.pending.iter().filter(|c| c.op == Op::Read));
                self.pending.retain(|c| c.op != Op::Read);
                true
            }
            (false, false) => {
                self.batch.append(&mut self.pending);
                true
            }
            _ => false,
        }
    }

    /// A draining pass's time for the batch's commands from index `from` on: each its
    /// command_overhead and, a read or a write without a buffer, its transfer t(L, d) (the
    /// pass moves their data: module doc, "The processor's passes").
    fn pass_cost(&self, from: usize) -> Ns {
        let p = &self.p;
        self.batch[from..]
            .iter()
            .map(|cmd| {
                let rate = match cmd.op {
                    Op::Read => p.read_rate_bps,
                    Op::Write if p.write_buffer_bytes == 0 => p.write_rate_bps,
                    _ => return p.command_ns(cmd.op),
                };
                let data = transfer_ns(cmd.len_bytes, rate.min(p.link_rate_bps));
                p.command_ns(cmd.op) + p.transfer_overhead_ns + data
            })
            .sum()
    }

    /// A command at the end of a draining pass, its data moved: a read or an unbuffered
    /// write takes its unit and is done; anything else goes on as after a snapshot's batch.
    fn dispatch_drained(&mut self, now: Ns, cmd: DevCmd) {
        match cmd.op {
            Op::Read => {
                let busy = self.service_ns(Op::Read) + self.stall_ns();
                let end = self.unit(now, busy);
                let end = self.streamed(end, &cmd);
                self.complete(end, &cmd);
            }
            Op::Write if self.p.write_buffer_bytes == 0 => {
                if self.p.flush_rate_bps > 0 {
                    self.dirty_bytes += cmd.len_bytes;
                }
                let busy = self.service_ns(Op::Write) + self.stall_ns();
                let end = self.unit(now, busy);
                let end = self.streamed(end, &cmd);
                self.complete(end, &cmd);
            }
            _ => self.dispatch(now, cmd),
        }
    }

    /// A command past the processor (or submitted, without one) goes to its unit or pipe.
    fn dispatch(&mut self, now: Ns, cmd: DevCmd) {
        match cmd.op {
            Op::Read => {
                self.stream_from(now, &cmd);
                let busy = self.service_ns(Op::Read) + self.stall_ns();
                let end = self.unit(now, busy);
                self.stage(end, Stage::ReadData(cmd));
            }
            Op::Write if self.p.write_buffer_bytes == 0 => {
                self.stream_from(now, &cmd);
                if self.p.flush_rate_bps > 0 {
                    self.dirty_bytes += cmd.len_bytes;
                }
                let end = self.transfer(now, Op::Write, cmd.len_bytes);
                self.stage(end, Stage::WriteUnit(cmd));
            }
            Op::Write => {
                self.buffered += 1;
                self.waiting.push_back(cmd);
                self.admit(now);
            }
            Op::Flush if self.drained < self.buffered => {
                self.flushes.push_back((self.buffered, cmd));
            }
            Op::Flush => {
                let end = self.flush_done(now);
                self.complete(end, &cmd);
            }
            Op::Trim => self.complete(now + self.p.flush_latency_ns, &cmd),
        }
    }
}

impl Device for Flash {
    fn identity(&self) -> Identity<'_> {
        let p = &self.p;
        Identity::new(&self.name, &ENTRY, &p.profile, &p.values)
            .limits(p.capacity_bytes, p.queue_depth)
    }

    fn submit(&mut self, real: Ns, cmd: DevCmd) {
        let now = self.clock(real);
        // Steps due by now come first: they became ready before this command.
        self.run(now);
        self.busy.start(real);
        if self.p.ring_descriptors > 0 {
            if self.splits(&cmd) {
                // Each part is a request of its own (module doc, "The ring's requests").
                let s = self.p.segment_bytes;
                let (bio, max) = (BIO_MAX_VECS * s, self.p.max_segments * s);
                let (mut at, mut parts) = (0, 0);
                while at < cmd.len_bytes {
                    let len = (cmd.len_bytes - at).min(bio - at % bio).min(max);
                    let part = DevCmd {
                        tag: self.next_part,
                        offset_bytes: cmd.offset_bytes + at,
                        len_bytes: len,
                        ..cmd
                    };
                    self.part_of.insert(part.tag, cmd.tag);
                    self.next_part -= 1;
                    if at > 0 {
                        self.busy.start(real);
                    }
                    self.wait_ring(now, part);
                    at += len;
                    parts += 1;
                }
                self.parts_left.insert(cmd.tag, parts);
            } else {
                self.wait_ring(now, cmd);
            }
            self.admit_ring(now);
        } else {
            self.enter(now, cmd);
        }
    }

    fn next_event_ns(&self) -> Option<Ns> {
        let stage = self.stages.peek_key().map(|k| match &self.freeze {
            Some(f) => f.to_real(k.0),
            None => k.0,
        });
        match (stage, self.done.next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance(&mut self, now: Ns, done: &mut Vec<u64>) {
        let clock = self.clock(now);
        self.run(clock);
        let from = done.len();
        self.done
            .drain_due(now, done, &mut self.stats, &mut self.busy);
        if self.p.ring_descriptors > 0 && done.len() > from {
            // Completed commands give their descriptors back; waiting ones enter.
            for tag in &done[from..] {
                self.ring_free += self.ring_held.remove(tag).unwrap_or(0);
            }
            if !(self.part_of.is_empty() && self.merged.is_empty()) {
                self.requests_done(now, done, from);
            }
            // virtio_blk's `virtblk_done` restarts a stopped queue.
            self.hw_stopped = false;
            self.admit_ring(clock);
            self.run(clock);
        }
    }

    fn stats(&self, now: Ns) -> DeviceStats {
        self.stats.as_of(&self.busy, now)
    }
}

/// The guest's mq-deadline expiries (Linux's block/mq-deadline.c defaults: `read_expire`
/// HZ / 2, `write_expire` 5 HZ), for `ring_scheduler = "mq-deadline"`.
const GUEST_READ_EXPIRE_NS: Ns = 500_000_000;
const GUEST_WRITE_EXPIRE_NS: Ns = 5_000_000_000;
/// The requests blk-mq takes from the scheduler at once when not `dispatch_busy`: the
/// queue's `nr_requests`, 2 x min(tags, 128) under a scheduler (128 tags here).
const GUEST_NR_REQUESTS: usize = 256;

/// A command waiting for the ring as the guest's I/O scheduler holds it (never merged: its
/// largest merge is 0).
fn dev_io(now: Ns, cmd: DevCmd) -> DevIo {
    DevIo {
        tag: cmd.tag,
        op: cmd.op,
        offset_bytes: cmd.offset_bytes,
        len_bytes: cmd.len_bytes,
        fua: cmd.fua,
        sync: true,
        owner: 0,
        queued_ns: now,
        merged: Vec::new(),
    }
}

impl FlashParams {
    /// The largest request the ring's mq-deadline merges (module doc, "The ring's
    /// requests"): max_segments (else the ring's R - 2) segments; 0 without `ring_merges`.
    fn merge_limit_bytes(&self) -> u64 {
        if !self.ring_merges {
            return 0;
        }
        let segments = match self.max_segments {
            0 => self.ring_descriptors.saturating_sub(2),
            n => n.min(self.ring_descriptors.saturating_sub(2)),
        };
        segments * self.segment_bytes
    }
}

/// The segments of one bio at most (include/linux/bio.h `BIO_MAX_VECS`; a direct I/O's
/// bios: fs/iomap/direct-io.c `iomap_dio_bio_iter`, block/fops.c `__blkdev_direct_IO`).
const BIO_MAX_VECS: u64 = 256;

impl Flash {
    /// Whether `cmd` goes as several requests (module doc, "The ring's requests"): a read or
    /// write of more segments than one bio (`BIO_MAX_VECS`) or `max_segments` allows.
    fn splits(&self, cmd: &DevCmd) -> bool {
        let max = self.p.max_segments;
        max > 0
            && matches!(cmd.op, Op::Read | Op::Write)
            && cmd.len_bytes.div_ceil(self.p.segment_bytes) > max.min(BIO_MAX_VECS)
    }

    /// A request waits for the ring: in the guest's mq-deadline (merged with an adjacent
    /// waiting one with `ring_merges`), or, a FLUSH (blk-flush's requests go to the
    /// dispatch list) or without a scheduler, in `ring_wait`.
    fn wait_ring(&mut self, now: Ns, cmd: DevCmd) {
        match &mut self.ring_sched {
            Some(s) if cmd.op != Op::Flush && self.p.ring_merges => s.insert(now, dev_io(now, cmd)),
            Some(s) if cmd.op != Op::Flush => s.insert_unmerged(now, dev_io(now, cmd)),
            _ => self.ring_wait.push_back(cmd),
        }
    }

    /// The tags completed from `done[from..]` as the engine submitted them: a merged
    /// request's commands all, a part only as the last of its command's (module doc, "The
    /// ring's requests"). `busy` ends once per command (a merged request ended once).
    fn requests_done(&mut self, real: Ns, done: &mut Vec<u64>, from: usize) {
        for tag in done.split_off(from) {
            let others = self.merged.remove(&tag).unwrap_or_default();
            for _ in &others {
                self.busy.end(real);
            }
            for t in std::iter::once(tag).chain(others) {
                let Some(whole) = self.part_of.remove(&t) else {
                    done.push(t);
                    continue;
                };
                let left = self.parts_left.get_mut(&whole).expect("a part's command");
                *left -= 1;
                if *left == 0 {
                    self.parts_left.remove(&whole);
                    done.push(whole);
                }
            }
        }
    }

    /// The descriptors `cmd` takes in the ring: its header and status, and one per
    /// `segment_size` of its data; the whole ring at most (module doc, "The ring").
    fn descriptors(&self, cmd: &DevCmd) -> u64 {
        let segments = cmd.len_bytes.div_ceil(self.p.segment_bytes);
        (2 + segments).min(self.p.ring_descriptors)
    }

    /// Waiting commands enter the ring while it has their descriptors: the one that found
    /// too few first, then the next waiting (mq-deadline's next dispatch with
    /// `ring_scheduler = "mq-deadline"`; else with `read_priority` the first waiting read,
    /// else the first waiting command), each entering the device at `now`.
    fn admit_ring(&mut self, now: Ns) {
        if self.ring_sched.is_some() {
            return self.run_hw_queue(now);
        }
        loop {
            let cmd = match self.ring_head.take() {
                Some(c) => c,
                None => {
                    let i = match self.p.read_priority {
                        true => self.ring_wait.iter().position(|c| c.op == Op::Read),
                        false => None,
                    };
                    match self.ring_wait.remove(i.unwrap_or(0)) {
                        Some(c) => c,
                        None => return,
                    }
                }
            };
            let need = self.descriptors(&cmd);
            if need > self.ring_free {
                self.ring_head = Some(cmd);
                return;
            }
            self.ring_free -= need;
            self.ring_held.insert(cmd.tag, need);
            self.enter(now, cmd);
        }
    }

    /// blk-mq's run of the hardware queue in front of the ring, with mq-deadline (module
    /// doc, "The ring"): nothing while stopped; the dispatch list first, and the scheduler
    /// only when all of it entered; then from the scheduler one request at a time while
    /// `dispatch_busy`, else everything it holds (up to `nr_requests`) at once, in its order.
    fn run_hw_queue(&mut self, now: Ns) {
        if self.hw_stopped {
            return;
        }
        if !self.ring_wait.is_empty() {
            let list = std::mem::take(&mut self.ring_wait);
            if !self.dispatch_list(now, list) {
                return;
            }
        }
        loop {
            let max = match self.dispatch_busy {
                0 => GUEST_NR_REQUESTS,
                _ => 1,
            };
            let mut list = VecDeque::new();
            while list.len() < max {
                match self.ring_sched.as_mut().and_then(|s| s.dispatch(now)) {
                    Some(io) => {
                        if !io.merged.is_empty() {
                            self.merged.insert(io.tag, io.merged);
                        }
                        list.push_back(DevCmd {
                            tag: io.tag,
                            op: io.op,
                            offset_bytes: io.offset_bytes,
                            len_bytes: io.len_bytes,
                            fua: io.fua,
                        })
                    }
                    None => break,
                }
            }
            if list.is_empty() || !self.dispatch_list(now, list) {
                return;
            }
        }
    }

    /// blk-mq's `blk_mq_dispatch_rq_list` to the ring: each command of `list` in order
    /// enters while the ring has its descriptors; the first that finds too few stops the
    /// queue (virtio_blk's -ENOSPC) and it and the rest go to the dispatch list's tail.
    /// `dispatch_busy` is the average of 8 (block/blk-mq.c `blk_mq_update_dispatch_busy`:
    /// x 7 / 8, plus 16 / 8 when busy). Whether all of `list` entered.
    fn dispatch_list(&mut self, now: Ns, mut list: VecDeque<DevCmd>) -> bool {
        while let Some(cmd) = list.pop_front() {
            let need = self.descriptors(&cmd);
            if need > self.ring_free {
                list.push_front(cmd);
                self.ring_wait.extend(list);
                self.hw_stopped = true;
                self.dispatch_busy = (self.dispatch_busy * 7 + 16) / 8;
                return false;
            }
            self.ring_free -= need;
            self.ring_held.insert(cmd.tag, need);
            self.enter(now, cmd);
        }
        self.dispatch_busy = self.dispatch_busy * 7 / 8;
        true
    }

    /// A command enters the device at `now`: the processor, or its unit and pipe.
    fn enter(&mut self, now: Ns, cmd: DevCmd) {
        if self.processor() {
            if self.p.batching == Batching::Drain {
                // A pass moves the command's data: its stream starts as it arrives.
                self.stream_from(now, &cmd);
            }
            self.pending.push(cmd);
            self.start_batch(now);
        } else {
            self.dispatch(now, cmd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{burst, closed_loop, drain, one, typed_params};
    use super::super::{build_device, DeviceError};
    use super::*;

    /// A flash device with the defaults overridden by `table` (a `[[device]]` body).
    fn flash(table: &str) -> Flash {
        let p = typed_params("nv0", "flash", table, |profile, v| {
            Ok(FlashParams::from_values(profile, v))
        });
        Flash::new("nv0", p.unwrap_or_else(|e| panic!("{e}")))
    }

    /// t(L, d) = c + L / min(rate_d, link_rate) of the closed forms, in ns (as the model
    /// rounds it).
    fn t(d: &Flash, op: Op, len: u64) -> Ns {
        let rate = match op {
            Op::Read => d.p.read_rate_bps,
            _ => d.p.write_rate_bps,
        };
        d.p.transfer_overhead_ns + transfer_ns(len, rate.min(d.p.link_rate_bps))
    }

    /// X(q) of the closed forms, requests per second, of `q` requests `op` of `len` bytes.
    fn closed_form_iops(d: &Flash, op: Op, len: u64, q: u64) -> f64 {
        let load = match op {
            Op::Read => Load::Read,
            _ => Load::Write,
        };
        ClosedForm::from(&d.p).requests_per_s(&ClosedLoop {
            load,
            bs: len,
            iodepth: q,
            path_ns: 0.0,
        })
    }

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got / want - 1.0).abs() <= rel
    }

    /// Closed-loop throughput and mean latency of `n` requests `op` of `len` bytes at `q`.
    fn measured(d: &mut Flash, op: Op, len: u64, q: usize, n: usize) -> (f64, f64) {
        let run = closed_loop(d, 0, q, n, |i| (op, i as u64 * len, len));
        (run.iops(), run.mean_latency_ns())
    }

    #[test]
    fn a_qd1_read_takes_the_read_latency_plus_its_transfer_at_the_slower_of_pipe_and_link() {
        let mut d = flash("");
        assert_eq!(
            one(&mut d, 0, 1, Op::Read, 0, 4096, false),
            80 * US + transfer_ns(4096, 3_000_000_000)
        );
        // A link slower than the read pipe sets the transfer.
        let mut d = flash("link_rate = \"1g\"");
        let t0 = 10 * US;
        assert_eq!(
            one(&mut d, t0, 1, Op::Read, 0, 1 << 20, false),
            t0 + 80 * US + transfer_ns(1 << 20, 1 << 30)
        );
        // A transfer overhead adds its set-up to the transfer.
        let mut d = flash("transfer_overhead = \"30us\"");
        assert_eq!(
            one(&mut d, 0, 1, Op::Read, 0, 4096, false),
            80 * US + 30 * US + transfer_ns(4096, 3_000_000_000)
        );
    }

    #[test]
    fn a_qd1_write_without_buffer_takes_its_transfer_then_the_write_latency() {
        let mut d = flash("");
        assert_eq!(
            one(&mut d, 0, 1, Op::Write, 0, 65536, false),
            transfer_ns(65536, 2_000_000_000) + 20 * US
        );
        let mut d = flash("transfer_overhead = \"30us\"");
        assert_eq!(
            one(&mut d, 0, 1, Op::Write, 0, 65536, false),
            30 * US + transfer_ns(65536, 2_000_000_000) + 20 * US
        );
    }

    /// A device whose pipes cost 30 us a command besides the bytes.
    const OVERHEAD: &str = "units = 64\ntransfer_overhead = \"30us\"";

    /// The three regimes of X(q): (table, op, size, q, the bound that should bind); with a
    /// transfer overhead, mid-size requests saturate their pipe at 1 / (c + L / rate).
    const REGIMES: [(&str, Op, u64, usize, &str); 8] = [
        ("units = 8", Op::Read, 4096, 2, "q/(a+t)"),
        ("units = 8", Op::Read, 4096, 32, "N/a"),
        ("units = 8", Op::Read, 1 << 20, 8, "1/t"),
        (
            "units = 4\nwrite_latency = \"100us\"",
            Op::Write,
            4096,
            2,
            "q/(a+t)",
        ),
        (
            "units = 4\nwrite_latency = \"100us\"",
            Op::Write,
            4096,
            16,
            "N/a",
        ),
        (
            "units = 4\nwrite_latency = \"100us\"",
            Op::Write,
            1 << 20,
            8,
            "1/t",
        ),
        (OVERHEAD, Op::Read, 65536, 32, "1/t"),
        (OVERHEAD, Op::Write, 16384, 32, "1/t"),
    ];

    #[test]
    fn closed_loop_throughput_is_the_least_of_the_queue_the_units_and_the_pipe_bounds() {
        for (table, op, len, q, bound) in REGIMES {
            let mut d = flash(table);
            let a = match op {
                Op::Read => d.p.read_latency_ns,
                _ => d.p.write_latency_ns,
            };
            let (tt, n) = (t(&d, op, len), d.p.units);
            let (qs, af, tf) = (q as f64, a as f64 / 1e9, tt as f64 / 1e9);
            let bounds = [
                ("q/(a+t)", qs / (af + tf)),
                ("N/a", n as f64 / af),
                ("1/t", 1.0 / tf),
            ];
            // The closed form (t in real ns) against the bounds (t rounded as the model
            // books it): the one it equals binds.
            let want = closed_form_iops(&d, op, len, q as u64);
            let binding = bounds.iter().find(|b| close(b.1, want, 1e-3)).unwrap().0;
            assert_eq!(
                binding, bound,
                "{table} {op:?} {len} q{q}: the case's regime"
            );
            // The other bounds are at least 20 % away, so the case tests its own.
            for (name, x) in bounds {
                assert!(name == bound || x > 1.2 * want, "{table} {op:?}: {name}");
            }
            let (iops, lat) = measured(&mut d, op, len, q, 20_000);
            assert!(
                close(iops, want, 0.005),
                "{table} {op:?} {len} q{q}: {iops} vs {want}"
            );
            let want_lat = q as f64 / want * 1e9;
            assert!(
                close(lat, want_lat, 0.005),
                "{table} {op:?}: {lat} vs {want_lat}"
            );
        }
    }

    #[test]
    fn a_buffered_write_is_acknowledged_at_its_transfer_end_until_the_buffer_fills() {
        // 16 writes of 4 KiB fill the buffer; one unit drains one write per 100 us.
        let mut d = flash("units = 1\nwrite_latency = \"100us\"\nwrite_buffer = \"64k\"");
        let tt = t(&d, Op::Write, 4096);
        let run = closed_loop(&mut d, 0, 32, 4000, |i| (Op::Write, i as u64 * 4096, 4096));
        for i in 0..16 {
            assert_eq!(run.latencies_ns[i], (i as u64 + 1) * tt, "write {i}");
        }
        // The 17th waits for the first write's unit work to free its space.
        assert_eq!(run.latencies_ns[16], tt + 100 * US + tt);
        // Then acknowledgements come at the drain rate, N / write_latency.
        assert!(
            close(run.iops(), 1e9 / (100 * US) as f64, 0.01),
            "{}",
            run.iops()
        );
        // Alone, a buffered write takes only its transfer.
        let mut d = flash("write_buffer = \"1m\"");
        assert_eq!(one(&mut d, 0, 1, Op::Write, 0, 4096, false), tt);
    }

    #[test]
    fn the_drain_rate_scales_with_the_units() {
        let mut d = flash("units = 4\nwrite_latency = \"100us\"\nwrite_buffer = \"64k\"");
        let run = closed_loop(&mut d, 0, 32, 8000, |i| (Op::Write, i as u64 * 4096, 4096));
        assert!(
            close(run.iops(), 4e9 / (100 * US) as f64, 0.01),
            "{}",
            run.iops()
        );
    }

    #[test]
    fn a_fua_write_waits_for_its_unit_work_even_with_a_buffer() {
        let mut d = flash("write_buffer = \"1m\"\nwrite_latency = \"30us\"");
        let tt = t(&d, Op::Write, 4096);
        assert_eq!(one(&mut d, 0, 1, Op::Write, 0, 4096, true), tt + 30 * US);
        let mut d = flash("write_latency = \"30us\"");
        assert_eq!(one(&mut d, 0, 1, Op::Write, 0, 4096, true), tt + 30 * US);
    }

    /// A processor of 40 us a batch and 10 us a command, in front of the defaults.
    const PROCESSOR: &str = "units = 256\nbatch_overhead = \"40us\"\ncommand_overhead = \"10us\"";

    #[test]
    fn a_lone_command_pays_one_batch_and_one_command_on_the_processor() {
        let mut d = flash(PROCESSOR);
        let tt = t(&d, Op::Read, 4096);
        assert_eq!(
            one(&mut d, 0, 1, Op::Read, 0, 4096, false),
            40 * US + 10 * US + 80 * US + tt
        );
        let mut d = flash(PROCESSOR);
        let tw = t(&d, Op::Write, 4096);
        assert_eq!(
            one(&mut d, 0, 1, Op::Write, 0, 4096, false),
            50 * US + tw + 20 * US
        );
    }

    #[test]
    fn commands_arriving_while_the_processor_is_busy_go_together_as_the_next_batch() {
        let mut d = flash(PROCESSOR);
        let tt = t(&d, Op::Read, 4096);
        burst(&mut d, 0, Op::Read, 4096, 5);
        let done_at = drain(&mut d);
        // The first is a batch of its own; the four behind it leave together after
        // 40 + 4 x 10 us more, then each reads on its own unit and queues for the pipe.
        assert_eq!(done_at[&0], 50 * US + 80 * US + tt);
        let second = 50 * US + 80 * US;
        for tag in 1..5u64 {
            assert_eq!(done_at[&tag], second + 80 * US + tag * tt, "command {tag}");
        }
    }

    #[test]
    fn at_depth_batches_grow_and_the_processor_tends_to_one_command_per_command_overhead() {
        let rate = |q| measured(&mut flash(PROCESSOR), Op::Read, 512, q, 40_000).0;
        // One command at a time: B + c + a + t a command.
        let lone = rate(1);
        let tt = t(&flash(PROCESSOR), Op::Read, 512);
        assert!(close(lone, 1e9 / (130 * US + tt) as f64, 0.001), "{lone}");
        // At depth 256 the batches are long and the 40 us is shared: close to 1 / c, never
        // above it.
        let deep = rate(256);
        assert!(deep <= 1e9 / (10 * US) as f64 * 1.0001, "{deep}");
        assert!(deep >= 0.9 * 1e9 / (10 * US) as f64, "{deep}");
        // Without the processor the same device is bound by its units only.
        let plain = measured(&mut flash("units = 256"), Op::Read, 512, 256, 40_000).0;
        assert!(plain > 2.0 * deep, "{plain} vs {deep}");
    }

    #[test]
    fn a_flush_waits_for_the_buffer_to_empty_then_takes_the_flush_latency() {
        let table =
            "units = 1\nwrite_latency = \"50us\"\nwrite_buffer = \"1m\"\nflush_latency = \"7us\"";
        let mut d = flash(table);
        let tt = t(&d, Op::Write, 4096);
        burst(&mut d, 0, Op::Write, 4096, 4);
        // The writes land at tt, 2tt, 3tt, 4tt; the one unit programs them back to back
        // from tt: the buffer is empty at tt + 4 × 50 us.
        let f = one(&mut d, 0, 9, Op::Flush, 0, 0, false);
        assert_eq!(f, tt + 4 * 50 * US + 7 * US);
        assert_eq!(d.stats(f).write_ops, 4);
        assert_eq!(d.stats(f).flush_ops, 1);
        // An empty buffer (or none): the flush latency alone, as a trim's.
        assert_eq!(one(&mut d, f, 10, Op::Flush, 0, 0, false), f + 7 * US);
        let mut d = flash("flush_latency = \"7us\"");
        assert_eq!(one(&mut d, 5, 1, Op::Flush, 0, 0, false), 5 + 7 * US);
        assert_eq!(one(&mut d, 5, 2, Op::Trim, 0, 1 << 20, false), 5 + 7 * US);
    }

    /// A device with a fixed 40 us read, 30 us write, 2 GB/s pipes and 5 us of transfer
    /// set-up, one command per unit.
    const STREAM: &str = "units = 8\nread_latency = \"40us\"\nwrite_latency = \"30us\"\nread_rate = \"2g\"\nwrite_rate = \"2g\"\nlink_rate = \"8g\"\ntransfer_overhead = \"5us\"\nread_stream_rate = \"1g\"\nwrite_stream_rate = \"1g\"";

    #[test]
    fn a_qd1_command_with_a_stream_rate_takes_the_later_of_its_usual_path_and_its_stream() {
        let g = 1u64 << 30;
        let rate = 2 * g;
        // The usual path a + c + L / rate against the stream's L / s: they cross where
        // a + c = L (1 / s - 1 / rate), L = (a + c) x 2^31 bytes/s: 94 KiB for reads (45 us),
        // 73 KiB for writes (35 us); 4k to 64k below, 256k and 1m above.
        for (op, a) in [(Op::Read, 40 * US), (Op::Write, 30 * US)] {
            for len in [4096u64, 16 << 10, 64 << 10, 256 << 10, 1 << 20] {
                let mut d = flash(STREAM);
                let usual = a + 5 * US + transfer_ns(len, rate);
                let stream = transfer_ns(len, g);
                let want = usual.max(stream);
                assert_eq!(one(&mut d, 0, 1, op, 0, len, false), want, "{op:?} {len}");
                // The closed forms' lone command is the same figure.
                let form = ClosedForm::from(&d.p);
                let load = if op == Op::Read {
                    Load::Read
                } else {
                    Load::Write
                };
                let (_, lat) = form.closed_loop(&ClosedLoop {
                    load,
                    bs: len,
                    iodepth: 1,
                    path_ns: 0.0,
                });
                // (the simulation books whole ns, the closed forms real ones)
                assert!(
                    close(lat, want as f64, 1e-4),
                    "{op:?} {len}: {lat} vs {want}"
                );
            }
        }
        // Both sides of the crossover are exercised: 4 KiB by its usual path, 1 MiB by its
        // stream.
        assert!(40 * US + 5 * US + transfer_ns(4096, rate) > transfer_ns(4096, g));
        assert!(40 * US + 5 * US + transfer_ns(1 << 20, rate) < transfer_ns(1 << 20, g));
    }

    #[test]
    fn a_stream_holds_nothing_so_streams_of_commands_in_flight_overlap() {
        // Two 1 MiB reads together on two units: each streams at 1 GiB/s from its unit's start,
        // side by side; their transfers share an 8 GiB/s pipe (40 + 2 x 127 us), which the
        // streams (977 us) outlast. Streams that queued would end the second at twice that.
        let mut d = flash(&STREAM.replace("read_rate = \"2g\"", "read_rate = \"8g\""));
        burst(&mut d, 0, Op::Read, 1 << 20, 2);
        let done = drain(&mut d);
        let stream = transfer_ns(1 << 20, 1 << 30);
        assert_eq!(done[&0], stream);
        assert_eq!(done[&1], stream);
    }

    #[test]
    fn a_flush_behind_k_writes_drains_their_bytes_at_the_flush_rate() {
        let table = "units = 64\nflush_latency = \"7us\"\nflush_rate = \"1g\"";
        for (k, len) in [(1u64, 4096u64), (4, 48 << 10), (16, 256 << 10)] {
            let mut d = flash(table);
            // k writes of L dispatched at 0, then a FLUSH at 0: flush_latency + k L / F.
            burst(&mut d, 0, Op::Write, len, k);
            let f = one(&mut d, 0, 99, Op::Flush, 0, 0, false);
            assert_eq!(f, 7 * US + transfer_ns(k * len, 1 << 30), "k {k} L {len}");
            // The closed form of the fdatasync point (one write, then the FLUSH).
            let form = ClosedForm::from(&d.p);
            let want = 7e3 + len as f64 / (1u64 << 30) as f64 * 1e9;
            assert!(close(form.flush_after_ns(len), want, 1e-9));
            // A FLUSH right behind it has nothing new to drain, and waits for the first.
            assert_eq!(one(&mut d, 0, 100, Op::Flush, 0, 0, false), f + 7 * US);
        }
        // Without a flush_rate the writes before it cost the FLUSH nothing.
        let mut d = flash("units = 64\nflush_latency = \"7us\"");
        burst(&mut d, 0, Op::Write, 1 << 20, 8);
        assert_eq!(one(&mut d, 0, 99, Op::Flush, 0, 0, false), 7 * US);
        assert_eq!(ClosedForm::from(&d.p).flush_after_ns(1 << 20), 7e3);
    }

    /// A draining processor of 2 us a pass and 3 us a command in front of 64 units of 20 us.
    const DRAIN: &str = "units = 64\nread_latency = \"20us\"\nread_rate = \"4g\"\nlink_rate = \"4g\"\nbatch_overhead = \"2us\"\ncommand_overhead = \"3us\"\nbatching = \"drain\"";

    #[test]
    fn a_draining_processor_takes_commands_arriving_during_its_pass_and_releases_them_together() {
        let mut d = flash(DRAIN);
        // One read at 0 starts a pass of 2 + 3 us + its transfer t; two more at 1 us join it
        // (3 us + t each): the pass ends at 11 us + 3 t and all three go on then, each to
        // its own unit, their data already moved.
        d.submit(0, cmd(0, Op::Read, 4096));
        d.submit(US, cmd(1, Op::Read, 4096));
        d.submit(US, cmd(2, Op::Read, 4096));
        let done = drain(&mut d);
        let tt = t(&d, Op::Read, 4096);
        for tag in 0..3 {
            assert_eq!(done[&tag], 11 * US + 3 * tt + 20 * US, "{tag}");
        }
        // The snapshot processor would have run the first alone (5 us) and the two others
        // as the next batch (2 + 6 us): the first goes on at 5 us.
        let mut d = flash(&DRAIN.replace("drain", "snapshot"));
        d.submit(0, cmd(0, Op::Read, 4096));
        d.submit(US, cmd(1, Op::Read, 4096));
        d.submit(US, cmd(2, Op::Read, 4096));
        assert_eq!(drain(&mut d)[&0], 5 * US + 20 * US + tt);
    }

    /// DRAIN with a write's own command cost of 1 us (reads keep 3 us) and 10 us writes.
    const DRAIN_KW: &str = "units = 64\nread_latency = \"20us\"\nwrite_latency = \"10us\"\nread_rate = \"4g\"\nwrite_rate = \"2g\"\nlink_rate = \"4g\"\nbatch_overhead = \"2us\"\ncommand_overhead = \"3us\"\nwrite_command_overhead = \"1us\"\nbatching = \"drain\"";

    #[test]
    fn a_lone_read_pays_the_command_overhead_and_a_lone_write_the_write_command_overhead() {
        // QD1 through a draining pass: B + k_d + t(L, d), then the unit's a_d.
        let mut d = flash(DRAIN_KW);
        let (tr, tw) = (t(&d, Op::Read, 4096), t(&d, Op::Write, 4096));
        assert_eq!(
            one(&mut d, 0, 1, Op::Read, 0, 4096, false),
            2 * US + 3 * US + tr + 20 * US
        );
        assert_eq!(
            one(&mut d, 0, 2, Op::Write, 0, 4096, false),
            2 * US + US + tw + 10 * US
        );
        // Through a snapshot batch the same: the batch of one, then unit and pipe.
        let mut d = flash(&DRAIN_KW.replace("drain", "snapshot"));
        assert_eq!(
            one(&mut d, 0, 2, Op::Write, 0, 4096, false),
            2 * US + US + tw + 10 * US
        );
        // A FLUSH pays k, as a read: B + k + flush_latency (20 us by default).
        let mut d = flash(DRAIN_KW);
        d.submit(0, cmd(3, Op::Flush, 0));
        assert_eq!(drain(&mut d)[&3], 2 * US + 3 * US + 20 * US);
    }

    #[test]
    fn a_pass_of_a_read_and_a_write_costs_each_its_own_command_and_releases_both_at_its_end() {
        // A read and a write together: one pass of B + (k + t_r) + (k_w + t_w); both go on at
        // its end (one interrupt a pass), each to its unit.
        let mut d = flash(DRAIN_KW);
        let (tr, tw) = (t(&d, Op::Read, 4096), t(&d, Op::Write, 4096));
        d.submit(0, cmd(0, Op::Read, 4096));
        d.submit(0, cmd(1, Op::Write, 4096));
        let done = drain(&mut d);
        let end = 2 * US + (3 * US + tr) + (US + tw);
        assert_eq!(done[&0], end + 20 * US);
        assert_eq!(done[&1], end + 10 * US);
        // A snapshot processor takes the read alone (B + k) and the write as the next batch
        // (B + k_w), each then to its unit and pipe.
        let mut d = flash(&DRAIN_KW.replace("drain", "snapshot"));
        d.submit(0, cmd(0, Op::Read, 4096));
        d.submit(0, cmd(1, Op::Write, 4096));
        let done = drain(&mut d);
        assert_eq!(done[&0], 5 * US + 20 * US + tr);
        assert_eq!(done[&1], 5 * US + 3 * US + tw + 10 * US);
    }

    #[test]
    fn an_unset_write_command_overhead_is_the_command_overhead_to_the_nanosecond() {
        // The same burst of reads and writes on a device without the key and on one with
        // write_command_overhead = command_overhead: the same completions.
        let run = |table: &str| {
            let mut d = flash(table);
            let mut out = Vec::new();
            for i in 0..40u64 {
                let op = if i % 3 == 0 { Op::Write } else { Op::Read };
                d.submit(i * 700, cmd(i, op, 4096 << (i % 4)));
            }
            let done = drain(&mut d);
            out.extend((0..40u64).map(|i| done[&i]));
            out
        };
        for batching in ["drain", "snapshot"] {
            let plain = DRAIN.replace("drain", batching);
            let same = format!("{plain}\nwrite_command_overhead = \"3us\"");
            assert_eq!(run(&plain), run(&same), "{batching}");
        }
        let form = ClosedForm::from_figures([("command_overhead", Figure::Number(3000.0))])
            .expect("a declared key");
        assert_eq!(form.write_command_ns(), 3000.0);
    }

    #[test]
    fn in_a_closed_loop_of_writes_a_draining_pass_adds_the_write_command_overhead_for_each() {
        // R(q) = B + q (k_w + t_w) + a_w, and the closed form's X = q / R(q).
        for q in [1usize, 4, 16] {
            let mut d = flash(DRAIN_KW);
            let (iops, lat) = measured(&mut d, Op::Write, 4096, q, 5_000);
            let per = US + t(&d, Op::Write, 4096);
            let want = (2 * US + q as u64 * per + 10 * US) as f64;
            assert!(close(lat, want, 0.005), "q {q}: {lat} vs {want}");
            let form = closed_form_iops(&d, Op::Write, 4096, q as u64);
            assert!(close(iops, form, 0.005), "q {q}: {iops} vs {form}");
        }
    }

    /// A device of one unit and 100 us reads, frozen 5 ms in every second.
    const FREEZE: &str =
        "units = 1\nread_latency = \"100us\"\nfreeze_interval = \"1s\"\nfreeze_time = \"5ms\"";

    #[test]
    fn a_freeze_holds_every_command_in_flight_and_every_arrival_until_it_ends() {
        let mut d = flash(FREEZE);
        let s0 = d.freeze.as_mut().map(|f| f.real_start(0)).unwrap();
        let (a, tt) = (100 * US, t(&d, Op::Read, 4096));
        // A read 50 us before the freeze and one queued behind it on the one unit: both
        // finish 5 ms later than they would; a read arriving 1 ms into the freeze starts
        // when it ends.
        d.submit(s0 - 50 * US, cmd(0, Op::Read, 4096));
        d.submit(s0 - 40 * US, cmd(1, Op::Read, 4096));
        d.submit(s0 + 1000 * US, cmd(2, Op::Read, 4096));
        let done = drain(&mut d);
        assert_eq!(done[&0], s0 - 50 * US + a + tt + 5000 * US);
        assert_eq!(done[&1], s0 - 50 * US + 2 * a + tt + 5000 * US);
        // The third: on the device's clock it arrives at the freeze's start, behind the
        // second's unit time (to s0 + 150 us on that clock).
        assert_eq!(done[&2], s0 - 50 * US + 3 * a + tt + 5000 * US);
    }

    #[test]
    fn freezes_scale_a_closed_loops_throughput_by_the_share_of_the_time_the_device_runs() {
        // X = X0 (1 - D / I): 20 ms in every 100 ms, over 2 s of 4 reads in flight.
        let table = FREEZE.replace("1s", "100ms").replace("5ms", "20ms");
        let mut d = flash(&table);
        let want = closed_form_iops(&d, Op::Read, 4096, 4);
        let x0 = closed_form_iops(
            &flash("units = 1\nread_latency = \"100us\""),
            Op::Read,
            4096,
            4,
        );
        assert!(close(want, 0.8 * x0, 1e-12), "{want} vs {x0}");
        let (iops, _) = measured(&mut d, Op::Read, 4096, 4, 20_000);
        assert!(close(iops, want, 0.01), "{iops} vs {want}");
    }

    /// `DRAIN` whose reads (writes) stop the processor for 1 ms with probability `p_r` (`p_w`).
    fn command_freezes(p_r: f64, p_w: f64) -> String {
        format!(
            "{DRAIN}\nfreeze_trigger = \"command\"\nread_freeze_probability = {p_r}\n\
             write_freeze_probability = {p_w}\nfreeze_time = \"1ms\""
        )
    }

    /// The latencies of `n` commands of 4 KiB at depth `q`, command i a read when `read(i)`.
    fn loop_latencies(d: &mut Flash, q: usize, n: usize, read: impl Fn(usize) -> bool) -> Vec<Ns> {
        let run = closed_loop(d, 0, q, n, |i| {
            let op = if read(i) { Op::Read } else { Op::Write };
            (op, i as u64 * 4096, 4096)
        });
        run.latencies_ns
    }

    /// The share of `lat` at or above 1 ms.
    fn frozen_share(lat: &[Ns]) -> f64 {
        lat.iter().filter(|&&x| x >= 1000 * US).count() as f64 / lat.len() as f64
    }

    #[test]
    fn a_read_at_qd1_waits_the_freeze_time_with_its_probability_and_no_other_does() {
        // A lone read: 2 + 3 us + t on the processor, its 20 us unit; a share p = 1 % of
        // them (stratified: 200 of 20,000, one in each block of 100) 1 ms more.
        let mut d = flash(&command_freezes(0.01, 0.0));
        let body = 5 * US + t(&d, Op::Read, 4096) + 20 * US;
        let lat = loop_latencies(&mut d, 1, 20_000, |_| true);
        let frozen = lat.iter().filter(|&&x| x == body + 1000 * US).count();
        assert_eq!(frozen, 200);
        assert_eq!(lat.iter().filter(|&&x| x == body).count(), 20_000 - 200);
    }

    #[test]
    fn at_depth_q_one_blocking_delays_the_q_commands_of_its_pass_so_their_share_grows_as_q_p() {
        // The q reads go round in one draining pass (B + q (k + t), then their units
        // together): a read that blocks holds all q, so a share q p waits the freeze.
        let p = 0.002;
        for q in [1usize, 4, 16] {
            let mut d = flash(&command_freezes(p, 0.0));
            let share = frozen_share(&loop_latencies(&mut d, q, 50_000, |_| true));
            let want = q as f64 * p;
            assert!(close(share, want, 0.05), "q {q}: {share} vs {want}");
        }
        // A mix of read share f = 3/4 with p_w = p / 2: q (f p_r + (1 - f) p_w), writes and
        // reads alike.
        let mut d = flash(&command_freezes(p, p / 2.0));
        let lat = loop_latencies(&mut d, 8, 80_000, |i| i % 4 != 0);
        let want = 8.0 * (0.75 * p + 0.25 * p / 2.0);
        let writes: Vec<Ns> = lat.iter().step_by(4).copied().collect();
        assert!(
            close(frozen_share(&lat), want, 0.05),
            "{}",
            frozen_share(&lat)
        );
        assert!(
            close(frozen_share(&writes), want, 0.1),
            "{}",
            frozen_share(&writes)
        );
    }

    #[test]
    fn writes_without_their_probability_never_freeze_but_one_in_a_stopped_pass_waits_with_it() {
        // Writes alone: the figures of the device without command freezes, to the ns.
        let writes = |table: &str| loop_latencies(&mut flash(table), 8, 5_000, |_| false);
        assert_eq!(
            writes(&command_freezes(MAX_STALL_PROBABILITY, 0.0)),
            writes(DRAIN)
        );
        // Ten reads and a write at once with p_r = 1/10: the first stratum is the ten reads,
        // one of which blocks, so the one pass of eleven ends 1 ms later and the write, done
        // with them, waits too: B + 10 (k + t_r) + k + t_w + 1 ms + its unit.
        let mut d = flash(&command_freezes(0.1, 0.0));
        for tag in 0..10 {
            d.submit(0, cmd(tag, Op::Read, 4096));
        }
        d.submit(0, cmd(10, Op::Write, 4096));
        let (tr, tw) = (t(&d, Op::Read, 4096), t(&d, Op::Write, 4096));
        let end = 2 * US + 10 * (3 * US + tr) + 3 * US + tw + 1000 * US;
        let done = drain(&mut d);
        assert_eq!(done[&10], end + 20 * US);
        assert_eq!(done[&0], end + 20 * US);
    }

    #[test]
    fn the_seed_decides_which_commands_block() {
        let p = typed_params(
            "nv0",
            "flash",
            &command_freezes(0.01, 0.005),
            |profile, v| Ok(FlashParams::from_values(profile, v)),
        )
        .unwrap();
        let run = |seed: u64| {
            let mut d = Flash::new_seeded("nv0", p.clone(), seed);
            loop_latencies(&mut d, 4, 5_000, |i| i % 3 != 0)
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn command_freezes_cost_a_loops_processor_their_mean_in_closed_form_and_in_simulation() {
        // X = q / (B + q (k + t + p D) + a): the blockings' mean time on the processor.
        let p = 0.005;
        let mut d = flash(&command_freezes(p, 0.0));
        let want = closed_form_iops(&d, Op::Read, 4096, 8);
        let per = 3e-6 + t(&d, Op::Read, 4096) as f64 / 1e9 + p * 1e-3;
        let x = 8.0 / (2e-6 + 8.0 * per + 20e-6);
        // (t rounded to the ns here, real in the closed forms)
        assert!(close(want, x, 1e-4), "{want} vs {x}");
        let (iops, _) = measured(&mut d, Op::Read, 4096, 8, 40_000);
        assert!(close(iops, want, 0.02), "{iops} vs {want}");
        // Writes without their probability pay nothing.
        let plain = closed_form_iops(&flash(DRAIN), Op::Write, 4096, 8);
        assert_eq!(closed_form_iops(&d, Op::Write, 4096, 8), plain);
    }

    #[test]
    fn a_command_trigger_without_a_command_processor_is_refused_in_one_line() {
        let src =
            "freeze_trigger = \"command\"\nread_freeze_probability = 0.01\nfreeze_time = \"1ms\"";
        let table: std::collections::BTreeMap<String, toml::Value> = toml::from_str(src).unwrap();
        let e = build_device("nv0", "flash", None, &table)
            .err()
            .expect("accepted")
            .to_string();
        assert!(e.contains("freeze_trigger = \"command\""), "{e}");
        assert!(e.contains("batch_overhead or command_overhead"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let table: std::collections::BTreeMap<String, toml::Value> =
            toml::from_str("freeze_trigger = \"often\"").unwrap();
        let e = build_device("nv0", "flash", None, &table)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("must be one of clock, command"), "{e}");
    }

    #[test]
    fn a_command_waits_for_its_descriptors_and_with_read_priority_a_waiting_read_enters_first() {
        // A ring of 8 descriptors: a 16 KiB command takes 2 + 4; one at a time. Writes W0 at
        // 0, W1, W2 and a read R3 at 1 us; each in the ring takes its pass (2 + 3 us + t)
        // and its unit (20 us), a cycle of 25 us + t, the next entering as it completes.
        let run = |first: bool| {
            let mut d = flash(&format!(
                "{DRAIN}\nring_descriptors = 8\nread_priority = {first}"
            ));
            d.submit(0, cmd(0, Op::Write, 16384));
            for (tag, op) in [(1, Op::Write), (2, Op::Write), (3, Op::Read)] {
                d.submit(US, cmd(tag, op, 16384));
            }
            let (tr, tw) = (t(&d, Op::Read, 16384), t(&d, Op::Write, 16384));
            (drain(&mut d), 25 * US + tr, 25 * US + tw)
        };
        // FIFO: W0, W1, W2, R3.
        let (done, cr, cw) = run(false);
        assert_eq!(done[&2], 3 * cw);
        assert_eq!(done[&3], 3 * cw + cr);
        // Reads first: W1 had found the ring full first and enters next, then R3, then W2.
        let (done, cr, cw) = run(true);
        assert_eq!(done[&1], 2 * cw);
        assert_eq!(done[&3], 2 * cw + cr);
        assert_eq!(done[&2], 3 * cw + cr);
    }

    /// A 16 KiB command `op` at `sector` (of 16 KiB).
    fn c16k(tag: u64, op: Op, sector: u64) -> DevCmd {
        DevCmd {
            tag,
            op,
            offset_bytes: sector * 16384,
            len_bytes: 16384,
            fua: false,
        }
    }

    /// The tags of `d`'s commands in the order they complete (every completion time apart).
    fn completion_order(d: &mut Flash) -> Vec<u64> {
        let done = drain(d);
        let mut tags: Vec<(Ns, u64)> = done.iter().map(|(&tag, &t)| (t, tag)).collect();
        tags.sort_unstable();
        assert!(tags.windows(2).all(|w| w[0].0 < w[1].0), "{tags:?}");
        tags.into_iter().map(|(_, tag)| tag).collect()
    }

    #[test]
    fn behind_a_full_ring_mq_deadline_lets_writes_through_after_two_batches_of_sixteen_reads() {
        // A ring of 8 descriptors holds one 16 KiB command (2 + 4): the others enter one at a
        // time, in the order the guest's mq-deadline dispatches them. W0 at 0 enters; at 1
        // us, 40 reads (tags 1-40, ascending sectors) then 4 writes (41-44). Linux's
        // block/mq-deadline.c: a batch goes on in sector order up to fifo_batch (16); a new
        // batch takes reads unless writes wait and have been passed over writes_starved (2)
        // times. Read 1 arrives alone and is dispatched at once (finding the ring full, it
        // waits at the head of blk-mq's dispatch list), a batch with no next request. So:
        // W0; read 1; reads 2-17 (starved 1), 18-33 (starved 2); writes 41-44 (the write
        // batch, up to 16, starved 0); reads 34-40.
        let run = |order: &str| {
            let mut d = flash(&format!(
                "{DRAIN}\nring_descriptors = 8\nring_scheduler = \"{order}\""
            ));
            d.submit(0, c16k(0, Op::Write, 1 << 16));
            for tag in 1..=44 {
                let op = if tag <= 40 { Op::Read } else { Op::Write };
                d.submit(US, c16k(tag, op, tag));
            }
            completion_order(&mut d)
        };
        let want: Vec<u64> = std::iter::once(0)
            .chain(1..=33)
            .chain(41..=44)
            .chain(34..=40)
            .collect();
        assert_eq!(run("mq-deadline"), want);
        // The default: arrival order.
        assert_eq!(run("fifo"), (0..=44).collect::<Vec<_>>());
    }

    #[test]
    fn behind_a_full_ring_mq_deadline_serves_a_batch_in_ascending_sectors_from_its_oldest_read() {
        // Reads at sectors 5, 4, 3, 2, 1, 6 (tags 1-6, in that order) behind W0. Linux's
        // block/mq-deadline.c: a batch goes on with the request after the last one in
        // sector order (`deadline_next_request`); with none, a new batch starts at the
        // FIFO's head (`deadline_fifo_request`, the oldest). Read 1 is taken alone (no next
        // then); read 2 (the oldest left) starts a batch, which goes on with read 6 (the
        // next sector after 4) and ends there; reads 3, 4 and 5 each start one in turn.
        let mut d = flash(&format!(
            "{DRAIN}\nring_descriptors = 8\nring_scheduler = \"mq-deadline\""
        ));
        d.submit(0, c16k(0, Op::Write, 1 << 16));
        for (tag, sector) in [(1, 5), (2, 4), (3, 3), (4, 2), (5, 1), (6, 6)] {
            d.submit(US, c16k(tag, Op::Read, sector));
        }
        assert_eq!(completion_order(&mut d), vec![0, 1, 2, 6, 3, 4, 5]);
    }

    #[test]
    fn a_queue_no_longer_busy_hands_the_ring_everything_mq_deadline_holds_in_one_order() {
        // A ring of 12 descriptors holds two 16 KiB commands. W0 and W1 at 0 enter and
        // complete together (one pass, two units); at 1 us W2 finds the ring full (the
        // queue stops, dispatch_busy 16 / 8 = 2), W3 (sector 20), W4 (sector 15) and R5 wait
        // in mq-deadline. When W0 and W1 complete: W2 enters from the dispatch list (busy 2
        // x 7 / 8 = 1), then one request from the scheduler, R5 (a read batch; busy 0);
        // not busy, blk-mq takes all the scheduler holds at once: W3, then W4 (a new batch:
        // nothing after sector 20), both to the dispatch list as W3 finds no room. R6,
        // arriving then, waits behind both: W3 and W4 enter together when W2 and R5
        // complete, R6 after them (one request at a time, it would have gone before W4:
        // a new batch after W3 takes the waiting read).
        let c = c16k;
        let mut d = flash(&format!(
            "{DRAIN}\nring_descriptors = 12\nring_scheduler = \"mq-deadline\""
        ));
        d.submit(0, c(0, Op::Write, 1000));
        d.submit(0, c(1, Op::Write, 2000));
        for (tag, op, sector) in [(2, Op::Write, 10), (3, Op::Write, 20), (4, Op::Write, 15)] {
            d.submit(US, c(tag, op, sector));
        }
        d.submit(US, c(5, Op::Read, 30));
        let (mut now, mut first) = (0, Vec::new());
        while !first.contains(&0) {
            now = d.next_event_ns().unwrap();
            d.advance(now, &mut first);
        }
        assert_eq!(first, vec![0, 1]);
        d.submit(now + 1, c(6, Op::Read, 40));
        let done = drain(&mut d);
        assert_eq!(done[&2], done[&5]);
        assert!(done[&5] < done[&3]);
        assert_eq!(done[&3], done[&4]);
        assert!(done[&4] < done[&6]);
    }

    #[test]
    fn a_command_past_max_segments_goes_as_the_requests_of_its_bios_and_completes_with_its_last() {
        // A ring of 6 descriptors and max_segments 4: a 24 KiB read (6 pages) goes as 16 KiB
        // (2 + 4 descriptors: the whole ring) then 8 KiB, which enters when the first
        // completes: each its own pass (2 + 3 us + t) and unit (20 us).
        let table = format!("{DRAIN}\nring_descriptors = 6\nmax_segments = 4");
        let mut d = flash(&table);
        d.submit(0, cmd(0, Op::Read, 24 << 10));
        let (t16, t8) = (t(&d, Op::Read, 16 << 10), t(&d, Op::Read, 8 << 10));
        assert_eq!(drain(&mut d)[&0], 25 * US + t16 + 25 * US + t8);
        assert_eq!(d.stats(0).read_ops, 2);
        // Without max_segments it is one request, capped at the whole ring.
        let mut d = flash(&format!("{DRAIN}\nring_descriptors = 6"));
        d.submit(0, cmd(0, Op::Read, 24 << 10));
        assert_eq!(drain(&mut d)[&0], 25 * US + t(&d, Op::Read, 24 << 10));
        // A bio holds 256 segments (BIO_MAX_VECS) whatever max_segments allows: 1040 KiB
        // (260 pages) goes as 1 MiB and 16 KiB, both in one pass (2 + 2 x 3 us + their t).
        let mut d = flash(&format!(
            "{DRAIN}\nring_descriptors = 1024\nmax_segments = 1000"
        ));
        d.submit(0, cmd(0, Op::Read, 1040 << 10));
        let (t1m, t16) = (t(&d, Op::Read, 1 << 20), t(&d, Op::Read, 16 << 10));
        assert_eq!(drain(&mut d)[&0], 8 * US + t1m + t16 + 20 * US);
    }

    #[test]
    fn reads_waiting_for_a_full_ring_merge_into_one_request_within_max_segments() {
        // A ring of 10 descriptors holds one 16 KiB command (2 + 4) or one of 32 KiB (2 + 8).
        // W0 enters at 0; at 1 us R1 (sector 0) finds the ring full and waits at the head of
        // the dispatch list; R2 (sector 1) waits in mq-deadline and R3 (sector 2) merges
        // into it (a back merge of 8 segments, max_segments 8): when R1 completes, R2 + R3
        // enter as one request of 32 KiB, one pass (5 us + t) and unit (20 us), and
        // complete together.
        let run = |keys: &str| {
            let mut d = flash(&format!(
                "{DRAIN}\nring_descriptors = 10\nring_scheduler = \"mq-deadline\"\n{keys}"
            ));
            d.submit(0, c16k(0, Op::Write, 1 << 16));
            for tag in 1..=3 {
                d.submit(US, c16k(tag, Op::Read, tag - 1));
            }
            let done = drain(&mut d);
            let (t16, t32) = (t(&d, Op::Read, 16 << 10), t(&d, Op::Read, 32 << 10));
            (done, d.stats(0).read_ops, t16, t32)
        };
        let (done, reads, _, t32) = run("ring_merges = true\nmax_segments = 8");
        assert_eq!(done[&2], done[&1] + 25 * US + t32);
        assert_eq!(done[&3], done[&2]);
        assert_eq!(reads, 2);
        // Apart: without ring_merges, or when the merged request would pass max_segments.
        for keys in ["", "ring_merges = true\nmax_segments = 4"] {
            let (done, reads, t16, _) = run(keys);
            assert_eq!(done[&2], done[&1] + 25 * US + t16, "{keys}");
            assert_eq!(done[&3], done[&2] + 25 * US + t16, "{keys}");
            assert_eq!(reads, 3, "{keys}");
        }
    }

    #[test]
    fn with_read_priority_a_read_waiting_behind_a_write_goes_in_a_pass_of_its_own_first() {
        // A write at 0 starts a pass (2 + 3 us + t_w); a write and a read arrive at 1 us.
        let run = |table: &str| {
            let mut d = flash(table);
            d.submit(0, cmd(0, Op::Write, 65536));
            d.submit(US, cmd(1, Op::Write, 65536));
            d.submit(US, cmd(2, Op::Read, 65536));
            let (tr, tw) = (t(&d, Op::Read, 65536), t(&d, Op::Write, 65536));
            (drain(&mut d), tr, tw)
        };
        // FIFO: both join the first pass, which ends at 5 us + t_w + 2 x 3 us + t_w + t_r;
        // each then takes its unit (20 us, reads and writes alike here).
        let (done, tr, tw) = run(DRAIN);
        let end = 5 * US + tw + 6 * US + tw + tr;
        assert_eq!(done[&2], end + 20 * US);
        assert_eq!(done[&1], end + 20 * US);
        // Reads first: the write's pass ends as it finds a read waiting (T1 = 5 us + t_w);
        // the read's pass follows (T2 = T1 + 5 us + t_r), then the second write's (T2 + 5 us
        // + t_w).
        let (done, tr, tw) = run(&format!("{DRAIN}\nread_priority = true"));
        let t1 = 5 * US + tw;
        let t2 = t1 + 5 * US + tr;
        assert_eq!(done[&0], t1 + 20 * US);
        assert_eq!(done[&2], t2 + 20 * US);
        assert_eq!(done[&1], t2 + 5 * US + tw + 20 * US);
    }

    #[test]
    fn in_a_closed_loop_a_draining_pass_adds_its_command_overhead_and_transfer_for_every_command() {
        // R(q) = B + q (k + t) + a: the q commands go round together, each pass holding all
        // and moving their data.
        for q in [1usize, 2, 4, 8, 16] {
            let mut d = flash(DRAIN);
            let (iops, lat) = measured(&mut d, Op::Read, 4096, q, 5_000);
            let per = 3 * US + t(&d, Op::Read, 4096);
            let want = (2 * US + q as u64 * per + 20 * US) as f64;
            assert!(close(lat, want, 0.005), "q {q}: {lat} vs {want}");
            let form = closed_form_iops(&d, Op::Read, 4096, q as u64);
            assert!(
                close(iops, form, 0.005),
                "q {q}: {iops} vs the closed form's {form}"
            );
        }
    }

    #[test]
    fn behind_a_draining_pass_a_lone_commands_stream_runs_from_its_arrival() {
        // QD1: max(B + k + t + a, L / s): the pass (2 + 3 us + t), then the unit (20 us),
        // against the stream from 0 at 1 GiB/s; 4 KiB by the pass and unit, 1 MiB by the
        // stream (977 us against 2 + 3 + 256 + 20 us).
        let table = format!("{DRAIN}\nread_stream_rate = \"1g\"");
        for len in [4096u64, 1 << 20] {
            let mut d = flash(&table);
            let path = 2 * US + 3 * US + t(&d, Op::Read, len) + 20 * US;
            let want = path.max(transfer_ns(len, 1 << 30));
            assert_eq!(one(&mut d, 0, 1, Op::Read, 0, len, false), want, "{len}");
            let form = ClosedForm::from(&d.p);
            let (_, lat) = form.closed_loop(&ClosedLoop {
                load: Load::Read,
                bs: len,
                iodepth: 1,
                path_ns: 0.0,
            });
            assert!(close(lat, want as f64, 1e-4), "{len}: {lat} vs {want}");
        }
    }

    #[test]
    fn reads_and_writes_together_never_exceed_the_link_rate() {
        // Each pipe alone is below the link; together they would exceed it (equal numbers
        // of reads and writes: 3 + 3 GB/s against a 4 GB/s link).
        let mut d = flash("units = 64\nwrite_rate = 3_000_000_000");
        let len = 1u64 << 20;
        let n = 4000;
        let run = closed_loop(&mut d, 0, 32, n, |i| {
            let op = if i % 2 == 0 { Op::Read } else { Op::Write };
            (op, i as u64 * len, len)
        });
        let total = n as f64 * len as f64 / (run.elapsed_ns as f64 / 1e9);
        assert!(total <= 4e9 * 1.001, "{total}");
        assert!(total > 3e9 * 1.1, "both directions move at once: {total}");
        let s = d.stats(Ns::MAX);
        assert_eq!((s.read_bytes, s.write_bytes), (2000 * len, 2000 * len));
    }

    /// Bytes per second of a closed loop of `q` alternating reads and writes of `len`.
    fn mixed_rate(table: &str, len: u64, q: usize, n: usize) -> f64 {
        let mut d = flash(table);
        let run = closed_loop(&mut d, 0, q, n, |i| {
            let op = if i % 2 == 0 { Op::Read } else { Op::Write };
            (op, i as u64 * len, len)
        });
        n as f64 * len as f64 / (run.elapsed_ns as f64 / 1e9)
    }

    #[test]
    fn half_duplex_moves_a_mix_at_one_pipe_time_per_command_and_full_duplex_adds_the_pipes() {
        // Equal pipes, a link that never binds: full duplex moves both directions at once
        // (the sum, 4 GB/s), half duplex one at a time (2 GB/s).
        let base = "units = 64\nread_rate = 2_000_000_000\nwrite_rate = 2_000_000_000\n\
                    link_rate = 8_000_000_000";
        let len = 1u64 << 20;
        let full = mixed_rate(base, len, 32, 20_000);
        assert!(close(full, 4e9, 0.005), "full: {full}");
        let half = mixed_rate(&format!("{base}\nduplex = \"half\""), len, 32, 20_000);
        assert!(close(half, 2e9, 0.005), "half: {half}");
        // Unequal pipes: a 50/50 mix moves 1 / (0.5 L / r + 0.5 L / w) commands a second;
        // with an overhead c, 1 / (c + 0.5 L / r + 0.5 L / w).
        let (r, w) = (3e9, 1.5e9);
        let table = "units = 64\nread_rate = 3_000_000_000\nwrite_rate = 1_500_000_000\n\
                     link_rate = 8_000_000_000\nduplex = \"half\"";
        let l = len as f64;
        let got = mixed_rate(table, len, 32, 20_000);
        let want = l / (0.5 * l / r + 0.5 * l / w);
        assert!(close(got, want, 0.005), "{got} vs {want}");
        let got = mixed_rate(
            &format!("{table}\ntransfer_overhead = \"100us\""),
            len,
            32,
            20_000,
        );
        let want = l / (100e-6 + 0.5 * l / r + 0.5 * l / w);
        assert!(close(got, want, 0.005), "{got} vs {want}");
    }

    #[test]
    fn a_busy_half_duplex_pipe_waits_its_turnaround_before_changing_direction() {
        // A 1 MiB write and a 64 KiB read at 0: the write's transfer holds the pipe until
        // w = L / write_rate; the read's unit work ends at 80 us, while the pipe is busy,
        // so its transfer starts at w + 1 ms. An idle pipe has turned: a write after the
        // read, once everything is done, pays nothing.
        let table = "duplex = \"half\"\nturnaround = \"1ms\"";
        let (big, len) = (1u64 << 20, 65536);
        let w = transfer_ns(big, 2_000_000_000);
        let r = transfer_ns(len, 3_000_000_000);
        let mut d = flash(table);
        d.submit(0, cmd(1, Op::Write, big));
        let read_done = one(&mut d, 0, 2, Op::Read, 0, len, false);
        assert_eq!(read_done, w + 1_000 * US + r);
        let later = read_done + 10 * US;
        let write_done = one(&mut d, later, 3, Op::Write, 0, len, false);
        assert_eq!(
            write_done,
            later + transfer_ns(len, 2_000_000_000) + 20 * US
        );
        // Full duplex: a pipe per direction never turns, whatever the turnaround; the read
        // waits only for the shared link, which the write holds for L / link_rate.
        let mut d = flash("turnaround = \"1ms\"");
        d.submit(0, cmd(1, Op::Write, big));
        let read_done = one(&mut d, 0, 2, Op::Read, 0, len, false);
        assert_eq!(read_done, transfer_ns(big, 4_000_000_000) + r);
    }

    /// A closed loop of `q` requests of `len` bytes, `load`.
    fn job(load: Load, len: u64, q: u64) -> ClosedLoop {
        ClosedLoop {
            load,
            bs: len,
            iodepth: q,
            path_ns: 0.0,
        }
    }

    #[test]
    fn a_mix_moves_what_the_closed_forms_give_on_either_duplex() {
        // Alternating reads and writes (a 50/50 mix) of 1 MiB at QD 32 on 64 units: the
        // pipes bind, with and without a set-up a command, half and full duplex.
        let base = "units = 64\nread_rate = 3_000_000_000\nwrite_rate = 1_500_000_000\n\
                    link_rate = 8_000_000_000";
        let len = 1u64 << 20;
        for extra in [
            "",
            "\nduplex = \"half\"",
            "\ntransfer_overhead = \"100us\"\nduplex = \"half\"",
        ] {
            let table = format!("{base}{extra}");
            let got = mixed_rate(&table, len, 32, 20_000);
            let form = ClosedForm::from(&flash(&table).p);
            let (x, lat) = form.closed_loop(&job(Load::Mixed { read_percent: 50 }, len, 32));
            let want = x * len as f64;
            assert!(close(got, want, 0.005), "{table}: {got} vs {want}");
            assert!(close(lat, 32.0 / x * 1e9, 1e-12), "{lat}");
        }
    }

    #[test]
    fn a_lone_command_and_a_flush_take_the_closed_forms_figures_through_the_processor() {
        let d = flash(PROCESSOR);
        let form = ClosedForm::from(&d.p);
        for op in [Op::Read, Op::Write] {
            let x = closed_form_iops(&d, op, 4096, 1);
            let lone = one(&mut flash(PROCESSOR), 0, 1, op, 0, 4096, false);
            assert!(
                close(x, 1e9 / lone as f64, 1e-3),
                "{op:?}: {x} vs {lone} ns"
            );
        }
        let flush = one(&mut flash(PROCESSOR), 0, 1, Op::Flush, 0, 0, false);
        assert_eq!(form.flush_ns(), flush as f64);
        assert_eq!(flush, 40 * US + 10 * US + 20 * US);
    }

    #[test]
    fn the_processors_mean_value_approximation_stays_within_twelve_percent_of_the_simulation() {
        // Small reads behind a processor of 40 us a batch and 10 us a command, from QD 1
        // (exact) to QD 256 (close to 1 / k); measured: -6.5 % at QD 2, +9.6 % at QD 8,
        // under 4 % elsewhere.
        let d = flash(PROCESSOR);
        for q in [1, 2, 4, 8, 16, 32, 256] {
            let want = closed_form_iops(&d, Op::Read, 512, q);
            let (got, _) = measured(&mut flash(PROCESSOR), Op::Read, 512, q as usize, 20_000);
            let margin = if q == 1 { 1e-3 } else { 0.12 };
            assert!(close(got, want, margin), "q{q}: {got} vs {want}");
        }
    }

    #[test]
    fn the_processor_bound_is_the_lone_commands_round_trip_at_q1_and_one_over_k_at_depth() {
        let (b, k, r0) = (40e-6, 10e-6, 50e-6);
        // No processor: the queue or the cap.
        assert!(close(processor_x(8, 0.0, 0.0, r0, 1e9), 8.0 / r0, 1e-12));
        assert_eq!(processor_x(8, 0.0, 0.0, r0, 1e4), 1e4);
        assert!(close(
            processor_x(1, b, k, r0, 1e9),
            1.0 / (b + k + r0),
            1e-9
        ));
        let xs: Vec<f64> = [1, 2, 4, 8, 16, 32, 256]
            .map(|q| processor_x(q, b, k, r0, 1e9))
            .to_vec();
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        assert!(xs[1] < 1.9 * xs[0]);
        assert!(0.9 / k < xs[6] && xs[6] <= 1.0 / k);
        assert!(close(processor_x(32, b, k, r0, 5e4), 5e4, 1e-9));
    }

    #[test]
    fn the_closed_forms_take_the_stack_files_names_defaults_and_texts() {
        // Nothing given: the model's defaults, as the simulation reads them.
        let defaults = ClosedForm::from_figures([]).unwrap();
        assert_eq!(defaults, ClosedForm::from(&flash("").p));
        // Numbers in the spec's unit, unrounded; texts as the stack file writes them.
        let got = ClosedForm::from_figures([
            ("read_latency", Figure::Number(61_234.5)),
            ("write_latency", Figure::Text("20us")),
            ("read_rate", Figure::Text("1g")),
            ("duplex", Figure::Text("half")),
            ("units", Figure::Number(8.0)),
        ])
        .unwrap();
        assert_eq!(got.read_latency_ns, 61_234.5);
        assert_eq!(got.write_latency_ns, 20_000.0);
        assert_eq!(got.read_rate_bps, (1u64 << 30) as f64);
        assert_eq!((got.duplex, got.units), (Duplex::Half, 8.0));
        assert_eq!(got.link_rate_bps, defaults.link_rate_bps);
        // One line naming the key and the accepted form.
        let cases = [
            (
                "unit",
                Figure::Number(8.0),
                "unknown key 'unit'; accepted: capacity, units",
            ),
            (
                "units",
                Figure::Number(0.0),
                "units = 0: must be an integer from 1 to 4096",
            ),
            (
                "read_rate",
                Figure::Number(0.5),
                "read_rate = 0.5: must be a positive rate",
            ),
            (
                "read_latency",
                Figure::Number(f64::NAN),
                "read_latency = NaN: must be a duration",
            ),
            (
                "duplex",
                Figure::Number(1.0),
                "duplex = 1: must be one of full, half",
            ),
            (
                "duplex",
                Figure::Text("simplex"),
                "duplex = \"simplex\": must be one of full, half",
            ),
            (
                "write_latency",
                Figure::Text("soon"),
                "write_latency = \"soon\": must be a duration",
            ),
        ];
        for (key, figure, want) in cases {
            let e = ClosedForm::from_figures([(key, figure)])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{key}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    /// A command at offset 0 (for `Device::submit`).
    fn cmd(tag: u64, op: Op, len: u64) -> DevCmd {
        DevCmd {
            tag,
            op,
            offset_bytes: 0,
            len_bytes: len,
            fua: false,
        }
    }

    #[test]
    fn the_same_commands_give_the_same_completion_times() {
        let table = "units = 3\nwrite_buffer = \"256k\"";
        let gen = |i: usize| {
            let op = [Op::Read, Op::Write, Op::Write, Op::Read][i % 4];
            let len = 4096 << (i * 7 % 6);
            (op, (i as u64 * 7919 % 1000) * 65536, len)
        };
        let a = closed_loop(&mut flash(table), 0, 16, 3000, gen);
        let b = closed_loop(&mut flash(table), 0, 16, 3000, gen);
        assert_eq!(a.latencies_ns, b.latencies_ns);
        assert_eq!(a.elapsed_ns, b.elapsed_ns);
    }

    /// The sorted unit-plus-transfer latencies of `n` commands `op` of 4 KiB at QD1.
    fn qd1_latencies(d: &mut Flash, op: Op, n: usize) -> Vec<u64> {
        let mut lat = closed_loop(d, 0, 1, n, |i| (op, i as u64 * 4096, 4096)).latencies_ns;
        lat.sort_unstable();
        lat
    }

    /// Quantile `p` of sorted `xs` (the order statistic at floor(p n)).
    fn order_stat(xs: &[u64], p: f64) -> f64 {
        xs[((p * xs.len() as f64) as usize).min(xs.len() - 1)] as f64
    }

    #[test]
    fn the_service_times_quantiles_and_mean_are_the_closed_forms() {
        // f = 0: Q(0.99) / Q(0.5) = 99^s; the mean over the scale is pi s / sin(pi s).
        let st = ServiceTime {
            mean_ns: 80_000.0,
            floor: 0.0,
            spread: 0.25,
        };
        let m = std::f64::consts::PI * 0.25 / (std::f64::consts::PI * 0.25).sin();
        assert!(close(log_logistic_mean(0.25), m, 1e-12));
        assert!(close(st.quantile_ns(0.5), 80_000.0 / m, 1e-12));
        assert!(close(
            st.quantile_ns(0.99) / st.quantile_ns(0.5),
            99f64.powf(0.25),
            1e-12
        ));
        // A floor: the least value is f a, the median f a + (1 - f) a / m.
        let st = ServiceTime { floor: 0.6, ..st };
        let least = 48_000.0 + 32_000.0 * (U_CUT / (1.0 - U_CUT)).powf(0.25) / m;
        assert!(close(st.quantile_ns(0.0), least, 1e-12));
        assert!(close(st.quantile_ns(0.5), 48_000.0 + 32_000.0 / m, 1e-12));
        // The mean: the integral of Q over (0, 1) is a (midpoint rule; the cut tails move
        // it by well under 0.1 %).
        let n = 1_000_000;
        let mean = (0..n)
            .map(|i| st.quantile_ns((i as f64 + 0.5) / n as f64))
            .sum::<f64>()
            / n as f64;
        assert!(close(mean, 80_000.0, 1e-3), "{mean}");
        // No spread, or a floor of 1: the constant.
        for st in [
            ServiceTime { spread: 0.0, ..st },
            ServiceTime { floor: 1.0, ..st },
        ] {
            assert!(st.constant());
            assert_eq!(st.quantile_ns(0.999), 80_000.0);
        }
    }

    #[test]
    fn at_qd1_a_spread_devices_percentiles_are_the_distributions_quantiles_plus_the_transfer() {
        let n = 200_000;
        for (table, op) in [
            ("read_spread = 0.2\nread_floor = 0.5", Op::Read),
            ("read_spread = 0.35", Op::Read),
            (
                "write_spread = 0.3\nwrite_floor = 0.25\nwrite_latency = \"40us\"",
                Op::Write,
            ),
        ] {
            let mut d = flash(table);
            let st = d.p.service(op);
            let tt = t(&d, op, 4096) as f64;
            let lat = qd1_latencies(&mut d, op, n);
            for (p, margin) in [(0.5, 0.01), (0.99, 0.02), (0.999, 0.05)] {
                let got = order_stat(&lat, p);
                let want = st.quantile_ns(p) + tt;
                assert!(close(got, want, margin), "{table} p{p}: {got} vs {want}");
            }
            // The mean stays the constant model's: latency + transfer.
            let mean = lat.iter().sum::<u64>() as f64 / n as f64;
            assert!(close(mean, st.mean_ns + tt, 0.01), "{table}: {mean}");
        }
    }

    #[test]
    fn a_stall_with_probability_p_puts_the_quantiles_above_one_minus_p_at_the_stalls_distribution()
    {
        let n = 200_000;
        for (table, op) in [
            (
                "stall_probability = 0.02\nstall_time = \"10ms\"\nstall_spread = 0.3\nstall_floor = 0.2",
                Op::Read,
            ),
            (
                "stall_probability = 0.005\nstall_time = \"20ms\"\nwrite_latency = \"40us\"",
                Op::Write,
            ),
        ] {
            let mut d = flash(table);
            let (p, stall) = (d.p.stall_probability, d.p.stall());
            // The body is constant: every command's latency plus its transfer.
            let body = d.p.service(op).mean_ns + t(&d, op, 4096) as f64;
            let lat = qd1_latencies(&mut d, op, n);
            for q in [0.5, 0.9, 1.0 - p - 0.002] {
                let got = order_stat(&lat, q);
                assert_eq!(got, body, "{table} p{q}: the body");
            }
            for q in [1.0 - p / 2.0, 1.0 - p / 4.0, 1.0 - p / 10.0] {
                let got = order_stat(&lat, q);
                let want = body + stall.quantile_ns((q - (1.0 - p)) / p);
                assert!(close(got, want, 0.05), "{table} p{q}: {got} vs {want}");
            }
            let mean = lat.iter().sum::<u64>() as f64 / n as f64;
            let want = body + p * stall.mean_ns;
            assert!(close(mean, want, 0.05), "{table}: mean {mean} vs {want}");
        }
    }

    #[test]
    fn a_stalled_command_holds_its_unit_so_the_units_bound_is_n_over_a_plus_its_mean_stall() {
        // Two units, four outstanding reads: the unit bound N / (a + p D) is below the
        // queue's q / (a + t + p D); at QD1 nothing queues, X = 1 / (a + t + p D).
        let table = "units = 2\nstall_probability = 0.01\nstall_time = \"5ms\"\nstall_spread = 0.2";
        let mut d = flash(table);
        let z = d.p.stall_probability * d.p.stall_time_ns as f64;
        let a = d.p.read_latency_ns as f64;
        let want = closed_form_iops(&d, Op::Read, 4096, 4);
        assert!(close(want, 2.0 / (a + z) * 1e9, 1e-9), "{want}");
        let (x, _) = measured(&mut d, Op::Read, 4096, 4, 200_000);
        assert!(close(x, want, 0.03), "{x} vs {want}");
        let mut d = flash(table);
        let round = a + t(&d, Op::Read, 4096) as f64 + z;
        let (x, mean) = measured(&mut d, Op::Read, 4096, 1, 200_000);
        assert!(close(x, 1e9 / round, 0.03), "{x} vs {}", 1e9 / round);
        assert!(close(mean, round, 0.03), "{mean} vs {round}");
    }

    #[test]
    fn n_commands_hold_n_p_stalls_within_one_whatever_the_seed_and_their_mean_is_the_stalls() {
        // A RAM-backed file's fit on a loaded machine: rare, long stalls. Independent draws
        // gave a 0.5 s run a Poisson count of them (module doc, "Stalls").
        let table = "read_latency = \"5us\"\nstall_probability = 0.00009\nstall_time = \"36ms\"";
        let n = 50_000;
        for seed in 1..=20 {
            let p = typed_params("nv0", "flash", table, |profile, v| {
                Ok(FlashParams::from_values(profile, v))
            });
            let mut d = Flash::new_seeded("nv0", p.unwrap(), seed);
            let body = d.p.read_latency_ns + t(&d, Op::Read, 4096);
            let lat = qd1_latencies(&mut d, Op::Read, n);
            let stalls = lat.iter().filter(|&&x| x > body).count() as f64;
            let want = n as f64 * d.p.stall_probability;
            assert!(
                (stalls - want).abs() <= 1.0,
                "seed {seed}: {stalls} vs {want}"
            );
        }
        // With a spread, K stalls' mean is D within a few % (the quantiles' Weyl sequence).
        let table = "stall_probability = 0.01\nstall_time = \"1ms\"\nstall_spread = 0.5";
        let mut d = flash(table);
        let body = d.p.read_latency_ns + t(&d, Op::Read, 4096);
        let lat = qd1_latencies(&mut d, Op::Read, 20_000);
        let stalls: Vec<f64> = lat
            .iter()
            .filter(|&&x| x > body)
            .map(|&x| (x - body) as f64)
            .collect();
        assert_eq!(stalls.len(), 200);
        let mean = stalls.iter().sum::<f64>() / stalls.len() as f64;
        assert!(close(mean, d.p.stall_time_ns as f64, 0.05), "{mean}");
    }

    #[test]
    fn stalls_draw_from_a_stream_of_their_own_and_leave_the_unit_times_draws_as_they_were() {
        let body = "read_spread = 0.3";
        let n = 4_000;
        let run = |table: &str| {
            closed_loop(&mut flash(table), 0, 1, n, |i| {
                (Op::Read, i as u64 * 4096, 4096)
            })
            .latencies_ns
        };
        let lat = run(body);
        let stalled = run(&format!(
            "{body}\nstall_probability = 0.05\nstall_time = \"1ms\""
        ));
        // At QD1 the i-th command draws the i-th unit time in both runs: a stall only adds.
        let moved = lat.iter().zip(&stalled).filter(|(a, b)| a != b).count();
        assert!(lat.iter().zip(&stalled).all(|(a, b)| b >= a));
        assert!((120..=280).contains(&moved), "{moved} of {n} stalled");
    }

    #[test]
    fn without_a_spread_no_draw_is_made_and_with_one_the_seed_decides_the_draws() {
        // No spread: every read takes read_latency + t, whatever the seed.
        let p = flash("").p;
        let mut a = Flash::new_seeded("nv0", p.clone(), 1);
        let lat = qd1_latencies(&mut a, Op::Read, 100);
        assert!(lat.iter().all(|&l| l == 80 * US + t(&a, Op::Read, 4096)));
        // A spread: the same seed gives the same draws, another seed others.
        let p = flash("read_spread = 0.3").p;
        let run = |seed| {
            let mut d = Flash::new_seeded("nv0", p.clone(), seed);
            closed_loop(&mut d, 0, 4, 2000, |i| (Op::Read, i as u64 * 4096, 4096)).latencies_ns
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn bad_parameters_are_refused_with_one_line_naming_the_parameter() {
        let cases = [
            ("units = 0", "units = 0: must be an integer from 1 to 4096"),
            (
                "units = 5000",
                "units = 5000: must be an integer from 1 to 4096",
            ),
            ("read_rate = 0", "read_rate = 0: must be a positive rate"),
            (
                "queue_depth = 0",
                "queue_depth = 0: must be an integer from 1 to 65536",
            ),
            (
                "write_buffer = \"big\"",
                "write_buffer = \"big\": must be a size",
            ),
            (
                "flush_latency = -1",
                "flush_latency = -1: must be a duration",
            ),
            (
                "duplex = \"simplex\"",
                "duplex = \"simplex\": must be one of full, half",
            ),
            ("read_spread = 0.6", "read_spread = 0.6: must be "),
            ("write_floor = 1.5", "write_floor = 1.5: must be "),
        ];
        for (src, want) in cases {
            let table: std::collections::BTreeMap<String, toml::Value> =
                toml::from_str(src).unwrap();
            let e = build_device("nv0", "flash", None, &table)
                .err()
                .unwrap_or_else(|| panic!("{src} accepted"))
                .to_string();
            assert!(e.starts_with("device 'nv0': "), "{e}");
            assert!(e.contains(want), "{src}: got {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = typed_params("nv0", "flash", "unit = 8", |_, _| Ok(()))
            .err()
            .unwrap();
        assert!(matches!(e, DeviceError::UnknownParam { .. }), "{e}");
    }
}

/// The model in a whole run: a native host's fio job on a `flash` device.
#[cfg(test)]
mod whole_run {
    use crate::run::{run_json, RunInput};
    use crate::vdisk::{InterfaceModel, VirtualDisk};
    use vmio_core::stack::Interface;
    use vmio_core::units::transfer_ns;
    use vmio_core::US;

    const STACK: &str = "[host]\ncores = 2\nhypervisor = \"native\"\n\
        [[device]]\nname = \"nv0\"\nmodel = \"flash\"\n\
        [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"nv0\"]\n\
        [[vm]]\nname = \"host\"\n\
        [[vm.disk]]\nname = \"nv0\"\nvolume = \"v\"\ninterface = \"host\"\ncache = \"none\"\n";

    const RANDREAD_QD1: &str = "[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\n\
        iodepth=1\nsize=1g\nruntime=1\ntime_based\n";

    #[test]
    fn a_native_qd1_4k_randread_takes_the_closed_form_plus_the_host_submission() {
        let j =
            run_json(&RunInput::texts(STACK, RANDREAD_QD1, 1)).unwrap_or_else(|e| panic!("{e}"));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        let read = &v["jobs"][0]["read"];
        // The device's closed form at QD1 with the defaults: read_latency + 4k / read_rate.
        let device = 80 * US + transfer_ns(4096, 3_000_000_000);
        // The host path's fixed cost (sim/guest.rs, vdisk_submit and host_finish, with the
        // default [cpu] model "dedicated"): the interface's guest_submit + vmm_submit +
        // vmm_complete; interface "host" (vdisk.rs): a system call and block-layer
        // submission of 1.5 us (fio's slat), no VMM. Its guest_complete (1 us) is charged
        // only under [cpu] model = "cfs"; the default scheduler (mq-deadline) adds no time
        // to a lone request.
        let m = InterfaceModel::new(Interface::Host, None, None);
        let host = m.guest_submit_ns()
            + m.vmm_submit_ns(vmio_core::request::Op::Read, 4096)
            + m.vmm_complete_ns(vmio_core::request::Op::Read, 4096);
        assert_eq!(host, 1_500);
        assert_eq!(read["clat_ns"]["mean"].as_f64(), Some(device as f64));
        assert_eq!(
            read["slat_ns"]["mean"].as_f64(),
            Some(m.guest_submit_ns() as f64)
        );
        assert_eq!(
            read["lat_ns"]["mean"].as_f64(),
            Some((device + host) as f64)
        );
        let iops = read["iops"].as_f64().unwrap();
        let want = 1e9 / (device + host) as f64;
        assert!((iops / want - 1.0).abs() < 1e-3, "{iops} vs {want}");
    }
}
