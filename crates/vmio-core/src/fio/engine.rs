//! fio 3.33's I/O engines (`fio --enghelp`; the `struct ioengine_ops` of each file under fio's
//! `engines/`) and what vmio makes of each: modelled, or refused with the reason.
//!
//! ```text
//! synchronous     sync psync vsync pvsync pvsync2 mmap splice: one request at a time
//!                 (FIO_SYNCIO in their ioengine_ops: iodepth > 1 behaves as 1)
//! asynchronous    libaio io_uring io_uring_cmd posixaio sg nbd xnvme: iodepth requests in
//!                 flight on the VM's disk (nbd: the disk behind vmio's NBD model)
//! null            engines/null.c: no device I/O; each I/O completes after fio's own loop cost
//!                 (NULL_IO_NS)
//! cpuio           engines/cpu.c: CPU only (cpuload, cpuchunks) through vmio's CPU layer
//! refused         network, RDMA, HTTP/object stores, cluster filesystems, exec, file and
//!                 metadata operations, persistent memory, GPU, raw flash (MTD), zoned
//!                 devices, other operating systems' engines, external engines: nothing of
//!                 vmio's stack (VM disks, host devices, guest page cache) models them
//! ```

/// How vmio runs a job of an engine it models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineModel {
    /// One request at a time (fio's `FIO_SYNCIO`).
    Sync,
    /// `iodepth` requests in flight.
    Async,
    /// fio's null engine: no device I/O.
    Null,
    /// fio's cpuio engine: CPU work only.
    Cpu,
}

/// How an engine runs a job's `fsync` / `fdatasync` (fio's `DDIR_SYNC` and `DDIR_DATASYNC`
/// io_us, drawn every `fsync` / `fdatasync` writes by io_u.c `get_rw_ddir`) while the job
/// has writes in flight:
///
/// ```text
/// Blocking   libaio: engines/libaio.c fio_libaio_queue returns FIO_Q_BUSY only while io_us
///            are queued and not yet io_submit()ted (ld->queued, which fio_libaio_commit
///            lowers), then calls do_io_u_sync() in the job's thread: the writes already
///            submitted stay in flight, and the thread neither submits nor reaps until the
///            fsync(2)/fdatasync(2) returns. fio stamps a completion when it reaps it
///            (io_u.c ios_completed → init_icd: fio_gettime), so a write that completes
///            meanwhile is stamped when the sync returns.
/// Queued     io_uring (engines/io_uring.c fio_ioring_prep: IORING_OP_FSYNC, with
///            IORING_FSYNC_DATASYNC for fdatasync), posixaio (engines/posixaio.c:
///            aio_fsync(3)), nbd (engines/nbd.c: nbd_aio_flush): one more request in flight
///            (it holds a slot of iodepth), nothing waits for it and it waits for nothing.
/// Drain      the rest: the sync is issued once the requests in flight have completed. For
///            the synchronous engines that is fio's order (depth 1: a write completes, then
///            its sync runs); for sg, io_uring_cmd and xnvme fio's handling was not read and
///            this older rule of vmio's stays.
/// ```
///
/// The sync reaches the disk as a FLUSH, which Linux's blk-mq sequences without draining the
/// queue (block/blk-flush.c, `blk_insert_flush`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncIssue {
    /// The job's thread runs the sync; writes in flight stay in flight (libaio).
    Blocking,
    /// The sync is one more asynchronous request (io_uring, posixaio, nbd).
    Queued,
    /// The sync waits for the requests in flight, then goes alone.
    Drain,
}

/// How `ioengine=name` runs a job's fsync and fdatasync ([`SyncIssue`]).
pub fn sync_issue(name: &str) -> SyncIssue {
    match name {
        "libaio" => SyncIssue::Blocking,
        "io_uring" | "posixaio" | "nbd" => SyncIssue::Queued,
        _ => SyncIssue::Drain,
    }
}

/// fio 3.33's own time per I/O with `ioengine=null` (its submit/complete loop, no engine
/// work): 4.7 million IOPS, 213 ns per I/O, measured with fio 3.33 on the 2-core AMD EPYC
/// build machine (`fio --name=x --ioengine=null --bs=4k --size=16g --rw=read`, 2026-11-24),
/// rounded to 200 ns. A null job's I/Os each take this long in virtual time.
pub const NULL_IO_NS: crate::Ns = 200;

/// The engines vmio models, in `fio --enghelp` order.
const MODELLED: &[(&str, EngineModel)] = &[
    ("cpuio", EngineModel::Cpu),
    ("mmap", EngineModel::Sync),
    ("sync", EngineModel::Sync),
    ("psync", EngineModel::Sync),
    ("vsync", EngineModel::Sync),
    ("pvsync", EngineModel::Sync),
    ("pvsync2", EngineModel::Sync),
    ("null", EngineModel::Null),
    ("posixaio", EngineModel::Async),
    ("splice", EngineModel::Sync),
    ("sg", EngineModel::Async),
    ("io_uring", EngineModel::Async),
    ("io_uring_cmd", EngineModel::Async),
    ("nbd", EngineModel::Async),
    ("libaio", EngineModel::Async),
    ("xnvme", EngineModel::Async),
];

