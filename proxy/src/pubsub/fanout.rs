//! A published message reaching this core's subscribers: each message is
//! encoded once per channel or matching pattern (RESP3 subscribers get the
//! same bytes with `>` for `*`), then copied into each subscriber's push
//! queue. Runs on whichever core holds the subscribers: the publisher's own,
//! or a peer reached through a batch (`execute.rs`) or a closure
//! (`publish.rs`).

use super::state::Kind;
use crate::core::Core;
use crate::push::deliver::push_to;
use shard::Args;

/// Delivers `message` published to `channel` (a channel or a shard
/// channel; channels also reach matching patterns) to this core's
/// subscribers and returns how many received it. Bytes for client `me`
/// (the publishing connection itself, 0 for none) go to `mine` instead,
/// so they land among its replies where Redis puts them.
pub fn publish_here(core: &Core, kind: Kind, channel: &[u8], message: &[u8], me: u64, mine: &mut Vec<u8>) -> usize {
    let subs = core.pubsub.borrow();
    let mut receivers = 0;
    let mut encoded = Vec::new();
    if let Some(list) = subs.local[kind as usize].get(channel) {
        let head: &[u8] = if kind == Kind::Shard { b"smessage" } else { b"message" };
        encode(&mut encoded, &[head, channel, message]);
        receivers += send(core, list, &encoded, me, mine);
    }
    if kind == Kind::Channel && !subs.local[Kind::Pattern as usize].is_empty() {
        for (pattern, list) in &subs.local[Kind::Pattern as usize] {
            if shard::glob::glob_match(pattern, channel, false) {
                encoded.clear();
                encode(&mut encoded, &[b"pmessage", pattern, channel, message]);
                receivers += send(core, list, &encoded, me, mine);
            }
        }
    }
    receivers
}

/// A remote PUBLISH / SPUBLISH op of a peer's batch: this core's part of
/// the receiver count, as an integer reply.
pub fn publish_op(core: &Core, spec: &shard::CommandSpec, args: &Args, out: &mut Vec<u8>) {
    let kind = if spec.name == "spublish" { Kind::Shard } else { Kind::Channel };
    let n = publish_here(core, kind, args.get(1), args.get(2), 0, &mut Vec::new());
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn send(
    core: &Core,
    list: &[std::rc::Rc<crate::push::queue::PushQueue>],
    encoded: &[u8],
    me: u64,
    mine: &mut Vec<u8>,
) -> usize {
    for q in list {
        if q.client_id == me {
            push_form(mine, encoded, q.resp3.get());
        } else {
            push_to(core, q, |out, resp3| push_form(out, encoded, resp3));
        }
    }
    list.len()
}

/// `encoded` is a RESP2 array; RESP3 clients get it as a push.
fn push_form(out: &mut Vec<u8>, encoded: &[u8], resp3: bool) {
    out.push(if resp3 { b'>' } else { b'*' });
    out.extend_from_slice(&encoded[1..]);
}

/// An array of bulk strings.
pub fn encode(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(parts.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for p in parts {
        out.push(b'$');
        out.extend_from_slice(itoa::Buffer::new().format(p.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}
