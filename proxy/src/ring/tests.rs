//! The ring layer on the real kernel: a glommio executor thread runs a
//! ring with a small server behaviour per test, the test thread is the
//! client (plain blocking sockets).

use super::stream::RingStream;
use super::{Ring, RingConfig};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::shared_channel::{self, SharedReceiver, SharedSender};
use glommio::{LocalExecutorBuilder, Placement};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone)]
enum Behaviour {
    /// Echo, reading at most `chunk` bytes at a time.
    Echo { chunk: usize },
    /// Echo, but only once `go` is set.
    EchoAfter { go: Arc<AtomicBool> },
    /// Write `bytes` (a counting pattern) without reading; `written`
    /// counts what the writes accepted.
    Blast { bytes: usize, written: Arc<AtomicUsize> },
    /// Echo through another executor: each read goes there and back over
    /// glommio's shared channels (one connection takes the ends).
    Relay { ends: Arc<Mutex<Option<RelayEnds>>> },
    /// Echo, but input "block" holds the executor thread (as a long
    /// command would) from setting `held` until `release` is set.
    EchoHolding { held: Arc<AtomicBool>, release: Arc<AtomicBool> },
    /// Echo each read after a glommio timer of `after`.
    EchoAfterTimer { after: Duration },
    /// Echo each read through a glommio task it spawns and awaits (done
    /// at its second poll).
    EchoThroughTask,
}

/// What the ring's `on_input` hook was shown, one entry per call.
type Looks = Arc<Mutex<Vec<Vec<Vec<u8>>>>>;

type RelayEnds = (SharedSender<Vec<u8>>, SharedReceiver<Vec<u8>>);

struct Harness {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// The ring's open connections, refreshed every millisecond.
    open: Arc<AtomicUsize>,
    /// Asks the executor to describe its open connections into `states`
    /// (at its next tick; only for a failure's message).
    describe: Arc<AtomicBool>,
    states: Arc<Mutex<String>>,
    looks: Looks,
    thread: Option<glommio::ExecutorJoinHandle<()>>,
}

