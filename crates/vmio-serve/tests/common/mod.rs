//! Shared helpers of the integration tests: temp dirs, stack files, a server process, tool
//! detection, and a minimal raw NBD client.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use vmio_serve::proto::{self, handshake as hs, transmission as tx};

pub const BIN: &str = env!("CARGO_BIN_EXE_vmio-serve");

/// A fresh directory on the target's (disk) file system, so O_DIRECT works.
pub fn tempdir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "serve-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Fail the calling test, naming the Debian package, when a client program is missing. A
/// Rust test cannot report itself as skipped, and one that returned early would be reported
/// as passed without testing anything: so a real-client test never skips. The README's test
/// command (`scripts/test-all.sh`) installs every package these tests need.
pub fn need(tool: &str, package: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "'{tool}' is not installed: this test needs it (apt-get install {package}, or run the \
         README's test command, scripts/test-all.sh, which installs it)"
    );
}

/// A stack whose devices `a`, `b` (backing files a.img, b.img of `dev_size`) form one volume
/// of `layout`, with one VM per cache mode given, each a disk of `disk_size` in turn.
pub fn stack(layout: &str, dev_size: &str, disk_size_bytes: u64, caches: &[&str]) -> String {
    let devs = if layout == "single" {
        "[\"a\"]"
    } else {
        "[\"a\", \"b\"]"
    };
    let mut s = format!(
        "[[device]]\nname = \"a\"\nmodel = \"ssd\"\npath = \"a.img\"\nsize = \"{dev_size}\"\n\
         [[device]]\nname = \"b\"\nmodel = \"ssd\"\npath = \"b.img\"\nsize = \"{dev_size}\"\n\
         [[volume]]\nname = \"data\"\nlayout = \"{layout}\"\ndevices = {devs}\n\
         [scheduler]\nname = \"none\"\n"
    );
    for (i, c) in caches.iter().enumerate() {
        s += &format!(
            "[[vm]]\nname = \"vm{}\"\n[[vm.disk]]\nname = \"disk0\"\nvolume = \"data\"\n\
             offset = {}\nsize = {disk_size_bytes}\ncache = \"{c}\"\n",
            i + 1,
            i as u64 * disk_size_bytes
        );
    }
    s
}

