//! `cache = "pdc"` with real clients: fio's nbd engine writing a circular log with flushes
//! (a journal) is detected and bypassed, random writes are not; data cached before a
//! bypassed write is never served stale (qemu-io patterns); flushed bypassed writes survive
//! `kill -9`. The detector's rule is vmio-core's (`vmio_core::cache::pdc`, default `[pdc]`
//! parameters: min_pass 1 MiB, min_syncs 2, window 1 MiB): the first pass over a log is
//! cached, and so is the second until its first commit (the first write after a FLUSH that
//! continues it) confirms the wrap; from there every write of the log is bypassed. The
//! figures below are closed forms of the passes and the writes between two FLUSHes.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;
use vmio_serve::proto::*;

const MIB: u64 = 1 << 20;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Two `pdc` VMs on one disk file, 8 MiB each, with a statistics file.
fn pdc_server(tag: &str) -> (Server, std::path::PathBuf) {
    let dir = tempdir(tag);
    let stats = dir.join("stats.json");
    let srv = Server::start_with(
        &dir,
        &stack("single", "16m", 8 * MIB, &["pdc", "pdc"]),
        &["--stats-file", stats.to_str().unwrap()],
    );
    (srv, stats)
}

#[test]
fn a_circular_log_written_by_fio_is_detected_as_its_region_and_random_writes_are_not() {
    let (srv, stats) = pdc_server("detect");
    let (log, size, loops) = (MIB, 2 * MIB, 4u64);
    let job = fio_log_job(
        "log",
        &srv.uri("vm1/disk0"),
        "write",
        log,
        size,
        loops as u32,
    ) + &fio_log_job("random", &srv.uri("vm2/disk0"), "randwrite", log, size, 4);
    run_fio(&srv.dir, "detect", &job);
    let writes = loops * size / 4096;
    let done = |e: &Value| e["pdc"]["writes"] == writes;
    let s = export_stats(&srv, &stats, "vm1/disk0", done);
    let p = &s["pdc"];
    assert_eq!(
        p["journals"],
        serde_json::json!([{"lo": log, "hi": log + size}]),
        "{p}"
    );
    let events = p["events"].as_array().unwrap_or_else(|| panic!("{p}"));
    assert_eq!(events.len(), 1, "{p}");
    assert_eq!(events[0]["kind"], "detected");
    assert_eq!(
        (u(&events[0]["lo"]), u(&events[0]["hi"])),
        (log, log + size)
    );
    assert!(u(&events[0]["at_ns"]) > 0);
    // Every pass but the first goes around the cache, less the second's first 4 writes
    // (before its first commit), all of it O_DIRECT (4 KiB aligned).
    let bypassed = (loops - 1) * size / 4096 - 4;
    assert_eq!(u(&p["bypassed_writes"]), bypassed, "{p}");
    assert_eq!(u(&p["bypassed_bytes"]), bypassed * 4096, "{p}");
    assert_eq!(u(&p["direct_pieces"]), bypassed, "{p}");
    assert_eq!(u(&p["dontcache_pieces"]) + u(&p["dropped_pieces"]), 0);
    let r = export_stats(&srv, &stats, "vm2/disk0", done);
    let p = &r["pdc"];
    assert_eq!(p["journals"], serde_json::json!([]), "{p}");
    assert_eq!(u(&p["bypassed_bytes"]), 0, "{p}");
    assert_eq!(p["events"], serde_json::json!([]), "{p}");
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
    assert!(err.contains("is pdc, RWF_DONTCACHE"), "{err}");
    assert!(
        err.contains(&format!("vm1/disk0 pdc: journals [{log}, {})", log + size)),
        "{err}"
    );
    assert!(err.contains("vm2/disk0 pdc: journals none"), "{err}");
}

