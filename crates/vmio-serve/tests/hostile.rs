//! Hostile input over raw sockets: every violation gets the NBD error the specification
//! names, or a closed connection, and never disturbs another client.

mod common;
use common::*;
use std::io::Write;
use vmio_serve::proto::{self, *};

fn server(tag: &str) -> (Server, std::path::PathBuf) {
    let dir = tempdir(tag);
    let srv = Server::start(
        &dir,
        &stack("stripe", "8m", 4 << 20, &["none", "writeback"]),
    );
    let sock = srv.socket.clone();
    (srv, sock)
}

/// A well-behaved client writes and reads back through the same server.
fn still_serves(sock: &std::path::Path) {
    let (mut c, size) = Raw::go(sock, "vm2/disk0");
    assert_eq!(size, 4 << 20);
    c.request(CMD_WRITE, CMD_FLAG_FUA, 1, 8192, 4096);
    c.send(&[0x77; 4096]);
    assert_eq!(c.reply(0).0, 0);
    c.request(CMD_READ, 0, 2, 8192, 4096);
    let (e, cookie, d) = c.reply(4096);
    assert_eq!((e, cookie), (0, 2));
    assert!(d.iter().all(|&b| b == 0x77));
}

#[test]
fn requests_out_of_range_or_oversized_or_unknown_get_nbd_errors_and_the_session_goes_on() {
    let (srv, sock) = server("errors");
    let (mut c, size) = Raw::go(&sock, "vm1/disk0");
    c.request(CMD_READ, 0, 1, size, 4096);
    assert_eq!(c.reply(4096).0, EINVAL);
    c.request(CMD_WRITE, 0, 2, size - 512, 4096);
    c.send(&[1; 4096]);
    assert_eq!(c.reply(0).0, ENOSPC);
    c.request(CMD_READ, 0, 3, 0, MAX_PAYLOAD_BYTES + 1);
    assert_eq!(c.reply(0).0, EINVAL);
    c.request(CMD_WRITE, 0, 4, 0, MAX_PAYLOAD_BYTES + 4096);
    c.send(&vec![0; MAX_PAYLOAD_BYTES as usize + 4096]);
    assert_eq!(c.reply(0).0, EINVAL);
    c.request(42, 0, 5, 0, 0);
    assert_eq!(c.reply(0).0, EINVAL);
    c.request(CMD_READ, 1 << 9, 6, 0, 512);
    assert_eq!(c.reply(0).0, EINVAL);
    c.request(CMD_TRIM, 0, 7, u64::MAX - 10, 4096);
    assert_eq!(c.reply(0).0, EINVAL);
    // Unaligned I/O on an O_DIRECT export still works (through the buffered descriptor).
    c.request(CMD_WRITE, 0, 8, 4095, 3);
    c.send(&[9, 8, 7]);
    assert_eq!(c.reply(0).0, 0);
    c.request(CMD_READ, 0, 9, 4094, 5);
    assert_eq!(c.reply(5), (0, 9, vec![0, 9, 8, 7, 0]));
    c.request(CMD_FLUSH, 0, 10, 0, 0);
    assert_eq!(c.reply(0), (0, 10, vec![]));
    c.request(CMD_DISC, 0, 11, 0, 0);
    assert!(c.closed());
    still_serves(&sock);
    drop(srv);
}