pub struct Server {
    pub child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl Server {
    pub fn start(dir: &Path, stack_text: &str) -> Server {
        Self::start_with(dir, stack_text, &[])
    }

    pub fn start_with(dir: &Path, stack_text: &str, extra: &[&str]) -> Server {
        let stack = dir.join("stack.toml");
        std::fs::write(&stack, stack_text).unwrap();
        let socket = dir.join("nbd.sock");
        // VMIO_SERVE_TEST_AIO=io_uring runs every test's server with that engine.
        let engine: Vec<String> = match std::env::var("VMIO_SERVE_TEST_AIO") {
            Ok(e) if !extra.contains(&"--aio") => vec!["--aio".into(), e],
            _ => vec![],
        };
        let child = Command::new(BIN)
            .arg("--stack")
            .arg(&stack)
            .arg("--socket")
            .arg(&socket)
            .args(engine)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut s = Server {
            child,
            dir: dir.to_path_buf(),
            socket,
        };
        let t = Instant::now();
        while UnixStream::connect(&s.socket).is_err() {
            if let Ok(Some(st)) = s.child.try_wait() {
                let mut err = String::new();
                s.child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("server exited with {st}: {err}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// SIGTERM and wait: (exit status, stderr).
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        self.signal(libc::SIGTERM);
        let st = self.child.wait().unwrap();
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (st, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a command; panic with its output unless it succeeds. Returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A minimal NBD client for hostile-input tests.
pub struct Raw {
    pub s: UnixStream,
}

impl Raw {
    /// Connect and read the greeting.
    pub fn connect(socket: &Path) -> Raw {
        let mut s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        assert_eq!(g, hs::greeting());
        Raw { s }
    }

    /// Connect, negotiate with NBD_OPT_GO, return the export size.
    pub fn go(socket: &Path, export: &str) -> (Raw, u64) {
        let mut r = Self::connect(socket);
        r.send(&3u32.to_be_bytes());
        let mut d = (export.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(export.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        r.option(proto::OPT_GO, &d);
        let mut size = 0;
        loop {
            let (ty, data) = r.option_reply();
            match ty {
                proto::REP_INFO if data[..2] == [0, 0] => {
                    size = u64::from_be_bytes(data[2..10].try_into().unwrap())
                }
                proto::REP_ACK => return (r, size),
                proto::REP_INFO => {}
                other => panic!("GO failed: reply type {other:#x}"),
            }
        }
    }

    pub fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    pub fn option(&mut self, option: u32, data: &[u8]) {
        let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b);
    }

    /// (reply type, data) of one option reply.
    pub fn option_reply(&mut self) -> (u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(
            u64::from_be_bytes(h[0..8].try_into().unwrap()),
            proto::REPLY_MAGIC
        );
        let ty = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        self.s.read_exact(&mut d).unwrap();
        (ty, d)
    }

    pub fn request(&mut self, cmd: u16, flags: u16, cookie: u64, offset: u64, len: u32) {
        let h = tx::RequestHeader {
            flags,
            cmd,
            cookie,
            offset,
            len,
        };
        self.send(&h.encode());
    }

    /// (error, cookie) of a simple reply, then `payload` bytes if asked.
    pub fn reply(&mut self, payload: usize) -> (u32, u64, Vec<u8>) {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(
            u32::from_be_bytes(h[0..4].try_into().unwrap()),
            proto::SIMPLE_REPLY_MAGIC
        );
        let err = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let mut d = vec![0u8; if err == 0 { payload } else { 0 }];
        self.s.read_exact(&mut d).unwrap();
        (err, cookie, d)
    }

    /// True when the server closed the connection.
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

/// Run the fio job file `job` (written to `dir/name.fio`) with JSON output: its jobs, each
/// checked to have ended without error.
pub fn run_fio(dir: &Path, name: &str, job: &str) -> Vec<serde_json::Value> {
    need("fio", "fio");
    let jobfile = dir.join(format!("{name}.fio"));
    std::fs::write(&jobfile, job).unwrap();
    let out = run(Command::new("fio")
        .arg("--output-format=json")
        .arg(&jobfile));
    let v: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    let jobs = v["jobs"].as_array().unwrap().clone();
    for j in &jobs {
        assert_eq!(j["error"], 0, "{name}: {j}");
    }
    jobs
}

/// A fio job section writing `[offset, offset + size)` of `uri` as a journal does, as a
/// circular log: 4 KiB sequential writes, an fsync (an NBD FLUSH) after every 4, `loops`
/// passes; `rw` = `write` (the log) or `randwrite` (the same writes in random order).
pub fn fio_log_job(name: &str, uri: &str, rw: &str, offset: u64, size: u64, loops: u32) -> String {
    format!(
        "[{name}]\nioengine=nbd\nuri={uri}\nrw={rw}\nbs=4k\niodepth=1\noffset={offset}\n\
         size={size}\nfsync=4\nloops={loops}\nrandrepeat=1\n"
    )
}

/// The statistics of `export` in the `--stats-file` `stats` once `ready` holds for them
/// (SIGUSR1 asks for a fresh file; at most 10 s).
pub fn export_stats(
    srv: &Server,
    stats: &Path,
    export: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let t = Instant::now();
    loop {
        srv.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(50));
        let text = std::fs::read_to_string(stats).unwrap_or_default();
        let found = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v.as_array()?
                    .iter()
                    .find(|e| e["export"] == export)
                    .cloned()
            });
        if let Some(e) = found.filter(|e| ready(e)) {
            return e;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{export}: {text}");
    }
}
