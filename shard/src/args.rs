//! Command arguments as borrowed byte slices, and Redis's rules for reading
//! numbers out of them.

/// Argument `i` is `buf[ranges[i].0 .. ranges[i].1]`. The buffer is either the
/// connection's read buffer (local execution) or a cross-core message's.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    buf: &'a [u8],
    ranges: &'a [(u32, u32)],
}

impl<'a> Args<'a> {
    pub fn new(buf: &'a [u8], ranges: &'a [(u32, u32)]) -> Self {
        Args { buf, ranges }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        let (s, e) = self.ranges[i];
        &self.buf[s as usize..e as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let buf = self.buf;
        self.ranges.iter().map(move |&(s, e)| &buf[s as usize..e as usize])
    }

    /// Argument `i` compared case-insensitively to an ASCII keyword.
    #[inline]
    pub fn is(&self, i: usize, keyword: &str) -> bool {
        self.get(i).eq_ignore_ascii_case(keyword.as_bytes())
    }

    pub fn ranges(&self) -> &'a [(u32, u32)] {
        self.ranges
    }

    pub fn buf(&self) -> &'a [u8] {
        self.buf
    }
}

/// Redis's `string2ll`: an optional '-', no '+', no leading zeros, no spaces,
/// within i64.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i128).wrapping_neg() as i64)
        }
    } else if v > i64::MAX as u64 {
        None
    } else {
        Some(v as i64)
    }
}

/// C's atoi, where Redis reads a number with it (MIGRATE's port, DEBUG's
/// flags, genericGetKeys' key count): leading spaces and a sign, then
/// digits, whatever follows ignored; 0 for none; out-of-range saturates.
pub fn atoi(s: &[u8]) -> i64 {
    let s = s.trim_ascii_start();
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0i64, |n, d| n.saturating_mul(10).saturating_add((d - b'0') as i64));
    if neg {
        -n
    } else {
        n
    }
}

/// Redis's `string2ull` as used for SCAN cursors: decimal digits only.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Parses a config-style memory size ("512mb", "1gb", "100", "2k").
pub fn parse_memory(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let split = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mul)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [&b""[..], b"-0", b"01", b"+1", b" 1", b"1 ", b"9223372036854775808", b"-", b"1a"] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("512mb"), Some(512 << 20));
        assert_eq!(parse_memory("1k"), Some(1000));
        assert_eq!(parse_memory("1x"), None);
    }
}
