//! Test harness: starts the real `corekv` binary (and, for differential
//! tests, a real `redis-server`) on ephemeral loopback ports, and talks RESP
//! to them. Every server is killed when its handle drops, and dies with the
//! test process (PR_SET_PDEATHSIG) if that is killed first.

#![allow(dead_code)]

use proxy::resp::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and only affects the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

pub struct Server {
    pub child: Child,
    pub port: u16,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Starts corekv on an ephemeral port with extra arguments.
    pub fn start(args: &[&str]) -> Server {
        Server::start_in(None, args)
    }

    /// Starts corekv with `dir` as its working directory (where its files go).
    pub fn start_in(dir: Option<&std::path::Path>, args: &[&str]) -> Server {
        Server::try_start_in(dir, args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts corekv; the error holds its stderr and log when it does not
    /// come up.
    pub fn try_start(args: &[&str]) -> Result<Server, String> {
        Server::try_start_in(None, args)
    }

    pub fn try_start_in(dir: Option<&std::path::Path>, args: &[&str]) -> Result<Server, String> {
        Server::try_start_with_file(dir, None, args)
    }

    /// Starts corekv from a config file (the first argument, as
    /// redis-server's), the test's options after it.
    pub fn start_with_file(file: &str, args: &[&str]) -> Server {
        Server::try_start_with_file(None, Some(file), args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_with_file(dir: Option<&std::path::Path>, file: Option<&str>, args: &[&str]) -> Result<Server, String> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_corekv"));
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        cmd.args(file);
        cmd.args(["--port", "0", "--bind", "127.0.0.1"]);
        // No snapshots into the working directory unless a test asks (as
        // the differential tests' redis-server runs with --save "").
        if !args.iter().any(|a| *a == "--save" || *a == "--dir") {
            cmd.args(["--save", ""]);
        }
        // A full resync starts at once (redis-server's test suite does the
        // same), unless a test is about the wait.
        if !args.contains(&"--repl-diskless-sync-delay") {
            cmd.args(["--repl-diskless-sync-delay", "0"]);
        }
        cmd.args(args);
        // COREKV_TEST_ARGS (e.g. "--client-ring no") runs the whole suite
        // against another configuration.
        if let Ok(extra) = std::env::var("COREKV_TEST_ARGS") {
            cmd.args(extra.split_whitespace());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("spawn corekv");
        let stdout = child.stdout.take().expect("stdout");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("Ready to accept connections tcp on ").nth(1) {
                    let _ = tx.send(addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()));
                }
                sink.lock().unwrap().push(line);
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(port)) => Ok(Server { child, port, log }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                Err(format!("corekv did not start: {err} {:?}", log.lock().unwrap()))
            }
        }
    }

    pub fn shards(n: usize) -> Server {
        Server::start(&["--shards", &n.to_string()])
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url()).unwrap().get_connection().unwrap()
    }

    pub fn raw(&self) -> Raw {
        Raw::connect(self.port)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        wait_timeout(&mut self.child, Duration::from_secs(10)).expect("corekv did not exit after SIGTERM")
    }

    /// Sends SIGTERM and blocks until the process is gone (no polling
    /// interval that would hide what happens right after exit).
    pub fn terminate_now(mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().expect("wait for corekv")
    }

    pub fn wait_exit(mut self, within: Duration) -> Option<std::process::ExitStatus> {
        wait_timeout(&mut self.child, within)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

fn wait_timeout(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A RESP connection speaking raw bytes.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        Raw::from_stream(TcpStream::connect(("127.0.0.1", port)).expect("connect"))
    }

    pub fn from_stream(stream: TcpStream) -> Raw {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        stream.set_nodelay(true).unwrap();
        Raw { stream, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    /// Reads one reply; `None` when the server closed the connection.
    pub fn read(&mut self) -> Option<Value> {
        loop {
            if let Some((v, used)) = Value::decode(&self.buf).expect("well-formed reply") {
                self.buf.drain(..used);
                return Some(v);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    pub fn cmd(&mut self, args: &[&[u8]]) -> Value {
        self.send(&Raw::encode(args));
        self.read().expect("a reply")
    }

    pub fn cmd_str(&mut self, line: &str) -> Value {
        let words: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
        self.cmd(&words)
    }

    /// Waits until the server counts `n` blocked clients, so that waiters
    /// block in the order a test sends them even on a loaded machine.
    pub fn wait_blocked(&mut self, n: usize) {
        let want = format!("blocked_clients:{n}\r");
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            let Value::Bulk(info) = self.cmd_str("INFO clients") else { panic!("INFO clients") };
            if String::from_utf8_lossy(&info).contains(&want) {
                return;
            }
            assert!(Instant::now() < give_up, "never saw {want:?}: {}", String::from_utf8_lossy(&info));
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// True when the server has closed this connection. A server that closes
    /// with our bytes still unread makes the kernel answer with a reset.
    pub fn closed(&mut self) -> bool {
        use std::io::ErrorKind::{ConnectionAborted, ConnectionReset};
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Err(e) => matches!(e.kind(), ConnectionReset | ConnectionAborted),
            Ok(_) => false,
        }
    }
}

static SETUP: Once = Once::new();

/// Installs redis-server (and friends) through the project's setup script
/// when missing, so `cargo test` works on a fresh machine.
pub fn ensure_test_deps() {
    SETUP.call_once(|| {
        if Command::new("redis-server").arg("--version").output().is_ok() {
            return;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/setup-test-deps.sh");
        let status = Command::new("bash").arg(script).status().expect("run scripts/setup-test-deps.sh");
        assert!(status.success(), "scripts/setup-test-deps.sh failed: redis-server is needed for these tests");
    });
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A real redis-server for differential tests.
pub struct Redis {
    child: Child,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// A redis-server with extra arguments.
    pub fn start_with(extra: &[&str]) -> Redis {
        ensure_test_deps();
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
            cmd.args(extra);
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            die_with_parent(&mut cmd);
            let mut child = cmd.spawn().expect("spawn redis-server");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                    let _ = s.write_all(b"PING\r\n");
                    let mut b = [0u8; 7];
                    if s.read_exact(&mut b).is_ok() && &b == b"+PONG\r\n" {
                        return Redis { child, port };
                    }
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    pub fn raw(&self) -> Raw {
        Raw::connect(self.port)
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `f` with a connection to a redis-server and one to a 3-shard
/// corekv, both just flushed. The pair starts once per test thread and
/// serves every case of a random-sequence test (proptest runs many), so a
/// case costs two FLUSHALLs rather than two server starts.
pub fn with_flushed_pair<R>(f: impl FnOnce(&mut Raw, &mut Raw) -> R) -> R {
    thread_local! {
        static PAIR: (Redis, Server) = (Redis::start(), Server::shards(3));
    }
    PAIR.with(|(redis, corekv)| {
        let (mut a, mut b) = (redis.raw(), corekv.raw());
        a.cmd_str("FLUSHALL");
        b.cmd_str("FLUSHALL");
        f(&mut a, &mut b)
    })
}

/// A fresh folder under the system temp dir, removed when dropped (on a
/// panic too). Names are per test binary and process.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("corekv-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
