//! A tiny in-process RESP server (PING/SET/GET) with deliberate misbehaviour:
//! periodic whole-server stalls, or corrupted GET values.

use corekv_bench::protocol::{self, Reply};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Default)]
pub struct Behaviour {
    /// Every `stall_every` the next request holds the server for `stall_for`.
    pub stall_every: Option<Duration>,
    pub stall_for: Duration,
    /// Flip a byte in every non-empty GET value.
    pub corrupt_gets: bool,
}

struct State {
    store: HashMap<Vec<u8>, Vec<u8>>,
    next_stall: Option<Instant>,
}

pub struct FakeServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl FakeServer {
    pub fn start(b: Behaviour) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(State {
            store: HashMap::new(),
            next_stall: b.stall_every.map(|e| Instant::now() + e),
        }));
        let stop2 = stop.clone();
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let (state, stop) = (state.clone(), stop2.clone());
                        std::thread::spawn(move || serve(s, b, &state, &stop));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FakeServer { port, stop }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut s: TcpStream, b: Behaviour, state: &Mutex<State>, stop: &AtomicBool) {
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let n = match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(_) => return,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut used = 0;
        while let Ok(Some((Reply::Array(args), len))) = protocol::parse_reply(&buf[used..]) {
            used += len;
            let args: Vec<&[u8]> = args.iter().map(|a| if let Reply::Bulk(b) = a { *b } else { &b""[..] }).collect();
            // One lock for the whole server: a stall holds every connection.
            let mut st = state.lock().unwrap();
            if let (Some(every), Some(at)) = (b.stall_every, st.next_stall) {
                if Instant::now() >= at {
                    std::thread::sleep(b.stall_for);
                    st.next_stall = Some(Instant::now() + every);
                }
            }
            match args.first().map(|c| c.to_ascii_uppercase()).as_deref() {
                Some(b"PING") => out.extend_from_slice(b"+PONG\r\n"),
                Some(b"SET") if args.len() == 3 => {
                    st.store.insert(args[1].to_vec(), args[2].to_vec());
                    out.extend_from_slice(b"+OK\r\n");
                }
                Some(b"GET") if args.len() == 2 => match st.store.get(args[1]) {
                    Some(v) => {
                        let mut v = v.clone();
                        if b.corrupt_gets {
                            if let Some(last) = v.last_mut() {
                                *last ^= 1;
                            }
                        }
                        protocol::encode_bulk(&mut out, &v);
                    }
                    None => out.extend_from_slice(b"$-1\r\n"),
                },
                _ => out.extend_from_slice(b"-ERR unknown command\r\n"),
            }
        }
        buf.drain(..used);
        if s.write_all(&out).is_err() {
            return;
        }
    }
}
