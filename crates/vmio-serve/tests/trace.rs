//! `--trace FILE`: real clients (qemu-io, fio) against the `vmio-serve` binary; the trace
//! holds exactly what they sent, in order, fio replays it and vmio's trace reader reads it.
//! A test whose client is not installed fails, naming the Debian package (`common::need`).

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use vmio_core::request::Op;
use vmio_core::workload::trace::{parse_trace, TraceFormat};

const STACK: &str = "[[device]]\nname = \"a\"\nmodel = \"ssd\"\npath = \"a.img\"\nsize = \"16m\"\n\
    [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"a\"]\n\
    [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\ncache = \"writeback\"\n";

/// The lines of a trace without their timestamps; the timestamps must never step back.
fn actions(text: &str) -> Vec<String> {
    let mut last = 0u64;
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let (t, rest) = line.split_once(' ').unwrap();
        let t: u64 = t.parse().unwrap();
        assert!(t >= last, "time steps back at '{line}'");
        last = t;
        out.push(rest.to_string());
    }
    out
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn qemu_io(srv: &Server, cmds: &[&str]) {
    let mut c = Command::new("qemu-io");
    // Writeback: qemu-io's default (writethrough) would set FUA on every write.
    c.args(["-f", "raw", "-t", "writeback"]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    run(c.arg(srv.uri("vm1")));
}

#[test]
fn a_qemu_io_write_flush_fua_write_read_sequence_is_traced_in_order_and_replays_in_fio() {
    need("qemu-io", "qemu-utils");
    need("fio", "fio");
    let dir = tempdir("trace");
    let trace = dir.join("t.iolog");
    let srv = Server::start_with(&dir, STACK, &["--create", "--trace", path(&trace)]);
    qemu_io(
        &srv,
        &[
            "write -P 1 0 64k",
            "flush",
            "write -f 65536 4k",
            "read -P 1 0 64k",
        ],
    );
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
    let text = std::fs::read_to_string(dir.join("t.iolog")).unwrap();
    assert!(text.starts_with("fio version 3 iolog\n"), "{text}");
    // qemu-io flushes once more when it closes the image.
    assert_eq!(
        actions(&text),
        [
            "vm1/vda add",
            "vm1/vda open",
            "vm1/vda write 0 65536",
            "vm1/vda sync 0 0",
            "vm1/vda write 65536 4096",
            "vm1/vda datasync 0 0",
            "vm1/vda read 0 65536",
            "vm1/vda sync 0 0",
            "vm1/vda close",
        ],
        "{text}"
    );

    let ios = parse_trace(&text, "t.iolog", TraceFormat::FioIolog).unwrap();
    let ops: Vec<(Op, u64, u64)> = ios
        .iter()
        .map(|i| (i.op, i.offset_bytes, i.len_bytes))
        .collect();
    assert_eq!(
        ops,
        [
            (Op::Write, 0, 65536),
            (Op::Flush, 0, 0),
            (Op::Write, 65536, 4096),
            (Op::Flush, 0, 0),
            (Op::Read, 0, 65536),
            (Op::Flush, 0, 0),
        ]
    );

    let target = dir.join("replay.img");
    std::fs::File::create(&target)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let out = run(Command::new("fio")
        .arg("--name=replay")
        .arg(format!("--read_iolog={}", dir.join("t.iolog").display()))
        .arg(format!("--replay_redirect={}", target.display()))
        .args(["--ioengine=psync", "--output-format=json"]));
    let json: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    let job = &json["jobs"][0];
    assert_eq!(job["error"], 0, "{out}");
    assert_eq!(job["read"]["total_ios"], 1, "{out}");
    assert_eq!(job["write"]["total_ios"], 2, "{out}");
    assert_eq!(job["write"]["io_bytes"], 65536 + 4096, "{out}");
    // fio counts its fsyncs (the `sync` lines) under "sync"; fdatasyncs are not counted.
    assert_eq!(job["sync"]["total_ios"], 2, "{out}");
}

fn start_fails(dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("--stack")
        .arg(dir.join("stack.toml"))
        .arg("--socket")
        .arg(dir.join("again.sock"))
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_existing_trace_file_is_refused_in_one_line_unless_overwrite_is_given() {
    let dir = tempdir("trace-exists");
    std::fs::write(dir.join("stack.toml"), STACK).unwrap();
    std::fs::write(dir.join("t.iolog"), "precious\n").unwrap();
    let err = start_fails(&dir, &["--create", "--trace", path(&dir.join("t.iolog"))]);
    assert!(
        err.starts_with("vmio-serve: error: --trace ")
            && err.contains("the file exists; give --trace-overwrite to replace it")
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("t.iolog")).unwrap(),
        "precious\n"
    );
    assert!(!dir.join("again.sock").exists());
    let err = start_fails(&dir, &["--trace-overwrite"]);
    assert!(err.contains("need --trace FILE"), "{err}");
    let trace = dir.join("t.iolog");
    let srv = Server::start_with(&dir, STACK, &["--trace", path(&trace), "--trace-overwrite"]);
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("t.iolog")).unwrap(),
        "fio version 3 iolog\n"
    );
}

#[test]
fn the_trace_stops_at_its_byte_limit_with_one_warning_and_whole_lines() {
    need("qemu-io", "qemu-utils");
    let dir = tempdir("trace-limit");
    let trace = dir.join("t.iolog");
    let srv = Server::start_with(
        &dir,
        STACK,
        &[
            "--create",
            "--trace",
            path(&trace),
            "--trace-max-bytes",
            "1k",
        ],
    );
    let writes: Vec<String> = (0..100).map(|i| format!("write {} 4k", i * 4096)).collect();
    let cmds: Vec<&str> = writes.iter().map(String::as_str).collect();
    qemu_io(&srv, &cmds);
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
    let text = std::fs::read_to_string(dir.join("t.iolog")).unwrap();
    assert!(
        text.len() <= 1024 && text.len() > 900,
        "{} bytes",
        text.len()
    );
    assert!(text.ends_with('\n'));
    assert_eq!(
        err.matches("reached --trace-max-bytes 1024").count(),
        1,
        "{err}"
    );
    // Every line written is whole: the reader takes them all.
    let ios = parse_trace(&text, "t.iolog", TraceFormat::FioIolog).unwrap();
    assert_eq!(ios.len(), text.lines().count() - 3);
    assert!(ios
        .iter()
        .enumerate()
        .all(|(i, io)| io.offset_bytes == i as u64 * 4096));
}
