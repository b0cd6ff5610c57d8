//! What to send: the SET:GET mix or a custom command template, value sizes,
//! and self-verifying value contents.
//!
//! A value is `"<key id>:<length>|"` followed by a fixed pseudo-random
//! pattern, truncated to its length. It is a pure function of (key, length),
//! so any GET of a key written during this run can be checked with one
//! `memcmp` no matter which client wrote it: a wrong key's value, a truncated
//! or padded value, or corrupted bytes are all caught.

use crate::data::{self, DataSet};
use crate::keys::{self, KeyGen};
use crate::protocol::{encode_array_header, encode_bulk, encode_bulk_header};
use rand::rngs::SmallRng;
use rand::RngExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Set,
    Get,
    Custom,
}

/// One request, described compactly enough to re-encode it after a redirect.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub kind: Kind,
    pub key: u64,
    pub size: u32,
    /// Seeds the value of a `--data` set other than the pattern.
    pub nonce: u64,
}

#[derive(Debug, Clone)]
pub enum Mix {
    Ratio { sets: u32, gets: u32 },
    Custom(Template),
}

/// A `--command` template: `__key__` and `__data__` are substituted; `;`
/// separates the commands of one request ("MULTI; INCR __key__; EXEC"),
/// which completes with its last reply.
#[derive(Debug, Clone)]
pub struct Template {
    pub name: String,
    commands: Vec<Vec<Arg>>,
}

#[derive(Debug, Clone)]
enum Arg {
    Lit(Vec<u8>),
    Key,
    /// `__key__` inside a word ("b__key__"): (before, after).
    KeyIn(Vec<u8>, Vec<u8>),
    Data,
}

impl Template {
    pub fn parse(cmd: &str) -> Result<Self, String> {
        let mut commands = Vec::new();
        for one in cmd.split(';') {
            let args: Vec<Arg> = one
                .split_ascii_whitespace()
                .map(|t| match t {
                    "__key__" => Arg::Key,
                    "__data__" => Arg::Data,
                    word => match word.split_once("__key__") {
                        Some((a, b)) => Arg::KeyIn(a.as_bytes().to_vec(), b.as_bytes().to_vec()),
                        None => Arg::Lit(word.as_bytes().to_vec()),
                    },
                })
                .collect();
            match args.first() {
                Some(Arg::Lit(_)) => commands.push(args),
                _ => return Err(format!("--command must start each command with its name: {cmd:?}")),
            }
        }
        if commands.len() > u8::MAX as usize {
            return Err(format!("--command has more than {} commands", u8::MAX));
        }
        let name = commands
            .iter()
            .map(|c| match &c[0] {
                Arg::Lit(name) => String::from_utf8_lossy(name).to_uppercase(),
                _ => unreachable!("checked above"),
            })
            .collect::<Vec<_>>()
            .join(";");
        Ok(Template { name, commands })
    }

    pub fn uses_key(&self) -> bool {
        self.commands.iter().flatten().any(|a| matches!(a, Arg::Key | Arg::KeyIn(..)))
    }

    fn uses_data(&self) -> bool {
        self.commands.iter().flatten().any(|a| matches!(a, Arg::Data))
    }

    /// Replies that answer one request.
    pub fn replies(&self) -> u8 {
        self.commands.len() as u8
    }
}

/// Value sizes (weighted) and the shared content pattern.
#[derive(Debug, Clone)]
pub struct Values {
    sizes: Vec<u32>,
    cumulative: Vec<u64>,
    pattern: Vec<u8>,
    data: DataSet,
}

impl Values {
    /// `sizes` are (bytes, weight) pairs with positive weights.
    pub fn new(sizes: &[(u32, u32)]) -> Self {
        let mut total = 0u64;
        let cumulative = sizes
            .iter()
            .map(|&(_, w)| {
                total += u64::from(w);
                total
            })
            .collect();
        let max = sizes.iter().map(|&(s, _)| s).max().unwrap_or(0) as usize;
        // Printable, non-periodic filler so shifted or spliced data can't match.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let pattern = (0..max)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b'!' + (x % 94) as u8
            })
            .collect();
        Values { sizes: sizes.iter().map(|&(s, _)| s).collect(), cumulative, pattern, data: DataSet::Pattern }
    }

    /// Values of `data` instead of the self-verifying pattern.
    pub fn with_data(self, data: DataSet) -> Self {
        Values { data, ..self }
    }

    pub fn data(&self) -> DataSet {
        self.data
    }

    /// Writes the value of `req` as a RESP bulk string; `nth` tells apart
    /// the values of one command (MSET, HSET).
    #[inline]
    pub fn encode_request(&self, out: &mut Vec<u8>, req: &Request, nth: u64) {
        if self.data == DataSet::Pattern {
            return self.encode(out, req.key, req.size);
        }
        encode_bulk_header(out, req.size as usize);
        data::fill(out, self.data, req.nonce ^ nth.wrapping_mul(0x9E37_79B9_7F4A_7C15), req.size as usize);
        out.extend_from_slice(b"\r\n");
    }

    #[inline]
    pub fn pick_size(&self, rng: &mut SmallRng) -> u32 {
        if self.sizes.len() == 1 {
            return self.sizes[0];
        }
        let r = rng.random_range(0..*self.cumulative.last().unwrap());
        self.sizes[self.cumulative.partition_point(|&c| c <= r)]
    }

    /// Writes the value for (key, len) as a RESP bulk string.
    #[inline]
    pub fn encode(&self, out: &mut Vec<u8>, key: u64, len: u32) {
        let len = len as usize;
        encode_bulk_header(out, len);
        let mut hdr = [0u8; 48];
        let h = header(&mut hdr, key, len).min(len);
        out.extend_from_slice(&hdr[..h]);
        out.extend_from_slice(&self.pattern[h..len]);
        out.extend_from_slice(b"\r\n");
    }

    /// True if `v` is exactly what some writer of `key` in this run stored.
    #[inline]
    pub fn check(&self, v: &[u8], key: u64) -> bool {
        if self.data != DataSet::Pattern {
            return true;
        }
        let len = v.len();
        if !self.sizes.iter().any(|&s| s as usize == len) {
            return false;
        }
        let mut hdr = [0u8; 48];
        let h = header(&mut hdr, key, len).min(len);
        v[..h] == hdr[..h] && v[h..] == self.pattern[h..len]
    }

    pub fn describe_mismatch(&self, v: &[u8], key: u64) -> String {
        let shown = String::from_utf8_lossy(&v[..v.len().min(40)]);
        format!("key id {key}: got {} bytes starting {shown:?}, expected one of {:?} bytes", v.len(), self.sizes)
    }
}

