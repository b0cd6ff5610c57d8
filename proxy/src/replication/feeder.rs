//! Feeding a replica the stream: it reads from core 0's backlog (a task
//! there waits for new blocks), gets the blocks shared, not copied,
//! decompresses and writes them, and reads the replica's REPLCONF ACKs
//! between writes.

use super::hub::{refresh_compression, HUB};
use crate::coordinator::dispatch::{call, call_task};
use crate::core::Core;
use crate::resp::{Limits, Parsed, RequestParser};
use crate::stream::ClientStream;
use futures_lite::{AsyncRead, AsyncWriteExt};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Stream bytes sent per write at most.
const SEND_CHUNK: usize = 256 << 10;
/// How long a feeder's request for more stream waits on the hub.
const POLL_WAIT: Duration = Duration::from_millis(500);

/// What the feeder waits for.
enum Event {
    Stream(Option<Fetched>),
    Read(std::io::Result<usize>),
}

/// Stream from the backlog: blocks with their leading bytes to skip.
struct Fetched {
    blocks: Vec<(std::sync::Arc<super::block::Block>, usize)>,
    killed: bool,
}

/// Sends the stream from `pos` as it grows, reading the replica's
/// REPLCONF ACKs meanwhile, until the link ends or it is cut off. After an
/// EOF-marker snapshot nothing is sent before the replica's first ACK, as
/// Redis does: the replica finds the marker only as the last bytes it read.
pub async fn stream_to(
    core: &Rc<Core>,
    stream: &mut ClientStream,
    id: u64,
    mut pos: u64,
    mut input: Vec<u8>,
    eof: bool,
) {
    let mut filled = input.len();
    input.resize(filled.max(4096), 0);
    let mut parser = RequestParser::new();
    let mut out = Vec::new();
    let (mut waiting, mut loaded) = (eof, false);
    loop {
        let mut fetch = Box::pin(fetch(core, id, pos));
        loop {
            if read_acks(core, id, &mut parser, &mut input, &mut filled).await && !loaded {
                (waiting, loaded) = (false, true);
                refresh_compression(core).await;
            }
            if filled == input.len() {
                input.resize(input.len() * 2, 0);
            }
            let event = poll_fn(|cx| {
                if !waiting {
                    if let Poll::Ready(f) = fetch.as_mut().poll(cx) {
                        return Poll::Ready(Event::Stream(f));
                    }
                }
                Pin::new(&mut *stream).poll_read(cx, &mut input[filled..]).map(Event::Read)
            })
            .await;
            match event {
                Event::Read(Ok(0)) | Event::Read(Err(_)) => return,
                Event::Read(Ok(n)) => filled += n,
                Event::Stream(None) => return,
                Event::Stream(Some(f)) if f.killed => return,
                Event::Stream(Some(f)) => {
                    out.clear();
                    for (block, skip) in f.blocks {
                        let start = out.len();
                        if block.decode_into(&mut out).is_err() {
                            return;
                        }
                        out.drain(start..start + skip);
                    }
                    if stream.write_all(&out).await.is_err() {
                        return;
                    }
                    pos += out.len() as u64;
                    break;
                }
            }
        }
    }
}

/// The stream after `pos`, waiting on the hub up to `POLL_WAIT` for some.
async fn fetch(core: &Rc<Core>, id: u64, pos: u64) -> Option<Fetched> {
    call_task(core, HUB, move |c| async move {
        let deadline = glommio::timer::sleep(POLL_WAIT);
        futures_lite::pin!(deadline);
        poll_fn(|cx| {
            let mut primary = c.repl.primary.borrow_mut();
            let Some(p) = primary.as_mut() else { return Poll::Ready(None) };
            let (first, end) = (p.backlog.first(), p.backlog.end);
            let held = p.backlog.held_from(pos).0;
            let Some(link) = p.link(id) else { return Poll::Ready(None) };
            let advanced = link.pos != pos;
            link.pos = pos;
            link.held.store(held, std::sync::atomic::Ordering::Relaxed);
            if advanced {
                // What was sent is let go now, not at the hub's next tick:
                // the backlog trims and mem_clients_slaves follows.
                crate::replication::hub::enforce_limits(&c, p);
            }
            let Some(link) = p.link(id) else { return Poll::Ready(None) };
            if link.killed || pos < first {
                return Poll::Ready(Some(Fetched { blocks: Vec::new(), killed: true }));
            }
            if pos < end || deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Fetched { blocks: p.backlog.read_from(pos, SEND_CHUNK), killed: false }));
            }
            link.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    })
    .await
    .flatten()
}

/// Takes the REPLCONF ACKs the replica sent, recording the last offset;
/// true when there was one.
async fn read_acks(core: &Rc<Core>, id: u64, parser: &mut RequestParser, input: &mut [u8], filled: &mut usize) -> bool {
    let limits = Limits { proto_max_bulk_len: 1 << 20, unauthenticated: false };
    let mut acked = None;
    while let Parsed::Command { inline } = parser.next(&input[..*filled], &limits) {
        let src: &[u8] = if inline { parser.inline_buf() } else { &input[..*filled] };
        let args = shard::Args::new(src, parser.args());
        if args.len() >= 3 && args.is(0, "replconf") && args.is(1, "ack") {
            acked = std::str::from_utf8(args.get(2)).ok().and_then(|s| s.parse::<u64>().ok());
        }
    }
    let consumed = parser.consumed();
    input.copy_within(consumed..*filled, 0);
    *filled -= consumed;
    parser.shift(consumed);
    if let Some(offset) = acked {
        call(core, HUB, move |c| {
            if let Some(p) = c.repl.primary.borrow_mut().as_mut() {
                if let Some(r) = p.link(id) {
                    r.ack = r.ack.max(offset);
                    r.ack_at = Instant::now();
                    r.loaded = true;
                }
                p.wake_ack_waiters();
            }
        })
        .await;
    }
    acked.is_some()
}