async fn serve(mut s: RingStream, b: Behaviour) {
    match b {
        Behaviour::Echo { chunk } => echo(&mut s, chunk).await,
        Behaviour::EchoAfter { go } => {
            while !go.load(Ordering::Relaxed) {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            echo(&mut s, 4096).await
        }
        Behaviour::Blast { bytes, written } => {
            let data = pattern(bytes);
            for piece in data.chunks(8192) {
                if s.write_all(piece).await.is_err() {
                    return;
                }
                written.fetch_add(piece.len(), Ordering::Relaxed);
            }
            let mut b = [0u8; 1];
            let _ = s.read(&mut b).await;
        }
        Behaviour::EchoHolding { held, release } => {
            let mut buf = vec![0u8; 4096];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                if &buf[..n] == b"block" {
                    held.store(true, Ordering::Relaxed);
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while !release.load(Ordering::Relaxed) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
        Behaviour::EchoAfterTimer { after } => {
            let mut buf = vec![0u8; 4096];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                glommio::timer::sleep(after).await;
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
        Behaviour::EchoThroughTask => {
            let mut buf = vec![0u8; 4096];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                let input = buf[..n].to_vec();
                let task = async move {
                    // Not done at its first poll: glommio has to run it.
                    futures_lite::future::yield_now().await;
                    input
                };
                let reply = glommio::spawn_local(task).await;
                if s.write_all(&reply).await.is_err() {
                    return;
                }
            }
        }
        Behaviour::Relay { ends } => {
            let (there, back) = ends.lock().unwrap().take().expect("one relayed connection");
            let (there, back) = (there.connect().await, back.connect().await);
            let mut buf = vec![0u8; 4096];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                if there.send(buf[..n].to_vec()).await.is_err() {
                    return;
                }
                let Some(reply) = back.recv().await else { return };
                if s.write_all(&reply).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn echo(s: &mut RingStream, chunk: usize) {
    let mut buf = vec![0u8; chunk];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

impl Harness {
    fn start(config: RingConfig, behaviour: Behaviour) -> Harness {
        Self::start_ticking(config, behaviour, Duration::from_millis(1))
    }

    /// The executor's own task wakes every `tick` (to refresh `open` and
    /// see `stop`); nothing else of the harness wakes it.
    fn start_ticking(config: RingConfig, behaviour: Behaviour, tick: Duration) -> Harness {
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let (describe, states) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(String::new())));
        let (stop2, open2) = (stop.clone(), open.clone());
        let (describe2, states2) = (describe.clone(), states.clone());
        let looks: Looks = Arc::default();
        let looks2 = looks.clone();
        // A long tick goes with a long preemption timer: its firing would
        // wake a park too.
        let thread = LocalExecutorBuilder::new(Placement::Unbound)
            .preempt_timer(tick.max(Duration::from_millis(100)))
            .spawn(move || async move {
                let ring = Ring::new(config).expect("ring");
                let socket = crate::listen::listen_socket("127.0.0.1:0".parse().unwrap(), 4096, false).unwrap();
                let addr = socket.local_addr().unwrap().as_socket().unwrap();
                ring.listen(socket.into(), 0);
                ring.on_accept(move |stream, _| {
                    let ring = stream.ring().clone();
                    ring.spawn(Box::pin(serve(stream, behaviour.clone())));
                });
                ring.on_input(move |inputs| looks2.lock().unwrap().push(inputs.iter().map(|i| i.to_vec()).collect()));
                let driver = glommio::spawn_local(ring.clone().drive()).detach();
                tx.send(addr).unwrap();
                while !stop2.load(Ordering::Relaxed) {
                    open2.store(ring.connections(), Ordering::Relaxed);
                    if describe2.swap(false, Ordering::Relaxed) {
                        *states2.lock().unwrap() = ring.describe_connections();
                    }
                    glommio::timer::sleep(tick).await;
                }
                ring.stop();
                driver.await;
                ring.on_accept(|_, _| {});
                open2.store(ring.connections(), Ordering::Relaxed);
            })
            .unwrap();
        let addr = rx.recv_timeout(Duration::from_secs(10)).expect("ring started");
        Harness { addr, stop, open, describe, states, looks, thread: Some(thread) }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Waits until the ring has `n` connections open.
    fn wait_open(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.open.load(Ordering::Relaxed) != n {
            if Instant::now() >= deadline {
                self.describe.store(true, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
                panic!("{} open, expected {n}\n{}", self.open.load(Ordering::Relaxed), self.states.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Stops the ring; the driver returns only once everything is reaped.
    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        assert_eq!(self.open.load(Ordering::Relaxed), 0);
    }
}

fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    s.read_exact(&mut v).unwrap();
    v
}

#[test]
fn short_reads_and_writes_keep_every_byte_in_order() {
    let h = Harness::start(RingConfig { buffer_size: 64, ..RingConfig::default() }, Behaviour::Echo { chunk: 3 });
    let mut c = h.connect();
    let data = pattern(10_000);
    // Pieces of odd sizes, some smaller than a read, some spanning buffers.
    for piece in data.chunks(37) {
        c.write_all(piece).unwrap();
    }
    assert_eq!(read_exact(&mut c, data.len()), data);
    drop(c);
    h.wait_open(0);
    h.finish();
}

#[test]
fn one_reap_shows_several_connections_input_before_they_run() {
    let (held, release) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let h =
        Harness::start(RingConfig::default(), Behaviour::EchoHolding { held: held.clone(), release: release.clone() });
    let mut blocker = h.connect();
    let mut others: Vec<TcpStream> = (0..8).map(|_| h.connect()).collect();
    h.wait_open(9);
    blocker.write_all(b"block").unwrap();
    while !held.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The executor is held: these wait in the kernel for one reap.
    let sent: Vec<Vec<u8>> = (0..8).map(|i| format!("GET k{i}").into_bytes()).collect();
    for (s, m) in others.iter_mut().zip(&sent) {
        s.write_all(m).unwrap();
    }
    release.store(true, Ordering::Relaxed);
    assert_eq!(read_exact(&mut blocker, 5), b"block");
    for (s, m) in others.iter_mut().zip(&sent) {
        assert_eq!(&read_exact(s, m.len()), m);
    }
    let looks = h.looks.lock().unwrap().clone();
    let several =
        looks.iter().find(|l| l.len() >= 2).unwrap_or_else(|| panic!("no reap with several inputs: {looks:?}"));
    assert!(several.iter().all(|i| sent.contains(i)), "{several:?}");
    drop((blocker, others));
    h.wait_open(0);
    h.finish();
}

#[test]
fn connections_closing_mid_batch_are_reaped() {
    let h = Harness::start(RingConfig::default(), Behaviour::Echo { chunk: 4096 });
    let mut keep = h.connect();
    for i in 0..200 {
        let mut c = h.connect();
        c.write_all(&pattern(1000 + i)).unwrap();
        if i % 2 == 0 {
            // Reset instead of FIN: the echo's send fails.
            socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO)).unwrap();
        }
        drop(c);
    }
    keep.write_all(b"still here").unwrap();
    assert_eq!(read_exact(&mut keep, 10), b"still here");
    h.wait_open(1);
    drop(keep);
    h.wait_open(0);
    h.finish();
}

#[test]
fn gathering_parks_answer_every_client_and_then_a_lone_one() {
    // Parks wait for several completions while 32 clients ping-pong; as
    // they finish, and for one client alone after them, the count must
    // come down within the 50 µs bound. A park that ignored its bound
    // would wait for the harness's slow tick (5 s), and a read time out.
    let config = RingConfig { gather_bound: Duration::from_micros(50), ..RingConfig::default() };
    let h = Harness::start_ticking(config, Behaviour::Echo { chunk: 4096 }, Duration::from_secs(5));
    let connect = || {
        let c = h.connect();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c
    };
    let clients: Vec<_> = (0..32u32)
        .map(|i| {
            let mut c = connect();
            std::thread::spawn(move || {
                for round in 0..300u32 {
                    let msg = (i * 1000 + round).to_le_bytes();
                    c.write_all(&msg).unwrap();
                    assert_eq!(read_exact(&mut c, 4), msg);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let mut lone = connect();
    for round in 0..300u32 {
        lone.write_all(&round.to_le_bytes()).unwrap();
        assert_eq!(read_exact(&mut lone, 4), round.to_le_bytes());
    }
    drop(lone);
    h.wait_open(0);
    h.finish();
}

#[test]
fn exhausted_buffer_ring_resumes_when_buffers_return() {
    let go = Arc::new(AtomicBool::new(false));
    let config = RingConfig { buffers: 4, buffer_size: 64, ..RingConfig::default() };
    let h = Harness::start(config, Behaviour::EchoAfter { go: go.clone() });
    let mut clients: Vec<TcpStream> = (0..3).map(|_| h.connect()).collect();
    let data = pattern(20_000);
    for c in &mut clients {
        c.write_all(&data).unwrap();
    }
    // Four 64-byte buffers for 60 KB: the receives run dry until the
    // connections read.
    std::thread::sleep(Duration::from_millis(50));
    go.store(true, Ordering::Relaxed);
    for c in &mut clients {
        assert_eq!(read_exact(c, data.len()), data);
    }
    drop(clients);
    h.wait_open(0);
    h.finish();
}

#[test]
fn a_slow_readers_replies_stay_queued_up_to_the_high_water_mark() {
    let written = Arc::new(AtomicUsize::new(0));
    let total = 8 << 20;
    let config = RingConfig { write_high_water: 256 << 10, ..RingConfig::default() };
    let h = Harness::start(config, Behaviour::Blast { bytes: total, written: written.clone() });
    let mut c = h.connect();
    h.wait_open(1);
    std::thread::sleep(Duration::from_millis(100));
    // Socket buffers plus the high-water mark, not the whole reply.
    let early = written.load(Ordering::Relaxed);
    assert!(early < total, "{early} bytes accepted from a client that reads nothing");
    assert_eq!(read_exact(&mut c, total), pattern(total));
    c.write_all(b"x").unwrap();
    h.wait_open(0);
    h.finish();
}

#[test]
fn a_parked_executor_wakes_for_another_executors_message() {
    relay_round_trips(Duration::ZERO);
}

/// The connection's channel ends wait for the peer's: its connecting must
/// wake the parked executor too.
#[test]
fn a_parked_executor_wakes_for_another_executor_connecting_late() {
    relay_round_trips(Duration::from_millis(200));
}

/// 200 round trips of a connection that relays each read through a peer
/// executor, which connects its channel ends after `peer_delay`.
fn relay_round_trips(peer_delay: Duration) {
    let (there_tx, there_rx) = shared_channel::new_bounded::<Vec<u8>>(16);
    let (back_tx, back_rx) = shared_channel::new_bounded::<Vec<u8>>(16);
    let peer = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            glommio::timer::sleep(peer_delay).await;
            let (from, to) = (there_rx.connect().await, back_tx.connect().await);
            while let Some(m) = from.recv().await {
                if to.send(m).await.is_err() {
                    return;
                }
            }
        })
        .unwrap();
    let ends = Arc::new(Mutex::new(Some((there_tx, back_rx))));
    let tick = Duration::from_secs(5);
    let h = Harness::start_ticking(RingConfig::default(), Behaviour::Relay { ends }, tick);
    let mut c = h.connect();
    // Each reply needs the peer's message to wake the parked executor; a
    // lost wake-up would leave it to the harness's next tick.
    c.set_read_timeout(Some(tick / 2)).unwrap();
    for i in 0..200 {
        let msg = pattern(1 + i % 50);
        c.write_all(&msg).unwrap();
        assert_eq!(read_exact(&mut c, msg.len()), msg, "round trip {i}");
    }
    drop(c);
    h.wait_open(0);
    h.finish();
    peer.join().unwrap();
}

/// A connection served inside the executor's park (`Ring::serve_parked`)
/// that sets a timer or spawns a task hands the thread back to glommio,
/// which sees the timer and runs the task: parked on until the harness's
/// next tick, each reply would wait for it.
#[test]
fn timers_and_tasks_of_connections_served_in_a_park_are_not_left_waiting() {
    let tick = Duration::from_secs(5);
    let harnesses: Vec<Harness> =
        [Behaviour::EchoAfterTimer { after: Duration::from_millis(2) }, Behaviour::EchoThroughTask]
            .into_iter()
            .map(|b| Harness::start_ticking(RingConfig::default(), b, tick))
            .collect();
    for h in &harnesses {
        let mut c = h.connect();
        c.set_read_timeout(Some(tick / 2)).unwrap();
        for i in 0..50 {
            let msg = pattern(1 + i);
            c.write_all(&msg).unwrap();
            assert_eq!(read_exact(&mut c, msg.len()), msg, "round trip {i}");
        }
        drop(c);
        h.wait_open(0);
    }
    for h in &harnesses {
        h.stop.store(true, Ordering::Relaxed);
    }
    harnesses.into_iter().for_each(Harness::finish);
}

/// Opens `COREKV_IDLE_CLIENTS` = "addr count" connections, checks the first
/// and last echo, and holds them until stdin closes: the client side of
/// `ten_thousand_idle_connections`, in a process of its own (the file
/// descriptor limit would not fit both sides in one).
#[test]
#[ignore]
fn idle_clients_process() {
    let Ok(spec) = std::env::var("COREKV_IDLE_CLIENTS") else { return };
    let (addr, n) = spec.split_once(' ').unwrap();
    let (addr, n): (SocketAddr, usize) = (addr.parse().unwrap(), n.parse().unwrap());
    let mut conns: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for i in [0, n - 1] {
        conns[i].write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        conns[i].read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
    }
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}

#[test]
fn ten_thousand_idle_connections() {
    let n = 10_000;
    let h = Harness::start(RingConfig::default(), Behaviour::Echo { chunk: 4096 });
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["ring::tests::idle_clients_process", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("COREKV_IDLE_CLIENTS", format!("{} {n}", h.addr))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    // The test harness prints its own lines first.
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "the client process ended");
    }
    h.wait_open(n);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    h.wait_open(0);
    h.finish();
}
