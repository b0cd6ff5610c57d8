//! Redis Cluster support: key → slot hashing, the slot → master map read
//! from `CLUSTER SLOTS`, and `-MOVED`/`-ASK` redirect parsing.

use crate::protocol::{self, Reply};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

pub const SLOTS: usize = 16384;
const UNASSIGNED: u16 = u16::MAX;

/// Hash slot of a key: CRC16-XMODEM of the key, or of the first non-empty
/// `{...}` hash tag in it, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS as u16
}

/// Which master owns each slot. Node indices are stable: nodes are only ever
/// appended, so per-node connection tables indexed by them stay valid.
#[derive(Clone, Debug)]
pub struct SlotMap {
    pub nodes: Vec<Node>,
    slots: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
}

impl SlotMap {
    /// No nodes, no slots assigned; filled by `fetch`.
    pub fn empty() -> Self {
        SlotMap { nodes: Vec::new(), slots: vec![UNASSIGNED; SLOTS] }
    }

    /// A "cluster" of one node owning everything: the non-cluster case.
    pub fn single(host: &str, port: u16) -> io::Result<Self> {
        let mut map = SlotMap { nodes: Vec::new(), slots: vec![0; SLOTS] };
        map.node_index(host, port)?;
        Ok(map)
    }

    pub fn owner(&self, slot: u16) -> Option<usize> {
        match self.slots[slot as usize] {
            UNASSIGNED => None,
            n => Some(n as usize),
        }
    }

    pub fn assign(&mut self, slot: u16, node: usize) {
        self.slots[slot as usize] = node as u16;
    }

    /// Index of `host:port`, adding (and resolving) it if new.
    pub fn node_index(&mut self, host: &str, port: u16) -> io::Result<usize> {
        if let Some(i) = self.nodes.iter().position(|n| n.host == host && n.port == port) {
            return Ok(i);
        }
        let addr = resolve(host, port)?;
        self.nodes.push(Node { host: host.to_string(), port, addr });
        Ok(self.nodes.len() - 1)
    }

    /// Replaces the slot assignment with a `CLUSTER SLOTS` reply, keeping
    /// known nodes at their indices. Endpoints reported as empty or `?`
    /// (Redis does this when it doesn't know its own address) mean
    /// `fallback_host`.
    pub fn update_from_reply(&mut self, reply: &Reply<'_>, fallback_host: &str) -> io::Result<()> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("CLUSTER SLOTS: {what}"));
        let Reply::Array(ranges) = reply else {
            return Err(match reply {
                Reply::Error(e) => bad(&String::from_utf8_lossy(e)),
                _ => bad("expected an array"),
            });
        };
        let mut slots = vec![UNASSIGNED; SLOTS];
        for range in ranges {
            let Reply::Array(fields) = range else {
                return Err(bad("range is not an array"));
            };
            let (Some(Reply::Integer(lo)), Some(Reply::Integer(hi)), Some(Reply::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(bad("malformed range"));
            };
            let (Some(Reply::Bulk(host)), Some(Reply::Integer(port))) = (master.first(), master.get(1)) else {
                return Err(bad("malformed master endpoint"));
            };
            let host = match String::from_utf8_lossy(host) {
                h if h.is_empty() || h == "?" => fallback_host.to_string(),
                h => h.into_owned(),
            };
            let port = u16::try_from(*port).map_err(|_| bad("bad port"))?;
            let node = self.node_index(&host, port)?;
            if !(0..SLOTS as i64).contains(lo) || !(*lo..SLOTS as i64).contains(hi) {
                return Err(bad("slot range out of bounds"));
            }
            slots[*lo as usize..=*hi as usize].fill(node as u16);
        }
        self.slots = slots;
        Ok(())
    }

    /// Indices of nodes that currently own at least one slot (the masters).
    pub fn masters(&self) -> Vec<usize> {
        let mut owned = vec![false; self.nodes.len()];
        for &s in &self.slots {
            if s != UNASSIGNED {
                owned[s as usize] = true;
            }
        }
        (0..self.nodes.len()).filter(|&i| owned[i]).collect()
    }

    pub fn unassigned_slots(&self) -> usize {
        self.slots.iter().filter(|&&s| s == UNASSIGNED).count()
    }

    /// Fetches the map from one node with a short blocking exchange. Used at
    /// start-up and, rarely, after a `-MOVED`; not on the hot path.
    pub fn fetch(&mut self, host: &str, port: u16, auth: Option<&str>) -> io::Result<()> {
        call(host, port, auth, &[b"CLUSTER", b"SLOTS"], |reply| self.update_from_reply(reply, host))
    }
}

/// One blocking request/reply exchange on a fresh connection (after AUTH if
/// a password is given); `f` sees the reply.
pub fn call<R>(
    host: &str,
    port: u16,
    auth: Option<&str>,
    args: &[&[u8]],
    f: impl FnOnce(&Reply<'_>) -> io::Result<R>,
) -> io::Result<R> {
    let addr = resolve(host, port)?;
    let mut req = Vec::new();
    if let Some(pw) = auth {
        protocol::encode_command(&mut req, &[b"AUTH", pw.as_bytes()]);
    }
    protocol::encode_command(&mut req, args);
    let timeout = Duration::from_secs(5);
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(&req)?;
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut pos = 0;
    if auth.is_some() {
        pos = read_reply_end(&mut s, &mut buf, 0)?;
        if let Some((Reply::Error(e), _)) = protocol::parse_reply(&buf[..pos]).ok().flatten() {
            return Err(io::Error::other(format!("AUTH failed: {}", String::from_utf8_lossy(e))));
        }
    }
    let end = read_reply_end(&mut s, &mut buf, pos)?;
    let (reply, _) = protocol::parse_reply(&buf[pos..end]).ok().flatten().expect("reply was parsed once already");
    f(&reply)
}

/// Blocking read until `buf[pos..]` holds one complete reply; returns its end.
fn read_reply_end(s: &mut TcpStream, buf: &mut Vec<u8>, pos: usize) -> io::Result<usize> {
    loop {
        match protocol::parse_reply(&buf[pos..]) {
            Ok(Some((_, n))) => return Ok(pos + n),
            Ok(None) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

pub fn resolve(host: &str, port: u16) -> io::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("cannot resolve {host}")))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    Moved,
    Ask,
}

/// Parses `MOVED <slot> <host>:<port>` / `ASK ...` (error text without '-').
pub fn parse_redirect(msg: &[u8]) -> Option<(RedirectKind, u16, String, u16)> {
    let text = std::str::from_utf8(msg).ok()?;
    let mut it = text.split_ascii_whitespace();
    let kind = match it.next()? {
        "MOVED" => RedirectKind::Moved,
        "ASK" => RedirectKind::Ask,
        _ => return None,
    };
    let slot: u16 = it.next()?.parse().ok()?;
    let endpoint = it.next()?;
    let (host, port) = endpoint.rsplit_once(':')?;
    if slot as usize >= SLOTS {
        return None;
    }
    Some((kind, slot, host.to_string(), port.parse().ok()?))
}
