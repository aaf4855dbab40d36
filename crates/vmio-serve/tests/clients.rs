//! Real NBD clients against the `vmio-serve` binary on a Unix socket: nbdinfo, qemu-io,
//! qemu-img, nbdcopy and fio's nbd engine (with crc32c verification over every layout and
//! cache mode). A test whose client is not installed fails, naming the Debian package
//! (see `common::need`): a real-client test never passes without its client.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

const MODES: [&str; 6] = [
    "none",
    "writeback",
    "writethrough",
    "directsync",
    "unsafe",
    "pdc",
];

#[test]
fn nbdinfo_lists_every_vm_disk_as_an_export() {
    need("nbdinfo", "libnbd-bin");
    let dir = tempdir("nbdinfo");
    let srv = Server::start(
        &dir,
        &stack("linear", "16m", 8 << 20, &["none", "writeback"]),
    );
    let out = run(Command::new("nbdinfo").arg("--list").arg(srv.uri("")));
    assert!(out.contains("export=\"vm1/disk0\""), "{out}");
    assert!(out.contains("export=\"vm2/disk0\""), "{out}");
    assert!(
        out.contains("can_multi_conn: true") && out.contains("can_fua: true"),
        "{out}"
    );
    let size = run(Command::new("nbdinfo").arg("--size").arg(srv.uri("vm2")));
    assert_eq!(size.trim(), (8u64 << 20).to_string());
}

/// The engines a test runs the server with besides the default (`--aio native`).
const URING: &[&str] = &["--aio", "io_uring"];

#[test]
fn qemu_io_reads_back_the_pattern_it_wrote_in_every_cache_mode() {
    qemu_io_patterns(&[]);
}

#[test]
fn qemu_io_reads_back_the_pattern_it_wrote_through_io_uring_in_every_cache_mode() {
    qemu_io_patterns(URING);
}

/// qemu-io (QEMU's NBD client, block/nbd.c) writes patterns, zeroes, discards and flushes on
/// a stripe volume in every cache mode, and reads the patterns back.
fn qemu_io_patterns(extra: &[&str]) {
    need("qemu-io", "qemu-utils");
    let dir = tempdir(&format!("qemu-io{}", extra.len()));
    let srv = Server::start_with(&dir, &stack("stripe", "32m", 8 << 20, &MODES), extra);
    for i in 1..=MODES.len() {
        let out = run(Command::new("qemu-io")
            .args(["-f", "raw"])
            .args(["-c", "write -P 0xab 0 64k"])
            .args(["-c", "write -P 0xcd 61440 8k"])
            .args(["-c", "write -z 1m 128k"])
            .args(["-c", "discard 2m 64k"])
            .args(["-c", "flush"])
            .args(["-c", "read -P 0xab 0 60k"])
            .args(["-c", "read -P 0xcd 61440 8k"])
            .args(["-c", "read -P 0 1m 128k"])
            .arg(srv.uri(&format!("vm{i}/disk0"))));
        assert!(!out.contains("Pattern verification failed"), "{out}");
    }
}

#[test]
fn qemu_img_and_nbdcopy_copy_an_image_in_and_out_unchanged() {
    copy_in_and_out(&[]);
}

#[test]
fn qemu_img_and_nbdcopy_copy_an_image_in_and_out_unchanged_through_io_uring() {
    copy_in_and_out(URING);
}

/// qemu-img convert and nbdcopy (libnbd, several connections, large requests) copy 4 MiB of
/// data into a raid0 export (O_DIRECT, and the page cache) and back out, unchanged.
fn copy_in_and_out(extra: &[&str]) {
    need("qemu-img", "qemu-utils");
    need("nbdcopy", "libnbd-bin");
    let dir = tempdir(&format!("copy{}", extra.len()));
    let srv = Server::start_with(
        &dir,
        &stack("raid0", "16m", 4 << 20, &["none", "writeback"]),
        extra,
    );
    let src = dir.join("src.raw");
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let info = run(Command::new("qemu-img")
        .arg("info")
        .arg(srv.uri("vm1/disk0")));
    assert!(info.contains("4 MiB"), "{info}");
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&src)
        .arg(srv.uri("vm1/disk0")));
    let back = dir.join("back.raw");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(srv.uri("vm1/disk0"))
        .arg(&back));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "qemu-img round trip differs"
    );
    run(Command::new("nbdcopy").arg(&src).arg(srv.uri("vm2/disk0")));
    let back2 = dir.join("back2.raw");
    run(Command::new("nbdcopy")
        .arg(srv.uri("vm2/disk0"))
        .arg(&back2));
    assert!(
        std::fs::read(&back2).unwrap() == data,
        "nbdcopy round trip differs"
    );
}

