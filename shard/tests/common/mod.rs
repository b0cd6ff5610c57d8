//! Shared by the model tests: run a command on a shard through the command
//! table and read its RESP2 reply back.

#![allow(dead_code)]

use shard::commands::{all, execute, resolve, Ctx};
use shard::{Args, Shard};

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Resp>),
}

impl Resp {
    pub fn int(&self) -> i64 {
        match self {
            Resp::Int(n) => *n,
            other => panic!("not an integer: {other:?}"),
        }
    }

    pub fn bulk(&self) -> Option<Vec<u8>> {
        match self {
            Resp::Bulk(b) => b.clone(),
            other => panic!("not a bulk string: {other:?}"),
        }
    }

    pub fn array(&self) -> &[Resp] {
        match self {
            Resp::Array(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }

    /// The bulk strings of an array reply.
    pub fn strings(&self) -> Vec<Vec<u8>> {
        self.array().iter().map(|i| i.bulk().expect("no nil")).collect()
    }
}

fn line(buf: &[u8], at: &mut usize) -> String {
    let end = buf[*at..].windows(2).position(|w| w == b"\r\n").expect("CRLF") + *at;
    let s = String::from_utf8_lossy(&buf[*at..end]).into_owned();
    *at = end + 2;
    s
}

fn parse_at(buf: &[u8], at: &mut usize) -> Resp {
    let kind = buf[*at];
    *at += 1;
    let text = line(buf, at);
    match kind {
        b'+' => Resp::Simple(text),
        b'-' => Resp::Error(text),
        b':' => Resp::Int(text.parse().unwrap()),
        b'$' => {
            let n: i64 = text.parse().unwrap();
            if n < 0 {
                return Resp::Bulk(None);
            }
            let data = buf[*at..*at + n as usize].to_vec();
            *at += n as usize + 2;
            Resp::Bulk(Some(data))
        }
        b'*' => {
            let n: i64 = text.parse().unwrap();
            Resp::Array((0..n.max(0)).map(|_| parse_at(buf, at)).collect())
        }
        other => panic!("unexpected reply type {:?}", other as char),
    }
}

/// Runs one command on the shard; returns its reply, parsed.
pub fn run(shard: &mut Shard, words: &[Vec<u8>]) -> Resp {
    let out = run_raw(shard, words);
    let mut at = 0;
    let r = parse_at(&out, &mut at);
    assert_eq!(at, out.len(), "one reply, nothing more: {:?}", String::from_utf8_lossy(&out));
    r
}

/// Runs one command on the shard; returns its raw RESP2 reply.
pub fn run_raw(shard: &mut Shard, words: &[Vec<u8>]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut ranges = Vec::new();
    for w in words {
        let s = buf.len() as u32;
        buf.extend_from_slice(w);
        ranges.push((s, buf.len() as u32));
    }
    let args = Args::new(&buf, &ranges);
    let name = String::from_utf8_lossy(&words[0]).to_lowercase();
    let spec = all().find(|c| c.name == name).expect("known command");
    let spec = resolve(spec, &args).expect("known subcommand");
    let mut out = Vec::new();
    let mut ctx = Ctx { db: 0, now: 1_000_000, reply: shard::Reply::new(&mut out, false) };
    if spec.arity_ok(words.len()) {
        execute(spec, shard, &mut ctx, args);
    } else {
        ctx.reply.error(&shard::commands::arity_error(spec.name));
    }
    out
}

/// Builds a command from words.
#[macro_export]
macro_rules! cmd {
    ($($w:expr),* $(,)?) => {{
        let mut v: Vec<Vec<u8>> = Vec::new();
        $( $crate::common::push_word(&mut v, $w); )*
        v
    }};
}

pub trait Word {
    fn word(self) -> Vec<Vec<u8>>;
}
impl Word for &str {
    fn word(self) -> Vec<Vec<u8>> {
        vec![self.as_bytes().to_vec()]
    }
}
impl Word for String {
    fn word(self) -> Vec<Vec<u8>> {
        vec![self.into_bytes()]
    }
}
impl Word for &[u8] {
    fn word(self) -> Vec<Vec<u8>> {
        vec![self.to_vec()]
    }
}
impl Word for &Vec<u8> {
    fn word(self) -> Vec<Vec<u8>> {
        vec![self.clone()]
    }
}
impl Word for Vec<Vec<u8>> {
    fn word(self) -> Vec<Vec<u8>> {
        self
    }
}
impl Word for i64 {
    fn word(self) -> Vec<Vec<u8>> {
        vec![self.to_string().into_bytes()]
    }
}

pub fn push_word(v: &mut Vec<Vec<u8>>, w: impl Word) {
    v.extend(w.word());
}
