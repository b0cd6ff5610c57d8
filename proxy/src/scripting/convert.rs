//! Conversions between Redis replies and Lua values, as script_lua.c does
//! them: a command's reply (RESP2 or RESP3, as the script chose with
//! `redis.setresp`) becomes a Lua value for `redis.call`, and the script's
//! return value becomes the client's reply in the client's protocol.

use super::lua::*;
use std::ffi::{c_int, CString};

/// Pushes `{err = "..."}` built from an error text the way Redis's
/// `luaPushErrorBuff` does: "-CODE message" keeps its code, anything else
/// gets "ERR"; CR and LF at both ends are trimmed.
pub unsafe fn push_error(l: *mut lua_State, text: &[u8]) {
    let (code, msg): (&[u8], &[u8]) = match text.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(sp) => (&rest[..sp], &rest[sp + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", text),
    };
    let trim = |b: &u8| *b != b'\r' && *b != b'\n';
    let start = msg.iter().position(trim).unwrap_or(msg.len());
    let end = msg.iter().rposition(trim).map_or(start, |e| e + 1);
    let mut full = Vec::with_capacity(code.len() + 1 + end - start);
    full.extend_from_slice(code);
    full.push(b' ');
    full.extend_from_slice(&msg[start..end]);
    // lua_pushstring stops at a NUL, as Redis's does.
    if let Some(nul) = full.iter().position(|&b| b == 0) {
        full.truncate(nul);
    }
    new_table(l);
    push_bytes(l, &full);
    lua_setfield(l, -2, c"err".as_ptr());
}

/// Marks the error table on top of the stack as already counted.
pub unsafe fn mark_error_counted(l: *mut lua_State) {
    lua_pushboolean(l, 1);
    lua_setfield(l, -2, c"ignore_error_stats_update".as_ptr());
}

/// A reply parser over one complete encoded reply.
struct Parser<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn line(&mut self) -> &'a [u8] {
        let rest = &self.data[self.at..];
        let end = rest.windows(2).position(|w| w == b"\r\n").unwrap_or(rest.len());
        self.at += (end + 2).min(rest.len());
        &rest[..end]
    }

    fn number(&mut self) -> i64 {
        std::str::from_utf8(self.line()).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    fn bulk(&mut self, len: usize) -> &'a [u8] {
        let start = self.at.min(self.data.len());
        let end = (start + len).min(self.data.len());
        self.at = end + 2;
        &self.data[start..end]
    }

    /// Pushes the next value (or skips it when `push` is false).
    unsafe fn value(&mut self, l: *mut lua_State, push: bool) {
        if self.at >= self.data.len() {
            if push {
                lua_pushnil(l);
            }
            return;
        }
        let kind = self.data[self.at];
        self.at += 1;
        if push && lua_checkstack(l, 4) == 0 {
            panic!("lua stack limit reach when parsing redis.call reply");
        }
        match kind {
            b'+' => {
                let s = self.line();
                if push {
                    new_table(l);
                    push_bytes(l, s);
                    lua_setfield(l, -2, c"ok".as_ptr());
                }
            }
            b'-' => {
                let s = self.line();
                if push {
                    let mut text = Vec::with_capacity(s.len() + 1);
                    text.push(b'-');
                    text.extend_from_slice(s);
                    push_error(l, &text);
                    mark_error_counted(l);
                }
            }
            b':' => {
                let n = self.number();
                if push {
                    lua_pushnumber(l, n as f64);
                }
            }
            b'$' | b'=' | b'!' => {
                let n = self.number();
                if n < 0 {
                    if push {
                        lua_pushboolean(l, 0);
                    }
                    return;
                }
                let s = self.bulk(n as usize);
                if !push {
                    return;
                }
                if kind == b'=' {
                    let (format, text) = if s.len() >= 4 { (&s[..3], &s[4..]) } else { (&b""[..], s) };
                    new_table(l);
                    new_table(l);
                    push_bytes(l, text);
                    lua_setfield(l, -2, c"string".as_ptr());
                    push_bytes(l, format);
                    lua_setfield(l, -2, c"format".as_ptr());
                    lua_setfield(l, -2, c"verbatim_string".as_ptr());
                } else if kind == b'!' {
                    let mut text = Vec::with_capacity(s.len() + 1);
                    text.push(b'-');
                    text.extend_from_slice(s);
                    push_error(l, &text);
                    mark_error_counted(l);
                } else {
                    push_bytes(l, s);
                }
            }
            b'(' => {
                let s = self.line();
                if push {
                    new_table(l);
                    push_bytes(l, s);
                    lua_setfield(l, -2, c"big_number".as_ptr());
                }
            }
            b'*' | b'~' | b'%' | b'>' => {
                let n = self.number();
                if n < 0 {
                    if push {
                        lua_pushboolean(l, 0);
                    }
                    return;
                }
                match kind {
                    b'%' => {
                        if push {
                            new_table(l);
                            new_table(l);
                        }
                        for _ in 0..n {
                            self.value(l, push);
                            self.value(l, push);
                            if push {
                                lua_settable(l, -3);
                            }
                        }
                        if push {
                            lua_setfield(l, -2, c"map".as_ptr());
                        }
                    }
                    b'~' => {
                        if push {
                            new_table(l);
                            new_table(l);
                        }
                        for _ in 0..n {
                            self.value(l, push);
                            if push {
                                lua_pushboolean(l, 1);
                                lua_settable(l, -3);
                            }
                        }
                        if push {
                            lua_setfield(l, -2, c"set".as_ptr());
                        }
                    }
                    _ => {
                        if push {
                            new_table(l);
                        }
                        for j in 0..n {
                            if push {
                                lua_pushnumber(l, (j + 1) as f64);
                            }
                            self.value(l, push);
                            if push {
                                lua_settable(l, -3);
                            }
                        }
                    }
                }
            }
            b'_' => {
                self.line();
                if push {
                    lua_pushnil(l);
                }
            }
            b'#' => {
                let s = self.line();
                if push {
                    lua_pushboolean(l, (s == b"t") as c_int);
                }
            }
            b',' => {
                let s = self.line();
                if push {
                    new_table(l);
                    lua_pushnumber(l, parse_double(s));
                    lua_setfield(l, -2, c"double".as_ptr());
                }
            }
            b'|' => {
                let n = self.number();
                for _ in 0..n {
                    self.value(l, false);
                    self.value(l, false);
                }
                self.value(l, push);
            }
            _ => {
                self.line();
                if push {
                    lua_pushnil(l);
                }
            }
        }
    }
}

