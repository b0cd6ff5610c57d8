//! Bindings to `numbers.c`: the number formats whose digits must match
//! Redis's C long double and strtod exactly.

use std::os::raw::{c_char, c_int};

extern "C" {
    fn corekv_timeout_ms(s: *const c_char, len: usize, ms: *mut i64) -> c_int;
    fn corekv_parse_double(s: *const c_char, len: usize, out: *mut f64) -> c_int;
    fn corekv_incrbyfloat(
        current: *const c_char,
        current_len: usize,
        incr: *const c_char,
        incr_len: usize,
        out: *mut c_char,
        out_cap: usize,
    ) -> c_int;
    fn corekv_format_double(value: f64, out: *mut c_char, out_cap: usize) -> c_int;
    fn corekv_sort_strtod(s: *const c_char, len: usize, out: *mut f64) -> c_int;
    fn corekv_format_human(value: f64, out: *mut c_char, out_cap: usize) -> c_int;
    fn corekv_parse_range_double(s: *const c_char, len: usize, out: *mut f64) -> c_int;
}

/// Redis's `string2d`: strtod over the whole argument, no leading space, no
/// NaN, no overflow.
pub fn parse_double(s: &[u8]) -> Option<f64> {
    let mut out = 0f64;
    // SAFETY: the C side reads at most `len` bytes and writes one f64.
    let ok = unsafe { corekv_parse_double(s.as_ptr().cast(), s.len(), &mut out) };
    (ok == 1).then_some(out)
}

/// The `strtod` of Redis's score ranges (`zslParseRange`): stops at a NUL,
/// skips leading spaces, takes overflow as infinity, refuses NaN and
/// trailing characters; an empty string is 0.
pub fn parse_range_double(s: &[u8]) -> Option<f64> {
    let mut out = 0f64;
    // SAFETY: the C side copies at most `len` bytes and writes one f64.
    let ok = unsafe { corekv_parse_range_double(s.as_ptr().cast(), s.len(), &mut out) };
    (ok == 1).then_some(out)
}

/// Room for any `%.17g` rendering ("-2.2250738585072014e-308" is 24).
pub type DoubleBuf = [u8; 32];

/// Redis's `addReplyDouble` digits: `%.17g` ("inf", "-inf", "-0" included).
/// Integral values below 1e17 print as plain integers, without the C call.
pub fn format_double(value: f64, buf: &mut DoubleBuf) -> &[u8] {
    if value.fract() == 0.0 && value.abs() < 1e17 && (value != 0.0 || value.is_sign_positive()) {
        let mut ints = itoa::Buffer::new();
        let text = ints.format(value as i64).as_bytes();
        buf[..text.len()].copy_from_slice(text);
        return &buf[..text.len()];
    }
    // SAFETY: `buf` has `buf.len()` writable bytes; snprintf writes at most
    // that many, NUL included.
    let n = unsafe { corekv_format_double(value, buf.as_mut_ptr().cast(), buf.len()) };
    &buf[..(n.max(0) as usize).min(buf.len() - 1)]
}

/// Redis's `addReplyHumanLongDouble` digits for a finite double: the value
/// as a long double in `%.17Lf`, trailing zeros dropped (GEOPOS, WITHCOORD).
/// Coordinates: 64 bytes hold any value below 1e40; larger ones come out
/// empty.
pub fn format_human(value: f64, buf: &mut [u8; 64]) -> &[u8] {
    // SAFETY: `buf` has `buf.len()` writable bytes; snprintf writes at most
    // that many, NUL included.
    let n = unsafe { corekv_format_human(value, buf.as_mut_ptr().cast(), buf.len()) };
    &buf[..(n.max(0) as usize).min(buf.len() - 1)]
}

/// SORT's strtod of a score: the value (0 when nothing parses) and whether
/// it is valid (nothing after the number, no overflow, not NaN).
pub fn sort_score(s: &[u8]) -> (f64, bool) {
    let mut out = 0f64;
    // SAFETY: the C side copies at most `len` bytes and writes one f64.
    let ok = unsafe { corekv_sort_strtod(s.as_ptr().cast(), s.len(), &mut out) };
    (out, ok == 1)
}

