//! The primary's command stream, applied through a master client: a
//! `Connection` with no socket whose commands take the ordinary router
//! (SELECT, MULTI/EXEC, writes batched to their owning cores in stream
//! order) and whose replies are dropped. The offset counts the bytes of
//! the commands applied; `REPLCONF GETACK` is answered here, and an ACK
//! goes out every second.

use super::io::{LinkIo, Read};
use crate::blocking;
use crate::core::{Core, CoreStats};
use crate::log;
use crate::resp::{skip_value, Limits, Parsed, RequestParser};
use crate::session::Connection;
use shard::Args;
use std::rc::Rc;
use std::time::{Duration, Instant};

const READ_CHUNK: usize = 64 * 1024;
const ACK_PERIOD: Duration = Duration::from_secs(1);

/// Applies the stream until the link fails (Err, Redis's words) or
/// REPLICAOF moves on (Ok).
pub async fn stream(core: &Rc<Core>, io: &mut LinkIo, generation: u64) -> Result<(), String> {
    let id = core.clients.borrow_mut().next_id(core.index, core.count);
    let mut master = Connection::master_client(core.clone(), id);
    let mut parser = RequestParser::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut filled = 0usize;
    // The stream offset of `buf[0]`, and the offset applied: the end of
    // the last command outside a MULTI (Redis's reploff), so a link lost
    // inside a transaction resumes from its MULTI.
    let mut buf_offset = core.repl.replica.link.borrow().offset;
    let mut offset = buf_offset;
    let mut last_ack = Instant::now();
    let mut last_io = Instant::now();
    // The commands whose replies are still to be looked at, in order.
    let mut names: Vec<&'static str> = Vec::new();
    loop {
        if core.repl.replica.link.borrow().generation != generation || core.process.shutting_down() {
            break Ok(());
        }
        if last_ack.elapsed() >= ACK_PERIOD {
            last_ack = Instant::now();
            if let Err(e) = ack(io, offset).await {
                break Err(e);
            }
        }
        let timeout = Duration::from_secs(core.config().repl_timeout.max(1));
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = match io.read_some(&mut buf[filled..]).await {
            Ok(Read::Bytes(n)) => n,
            Ok(Read::Idle) if last_io.elapsed() > timeout => {
                break Err("MASTER timeout: no data nor PING received...".into())
            }
            Ok(Read::Idle) => continue,
            Err(e) => break Err(e),
        };
        // REPLICAOF may have moved on while this read waited.
        if core.repl.replica.link.borrow().generation != generation {
            break Ok(());
        }
        last_io = Instant::now();
        filled += n;
        {
            let mut link = core.repl.replica.link.borrow_mut();
            link.read_offset += n as u64;
            link.last_io = Some(last_io);
        }
        let limits = Limits { proto_max_bulk_len: core.config().proto_max_bulk_len, unauthenticated: false };
        master.now = core.now_ms();
        let mut failed = None;
        loop {
            match parser.next(&buf[..filled], &limits) {
                Parsed::Command { inline } => {
                    let src: &[u8] = if inline { parser.inline_buf() } else { &buf[..filled] };
                    let args = Args::new(src, parser.args());
                    let name = args.get(0);
                    if name.eq_ignore_ascii_case(b"replconf") {
                        if args.len() >= 2 && args.get(1).eq_ignore_ascii_case(b"getack") {
                            // Everything before it is applied before the answer.
                            drain_replies(&mut master, &mut names).await;
                            if let Err(e) = ack(io, offset).await {
                                failed = Some(e);
                                break;
                            }
                            last_ack = Instant::now();
                        }
                    } else if !name.eq_ignore_ascii_case(b"ping") {
                        CoreStats::add(&core.stats.commands, 1);
                        names.push(core.commands.lookup(name).map_or("<unknown>", |spec| spec.name));
                        run(&mut master, args).await;
                        if master.pipeline.out.len() > READ_CHUNK {
                            drain_replies(&mut master, &mut names).await;
                        }
                    }
                    if master.state.multi.is_none() {
                        offset = buf_offset + parser.consumed() as u64;
                    }
                }
                Parsed::Incomplete => break,
                Parsed::Error(msg) => {
                    failed = Some(format!("Protocol error from MASTER: {}", String::from_utf8_lossy(&msg)));
                    break;
                }
            }
        }
        drain_replies(&mut master, &mut names).await;
        if let Some(e) = failed {
            break Err(e);
        }
        let consumed = parser.consumed();
        buf_offset += consumed as u64;
        core.repl.replica.link.borrow_mut().offset = offset;
        buf.copy_within(consumed..filled, 0);
        filled -= consumed;
        parser.shift(consumed);
        if filled == 0 && buf.len() > 4 * READ_CHUNK {
            buf = vec![0u8; READ_CHUNK];
        }
    }
}

/// One command through the router, as a client's would go.
async fn run(master: &mut Connection, args: Args<'_>) {
    master.tally.clock = std::time::Instant::now();
    if let Some(deferred) = master.handle(args) {
        if let Some(wait) = master.run_deferred(deferred, args).await {
            // A primary never sends a blocking command that waits.
            blocking::give_up(master, wait).await;
        }
    }
}

/// Waits for the replies so far and drops them, logging an error one
/// gave as Redis does (the dataset may now differ from the primary's).
async fn drain_replies(master: &mut Connection, names: &mut Vec<&'static str>) {
    master.pipeline.flush(&master.core.clone()).await;
    let (out, mut at) = (&master.pipeline.out, 0);
    for name in names.drain(..) {
        if out.get(at) == Some(&b'-') {
            let end = out[at..].iter().position(|&b| b == b'\r').map_or(out.len(), |e| at + e);
            let error = String::from_utf8_lossy(&out[at + 1..end]);
            log::warning(&format!(
                "== CRITICAL == This replica is sending an error to its master: '{error}' after processing the command '{name}'"
            ));
        }
        match skip_value(&out[at.min(out.len())..]) {
            Some(n) => at += n,
            None => break,
        }
    }
    master.pipeline.out.clear();
}

pub async fn ack(io: &mut LinkIo, offset: u64) -> Result<(), String> {
    io.send(&[b"REPLCONF", b"ACK", offset.to_string().as_bytes()]).await
}