/// `strtod` as Redis's reply parser uses it ("inf", "-inf", "nan" included).
fn parse_double(s: &[u8]) -> f64 {
    let text = CString::new(s).unwrap_or_default();
    unsafe { libc::strtod(text.as_ptr(), std::ptr::null_mut()) }
}

/// Pushes the Lua value of one encoded reply (`redisProtocolToLuaType`).
pub unsafe fn push_reply(l: *mut lua_State, reply: &[u8]) {
    Parser { data: reply, at: 0 }.value(l, true)
}

/// `%.17g`, the format Redis gives Lua numbers (arguments, doubles).
pub fn format_g17(n: f64) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let len = unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), c"%.17g".as_ptr(), n) };
    buf[..len.clamp(0, 63) as usize].to_vec()
}

/// C's `(long long)` of a double as x86-64 computes it (out of range: the
/// minimum).
pub fn double_to_i64(n: f64) -> i64 {
    // 2^63 exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if (-LIMIT..LIMIT).contains(&n) {
        n as i64
    } else {
        i64::MIN
    }
}

/// What the client sees: its protocol, and the one the script selected
/// with `redis.setresp` (it decides how booleans go out in RESP2).
pub struct ReplyProtocols {
    pub client_resp3: bool,
    pub script_resp3: bool,
}