/// One fio job per export `vm1/disk0` .. `vm{vms}/disk0`: random writes of `size_bytes` with
/// the block size and depth options `io`, then fio's crc32c read-back; every job must end
/// without error and read back all it wrote (`what` names the case in failures).
fn run_fio_verify(srv: &Server, dir: &Path, vms: usize, io: &str, size_bytes: u64, what: &str) {
    let mut job = format!(
        "[global]\nioengine=nbd\nrw=randwrite\n{io}\nsize={size_bytes}\n\
         verify=crc32c\nverify_fatal=1\ndo_verify=1\nrandrepeat=1\nverify_state_save=0\n",
    );
    for i in 1..=vms {
        job += &format!("[vm{i}]\nuri={}\n", srv.uri(&format!("vm{i}/disk0")));
    }
    let jobs = run_fio(dir, "verify", &job);
    assert_eq!(jobs.len(), vms, "{what}: one fio job per export");
    for j in jobs {
        assert_eq!(j["read"]["io_bytes"], size_bytes, "{what}: verify read");
    }
}

/// fio verify=crc32c with random 4k..64k writes at queue depth 16 on every cache mode; then,
/// on the `pdc` disk, a journal-like log (2 MiB written 4 times, 4 KiB writes, a FLUSH after
/// every 4) verified after each pass: its detector bypasses the later passes, which
/// overwrite what the earlier ones left in the page cache and must read back as written.
fn fio_verify(layout: &str, engine: &[&str]) {
    need("fio", "fio");
    let dir = tempdir(&format!("fio-{layout}{}", engine.len()));
    let dev = if layout == "single" { "64m" } else { "32m" };
    let stats = dir.join("stats.json");
    let srv = Server::start_with(
        &dir,
        &stack(layout, dev, 8 << 20, &MODES),
        &[&["--stats-file", stats.to_str().unwrap()], engine].concat(),
    );
    run_fio_verify(
        &srv,
        &dir,
        MODES.len(),
        "bsrange=4k-64k\niodepth=16",
        8 << 20,
        layout,
    );
    let pdc = format!("vm{}/disk0", MODES.len());
    let job = fio_log_job("log", &srv.uri(&pdc), "write", 1 << 20, 2 << 20, 4)
        + "verify=crc32c\nverify_fatal=1\ndo_verify=1\nverify_state_save=0\n";
    let jobs = run_fio(&dir, "log", &job);
    assert_eq!(
        jobs[0]["read"]["io_bytes"],
        4 * (2 << 20),
        "{layout}: verify read"
    );
    // A pass wrapping to where the previous one began is a journal: the fourth at least is
    // bypassed (a random write ending where the log begins makes the first pass continue
    // its stream, so that the second does not wrap to the stream's start; the wrap of the
    // second or third is confirmed at its first commit).
    let bypassed = |e: &serde_json::Value| e["pdc"]["bypassed_bytes"].as_u64() >= Some(2 << 20);
    export_stats(&srv, &stats, &pdc, bypassed);
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
    assert!(err.contains("vm6/disk0 pdc: journals"), "{err}");
}

#[test]
fn fio_verifies_crc32c_on_a_single_disk_in_every_cache_mode() {
    fio_verify("single", &[]);
}

#[test]
fn fio_verifies_crc32c_on_a_linear_volume_in_every_cache_mode() {
    fio_verify("linear", &[]);
}

#[test]
fn fio_verifies_crc32c_on_a_stripe_volume_in_every_cache_mode() {
    fio_verify("stripe", &[]);
}

#[test]
fn fio_verifies_crc32c_on_a_raid0_volume_in_every_cache_mode() {
    fio_verify("raid0", &[]);
}

#[test]
fn fio_verifies_crc32c_on_a_stripe_volume_through_io_uring_in_every_cache_mode() {
    fio_verify("stripe", URING);
}

