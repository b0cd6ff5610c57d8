//! A general RESP2/RESP3 value with an encoder and a decoder. The hot path
//! never builds these: shards write reply bytes directly. This serves static
//! metadata (COMMAND INFO/DOCS, stored once as RESP3 and served in either
//! protocol), merging of split replies, and tests.

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Value>),
    NilArray,
    // RESP3 types
    Map(Vec<(Value, Value)>),
    Set(Vec<Value>),
    Double(Vec<u8>),
    Bool(bool),
    Verbatim(Vec<u8>),
    Null,
}

fn line(out: &mut Vec<u8>, prefix: u8, body: &[u8]) {
    out.push(prefix);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, prefix: u8, n: usize) {
    line(out, prefix, n.to_string().as_bytes());
}

impl Value {
    /// Encodes in RESP3 (`resp3`) or in RESP2, where maps become flat arrays,
    /// sets arrays, doubles bulk strings, booleans integers and nulls `$-1`.
    pub fn encode(&self, out: &mut Vec<u8>, resp3: bool) {
        match self {
            Value::Simple(s) => line(out, b'+', s),
            Value::Error(s) => line(out, b'-', s),
            Value::Int(n) => line(out, b':', n.to_string().as_bytes()),
            Value::Bulk(b) => {
                header(out, b'$', b.len());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Nil => out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" }),
            Value::NilArray => out.extend_from_slice(if resp3 { b"_\r\n" } else { b"*-1\r\n" }),
            Value::Null => out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" }),
            Value::Array(items) => {
                header(out, b'*', items.len());
                items.iter().for_each(|v| v.encode(out, resp3));
            }
            Value::Set(items) => {
                header(out, if resp3 { b'~' } else { b'*' }, items.len());
                items.iter().for_each(|v| v.encode(out, resp3));
            }
            Value::Map(pairs) => {
                if resp3 {
                    header(out, b'%', pairs.len());
                } else {
                    header(out, b'*', pairs.len() * 2);
                }
                for (k, v) in pairs {
                    k.encode(out, resp3);
                    v.encode(out, resp3);
                }
            }
            Value::Double(d) => {
                if resp3 {
                    line(out, b',', d)
                } else {
                    Value::Bulk(d.clone()).encode(out, false)
                }
            }
            Value::Bool(b) => {
                if resp3 {
                    out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" })
                } else {
                    Value::Int(*b as i64).encode(out, false)
                }
            }
            Value::Verbatim(text) => {
                if resp3 {
                    header(out, b'=', text.len() + 4);
                    out.extend_from_slice(b"txt:");
                    out.extend_from_slice(text);
                    out.extend_from_slice(b"\r\n");
                } else {
                    Value::Bulk(text.clone()).encode(out, false)
                }
            }
        }
    }

    pub fn to_bytes(&self, resp3: bool) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out, resp3);
        out
    }

    /// Decodes one value from the start of `buf`: `Ok(Some((value, used)))`,
    /// `Ok(None)` when incomplete, `Err` on malformed input. Nesting is
    /// bounded so hostile input cannot exhaust the stack.
    pub fn decode(buf: &[u8]) -> Result<Option<(Value, usize)>, String> {
        decode_at(buf, 0, 0)
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Simple(b) | Value::Bulk(b) | Value::Verbatim(b) => Some(b),
            _ => None,
        }
    }
}

const MAX_DEPTH: usize = 128;

fn read_line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let i = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..i], at + i + 2))
}

fn number(s: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad number {:?}", String::from_utf8_lossy(s)))
}

