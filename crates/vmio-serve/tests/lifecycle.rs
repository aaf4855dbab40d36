//! The server as a process: placement of data on stripe/raid0 backing files, durability of
//! flushed data across `kill -9`, clean shutdown, statistics, and bad input on the command
//! line and in the stack file (exit status 2, a message naming the field).

mod common;
use common::*;
use std::process::Command;
use vmio_core::volume::{self, Piece};
use vmio_serve::proto::*;

fn backing(dir: &std::path::Path, dev: usize) -> Vec<u8> {
    std::fs::read(dir.join(["a.img", "b.img"][dev])).unwrap()
}

/// Writes a distinct byte into every 4 KiB block of the export, then checks each block is
/// where vmio-core's layout says, plus a few hand-computed locations.
fn placement(layout: &str, hand: &[(u64, usize, u64)]) {
    let dir = tempdir(&format!("place-{layout}"));
    let srv = Server::start(&dir, &stack(layout, "4m", 8 << 20, &["none"]));
    let (mut c, size) = Raw::go(&srv.socket, "vm1");
    assert_eq!(size, 8 << 20);
    let blocks = size / 4096;
    // Windows of 64 requests: a client must read its replies to keep the server reading.
    for w in (0..blocks).step_by(64) {
        for b in w..w + 64 {
            c.request(CMD_WRITE, 0, b, b * 4096, 4096);
            c.send(&[(b % 255 + 1) as u8; 4096]);
        }
        for _ in w..w + 64 {
            assert_eq!(c.reply(0).0, 0);
        }
    }
    c.request(CMD_FLUSH, 0, 0, 0, 0);
    assert_eq!(c.reply(0).0, 0);
    let devs = [backing(&dir, 0), backing(&dir, 1)];
    let kind = volume::lookup(layout).unwrap();
    let l = volume::build("data", kind, &[4 << 20, 4 << 20], &volume::defaults()).unwrap();
    let mut pieces: Vec<Piece> = Vec::new();
    for b in 0..blocks {
        pieces.clear();
        l.map(b * 4096, 4096, &mut pieces);
        let p = pieces[0];
        let at = p.offset_bytes as usize;
        assert_eq!(
            devs[p.device][at],
            (b % 255 + 1) as u8,
            "{layout} block {b}"
        );
    }
    for &(vol_off, dev, dev_off) in hand {
        let want = ((vol_off / 4096) % 255 + 1) as u8;
        assert_eq!(devs[dev][dev_off as usize], want, "{layout} {vol_off}");
    }
}

#[test]
fn bytes_written_through_a_stripe_land_where_lvm_striping_puts_them() {
    // 64k stripes over a, b: [0,64k) -> a@0, [64k,128k) -> b@0, [128k,192k) -> a@64k.
    placement(
        "stripe",
        &[
            (0, 0, 0),
            (64 << 10, 1, 0),
            (128 << 10, 0, 64 << 10),
            (200 << 10, 1, 72 << 10),
        ],
    );
}

#[test]
fn bytes_written_through_raid0_land_where_md_chunks_put_them() {
    // 512k chunks over a, b: [512k,1m) -> b@0, [1m, 1.5m) -> a@512k, chunk 7 -> b@1.5m.
    placement(
        "raid0",
        &[
            (0, 0, 0),
            (512 << 10, 1, 0),
            (1 << 20, 0, 512 << 10),
            ((7 << 19) + 4096, 1, (3 << 19) + 4096),
        ],
    );
}

