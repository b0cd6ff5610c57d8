//! Pub/Sub fan-out: one publisher, N subscribers of one channel.
//!
//!   pubsub-bench PORT SUBSCRIBERS SECONDS [INFLIGHT] [PAYLOAD]
//!
//! The subscribers connect first (on a server with several cores, the
//! kernel spreads them over its cores) and are read by 4 threads (mio);
//! the publisher keeps INFLIGHT PUBLISHes outstanding for SECONDS. Prints
//! one JSON line: messages published and delivered, messages delivered per
//! second (until the last one arrived), and each PUBLISH's latency
//! (sent → reply) p50/p99 in µs.

use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHANNEL: &str = "bench";
const READERS: usize = 4;

fn command(words: &[&str]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        v.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    v
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: pubsub-bench PORT SUBSCRIBERS SECONDS [INFLIGHT] [PAYLOAD]");
        std::process::exit(2);
    }
    let port: u16 = args[1].parse().expect("port");
    let subscribers: usize = args[2].parse().expect("subscribers");
    let seconds: f64 = args[3].parse().expect("seconds");
    let inflight: usize = args.get(4).map_or(1, |a| a.parse().expect("inflight"));
    let payload = "x".repeat(args.get(5).map_or(16, |a| a.parse().expect("payload")));
    let message_len =
        format!("*3\r\n$7\r\nmessage\r\n${}\r\n{CHANNEL}\r\n${}\r\n{payload}\r\n", CHANNEL.len(), payload.len()).len();
    let confirm_len = format!("*3\r\n$9\r\nsubscribe\r\n${}\r\n{CHANNEL}\r\n:1\r\n", CHANNEL.len()).len();

    // Subscribers: subscribed and confirmed before anything is published.
    let mut socks = Vec::with_capacity(subscribers);
    for _ in 0..subscribers {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_nodelay(true).unwrap();
        s.write_all(&command(&["SUBSCRIBE", CHANNEL])).unwrap();
        let mut confirm = vec![0u8; confirm_len];
        s.read_exact(&mut confirm).expect("subscribe confirmation");
        socks.push(s);
    }
    let received = Arc::new(AtomicU64::new(0));
    let last_at = Arc::new(std::sync::Mutex::new(Instant::now()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    let per = subscribers.div_ceil(READERS).max(1);
    let mut socks = socks.into_iter().peekable();
    while socks.peek().is_some() {
        let group: Vec<TcpStream> = socks.by_ref().take(per).collect();
        let (received, stop, last_at) = (received.clone(), stop.clone(), last_at.clone());
        readers.push(std::thread::spawn(move || {
            let mut poll = Poll::new().unwrap();
            let mut streams: Vec<MioStream> = group
                .into_iter()
                .map(|s| {
                    s.set_nonblocking(true).unwrap();
                    MioStream::from_std(s)
                })
                .collect();
            for (i, s) in streams.iter_mut().enumerate() {
                poll.registry().register(s, Token(i), Interest::READABLE).unwrap();
            }
            let mut events = Events::with_capacity(1024);
            let mut buf = vec![0u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) {
                poll.poll(&mut events, Some(Duration::from_millis(50))).unwrap();
                let mut got = 0u64;
                for e in events.iter() {
                    let s = &mut streams[e.token().0];
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => got += n as u64,
                            Err(_) => break,
                        }
                    }
                }
                if got > 0 {
                    received.fetch_add(got, Ordering::Relaxed);
                    *last_at.lock().unwrap() = Instant::now();
                }
            }
        }));
    }

    // The publisher.
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let publish = command(&["PUBLISH", CHANNEL, &payload]);
    let mut latencies: Vec<u32> = Vec::new();
    let mut sent_at = std::collections::VecDeque::new();
    let mut receivers_total = 0u64;
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(seconds);
    let mut line = String::new();
    let mut published = 0u64;
    loop {
        while sent_at.len() < inflight && Instant::now() < end {
            writer.write_all(&publish).unwrap();
            sent_at.push_back(Instant::now());
        }
        let Some(at) = sent_at.pop_front() else { break };
        line.clear();
        reader.read_line(&mut line).unwrap();
        latencies.push(at.elapsed().as_micros().min(u32::MAX as u128) as u32);
        receivers_total += line.trim_start_matches(':').trim().parse::<u64>().unwrap_or(0);
        published += 1;
    }
    let publish_secs = started.elapsed().as_secs_f64();
    // Wait for the subscribers to have everything (or give up after 10 s
    // without progress: a subscriber cut at its output limit).
    let expected = receivers_total * message_len as u64;
    let mut last = (received.load(Ordering::Relaxed), Instant::now());
    while received.load(Ordering::Relaxed) < expected {
        std::thread::sleep(Duration::from_millis(10));
        let now = received.load(Ordering::Relaxed);
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let delivered = received.load(Ordering::Relaxed) / message_len as u64;
    let delivered_secs = last_at.lock().unwrap().duration_since(started).as_secs_f64().max(publish_secs);
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{{\"subscribers\":{subscribers},\"inflight\":{inflight},\"published\":{published},\"receivers_counted\":{receivers_total},\"delivered\":{delivered},\"delivered_per_sec\":{:.0},\"publish_per_sec\":{:.0},\"p50_us\":{},\"p99_us\":{}}}",
        delivered as f64 / delivered_secs,
        published as f64 / publish_secs,
        pct(0.50),
        pct(0.99)
    );
}