/// qemu-io commands writing `[lo, lo + 1 MiB)` as one log pass of 64 KiB writes of
/// `pattern` with a flush after every 2 (`split`: the last write in two unaligned parts).
fn log_pass(lo: u64, pattern: u8, split: bool) -> Vec<String> {
    let mut c = Vec::new();
    for k in 0..16u64 {
        let off = lo + k * 65536;
        if split && k == 15 {
            c.push(format!("write -P {pattern:#x} {off} 1536"));
            c.push(format!(
                "write -P {pattern:#x} {} {}",
                off + 1536,
                65536 - 1536
            ));
        } else {
            c.push(format!("write -P {pattern:#x} {off} 64k"));
        }
        if k % 2 == 1 {
            c.push("flush".into());
        }
    }
    c
}

fn qemu_io(uri: &str, cmds: &[String]) -> String {
    need("qemu-io", "qemu-utils");
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in cmds {
        cmd.args(["-c", c]);
    }
    let out = run(cmd.arg(uri));
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert!(!out.contains("error"), "{out}");
    out
}

#[test]
fn data_cached_before_a_bypassed_write_is_not_served_stale() {
    let (srv, stats) = pdc_server("stale");
    let uri = srv.uri("vm1/disk0");
    let x = MIB + 4 * 65536;
    // X is written and read through the page cache (nothing is predicted yet).
    let mut cmds = vec![
        format!("write -P 0x11 {x} 4k"),
        format!("read -P 0x11 {x} 4k"),
    ];
    // The log's first pass (cached, over X), then its second: cached for its first 2 writes,
    // bypassed from its first commit on (over X), its last write in two unaligned pieces
    // (RWF_DONTCACHE, or written back and dropped).
    cmds.extend(log_pass(MIB, 0x22, false));
    cmds.push(format!("read -P 0x22 {x} 4k"));
    cmds.extend(log_pass(MIB, 0x33, true));
    cmds.push(format!("read -P 0x33 {MIB} 1m"));
    qemu_io(&uri, &cmds);
    let s = export_stats(&srv, &stats, "vm1/disk0", |e| e["pdc"]["writes"] == 34);
    let p = &s["pdc"];
    assert_eq!(
        p["journals"],
        serde_json::json!([{"lo": MIB, "hi": 2 * MIB}]),
        "{p}"
    );
    assert_eq!(u(&p["bypassed_writes"]), 15, "{p}");
    assert_eq!(u(&p["bypassed_bytes"]), MIB - 2 * 65536, "{p}");
    assert_eq!(u(&p["direct_pieces"]), 13, "{p}");
    assert_eq!(
        u(&p["dontcache_pieces"]) + u(&p["dropped_pieces"]),
        2,
        "{p}"
    );
    let pieces = if p["dontcache_supported"] == true {
        "dontcache_pieces"
    } else {
        "dropped_pieces"
    };
    assert_eq!(u(&p[pieces]), 2, "{p}");
    // A new client reads the bypassed data, and X's old value nowhere.
    qemu_io(&uri, &[format!("read -P 0x33 {MIB} 1m")]);
}

#[test]
fn flushed_bypassed_writes_survive_kill_9() {
    let (srv, stats) = pdc_server("kill9");
    let (mut c, _) = Raw::go(&srv.socket, "vm1/disk0");
    let mut cookie = 0;
    for pattern in [0x22u8, 0x33] {
        for k in 0..16u64 {
            cookie += 1;
            c.request(CMD_WRITE, 0, cookie, MIB + k * 65536, 65536);
            c.send(&[pattern; 65536]);
            assert_eq!(c.reply(0).0, 0);
            if k % 2 == 1 {
                cookie += 1;
                c.request(CMD_FLUSH, 0, cookie, 0, 0);
                assert_eq!(c.reply(0).0, 0);
            }
        }
    }
    let s = export_stats(&srv, &stats, "vm1/disk0", |e| e["pdc"]["writes"] == 32);
    // The second pass from its first commit on (its third write).
    assert_eq!(u(&s["pdc"]["bypassed_bytes"]), MIB - 2 * 65536, "{s}");
    srv.signal(libc::SIGKILL);
    let dir = srv.dir.clone();
    drop(srv);
    let a = std::fs::read(dir.join("a.img")).unwrap();
    let log = &a[MIB as usize..2 * MIB as usize];
    assert!(log.iter().all(|&b| b == 0x33));
}