#[test]
fn flushed_data_survives_kill_9_in_every_mode_but_unsafe() {
    let modes = ["none", "writeback", "writethrough", "directsync", "pdc"];
    let dir = tempdir("kill9");
    let srv = Server::start(&dir, &stack("linear", "16m", 2 << 20, &modes));
    for i in 0..modes.len() {
        let (mut c, _) = Raw::go(&srv.socket, &format!("vm{}", i + 1));
        c.request(CMD_WRITE, 0, 1, 0, 65536);
        c.send(&[0x5a + i as u8; 65536]);
        assert_eq!(c.reply(0).0, 0);
        c.request(CMD_WRITE, CMD_FLAG_FUA, 2, 65536, 4096);
        c.send(&[0xa5; 4096]);
        assert_eq!(c.reply(0).0, 0);
        c.request(CMD_FLUSH, 0, 3, 0, 0);
        assert_eq!(c.reply(0).0, 0);
    }
    srv.signal(libc::SIGKILL);
    drop(srv);
    let a = backing(&dir, 0);
    for (i, mode) in modes.iter().enumerate() {
        let base = i * (2 << 20);
        assert!(
            a[base..base + 65536].iter().all(|&b| b == 0x5a + i as u8),
            "{mode}"
        );
        assert!(a[base + 65536..base + 69632].iter().all(|&b| b == 0xa5));
    }
}

