//! `--read-ahead` with real clients on a Unix socket: data identical to the backing file
//! (also after writes into a window), the closed form of a sequential stream (read from the
//! windows after the first miss), nothing read ahead of random reads, fio's crc32c
//! verification through sequential read-back at depth 8, qemu-io reading back what it wrote
//! over a window. A test whose client is not installed fails, naming the Debian package.

mod common;
use common::*;
use std::process::Command;

/// One device, one `cache = "none"` disk of `bytes`, the backing file filled with a
/// position-dependent pattern first.
fn patterned(dir: &std::path::Path, bytes: u64) -> (String, Vec<u8>) {
    let data: Vec<u8> = (0..bytes as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("a.img"), &data).unwrap();
    let text = stack("single", &format!("{bytes}"), bytes, &["none"]);
    (text, data)
}

/// The server on `stack_text` with `--read-ahead ra` and a stats file: it, and the file.
fn serve_ra(dir: &std::path::Path, stack_text: &str, ra: &str) -> (Server, std::path::PathBuf) {
    let stats = dir.join("stats.json");
    let args = ["--read-ahead", ra, "--stats-file", stats.to_str().unwrap()];
    (Server::start_with(dir, stack_text, &args), stats)
}

fn read(c: &mut Raw, cookie: u64, off: u64, len: u32) -> Vec<u8> {
    c.request(0, 0, cookie, off, len);
    let (err, got, data) = c.reply(len as usize);
    assert_eq!((err, got), (0, cookie), "read {off}+{len}");
    data
}

fn write(c: &mut Raw, cookie: u64, off: u64, data: &[u8]) {
    c.request(1, 0, cookie, off, data.len() as u32);
    c.send(data);
    let (err, got, _) = c.reply(0);
    assert_eq!((err, got), (0, cookie), "write {off}");
}

#[test]
fn a_sequential_qd1_stream_is_served_from_the_windows_after_the_first_miss_with_the_file_bytes() {
    let dir = tempdir("ra-seq");
    let bytes = 16u64 << 20;
    let (text, data) = patterned(&dir, bytes);
    let (srv, stats) = serve_ra(&dir, &text, "1m");
    let (mut c, size) = Raw::go(&srv.socket, "vm1");
    assert_eq!(size, bytes);
    let b = 64u64 << 10;
    let n = bytes / b;
    for i in 0..n {
        let got = read(&mut c, i, i * b, b as u32);
        assert!(
            got == data[(i * b) as usize..((i + 1) * b) as usize],
            "read {i}"
        );
    }
    let e = export_stats(&srv, &stats, "vm1/disk0", |e| e["read_ops"] == n);
    let ra = &e["read_ahead"];
    // Closed form (crates/vmio-serve/src/readahead.rs): the READ at 0 misses and starts a
    // window; every later READ of the stream is in one.
    assert_eq!(
        (ra["misses"].as_u64(), ra["hits"].as_u64()),
        (Some(1), Some(n - 1)),
        "{e}"
    );
    assert_eq!(ra["hit_bytes"].as_u64(), Some((n - 1) * b));
    // Read ahead: everything after the first READ, once, and nothing past the export.
    assert_eq!(ra["chunk_bytes"].as_u64(), Some(bytes - b), "{e}");
    // The client's statistics count the client's READs only.
    assert_eq!(e["read_bytes"].as_u64(), Some(bytes));
    let (st, _) = srv.stop();
    assert!(st.success());
}

#[test]
fn a_write_into_a_window_drops_it_and_later_reads_return_the_written_bytes() {
    let dir = tempdir("ra-write");
    let bytes = 8u64 << 20;
    let (text, mut data) = patterned(&dir, bytes);
    let (srv, stats) = serve_ra(&dir, &text, "1m");
    let (mut c, _) = Raw::go(&srv.socket, "vm1");
    let b = 16u64 << 10;
    // Start a stream: the window covers the next bytes.
    for i in 0..4 {
        assert!(read(&mut c, i, i * b, b as u32) == data[(i * b) as usize..((i + 1) * b) as usize]);
    }
    // Overwrite inside the window (aligned and not), then read the stream on across it.
    let w1 = vec![0xa5u8; 8192];
    write(&mut c, 100, 5 * b, &w1);
    data[(5 * b) as usize..(5 * b) as usize + 8192].copy_from_slice(&w1);
    let w2 = vec![0x5au8; 1000];
    write(&mut c, 101, 7 * b + 100, &w2);
    data[(7 * b + 100) as usize..(7 * b + 1100) as usize].copy_from_slice(&w2);
    for i in 4..64 {
        let got = read(&mut c, 200 + i, i * b, b as u32);
        assert!(
            got == data[(i * b) as usize..((i + 1) * b) as usize],
            "read {i} after the writes"
        );
    }
    let e = export_stats(&srv, &stats, "vm1/disk0", |e| e["read_ops"] == 64);
    assert!(e["read_ahead"]["invalidations"].as_u64() >= Some(1), "{e}");
    assert!(e["read_ahead"]["hits"].as_u64() >= Some(50), "{e}");
    drop(c);
    let (st, _) = srv.stop();
    assert!(st.success());
    assert!(
        std::fs::read(dir.join("a.img")).unwrap() == data,
        "the file"
    );
}