fn decode_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, String> {
    if depth > MAX_DEPTH {
        return Err("nesting too deep".into());
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((body, next)) = read_line(buf, at + 1) else {
        return Ok(None);
    };
    let blob = |len: i64| -> Result<Option<(Vec<u8>, usize)>, String> {
        if len < 0 {
            return Err("negative length".into());
        }
        let end = next + len as usize;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err("missing CRLF after blob".into());
        }
        Ok(Some((buf[next..end].to_vec(), end + 2)))
    };
    let aggregate = |n: usize, depth: usize| -> Result<Option<(Vec<Value>, usize)>, String> {
        let mut items = Vec::with_capacity(n.min(1024));
        let mut pos = next;
        for _ in 0..n {
            match decode_at(buf, pos, depth + 1)? {
                Some((v, p)) => {
                    items.push(v);
                    pos = p;
                }
                None => return Ok(None),
            }
        }
        Ok(Some((items, pos)))
    };
    let v = match kind {
        b'+' => (Value::Simple(body.to_vec()), next),
        b'-' => (Value::Error(body.to_vec()), next),
        b':' => (Value::Int(number(body)?), next),
        b',' => (Value::Double(body.to_vec()), next),
        b'_' => (Value::Null, next),
        b'#' => match body {
            b"t" => (Value::Bool(true), next),
            b"f" => (Value::Bool(false), next),
            _ => return Err("bad boolean".into()),
        },
        b'$' => match number(body)? {
            -1 => (Value::Nil, next),
            n => match blob(n)? {
                Some((b, p)) => (Value::Bulk(b), p),
                None => return Ok(None),
            },
        },
        b'=' => match blob(number(body)?)? {
            Some((b, p)) if b.len() >= 4 => (Value::Verbatim(b[4..].to_vec()), p),
            Some(_) => return Err("short verbatim string".into()),
            None => return Ok(None),
        },
        b'*' | b'~' | b'%' => {
            let n = number(body)?;
            if n == -1 && kind == b'*' {
                (Value::NilArray, next)
            } else if n < 0 {
                return Err("negative aggregate length".into());
            } else {
                let count = if kind == b'%' { n as usize * 2 } else { n as usize };
                let Some((items, p)) = aggregate(count, depth)? else {
                    return Ok(None);
                };
                let v = match kind {
                    b'*' => Value::Array(items),
                    b'~' => Value::Set(items),
                    _ => {
                        let mut it = items.into_iter();
                        let mut pairs = Vec::with_capacity(n as usize);
                        while let (Some(k), Some(v)) = (it.next(), it.next()) {
                            pairs.push((k, v));
                        }
                        Value::Map(pairs)
                    }
                };
                (v, p)
            }
        }
        other => return Err(format!("unknown type byte {other:#x}")),
    };
    Ok(Some(v))
}

/// Length of the first complete value in `buf` (a well-formed reply written
/// by a shard), without building it.
pub fn skip_value(buf: &[u8]) -> Option<usize> {
    let mut pending = 1usize;
    let mut pos = 0;
    while pending > 0 {
        let kind = *buf.get(pos)?;
        let (body, next) = read_line(buf, pos + 1)?;
        pending -= 1;
        pos = next;
        let n = || std::str::from_utf8(body).ok()?.parse::<i64>().ok();
        match kind {
            b'$' | b'=' | b'!' => {
                let len = n()?;
                if len >= 0 {
                    pos += len as usize + 2;
                }
            }
            b'*' | b'~' | b'>' => pending += n()?.max(0) as usize,
            b'%' | b'|' => pending += 2 * n()?.max(0) as usize,
            _ => {}
        }
    }
    (pos <= buf.len()).then_some(pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_value() -> impl Strategy<Value = Value> {
        let bytes = proptest::collection::vec(any::<u8>(), 0..16);
        let line = "[a-zA-Z0-9 ]{0,12}".prop_map(|s| s.into_bytes());
        let leaf = prop_oneof![
            line.clone().prop_map(Value::Simple),
            line.clone().prop_map(Value::Error),
            any::<i64>().prop_map(Value::Int),
            bytes.clone().prop_map(Value::Bulk),
            // Nil/NilArray are RESP2's spellings of RESP3's Null.
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<f64>().prop_map(|d| Value::Double(format!("{d}").into_bytes())),
            bytes.prop_map(Value::Verbatim),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Set),
                proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Value::Map),
            ]
        })
    }

    proptest! {
        #[test]
        fn resp3_round_trip(v in arb_value()) {
            let bytes = v.to_bytes(true);
            let (back, used) = Value::decode(&bytes).unwrap().unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(back, v);
            prop_assert_eq!(skip_value(&bytes), Some(bytes.len()));
        }

        #[test]
        fn every_prefix_is_incomplete(v in arb_value()) {
            let bytes = v.to_bytes(true);
            for cut in 0..bytes.len() {
                prop_assert!(matches!(Value::decode(&bytes[..cut]), Ok(None)));
            }
        }

        #[test]
        fn resp2_is_decodable(v in arb_value()) {
            let bytes = v.to_bytes(false);
            let (_, used) = Value::decode(&bytes).unwrap().unwrap();
            prop_assert_eq!(used, bytes.len());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Value::decode(&bytes);
            let _ = skip_value(&bytes);
        }
    }
}