/// The engines vmio refuses, with why.
const REFUSED: &[(&[&str], &str)] = &[
    (
        &["net", "netsplice"],
        "network I/O (TCP/UDP sockets), not a disk",
    ),
    (
        &[
            "rdma",
            "librpma_apm_client",
            "librpma_apm_server",
            "librpma_gpspm_client",
            "librpma_gpspm_server",
        ],
        "RDMA network I/O, not a disk",
    ),
    (&["http"], "HTTP/S3/Swift object storage, not a disk"),
    (
        &[
            "rados", "rbd", "gfapi", "gfapi_async", "libhdfs", "nfs", "dfs", "libiscsi",
            "ime_psync", "ime_psyncv", "ime_aio",
        ],
        "a networked or cluster storage client, not a VM disk",
    ),
    (&["exec"], "it runs a program, not I/O"),
    (
        &["filecreate", "filestat", "filedelete", "ftruncate", "falloc", "e4defrag"],
        "file and metadata operations (create, stat, delete, truncate, fallocate, defrag) are not modelled as an engine",
    ),
    (
        &["pmemblk", "dev-dax", "libpmem"],
        "persistent memory (DAX), not a block device",
    ),
    (&["libcufile"], "GPU direct storage (cuFile)"),
    (&["mtd"], "raw flash (MTD) with erase blocks, not a block device"),
    (&["libzbc"], "zoned block devices are not modelled"),
    (
        &["windowsaio", "solarisaio"],
        "an engine of another operating system (fio on Linux does not have it)",
    ),
];

/// The engines vmio models, for error messages.
pub fn accepted() -> String {
    MODELLED.iter().map(|m| m.0).collect::<Vec<_>>().join(", ")
}

/// Whether a job of engine `name` works on files when the disk has a filesystem: not the
/// null engine (fio's `FIO_DISKLESSIO`: no file is opened), cpuio (no I/O) or nbd (its target
/// is the NBD export, here the VM's disk itself).
pub fn uses_files(name: &str) -> bool {
    !matches!(name, "null" | "cpuio" | "nbd")
}

/// What vmio does with `ioengine=name`: its model, or `Err(reason)` for a refused engine
/// (None: not an engine of fio 3.33). fio's `external:path` and a path to a `.so` are
/// external engines, refused.
pub fn classify(name: &str) -> Option<Result<EngineModel, &'static str>> {
    if let Some(&(_, model)) = MODELLED.iter().find(|m| m.0 == name) {
        return Some(Ok(model));
    }
    if name.starts_with("external")
        || name.contains('/')
        || name.ends_with(".so")
        || name == "cpp_null"
    {
        return Some(Err(
            "an external engine (a shared object, like fio's examples/cpp_null.cpp) that vmio cannot load",
        ));
    }
    REFUSED
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|&(_, why)| Err(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libaio_syncs_in_the_jobs_thread_io_uring_queues_the_sync_and_sync_engines_drain() {
        assert_eq!(sync_issue("libaio"), SyncIssue::Blocking);
        for queued in ["io_uring", "posixaio", "nbd"] {
            assert_eq!(sync_issue(queued), SyncIssue::Queued, "{queued}");
        }
        for drain in ["psync", "sync", "pvsync2", "sg", "xnvme"] {
            assert_eq!(sync_issue(drain), SyncIssue::Drain, "{drain}");
        }
    }

    #[test]
    fn every_engine_of_fio_3_33_is_modelled_or_refused() {
        // `fio --enghelp` of Debian's fio 3.33, plus those of engines/ built elsewhere.
        let enghelp = "cpuio mmap sync psync vsync pvsync pvsync2 null net netsplice ftruncate \
            filecreate filestat filedelete exec posixaio falloc e4defrag splice gfapi \
            gfapi_async mtd sg io_uring io_uring_cmd nbd libaio rdma rados rbd pmemblk dev-dax \
            libpmem http libiscsi nfs libzbc xnvme dfs libhdfs librpma_apm_client \
            librpma_gpspm_server libcufile ime_psync windowsaio";
        for name in enghelp.split_whitespace() {
            assert!(classify(name).is_some(), "{name}");
        }
        assert_eq!(classify("psync"), Some(Ok(EngineModel::Sync)));
        assert_eq!(classify("io_uring"), Some(Ok(EngineModel::Async)));
        assert_eq!(classify("null"), Some(Ok(EngineModel::Null)));
        assert!(classify("net").unwrap().unwrap_err().contains("network"));
        assert!(classify("external:/x/e.so").unwrap().is_err());
        assert!(classify("cpp_null")
            .unwrap()
            .unwrap_err()
            .contains("external"));
        assert!(!uses_files("null") && !uses_files("nbd") && uses_files("psync"));
        assert_eq!(classify("nosuch"), None);
    }
}