/// A blocking command's timeout in ms, computed as Redis 7.0 does (long
/// double seconds × 1000, truncated; `i64::MIN` past the range).
pub fn timeout_ms(s: &[u8]) -> Option<i64> {
    let mut out = 0i64;
    // SAFETY: the C side reads at most `len` bytes and writes one i64.
    let ok = unsafe { corekv_timeout_ms(s.as_ptr().cast(), s.len(), &mut out) };
    (ok == 1).then_some(out)
}

pub enum IncrFloatError {
    NotFloat,
    NanOrInfinity,
}

/// INCRBYFLOAT's arithmetic and formatting, in long double as Redis does.
pub fn incr_by_float(current: Option<&[u8]>, incr: &[u8]) -> Result<Vec<u8>, IncrFloatError> {
    let mut out = vec![0u8; 5 * 1024 + 64];
    let (cur_ptr, cur_len) = match current {
        Some(c) => (c.as_ptr(), c.len()),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: pointers and lengths describe live slices; `out` has `out.len()`
    // writable bytes and the C side never writes past `out_cap`.
    let n = unsafe {
        corekv_incrbyfloat(
            cur_ptr.cast(),
            cur_len,
            incr.as_ptr().cast(),
            incr.len(),
            out.as_mut_ptr().cast(),
            out.len(),
        )
    };
    match n {
        -2 => Err(IncrFloatError::NanOrInfinity),
        n if n < 0 => Err(IncrFloatError::NotFloat),
        n => {
            out.truncate(n as usize);
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_digits() {
        let r = |c: Option<&str>, i: &str| match incr_by_float(c.map(str::as_bytes), i.as_bytes()) {
            Ok(v) => String::from_utf8(v).unwrap(),
            Err(IncrFloatError::NotFloat) => "notfloat".into(),
            Err(IncrFloatError::NanOrInfinity) => "naninf".into(),
        };
        assert_eq!(r(None, "0.1"), "0.1");
        assert_eq!(r(Some("10.50"), "0.1"), "10.6");
        assert_eq!(r(Some("5.0e3"), "2.0e2"), "5200");
        assert_eq!(r(Some("3"), "-3"), "0");
        assert_eq!(r(Some("abc"), "1"), "notfloat");
        assert_eq!(r(Some("1"), " 1"), "notfloat");
        assert_eq!(r(Some("1"), "inf"), "naninf");
        assert_eq!(parse_double(b"1.5"), Some(1.5));
        assert_eq!(parse_double(b"0x10"), Some(16.0));
        assert_eq!(parse_double(b"nan"), None);
        assert_eq!(parse_double(b"1e999"), None);
    }

    #[test]
    fn doubles_as_redis_prints_them() {
        let f = |v: f64| String::from_utf8(format_double(v, &mut [0; 32]).to_vec()).unwrap();
        assert_eq!(f(0.1), "0.10000000000000001");
        assert_eq!(f(1.0), "1");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(f(1e17), "1e+17");
        assert_eq!(f(123456789012345.0), "123456789012345");
        assert_eq!(f(f64::INFINITY), "inf");
        assert_eq!(f(f64::NEG_INFINITY), "-inf");
        assert_eq!(f(-2.2250738585072014e-308), "-2.2250738585072014e-308");
        assert_eq!(f(1.5e-7), "1.4999999999999999e-07");
    }

    #[test]
    fn range_doubles_use_plain_strtod() {
        assert_eq!(parse_range_double(b""), Some(0.0));
        assert_eq!(parse_range_double(b" 1"), Some(1.0));
        assert_eq!(parse_range_double(b"1e999"), Some(f64::INFINITY));
        assert_eq!(parse_range_double(b"2\0x"), Some(2.0));
        assert_eq!(parse_range_double(b"1 "), None);
        assert_eq!(parse_range_double(b"nan"), None);
        assert_eq!(parse_range_double(b"-inf"), Some(f64::NEG_INFINITY));
    }
}