fn header(out: &mut Vec<u8>, prefix: u8, n: usize) {
    out.push(prefix);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, s: &[u8]) {
    header(out, b'$', s.len());
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

fn map_crlf(s: &[u8]) -> Vec<u8> {
    s.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect()
}

/// Gets `t[field]` of the table on top of the stack (raw), pushed.
unsafe fn raw_field(l: *mut lua_State, field: &std::ffi::CStr) -> c_int {
    lua_pushstring(l, field.as_ptr());
    lua_rawget(l, -2);
    lua_type(l, -1)
}

/// Writes the value on top of the stack as the client's reply and pops it
/// (`luaReplyToRedisReply`).
pub unsafe fn write_reply(l: *mut lua_State, p: &ReplyProtocols, out: &mut Vec<u8>) {
    let t = lua_type(l, -1);
    if lua_checkstack(l, 4) == 0 {
        out.extend_from_slice(b"-ERR reached lua stack limit\r\n");
        pop(l, 1);
        return;
    }
    match t {
        TSTRING => bulk(out, to_bytes(l, -1).unwrap_or_default()),
        TBOOLEAN => {
            let b = lua_toboolean(l, -1) != 0;
            if !p.script_resp3 {
                out.extend_from_slice(match (b, p.client_resp3) {
                    (true, _) => b":1\r\n",
                    (false, true) => b"_\r\n",
                    (false, false) => b"$-1\r\n",
                });
            } else if p.client_resp3 {
                out.extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
            } else {
                out.extend_from_slice(if b { b":1\r\n" } else { b":0\r\n" });
            }
        }
        TNUMBER => {
            out.push(b':');
            out.extend_from_slice(itoa::Buffer::new().format(double_to_i64(lua_tonumber(l, -1))).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        TTABLE => {
            write_table(l, p, out);
            return;
        }
        _ => out.extend_from_slice(if p.client_resp3 { b"_\r\n" } else { b"$-1\r\n" }),
    }
    pop(l, 1);
}

unsafe fn write_table(l: *mut lua_State, p: &ReplyProtocols, out: &mut Vec<u8>) {
    if raw_field(l, c"err") == TSTRING {
        pop(l, 1);
        let info = error_info(l);
        if info.counted {
            super::context::note_error_counted();
        }
        out.push(b'-');
        out.extend_from_slice(&map_crlf(&info.msg));
        out.extend_from_slice(b"\r\n");
        pop(l, 1);
        return;
    }
    pop(l, 1);
    if raw_field(l, c"ok") == TSTRING {
        out.push(b'+');
        out.extend_from_slice(&map_crlf(to_bytes(l, -1).unwrap_or_default()));
        out.extend_from_slice(b"\r\n");
        pop(l, 2);
        return;
    }
    pop(l, 1);
    if raw_field(l, c"double") == TNUMBER {
        write_double(out, lua_tonumber(l, -1), p.client_resp3);
        pop(l, 2);
        return;
    }
    pop(l, 1);
    if raw_field(l, c"big_number") == TSTRING {
        let num = map_crlf(to_bytes(l, -1).unwrap_or_default());
        if p.client_resp3 {
            out.push(b'(');
            out.extend_from_slice(&num);
            out.extend_from_slice(b"\r\n");
        } else {
            bulk(out, &num);
        }
        pop(l, 2);
        return;
    }
    pop(l, 1);
    if raw_field(l, c"verbatim_string") == TTABLE {
        if raw_field(l, c"format") == TSTRING {
            let format = to_bytes(l, -1).unwrap_or_default().to_vec();
            lua_pushstring(l, c"string".as_ptr());
            lua_rawget(l, -3);
            if lua_type(l, -1) == TSTRING {
                let text = to_bytes(l, -1).unwrap_or_default();
                if p.client_resp3 {
                    header(out, b'=', text.len() + 4);
                    // The format is a C string: it ends at a NUL.
                    let format = format.split(|&b| b == 0).next().unwrap_or_default();
                    for i in 0..3 {
                        out.push(*format.get(i).unwrap_or(&b' '));
                    }
                    out.push(b':');
                    out.extend_from_slice(text);
                    out.extend_from_slice(b"\r\n");
                } else {
                    bulk(out, text);
                }
                pop(l, 4);
                return;
            }
            pop(l, 1);
        }
        pop(l, 1);
    }
    pop(l, 1);
    if raw_field(l, c"map") == TTABLE {
        let mut body = Vec::new();
        let mut len = 0;
        lua_pushnil(l);
        while lua_next(l, -2) != 0 {
            lua_pushvalue(l, -2);
            write_reply(l, p, &mut body);
            write_reply(l, p, &mut body);
            len += 1;
        }
        if p.client_resp3 {
            header(out, b'%', len);
        } else {
            header(out, b'*', len * 2);
        }
        out.extend_from_slice(&body);
        pop(l, 2);
        return;
    }
    pop(l, 1);
    if raw_field(l, c"set") == TTABLE {
        let mut body = Vec::new();
        let mut len = 0;
        lua_pushnil(l);
        while lua_next(l, -2) != 0 {
            pop(l, 1);
            lua_pushvalue(l, -1);
            write_reply(l, p, &mut body);
            len += 1;
        }
        header(out, if p.client_resp3 { b'~' } else { b'*' }, len);
        out.extend_from_slice(&body);
        pop(l, 2);
        return;
    }
    pop(l, 1);
    let mut body = Vec::new();
    let mut len = 0;
    let mut j = 1;
    loop {
        lua_pushnumber(l, j as f64);
        j += 1;
        lua_rawget(l, -2);
        if lua_type(l, -1) == TNIL {
            pop(l, 1);
            break;
        }
        write_reply(l, p, &mut body);
        len += 1;
    }
    header(out, b'*', len);
    out.extend_from_slice(&body);
    pop(l, 1);
}

/// `addReplyDouble`.
pub fn write_double(out: &mut Vec<u8>, d: f64, resp3: bool) {
    if d.is_infinite() {
        let text: &[u8] = if d > 0.0 { b"inf" } else { b"-inf" };
        if resp3 {
            out.push(b',');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        } else {
            bulk(out, text);
        }
        return;
    }
    let text = format_g17(d);
    if resp3 {
        out.push(b',');
        out.extend_from_slice(&text);
        out.extend_from_slice(b"\r\n");
    } else {
        bulk(out, &text);
    }
}

/// The parts of a script error (`luaExtractErrorInformation`).
pub struct ErrorInfo {
    pub msg: Vec<u8>,
    pub source: Option<Vec<u8>>,
    pub line: Option<Vec<u8>>,
    /// Raised by a command the script called: already in the error stats.
    pub counted: bool,
}

/// Reads the error value on top of the stack (left there).
pub unsafe fn error_info(l: *mut lua_State) -> ErrorInfo {
    if lua_type(l, -1) == TSTRING || lua_type(l, -1) == TNUMBER {
        let mut msg = b"ERR ".to_vec();
        msg.extend_from_slice(to_bytes(l, -1).unwrap_or_default());
        return ErrorInfo { msg, source: None, line: None, counted: false };
    }
    let field = |name: &std::ffi::CStr| {
        lua_getfield(l, -1, name.as_ptr());
        let v = if lua_isstring(l, -1) != 0 { to_bytes(l, -1).map(<[u8]>::to_vec) } else { None };
        pop(l, 1);
        v
    };
    lua_getfield(l, -1, c"ignore_error_stats_update".as_ptr());
    let counted = lua_type(l, -1) == TBOOLEAN && lua_toboolean(l, -1) != 0;
    pop(l, 1);
    ErrorInfo { msg: field(c"err").unwrap_or_default(), source: field(c"source"), line: field(c"line"), counted }
}
