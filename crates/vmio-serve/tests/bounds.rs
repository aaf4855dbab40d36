//! Bounds on what clients can make the server hold: the connection limit, the
//! payload budgets, the handshake and idle timeouts, the shutdown grace, locked backing
//! files, statistics of failed writes, and a hostile crowd against a well-behaved client.

mod common;
use common::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmio_serve::options::Aio;
use vmio_serve::proto::*;
use vmio_serve::{Config, Listen};

/// An in-process server on `dir/nbd.sock` over `stack_text`, configured by `tune`.
fn in_process(
    dir: &Path,
    stack_text: &str,
    tune: impl FnOnce(&mut Config),
) -> (vmio_serve::Server, PathBuf) {
    std::fs::write(dir.join("stack.toml"), stack_text).unwrap();
    let sock = dir.join("nbd.sock");
    let mut cfg = Config::new(dir.join("stack.toml"), Listen::Unix(sock.clone()));
    cfg.signals = false;
    // As common::Server: VMIO_SERVE_TEST_AIO=io_uring runs every server with that engine.
    if let Ok(e) = std::env::var("VMIO_SERVE_TEST_AIO") {
        cfg.aio = Aio::from_name(&e);
    }
    tune(&mut cfg);
    (vmio_serve::start(&cfg).unwrap(), sock)
}

/// A well-behaved client writes a pattern and reads it back.
fn write_and_verify(c: &mut Raw, cookie: u64, offset: u64, pattern: u8) {
    c.request(CMD_WRITE, 0, cookie, offset, 4096);
    c.send(&[pattern; 4096]);
    assert_eq!(c.reply(0).0, 0);
    c.request(CMD_READ, 0, cookie + 1, offset, 4096);
    let (e, k, d) = c.reply(4096);
    assert_eq!((e, k), (0, cookie + 1));
    assert!(
        d.iter().all(|&b| b == pattern),
        "read back what was written"
    );
}