#[test]
fn random_reads_read_nothing_ahead() {
    let dir = tempdir("ra-random");
    let bytes = 8u64 << 20;
    let (text, data) = patterned(&dir, bytes);
    let (srv, stats) = serve_ra(&dir, &text, "1m");
    let (mut c, _) = Raw::go(&srv.socket, "vm1");
    for i in 1..=100u64 {
        let off = (i * 7919 * 4096) % bytes;
        assert!(read(&mut c, i, off, 4096) == data[off as usize..off as usize + 4096]);
    }
    let e = export_stats(&srv, &stats, "vm1/disk0", |e| e["read_ops"] == 100);
    assert_eq!(e["read_ahead"]["chunks"].as_u64(), Some(0), "{e}");
    assert_eq!(e["read_ahead"]["misses"].as_u64(), Some(100), "{e}");
}

#[test]
fn fio_verifies_crc32c_through_sequential_read_back_at_depth_8_with_read_ahead() {
    let dir = tempdir("ra-fio");
    let bytes = 32u64 << 20;
    let text = stack("single", "32m", bytes, &["none"]);
    let (srv, stats) = serve_ra(&dir, &text, "4m");
    // Sequential writes, then fio's sequential crc32c read-back; a second job reads and
    // verifies while the first one's stream is read ahead.
    let job = format!(
        "[global]\nioengine=nbd\nuri={}\nbs=64k\niodepth=8\nsize={bytes}\n\
         verify=crc32c\nverify_fatal=1\nverify_state_save=0\n\
         [w]\nrw=write\ndo_verify=1\n",
        srv.uri("vm1/disk0")
    );
    let jobs = run_fio(&dir, "ra", &job);
    assert_eq!(jobs[0]["read"]["io_bytes"], bytes, "verify read");
    let e = export_stats(&srv, &stats, "vm1/disk0", |e| e["read_bytes"] == bytes);
    assert!(e["read_ahead"]["hits"].as_u64() > Some(0), "{e}");
}

#[test]
fn qemu_io_reads_back_what_it_wrote_over_a_window() {
    need("qemu-io", "qemu-utils");
    let dir = tempdir("ra-qemu-io");
    let bytes = 8u64 << 20;
    let text = stack("single", "8m", bytes, &["none"]);
    let srv = Server::start_with(&dir, &text, &["--read-ahead", "2m"]);
    let out = run(Command::new("qemu-io")
        .args(["-f", "raw"])
        .args(["-c", "write -P 0x11 0 4m"])
        .args(["-c", "read -P 0x11 0 64k"])
        .args(["-c", "read -P 0x11 64k 64k"])
        .args(["-c", "write -P 0x22 192k 64k"])
        .args(["-c", "read -P 0x11 128k 64k"])
        .args(["-c", "read -P 0x22 192k 64k"])
        .args(["-c", "read -P 0x11 256k 3840k"])
        .arg(srv.uri("vm1/disk0")));
    assert!(!out.contains("Pattern verification failed"), "{out}");
}

#[test]
fn a_read_ahead_out_of_its_range_is_one_error_line() {
    let dir = tempdir("ra-bad");
    let text = stack("single", "8m", 8 << 20, &["none"]);
    std::fs::write(dir.join("stack.toml"), text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vmio-serve"))
        .arg("--stack")
        .arg(dir.join("stack.toml"))
        .args(["--socket", "/nonexistent/x.sock", "--read-ahead", "65m"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--read-ahead '65m': must be a size in 0..64m"),
        "{err}"
    );
}