#[test]
fn sigterm_finishes_flushes_removes_the_socket_and_prints_statistics() {
    let dir = tempdir("sigterm");
    let stats = dir.join("stats.json");
    let srv = Server::start_with(
        &dir,
        &stack("single", "8m", 4 << 20, &["writeback"]),
        &["--stats-file", stats.to_str().unwrap()],
    );
    let (mut c, _) = Raw::go(&srv.socket, "vm1/disk0");
    for k in 0..10 {
        c.request(CMD_WRITE, 0, k, k * 4096, 4096);
        c.send(&[1; 4096]);
        assert_eq!(c.reply(0).0, 0);
    }
    c.request(CMD_READ, 0, 99, 0, 4096);
    assert_eq!(c.reply(4096).0, 0);
    srv.signal(libc::SIGUSR1);
    let t = std::time::Instant::now();
    let snap = loop {
        let text = std::fs::read_to_string(&stats).unwrap_or_default();
        if text.contains("\"write_ops\": 10") {
            break text;
        }
        assert!(t.elapsed().as_secs() < 10, "stats file: {text}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let v: serde_json::Value = serde_json::from_str(&snap).unwrap();
    assert_eq!(v[0]["export"], "vm1/disk0");
    assert_eq!(v[0]["write_bytes"], 40960);
    assert!(v[0]["write_lat_p99_ns"].as_u64().unwrap() > 0);
    let sock = srv.socket.clone();
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
    assert!(
        err.contains("vm1/disk0") && err.contains("write_ops"),
        "{err}"
    );
    assert!(!sock.exists(), "socket left behind");
    assert!(c.closed());
}

fn bad(args: &[&str], stack_text: Option<&str>) -> String {
    let dir = tempdir("bad");
    let stack = dir.join("stack.toml");
    if let Some(t) = stack_text {
        std::fs::write(&stack, t).unwrap();
    }
    let out = Command::new(BIN)
        .current_dir(&dir)
        .args(
            args.iter()
                .map(|a| a.replace("STACK", stack.to_str().unwrap())),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_arguments_and_stacks_exit_2_with_a_message_naming_the_field() {
    assert!(bad(&[], None).contains("--stack STACK.toml is required"));
    assert!(bad(&["--stack", "STACK", "--tcp", "x"], None).contains("--tcp 'x'"));
    assert!(bad(&["--stack", "STACK"], None).contains("stack.toml: No such file"));
    let ok = stack("single", "8m", 4 << 20, &["none"]);
    let e = bad(
        &["--stack", "STACK"],
        Some(&ok.replace("cache = \"none\"", "cache = \"fast\"")),
    );
    assert!(
        e.contains("vm[0].disk[0].cache: 'fast' is not valid; accepted: none,"),
        "{e}"
    );
    let e = bad(
        &["--stack", "STACK"],
        Some(&ok.replace("path = \"a.img\"\n", "")),
    );
    assert!(e.contains("device[0] 'a': needs path"), "{e}");
    let e = bad(
        &["--stack", "STACK"],
        Some(&ok.replace("size = \"8m\"", "size = \"1x\"")),
    );
    assert!(e.contains("device[0].size"), "{e}");
}

#[test]
fn existing_files_are_never_resized_without_create() {
    let dir = tempdir("resize");
    std::fs::write(dir.join("a.img"), vec![7u8; 1 << 20]).unwrap();
    let text = stack("single", "8m", 4 << 20, &["writeback"]);
    std::fs::write(dir.join("stack.toml"), &text).unwrap();
    let out = Command::new(BIN)
        .args(["--stack", dir.join("stack.toml").to_str().unwrap()])
        .args(["--socket", dir.join("s.sock").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("smaller than device 'a' size") && e.contains("--create"),
        "{e}"
    );
    assert_eq!(std::fs::metadata(dir.join("a.img")).unwrap().len(), 1 << 20);
    let srv = Server::start_with(&dir, &text, &["--create"]);
    assert_eq!(std::fs::metadata(dir.join("a.img")).unwrap().len(), 8 << 20);
    let (mut c, _) = Raw::go(&srv.socket, "vm1");
    c.request(CMD_READ, 0, 1, 0, 4096);
    let (e, _, d) = c.reply(4096);
    assert_eq!(e, 0);
    assert!(d.iter().all(|&b| b == 7), "existing data kept");
}

#[test]
fn o_direct_on_tmpfs_works_or_fails_with_a_clear_message() {
    let Ok(base) = std::fs::canonicalize("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm");
        return;
    };
    let dir = base.join(format!("vmio-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = stack("single", "8m", 4 << 20, &["none"]);
    std::fs::write(dir.join("stack.toml"), &text).unwrap();
    let mut child = Command::new(BIN)
        .args(["--stack", dir.join("stack.toml").to_str().unwrap()])
        .args(["--socket", dir.join("s.sock").to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    match child.try_wait().unwrap() {
        Some(st) => {
            let mut e = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut e).unwrap();
            assert_eq!(st.code(), Some(2));
            assert!(
                e.contains("O_DIRECT is not supported") && e.contains("a.img"),
                "{e}"
            );
        }
        None => {
            // Linux >= 6.6 supports O_DIRECT on tmpfs.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sharing_device_is_a_backing_file_of_its_capacity_when_it_has_no_size() {
    let dir = tempdir("share");
    // b is a region of a's disk in the simulator; served, it is a file of its own.
    let text = stack("raid0", "4m", 8 << 20, &["none"]).replace(
        "name = \"b\"\nmodel = \"ssd\"\npath = \"b.img\"\nsize = \"4m\"",
        "name = \"b\"\nshare = \"a\"\nstart = \"1g\"\ncapacity = \"4m\"\npath = \"b.img\"",
    );
    assert!(text.contains("share = \"a\""), "{text}");
    let srv = Server::start(&dir, &text);
    let (_, size) = Raw::go(&srv.socket, "vm1");
    assert_eq!(size, 8 << 20);
    assert_eq!(std::fs::metadata(dir.join("b.img")).unwrap().len(), 4 << 20);
}

#[test]
fn a_stack_that_is_a_device_a_fifo_or_over_16_mib_is_refused_without_being_read() {
    let dir = tempdir("stack-input");
    let fifo = dir.join("stack.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = dir.join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((16 << 20) + 1)
        .unwrap();
    for (path, says) in [
        (
            std::path::PathBuf::from("/dev/zero"),
            "is not a regular file",
        ),
        (fifo, "is not a regular file"),
        (big, "is 16777217 bytes; the limit is 16777216 (16 MiB)"),
    ] {
        let err = match vmio_serve::server::load(&path, false) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{} was accepted", path.display()),
        };
        assert!(
            err.starts_with(&format!("{}: ", path.display())) && err.contains(says),
            "{err}"
        );
    }
}