fn header(buf: &mut [u8; 48], key: u64, len: usize) -> usize {
    let mut n = 0;
    for part in [itoa::Buffer::new().format(key).as_bytes(), b":", itoa::Buffer::new().format(len).as_bytes(), b"|"] {
        buf[n..n + part.len()].copy_from_slice(part);
        n += part.len();
    }
    n
}

/// Everything about the requests that doesn't change per client.
#[derive(Debug, Clone)]
pub struct Workload {
    pub mix: Mix,
    pub key_prefix: Vec<u8>,
    pub values: Values,
}

/// Per-client generator state.
#[derive(Debug, Clone)]
pub struct ClientGen {
    pub rng: SmallRng,
    pub keys: KeyGen,
    /// Position in the SET/GET cycle.
    pub pos: u64,
}

impl Workload {
    /// Names of the per-command statistics slots, indexed by `stat_index`.
    pub fn command_names(&self) -> Vec<String> {
        match &self.mix {
            Mix::Ratio { .. } => vec!["SET".into(), "GET".into()],
            Mix::Custom(t) => vec![t.name.clone()],
        }
    }

    #[inline]
    pub fn stat_index(kind: Kind) -> usize {
        match kind {
            Kind::Set | Kind::Custom => 0,
            Kind::Get => 1,
        }
    }

    /// True if requests carry a key (and so can be routed in a cluster).
    pub fn keyed(&self) -> bool {
        match &self.mix {
            Mix::Ratio { .. } => true,
            Mix::Custom(t) => t.uses_key(),
        }
    }

    #[inline]
    pub fn next_request(&self, g: &mut ClientGen) -> Request {
        let kind = match &self.mix {
            Mix::Ratio { sets, gets } => {
                let cycle = u64::from(sets + gets);
                let k = if g.pos % cycle < u64::from(*sets) { Kind::Set } else { Kind::Get };
                g.pos += 1;
                k
            }
            Mix::Custom(_) => Kind::Custom,
        };
        let key = if self.keyed() { g.keys.next_key(&mut g.rng) } else { 0 };
        let size = match &self.mix {
            Mix::Ratio { .. } if kind == Kind::Set => self.values.pick_size(&mut g.rng),
            Mix::Custom(t) if t.uses_data() => self.values.pick_size(&mut g.rng),
            _ => 0,
        };
        let nonce = if self.values.data == DataSet::Pattern { 0 } else { g.rng.random() };
        Request { kind, key, size, nonce }
    }

    /// Replies that answer one custom request (1 for SET/GET).
    pub fn replies_per_custom_request(&self) -> u8 {
        match &self.mix {
            Mix::Custom(t) => t.replies(),
            Mix::Ratio { .. } => 1,
        }
    }

    /// Appends the formatted key of `req` to `out` (empty for unkeyed ones).
    #[inline]
    pub fn write_key(&self, out: &mut Vec<u8>, req: &Request) {
        if self.keyed() {
            keys::write_key(out, &self.key_prefix, req.key);
        }
    }

    /// Encodes `req` (whose formatted key is `key`) onto `out`.
    #[inline]
    pub fn encode(&self, out: &mut Vec<u8>, req: &Request, key: &[u8]) {
        match (&self.mix, req.kind) {
            (_, Kind::Set) => {
                out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                encode_bulk(out, key);
                self.values.encode_request(out, req, 0);
            }
            (_, Kind::Get) => {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                encode_bulk(out, key);
            }
            (Mix::Custom(t), Kind::Custom) => {
                let mut nth = 0;
                for args in &t.commands {
                    encode_array_header(out, args.len());
                    for a in args {
                        match a {
                            Arg::Lit(l) => encode_bulk(out, l),
                            Arg::Key => encode_bulk(out, key),
                            Arg::KeyIn(a, b) => encode_bulk(out, &[&a[..], key, &b[..]].concat()),
                            Arg::Data => {
                                self.values.encode_request(out, req, nth);
                                nth += 1;
                            }
                        }
                    }
                }
            }
            (Mix::Ratio { .. }, Kind::Custom) => unreachable!("custom request without a template"),
        }
    }
}