#[test]
fn bad_magic_and_garbage_close_only_that_connection() {
    let (_srv, sock) = server("garbage");
    let mut c = Raw::connect(&sock);
    c.send(&[0xff, 0xff, 0xff, 0xff]);
    assert!(c.closed(), "unknown client flags must close");
    let mut c = Raw::connect(&sock);
    c.send(&3u32.to_be_bytes());
    c.send(b"NOTMAGIC\0\0\0\x07\0\0\0\0");
    assert!(c.closed(), "bad option magic must close");
    let (mut c, _) = Raw::go(&sock, "vm1");
    c.send(&[0xde; 28]);
    assert!(c.closed(), "bad request magic must close");
    let mut c = Raw::connect(&sock);
    let junk: Vec<u8> = (0..100_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let _ = c.s.write_all(&junk);
    assert!(c.closed());
    still_serves(&sock);
}

#[test]
fn unknown_options_get_unsup_and_unknown_exports_get_unknown() {
    let (_srv, sock) = server("options");
    let mut c = Raw::connect(&sock);
    c.send(&3u32.to_be_bytes());
    c.option(proto::OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().0, REP_ERR_UNSUP);
    c.option(77, b"whatever");
    assert_eq!(c.option_reply().0, REP_ERR_UNSUP);
    c.option(OPT_INFO, &[0, 0, 0, 50, 0, 0]);
    assert_eq!(c.option_reply().0, REP_ERR_INVALID);
    let mut d = 5u32.to_be_bytes().to_vec();
    d.extend_from_slice(b"nosuc\0\0");
    c.option(OPT_GO, &d);
    assert_eq!(c.option_reply().0, REP_ERR_UNKNOWN);
    c.option(OPT_LIST, &[]);
    let mut names = Vec::new();
    loop {
        let (ty, d) = c.option_reply();
        if ty == REP_ACK {
            break;
        }
        assert_eq!(ty, REP_SERVER);
        names.push(String::from_utf8(d[4..].to_vec()).unwrap());
    }
    assert_eq!(names, ["vm1/disk0", "vm2/disk0"]);
    c.option(OPT_ABORT, &[]);
    assert_eq!(c.option_reply().0, REP_ACK);
    assert!(c.closed());
    // EXPORT_NAME of an unknown export ends the session (it cannot carry an error).
    let mut c = Raw::connect(&sock);
    c.send(&3u32.to_be_bytes());
    c.option(OPT_EXPORT_NAME, b"vm9");
    assert!(c.closed());
    // ... and of a known one enters transmission, without the 124 zeroes (NO_ZEROES).
    let mut c = Raw::connect(&sock);
    c.send(&3u32.to_be_bytes());
    c.option(OPT_EXPORT_NAME, b"vm1/disk0");
    let mut b = [0u8; 10];
    std::io::Read::read_exact(&mut c.s, &mut b).unwrap();
    assert_eq!(u64::from_be_bytes(b[..8].try_into().unwrap()), 4 << 20);
    c.request(CMD_READ, 0, 1, 0, 512);
    assert_eq!(c.reply(512).0, 0);
}

#[test]
fn clients_vanishing_mid_request_leave_the_server_serving_others() {
    let (srv, sock) = server("vanish");
    for _ in 0..20 {
        let (mut c, _) = Raw::go(&sock, "vm1/disk0");
        c.request(CMD_WRITE, 0, 1, 0, 1 << 20);
        c.send(&[5; 1000]);
        drop(c);
        let (mut c, _) = Raw::go(&sock, "vm1/disk0");
        for k in 0..16 {
            c.request(CMD_READ, 0, k, k * 65536, 65536);
        }
        drop(c);
    }
    let mut c = Raw::connect(&sock);
    c.send(&3u32.to_be_bytes());
    c.send(&proto::IHAVEOPT.to_be_bytes()[..5]);
    drop(c);
    still_serves(&sock);
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn many_requests_in_flight_on_one_connection_all_get_their_own_reply() {
    let (_srv, sock) = server("inflight");
    let (c, _) = Raw::go(&sock, "vm1/disk0");
    let n = 600u64;
    let mut w = Raw {
        s: c.s.try_clone().unwrap(),
    };
    let sender = std::thread::spawn(move || {
        for k in 0..n {
            w.request(CMD_WRITE, 0, k, k * 4096 % (4 << 20), 4096);
            w.send(&[(k % 251) as u8; 4096]);
        }
    });
    let mut c = c;
    let mut seen = vec![false; n as usize];
    for _ in 0..n {
        let (e, cookie, _) = c.reply(0);
        assert_eq!(e, 0);
        assert!(!std::mem::replace(&mut seen[cookie as usize], true));
    }
    sender.join().unwrap();
}

#[test]
fn a_client_that_never_reads_its_replies_does_not_stall_the_others() {
    let (_srv, sock) = server("stall");
    let (mut greedy, _) = Raw::go(&sock, "vm1/disk0");
    greedy
        .s
        .set_write_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    // Ask for far more reply data than the socket buffers hold, and never read it.
    for k in 0..200 {
        let h = vmio_serve::proto::transmission::RequestHeader {
            flags: 0,
            cmd: CMD_READ,
            cookie: k,
            offset: 0,
            len: 1 << 20,
        };
        if greedy.s.write_all(&h.encode()).is_err() {
            break;
        }
    }
    for _ in 0..3 {
        still_serves(&sock);
    }
    drop(greedy);
    still_serves(&sock);
}

#[test]
fn large_read_replies_that_fill_the_socket_arrive_whole_each_with_its_own_region_s_bytes() {
    let (_srv, sock) = server("splitreply");
    let (mut c, size) = Raw::go(&sock, "vm1/disk0");
    // 16 regions of 256 KiB, each its own byte.
    let (region, regions) = (256u64 << 10, 16u64);
    assert!(region * regions <= size);
    for k in 0..regions {
        c.request(CMD_WRITE, 0, k, k * region, region as u32);
        c.send(&vec![(k * 13 + 1) as u8; region as usize]);
        assert_eq!(c.reply(0).0, 0);
    }
    // 64 reads (16 MiB of replies, beyond any socket buffer) sent before any reply is read:
    // the server's sends meet a full socket and go on where they stopped.
    let n = 64u64;
    for k in 0..n {
        c.request(CMD_READ, 0, 1000 + k, (k % regions) * region, region as u32);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut seen = vec![false; n as usize];
    for _ in 0..n {
        let (e, cookie, d) = c.reply(region as usize);
        assert_eq!(e, 0);
        let k = cookie - 1000;
        assert!(!std::mem::replace(&mut seen[k as usize], true));
        let want = ((k % regions) * 13 + 1) as u8;
        assert!(
            d.iter().all(|&b| b == want),
            "reply {cookie}: not region {}'s bytes",
            k % regions
        );
    }
    still_serves(&sock);
}