/// fio verify=crc32c through the proportional-share schedulers: four weighted VMs on a raid0
/// volume under cfq and mcfq, whose idling and slices need the dispatcher's timer to wake the
/// device queues (vmio_core::blockq wake-ups); every job must finish and verify its data.
fn fio_verify_under(scheduler: &str, cache: &str, engine: &[&str]) {
    need("fio", "fio");
    let dir = tempdir(&format!("fio-{scheduler}{}", engine.len()));
    let mut text = stack("raid0", "32m", 8 << 20, &[cache; 4])
        .replace("name = \"none\"", &format!("name = \"{scheduler}\""));
    for (i, w) in [1000, 700, 400, 100].iter().enumerate() {
        let vm = format!("name = \"vm{}\"\n", i + 1);
        text = text.replace(&vm, &format!("{vm}weight = {w}\n"));
    }
    assert!(
        text.contains(&format!("[scheduler]\nname = \"{scheduler}\"")),
        "{text}"
    );
    assert!(text.contains("name = \"vm4\"\nweight = 100\n"), "{text}");
    let srv = Server::start_with(&dir, &text, engine);
    run_fio_verify(&srv, &dir, 4, "bs=16k\niodepth=8", 4 << 20, scheduler);
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn fio_verifies_crc32c_through_cfq_with_four_weighted_vms() {
    fio_verify_under("cfq", "writeback", &[]);
}

/// The same through io_uring on O_DIRECT disks (cache none): four connections share one device queue, so
/// a connection's thread completes pieces of the others' requests in its own ring.
#[test]
fn fio_verifies_crc32c_through_cfq_with_four_weighted_vms_through_io_uring() {
    fio_verify_under("cfq", "none", URING);
}

#[test]
fn fio_verifies_crc32c_through_mcfq_with_four_weighted_vms() {
    fio_verify_under("mcfq", "writeback", &[]);
}

#[test]
fn an_o_direct_read_across_and_past_the_end_of_a_short_backing_file_reads_zeros_there() {
    use vmio_serve::proto::CMD_READ;
    let dir = tempdir("short-file");
    let srv = Server::start(&dir, &stack("single", "1m", 1 << 20, &["none"]));
    let (mut c, size) = Raw::go(&srv.socket, "vm1/disk0");
    assert_eq!(size, 1 << 20);
    // The file shrinks under the server to 1.5 blocks of data: the O_DIRECT (AIO) reads
    // come back short and the rest reads as zeros.
    std::fs::write(dir.join("a.img"), [0xab; 6144]).unwrap();
    for (cookie, off) in [(1u64, 0u64), (2, 4096), (3, 8192)] {
        c.request(CMD_READ, 0, cookie, off, 8192);
        let (e, got, d) = c.reply(8192);
        assert_eq!((e, got), (0, cookie));
        let data = 6144u64.saturating_sub(off) as usize;
        assert!(d[..data].iter().all(|&b| b == 0xab), "offset {off}");
        assert!(d[data..].iter().all(|&b| b == 0), "offset {off}");
    }
    assert_eq!(std::fs::metadata(dir.join("a.img")).unwrap().len(), 6144);
}

/// qemu-nbd's own NBD client (QEMU block/nbd.c) lists the exports of a server on io_uring,
/// then serves one of them again on its own socket, through which qemu-io writes patterns,
/// zeroes and a flush and reads them back: requests relayed by QEMU's client to vmio's.
#[test]
fn qemu_nbd_as_a_client_of_an_io_uring_server_relays_patterns_that_read_back() {
    need("qemu-nbd", "qemu-utils");
    need("qemu-io", "qemu-utils");
    let dir = tempdir("qemu-nbd-client");
    let srv = Server::start_with(&dir, &stack("single", "16m", 8 << 20, &["none"]), URING);
    let list = run(Command::new("qemu-nbd")
        .arg("--list")
        .arg("-k")
        .arg(&srv.socket));
    assert!(list.contains("vm1/disk0"), "{list}");
    let relay = dir.join("relay.sock");
    let opts = format!(
        "driver=raw,file.driver=nbd,file.server.type=unix,file.server.path={},file.export=vm1/disk0",
        srv.socket.display()
    );
    let mut q = Command::new("qemu-nbd")
        .args(["--persistent", "--cache=none", "--image-opts"])
        .arg(format!("--socket={}", relay.display()))
        .arg(&opts)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(&relay).is_err() {
        assert!(
            q.try_wait().unwrap().is_none(),
            "qemu-nbd exited before listening"
        );
        assert!(t.elapsed().as_secs() < 20, "qemu-nbd did not listen");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = run(Command::new("qemu-io")
        .args(["-f", "raw"])
        .args(["-c", "write -P 0x5a 0 256k"])
        .args(["-c", "write -P 0xa5 4096 4k"])
        .args(["-c", "write -z 1m 64k"])
        .args(["-c", "flush"])
        .args(["-c", "read -P 0x5a 0 4k"])
        .args(["-c", "read -P 0xa5 4096 4k"])
        .args(["-c", "read -P 0x5a 8192 248k"])
        .args(["-c", "read -P 0 1m 64k"])
        .arg(format!("nbd+unix:///?socket={}", relay.display())));
    let _ = q.kill();
    let _ = q.wait();
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let reads = out.lines().filter(|l| l.starts_with("read ")).count();
    assert_eq!(reads, 4, "every read completed: {out}");
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
}