fn still_serves(sock: &Path) {
    let (mut c, _) = Raw::go(sock, "vm1");
    write_and_verify(&mut c, 1, 8192, 0x5c);
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Connect and negotiate NBD_OPT_GO without reading more than the handshake.
fn go(sock: &Path) -> Raw {
    Raw::go(sock, "vm1").0
}

/// Send a READ of 32 MiB (never read back).
fn big_read(c: &mut Raw, cookie: u64) -> bool {
    let h = transmission::RequestHeader {
        flags: 0,
        cmd: CMD_READ,
        cookie,
        offset: 0,
        len: MAX_PAYLOAD_BYTES,
    };
    c.s.write_all(&h.encode()).is_ok()
}

/// Declare a 32 MiB WRITE and send one byte of it.
fn partial_write(c: &mut Raw) -> bool {
    let h = transmission::RequestHeader {
        flags: 0,
        cmd: CMD_WRITE,
        cookie: 1,
        offset: 0,
        len: MAX_PAYLOAD_BYTES,
    };
    c.s.write_all(&h.encode()).is_ok() && c.s.write_all(&[1]).is_ok()
}

#[test]
fn a_client_past_the_connection_limit_is_refused_with_policy_and_the_server_keeps_serving() {
    let dir = tempdir("limit");
    let (srv, sock) = in_process(&dir, &stack("single", "8m", 4 << 20, &["writeback"]), |c| {
        // The third slot is kept for another peer.
        c.max_connections = 3;
        c.max_connections_per_peer = 2;
    });
    // One connection in the handshake and one that has sent requests: neither is evictable.
    let a = Raw::connect(&sock);
    let (mut b, _) = Raw::go(&sock, "vm1");
    write_and_verify(&mut b, 10, 0, 0x11);
    wait_until("two admitted", Duration::from_secs(5), || {
        srv.usage().connections == 2
    });
    // The third gets the greeting, then NBD_REP_ERR_POLICY with the reason, for every option.
    let mut c = Raw::connect(&sock);
    c.send(&3u32.to_be_bytes());
    c.option(OPT_LIST, &[]);
    let (ty, msg) = c.option_reply();
    assert_eq!(ty, REP_ERR_POLICY);
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(
        String::from_utf8(msg).unwrap(),
        format!("too many connections from uid {uid} (limit 2; --max-connections-per-peer)")
    );
    let mut d = 3u32.to_be_bytes().to_vec();
    d.extend_from_slice(b"vm1\0\0");
    c.option(OPT_GO, &d);
    assert_eq!(c.option_reply().0, REP_ERR_POLICY);
    c.option(OPT_ABORT, &[]);
    assert_eq!(c.option_reply().0, REP_ACK);
    assert!(c.closed());
    // A refused client that says nothing is closed within a bounded time.
    let mut silent = Raw::connect(&sock);
    let t = Instant::now();
    assert!(silent.closed());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(srv.usage().refused, 2);
    assert_eq!(srv.usage().evicted, 0);
    // The admitted ones still work; once one leaves, a new client is admitted.
    write_and_verify(&mut b, 20, 0, 0x12);
    drop(a);
    wait_until("one left", Duration::from_secs(5), || {
        srv.usage().connections == 1
    });
    still_serves(&sock);
    srv.shutdown();
    srv.wait().unwrap();
}

#[test]
fn a_full_server_closes_the_connection_unused_longest_to_admit_a_client_and_keeps_used_ones() {
    let dir = tempdir("evict");
    let (srv, sock) = in_process(&dir, &stack("single", "8m", 4 << 20, &["writeback"]), |c| {
        c.max_connections = 3
    });
    // One peer may hold 3 - 1 (the reserved slot) = 2: one unused, one used.
    let (mut unused, _) = Raw::go(&sock, "vm1");
    let (mut used, _) = Raw::go(&sock, "vm1");
    write_and_verify(&mut used, 1, 0, 0x21);
    wait_until("two admitted", Duration::from_secs(5), || {
        srv.usage().connections == 2
    });
    // A new client of the same peer evicts the unused connection and is served.
    let (mut fresh, _) = Raw::go(&sock, "vm1");
    write_and_verify(&mut fresh, 2, 4096, 0x22);
    assert!(unused.closed(), "the never-used connection was closed");
    assert_eq!(srv.usage().evicted, 1);
    // The used one, idle meanwhile, still works; a further client of the peer is refused
    // (nothing of it is unused), with the per-peer reason.
    write_and_verify(&mut used, 3, 8192, 0x23);
    let mut late = Raw::connect(&sock);
    late.send(&3u32.to_be_bytes());
    late.option(OPT_LIST, &[]);
    let (ty, msg) = late.option_reply();
    assert_eq!(ty, REP_ERR_POLICY);
    assert!(
        String::from_utf8_lossy(&msg).contains("--max-connections-per-peer"),
        "{msg:?}"
    );
    assert_eq!(srv.usage().evicted, 1);
    srv.shutdown();
    srv.wait().unwrap();
}

#[test]
fn the_handshake_timeout_closes_a_silent_client() {
    let dir = tempdir("hs-timeout");
    let (srv, sock) = in_process(&dir, &stack("single", "8m", 4 << 20, &["writeback"]), |c| {
        c.handshake_timeout = Duration::from_millis(500)
    });
    let t = Instant::now();
    let mut c = Raw::connect(&sock);
    // Half an option header, then silence.
    c.send(&3u32.to_be_bytes());
    c.send(&IHAVEOPT.to_be_bytes()[..4]);
    assert!(c.closed());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    wait_until("unregistered", Duration::from_secs(5), || {
        srv.usage().connections == 0
    });
    still_serves(&sock);
    srv.shutdown();
    srv.wait().unwrap();
}

fn status_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_declared_but_unsent_32_mib_write_holds_only_budget_and_is_dropped_at_the_idle_timeout() {
    unsent_writes(&["writeback"], None);
}

/// The same with io_uring on O_DIRECT: the stalled receives are cancelled at each tick and
/// the idle timeout closes them as before.
#[test]
fn a_declared_but_unsent_32_mib_write_is_dropped_at_the_idle_timeout_through_io_uring() {
    unsent_writes(&["none"], Some(Aio::IoUring));
}

fn unsent_writes(cache: &[&str], aio: Option<Aio>) {
    let dir = tempdir(&format!("partial-write-{}", cache[0]));
    let (srv, sock) = in_process(&dir, &stack("single", "64m", 32 << 20, cache), |c| {
        c.aio = aio.unwrap_or(c.aio);
        c.max_connections = 32;
        c.max_conn_payload_bytes = 32 << 20;
        c.max_total_payload_bytes = 256 << 20;
        c.idle_timeout = Duration::from_secs(2);
    });
    // 30 clients declare a 32 MiB WRITE and send one byte: 7 of them get budget (the shared
    // pool is 256 MiB less 32 reserves of 1 MiB), the others wait for it.
    let mut clients: Vec<Raw> = (0..30).map(|_| go(&sock)).collect();
    for c in &mut clients {
        assert!(partial_write(c));
    }
    std::thread::sleep(Duration::from_millis(500));
    let u = srv.usage();
    assert!(u.payload_bytes <= 256 << 20, "{u:?}");
    assert!(u.payload_peak_bytes <= 256 << 20, "{u:?}");
    assert!(u.payload_bytes >= 7 * (32 << 20), "{u:?}");
    // (The resident memory of a server process under this attack is measured by the hostile
    // crowd test below; here other tests share the process.)
    // A well-behaved client meanwhile works (its small requests use its own reserve).
    still_serves(&sock);
    // At the idle timeout the stalled writes are dropped and their budget given back; the
    // waiting ones then get it, and are dropped in turn (about 1 s per round of 7).
    wait_until("idle connections dropped", Duration::from_secs(30), || {
        srv.usage().connections == 0
    });
    assert_eq!(srv.usage().payload_bytes, 0);
    for c in &mut clients {
        assert!(c.closed());
    }
    srv.shutdown();
    srv.wait().unwrap();
}

#[test]
fn an_idle_guest_with_nothing_in_flight_outlives_the_idle_timeout() {
    let dir = tempdir("idle-guest");
    let (srv, sock) = in_process(
        &dir,
        &stack("single", "64m", 32 << 20, &["writeback"]),
        |c| c.idle_timeout = Duration::from_secs(1),
    );
    let (mut guest, _) = Raw::go(&sock, "vm1");
    write_and_verify(&mut guest, 1, 0, 0x11);
    // Three idle timeouts with nothing in flight: a VM whose disk is idle keeps its disk.
    std::thread::sleep(Duration::from_millis(3200));
    assert_eq!(
        srv.usage().connections,
        1,
        "the idle guest is still connected"
    );
    write_and_verify(&mut guest, 3, 4096, 0x22);
    srv.shutdown();
    srv.wait().unwrap();
}

#[test]
fn pipelined_unread_32_mib_reads_stop_at_the_per_connection_budget() {
    unread_reads(&["writeback"], None);
}

/// The same with io_uring on O_DIRECT: the reader waits for budget while its own ring holds
/// the reads in flight, and completes them meanwhile.
#[test]
fn pipelined_unread_32_mib_reads_stop_at_the_per_connection_budget_through_io_uring() {
    unread_reads(&["none"], Some(Aio::IoUring));
}

fn unread_reads(cache: &[&str], aio: Option<Aio>) {
    let dir = tempdir(&format!("unread-{}", cache[0]));
    let (srv, sock) = in_process(&dir, &stack("single", "64m", 32 << 20, cache), |c| {
        c.aio = aio.unwrap_or(c.aio);
        c.max_conn_payload_bytes = 64 << 20;
        c.idle_timeout = Duration::from_secs(3);
    });
    let mut greedy = go(&sock);
    greedy
        .s
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for k in 0..40 {
        if !big_read(&mut greedy, k) {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(700));
    let u = srv.usage();
    assert!(u.payload_bytes <= 64 << 20, "{u:?}");
    assert!(u.payload_peak_bytes <= 64 << 20, "{u:?}");
    assert!(
        u.payload_bytes >= 32 << 20,
        "the first reads were served: {u:?}"
    );
    still_serves(&sock);
    // The replies it does not read count as idle: closed, budget back.
    wait_until("unread replies dropped", Duration::from_secs(10), || {
        srv.usage().connections == 0
    });
    assert_eq!(srv.usage().payload_bytes, 0);
    srv.shutdown();
    srv.wait().unwrap();
}

#[test]
fn sigterm_finishes_within_the_grace_with_a_client_that_does_not_read() {
    let dir = tempdir("grace");
    let srv = Server::start_with(
        &dir,
        &stack("single", "64m", 32 << 20, &["writeback"]),
        &["--shutdown-grace", "1"],
    );
    let sock = srv.socket.clone();
    let mut greedy = go(&sock);
    greedy
        .s
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for k in 0..40 {
        if !big_read(&mut greedy, k) {
            break;
        }
    }
    let (mut polite, _) = Raw::go(&sock, "vm1");
    write_and_verify(&mut polite, 1, 4096, 0x42);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let (st, err) = srv.stop();
    let took = t.elapsed();
    assert!(st.success(), "{st}: {err}");
    assert!(took < Duration::from_secs(6), "shutdown took {took:?}");
    assert!(err.contains("still open after the shutdown grace"), "{err}");
    assert!(!sock.exists(), "socket left behind");
    assert!(polite.closed());
}

#[test]
fn server_shutdown_finishes_within_the_grace_in_process_too() {
    let dir = tempdir("grace-inproc");
    let (srv, sock) = in_process(
        &dir,
        &stack("single", "64m", 32 << 20, &["writeback"]),
        |c| c.shutdown_grace = Duration::from_millis(500),
    );
    let mut greedy = go(&sock);
    for k in 0..8 {
        big_read(&mut greedy, k);
    }
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    srv.shutdown();
    let snaps = srv.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        snaps[0].read_ops >= 1,
        "requests in flight completed: {snaps:?}"
    );
    assert!(!sock.exists());
}

#[test]
fn a_dead_accept_thread_ends_the_server_with_an_error() {
    let dir = tempdir("fatal");
    let (srv, _sock) = in_process(
        &dir,
        &stack("single", "8m", 4 << 20, &["writeback"]),
        |_| {},
    );
    srv.break_listener_for_tests();
    let e = srv.wait().unwrap_err();
    assert!(e.to_string().contains("internal error: accept"), "{e}");
}

#[test]
fn a_second_server_on_the_same_files_is_refused_naming_the_file() {
    let dir = tempdir("locked");
    let text = stack("linear", "8m", 4 << 20, &["writeback"]);
    let first = Server::start(&dir, &text);
    let out = Command::new(BIN)
        .args(["--stack", dir.join("stack.toml").to_str().unwrap()])
        .args(["--socket", dir.join("second.sock").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("a.img: is locked by another process (another vmio serve or QEMU?)"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    // QEMU honours the same locks (and vmio honours QEMU's).
    need("qemu-io", "qemu-utils");
    {
        let out = Command::new("qemu-io")
            .args(["-f", "raw", "-c", "write 0 4k"])
            .arg(dir.join("b.img"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("lock"), "qemu-io must be refused: {text}");
    }
    drop(first);
    need("qemu-nbd", "qemu-utils");
    {
        let qsock = dir.join("q.sock");
        let mut q = Command::new("qemu-nbd")
            .args(["--format=raw", "--persistent", "--socket"])
            .arg(&qsock)
            .arg(dir.join("a.img"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until("qemu-nbd listens", Duration::from_secs(10), || {
            UnixStream::connect(&qsock).is_ok()
        });
        let out = Command::new(BIN)
            .args(["--stack", dir.join("stack.toml").to_str().unwrap()])
            .args(["--socket", dir.join("third.sock").to_str().unwrap()])
            .output()
            .unwrap();
        let _ = q.kill();
        let _ = q.wait();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("a.img: is locked"));
    }
}

#[test]
fn the_same_file_twice_in_one_stack_is_refused_naming_both_devices() {
    let dir = tempdir("samefile");
    let text = stack("stripe", "8m", 4 << 20, &["writeback"])
        .replace("path = \"a.img\"", "path = \"same.img\"")
        .replace("path = \"b.img\"", "path = \"./same.img\"");
    std::fs::write(dir.join("stack.toml"), text).unwrap();
    let out = Command::new(BIN)
        .args(["--stack", dir.join("stack.toml").to_str().unwrap()])
        .args(["--socket", dir.join("s.sock").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("device[0] 'a'")
            && e.contains("same.img")
            && e.contains("device[1] 'b'")
            && e.contains("./same.img")
            && e.contains("are the same file"),
        "{e}"
    );
}

#[test]
fn statistics_count_failed_writes_as_errors_not_bytes() {
    use std::os::unix::process::CommandExt;
    let dir = tempdir("failed-writes");
    for f in ["a.img", "b.img"] {
        std::fs::File::create(dir.join(f))
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
    }
    std::fs::write(
        dir.join("stack.toml"),
        stack("single", "8m", 8 << 20, &["writeback"]),
    )
    .unwrap();
    let sock = dir.join("nbd.sock");
    let stats = dir.join("stats.json");
    let mut cmd = Command::new(BIN);
    cmd.args(["--stack", dir.join("stack.toml").to_str().unwrap()])
        .args(["--socket", sock.to_str().unwrap()])
        .args(["--stats-file", stats.to_str().unwrap()])
        .stderr(Stdio::piped());
    // Writes past 1 MiB fail with EFBIG (RLIMIT_FSIZE), as on a full or failing disk.
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    wait_until("server listens", Duration::from_secs(20), || {
        UnixStream::connect(&sock).is_ok()
    });
    let (mut c, _) = Raw::go(&sock, "vm1");
    c.request(CMD_WRITE, 0, 1, 0, 4096);
    c.send(&[1; 4096]);
    assert_eq!(c.reply(0).0, 0);
    c.request(CMD_WRITE, 0, 2, 4 << 20, 65536);
    c.send(&[2; 65536]);
    assert_eq!(c.reply(0).0, ENOSPC, "EFBIG maps to NBD_ENOSPC");
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(v[0]["write_ops"], 1, "{v}");
    assert_eq!(v[0]["write_bytes"], 4096, "{v}");
    assert_eq!(v[0]["errors"], 1, "{v}");
}

#[test]
fn out_of_range_flags_exit_2_with_one_line_naming_the_flag_and_the_range() {
    for (flag, value, range) in [
        ("--workers", "100000", "1..=1024"),
        ("--queue-depth", "0", "1..=1024"),
        ("--max-connections", "99999999999999999999", "1..=4096"),
        ("--max-conn-payload", "1m", "32m..1t"),
    ] {
        let out = Command::new(BIN)
            .args(["--stack", "x.toml", flag, value])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let e = String::from_utf8_lossy(&out.stderr);
        let first = e.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("vmio-serve: error: ")
                && first.contains(flag)
                && first.contains(range),
            "{e}"
        );
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn client_misbehaviour_is_logged_at_most_ten_lines_a_second_with_names_escaped() {
    let dir = tempdir("ratelog");
    let srv = Server::start(&dir, &stack("single", "8m", 4 << 20, &["writeback"]));
    let name: String = "\u{1b}[2J".repeat(1000);
    for _ in 0..50 {
        let mut c = Raw::connect(&srv.socket);
        c.send(&3u32.to_be_bytes());
        c.option(OPT_EXPORT_NAME, name.as_bytes());
        assert!(c.closed());
    }
    let (st, err) = srv.stop();
    assert!(st.success());
    let unknown = err.lines().filter(|l| l.contains("unknown export")).count();
    assert!((1..=20).contains(&unknown), "{unknown} lines:\n{err}");
    assert!(err.contains("similar messages suppressed"), "{err}");
    assert!(!err.contains('\u{1b}'), "control characters are escaped");
    assert!(err.lines().all(|l| l.len() < 600), "names are truncated");
}

// --- hostile crowd --------------------------------------------------------------------------

/// What a server process holds: resident memory, threads, descriptors.
#[derive(Clone, Copy, Debug, Default)]
struct Footprint {
    rss_kib: u64,
    hwm_kib: u64,
    threads: u64,
    fds: u64,
}

fn footprint(pid: u32) -> Footprint {
    Footprint {
        rss_kib: status_field(pid, "VmRSS:"),
        hwm_kib: status_field(pid, "VmHWM:"),
        threads: status_field(pid, "Threads:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64),
    }
}

/// A well-behaved client, connected before the attack: 4 KiB pattern writes read back, one
/// at a time, for `secs`; (operations per second, p99 latency of one write or read in µs).
fn well_behaved(c: &mut Raw, (base, size): (u64, u64), secs: f64, salt: u8) -> (f64, f64) {
    c.s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut lat = Vec::new();
    let t = Instant::now();
    let mut k = 0u64;
    while t.elapsed().as_secs_f64() < secs {
        let off = base + (k * 4096 * 7919) % (size - 4096) / 4096 * 4096;
        let pattern = (k as u8) ^ salt;
        let t1 = Instant::now();
        c.request(CMD_WRITE, 0, 2 * k, off, 4096);
        c.send(&[pattern; 4096]);
        assert_eq!(c.reply(0).0, 0);
        let t2 = Instant::now();
        c.request(CMD_READ, 0, 2 * k + 1, off, 4096);
        let (e, cookie, d) = c.reply(4096);
        lat.push((t2 - t1).as_secs_f64() * 1e6);
        lat.push(t2.elapsed().as_secs_f64() * 1e6);
        assert_eq!((e, cookie), (0, 2 * k + 1));
        assert!(
            d.iter().all(|&b| b == pattern),
            "read back what was written"
        );
        k += 1;
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p99 = lat[(lat.len() * 99 / 100).min(lat.len() - 1)];
    (2.0 * k as f64 / t.elapsed().as_secs_f64(), p99)
}

/// Open `n` hostile connections of one kind; they stay open while the result lives.
fn crowd(sock: &Path, n: usize, kind: &str) -> Vec<UnixStream> {
    let mut out = Vec::new();
    for i in 0..n {
        let Ok(s) = UnixStream::connect(sock) else {
            continue;
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        s.set_write_timeout(Some(Duration::from_secs(2))).ok();
        let mut r = Raw { s };
        match kind {
            // Connects and never says a word.
            "silent" => {}
            // Pipelines 32 MiB READs and never reads the replies.
            "unread" => {
                let mut g = [0u8; 18];
                if r.s.read_exact(&mut g).is_ok() {
                    r.s.write_all(&3u32.to_be_bytes()).ok();
                    r.s.write_all(&IHAVEOPT.to_be_bytes()).ok();
                    r.s.write_all(&OPT_EXPORT_NAME.to_be_bytes()).ok();
                    r.s.write_all(&3u32.to_be_bytes()).ok();
                    r.s.write_all(b"vm1").ok();
                    for k in 0..4 {
                        big_read(&mut r, i as u64 * 100 + k);
                    }
                }
            }
            // Declares 32 MiB WRITEs and sends one byte.
            _ => {
                let mut g = [0u8; 18];
                if r.s.read_exact(&mut g).is_ok() {
                    r.s.write_all(&3u32.to_be_bytes()).ok();
                    r.s.write_all(&IHAVEOPT.to_be_bytes()).ok();
                    r.s.write_all(&OPT_EXPORT_NAME.to_be_bytes()).ok();
                    r.s.write_all(&3u32.to_be_bytes()).ok();
                    r.s.write_all(b"vm1").ok();
                    partial_write(&mut r);
                }
            }
        }
        out.push(r.s);
    }
    out
}

/// Runs the attack against a `vmio-serve` process; returns the report lines.
fn attack(conns: usize, well_s: f64, total_payload_mib: u64) -> Vec<String> {
    let dir = tempdir("crowd");
    let total = format!("{total_payload_mib}m");
    let srv = Server::start_with(
        &dir,
        &stack("single", "256m", 128 << 20, &["writeback"]),
        &[
            "--max-connections",
            "256",
            "--max-conn-payload",
            "64m",
            "--max-total-payload",
            &total,
            "--idle-timeout",
            "60",
        ],
    );
    let pid = srv.child.id();
    let sock = srv.socket.clone();
    let mut report = Vec::new();
    // Connected before the attack (past the limit, new clients are refused: that is the point).
    let (mut c, size) = Raw::go(&sock, "vm1");
    let (mut c2, _) = Raw::go(&sock, "vm1");
    // Each in its own half of the disk.
    let (r1, r2) = ((0, size / 2), (size / 2, size / 2));
    let (iops0, p99_0) = well_behaved(&mut c, r1, well_s, 0);
    let base = footprint(pid);
    report.push(format!(
        "before: {iops0:.0} IOPS, p99 {p99_0:.0} us; {base:?}"
    ));
    // The well-behaved client keeps working in the background during both attacks.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let bg = std::thread::spawn(move || {
        let mut rounds = Vec::new();
        let mut salt = 1u8;
        while stop_rx.try_recv().is_err() {
            rounds.push(well_behaved(&mut c2, r2, 0.5, salt));
            salt = salt.wrapping_add(1);
        }
        rounds
    });
    // Flood: silent connections (the handshake holds them for 10 s), a third past the limit.
    let t = Instant::now();
    let flood = crowd(&sock, conns, "silent");
    let opened_s = t.elapsed().as_secs_f64();
    let mut peak = footprint(pid);
    std::thread::sleep(Duration::from_millis(500));
    let (iops1, p99_1) = well_behaved(&mut c, r1, well_s, 0x40);
    let f = footprint(pid);
    peak.threads = peak.threads.max(f.threads);
    peak.fds = peak.fds.max(f.fds);
    report.push(format!(
        "flood of {} connections ({:.1} s to open): {iops1:.0} IOPS, p99 {p99_1:.0} us; {f:?}",
        flood.len(),
        opened_s
    ));
    drop(flood);
    std::thread::sleep(Duration::from_millis(500));
    // Pinning: half unread 32 MiB READs, half 32 MiB WRITEs with one byte.
    let t = Instant::now();
    let mut pin = crowd(&sock, conns / 2, "unread");
    pin.extend(crowd(&sock, conns - conns / 2, "partial"));
    let opened_s = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(1000));
    let (iops2, p99_2) = well_behaved(&mut c, r1, well_s, 0x80);
    let f = footprint(pid);
    peak.threads = peak.threads.max(f.threads);
    peak.fds = peak.fds.max(f.fds);
    report.push(format!(
        "pinning with {} connections ({:.1} s to open and send): {iops2:.0} IOPS, p99 {p99_2:.0} us; {f:?}",
        pin.len(),
        opened_s
    ));
    stop_tx.send(()).unwrap();
    let rounds = bg.join().unwrap();
    report.push(format!(
        "background client: {} rounds, all verified; peak VmHWM {} KiB, threads {}, fds {}",
        rounds.len(),
        f.hwm_kib,
        peak.threads,
        peak.fds
    ));
    // Bounds: the payload budget + the buffer pool (64 MiB) + 96 MiB for stacks, the page
    // tables and the allocator, over the footprint before the attack.
    let bound_kib = base.rss_kib + (total_payload_mib + 64 + 96) * 1024;
    report.push(format!(
        "bound on VmHWM: {bound_kib} KiB (total payload budget {total_payload_mib} MiB)"
    ));
    assert!(
        f.hwm_kib <= bound_kib,
        "VmHWM {} KiB > {bound_kib} KiB",
        f.hwm_kib
    );
    assert!(peak.threads <= 2 * 256 + 32 + 8, "threads {}", peak.threads);
    // A connection holds its socket, and with --aio io_uring its ring too.
    let uring = std::env::var("VMIO_SERVE_TEST_AIO").is_ok_and(|e| e == "io_uring");
    let per_conn = if uring { 2 } else { 1 };
    assert!(peak.fds <= per_conn * 256 + 2 * 64 + 32, "fds {}", peak.fds);
    drop(pin);
    let (st, err) = srv.stop();
    assert!(st.success(), "{st}: {err}");
    assert!(err.lines().count() < 200, "rate-limited log:\n{err}");
    report
}

#[test]
fn hundreds_of_hostile_connections_neither_stop_a_well_behaved_client_nor_grow_memory_past_the_budget(
) {
    for line in attack(300, 1.0, 256) {
        eprintln!("{line}");
    }
}

/// The figures of docs/serve.md ("Bounds and hostile clients"):
/// `cargo test --release -p vmio-serve --test bounds -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_flood_and_pinning() {
    for total_mib in [256, 1024] {
        println!("--max-total-payload {total_mib}m, --max-conn-payload 64m, 256 connections:");
        for line in attack(300, 5.0, total_mib) {
            println!("  {line}");
        }
    }
}
