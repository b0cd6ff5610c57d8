//! Reading the zipmaps of Redis ≤ 2.4 dumps (small hashes), with
//! `zipmapValidateIntegrity`'s deep checks.
//!
//! Layout: a count byte (254 = unknown), then per pair the field length,
//! field, value length, a "free" byte, value and that many free bytes, then
//! 0xFF. Lengths are one byte below 254, else 254 and a u32.

const BIGLEN: u8 = 254;
const END: u8 = 0xff;
const BAD: &str = "Zipmap integrity check failed";

fn length(zm: &[u8], p: usize) -> Option<(usize, usize)> {
    match *zm.get(p)? {
        b if b < BIGLEN => Some((b as usize, 1)),
        BIGLEN => Some((u32::from_le_bytes(zm.get(p + 1..p + 5)?.try_into().ok()?) as usize, 5)),
        _ => None,
    }
}

/// A field and its value.
pub type Pair<'a> = (&'a [u8], &'a [u8]);

/// The (field, value) pairs of a zipmap.
pub fn parse(zm: &[u8]) -> Result<Vec<Pair<'_>>, &'static str> {
    if zm.len() < 2 || zm[zm.len() - 1] != END {
        return Err(BAD);
    }
    let last = zm.len() - 1;
    let body = &zm[..last];
    let mut pairs = Vec::new();
    let mut p = 1;
    while p < last {
        let (flen, s) = length(body, p).ok_or(BAD)?;
        let field = body.get(p + s..(p + s).checked_add(flen).ok_or(BAD)?).ok_or(BAD)?;
        p += s + flen;
        let (vlen, s) = length(body, p).ok_or(BAD)?;
        let free = *body.get(p + s).ok_or(BAD)? as usize;
        let start = p + s + 1;
        let value = body.get(start..start.checked_add(vlen).ok_or(BAD)?).ok_or(BAD)?;
        p = start + vlen + free;
        if p > last {
            return Err(BAD);
        }
        pairs.push((field, value));
    }
    if pairs.is_empty() || (zm[0] != BIGLEN && zm[0] as usize != pairs.len()) {
        return Err(BAD);
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pairs_and_rejects_overruns() {
        // {"foo": "bar", "k": "v"} with one free byte after "bar".
        let zm = b"\x02\x03foo\x03\x01barX\x01k\x01\x00v\xff";
        assert_eq!(parse(zm).unwrap(), vec![(&b"foo"[..], &b"bar"[..]), (&b"k"[..], &b"v"[..])]);
        assert!(parse(b"\x01\x03foo\x03\x01barX\x01k\x01\x00v\xff").is_err());
        assert!(parse(b"\x01\x03foo\x09\x00bar\xff").is_err());
        assert!(parse(b"\x00\xff").is_err());
        for cut in 0..zm.len() {
            let _ = parse(&zm[..cut]);
        }
    }
}
