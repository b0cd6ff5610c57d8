//! The Lua 5.1 C API of the interpreter in third_party/lua (Redis's copy),
//! declared by hand: only what the engine uses, and the C macros as
//! functions.
//!
//! Lua reports errors with `longjmp`: a function that can raise one
//! (`lua_error`, `luaL_error`, the argument checks) is called only where no
//! Rust value with a destructor is alive on the frames it jumps over.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_void, CStr};

pub enum lua_State {}
pub enum lua_Debug {}

pub type CFunction = unsafe extern "C" fn(*mut lua_State) -> c_int;
pub type Hook = unsafe extern "C" fn(*mut lua_State, *mut lua_Debug);

pub const REGISTRYINDEX: c_int = -10000;
pub const GLOBALSINDEX: c_int = -10002;
pub const MULTRET: c_int = -1;

pub const TNIL: c_int = 0;
pub const TBOOLEAN: c_int = 1;
pub const TNUMBER: c_int = 3;
pub const TSTRING: c_int = 4;
pub const TTABLE: c_int = 5;
pub const TFUNCTION: c_int = 6;

pub const MASKLINE: c_int = 1 << 2;
pub const MASKCOUNT: c_int = 1 << 3;

pub const GCCOLLECT: c_int = 2;
pub const GCCOUNT: c_int = 3;
pub const GCSTEP: c_int = 5;

extern "C" {
    pub fn luaL_newstate() -> *mut lua_State;
    pub fn lua_close(l: *mut lua_State);
    pub fn lua_gettop(l: *mut lua_State) -> c_int;
    pub fn lua_settop(l: *mut lua_State, idx: c_int);
    pub fn lua_pushvalue(l: *mut lua_State, idx: c_int);
    pub fn lua_remove(l: *mut lua_State, idx: c_int);
    pub fn lua_insert(l: *mut lua_State, idx: c_int);
    pub fn lua_replace(l: *mut lua_State, idx: c_int);
    pub fn lua_checkstack(l: *mut lua_State, n: c_int) -> c_int;
    pub fn lua_type(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn lua_isnumber(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn lua_isstring(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn lua_toboolean(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn lua_tonumber(l: *mut lua_State, idx: c_int) -> f64;
    pub fn lua_tolstring(l: *mut lua_State, idx: c_int, len: *mut usize) -> *const c_char;
    pub fn lua_topointer(l: *mut lua_State, idx: c_int) -> *const c_void;
    pub fn lua_pushnil(l: *mut lua_State);
    pub fn lua_pushnumber(l: *mut lua_State, n: f64);
    pub fn lua_pushlstring(l: *mut lua_State, s: *const c_char, len: usize);
    pub fn lua_pushstring(l: *mut lua_State, s: *const c_char);
    pub fn lua_pushcclosure(l: *mut lua_State, f: CFunction, n: c_int);
    pub fn lua_pushboolean(l: *mut lua_State, b: c_int);
    pub fn lua_pushlightuserdata(l: *mut lua_State, p: *mut c_void);
    pub fn lua_gettable(l: *mut lua_State, idx: c_int);
    pub fn lua_getfield(l: *mut lua_State, idx: c_int, k: *const c_char);
    pub fn lua_rawget(l: *mut lua_State, idx: c_int);
    pub fn lua_rawgeti(l: *mut lua_State, idx: c_int, n: c_int);
    pub fn lua_createtable(l: *mut lua_State, narr: c_int, nrec: c_int);
    pub fn lua_getmetatable(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn lua_settable(l: *mut lua_State, idx: c_int);
    pub fn lua_setfield(l: *mut lua_State, idx: c_int, k: *const c_char);
    pub fn lua_rawset(l: *mut lua_State, idx: c_int);
    pub fn lua_rawseti(l: *mut lua_State, idx: c_int, n: c_int);
    pub fn lua_setmetatable(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn lua_call(l: *mut lua_State, nargs: c_int, nresults: c_int);
    pub fn lua_pcall(l: *mut lua_State, nargs: c_int, nresults: c_int, errfunc: c_int) -> c_int;
    pub fn lua_error(l: *mut lua_State) -> c_int;
    pub fn lua_next(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn lua_gc(l: *mut lua_State, what: c_int, data: c_int) -> c_int;
    pub fn lua_sethook(l: *mut lua_State, f: Option<Hook>, mask: c_int, count: c_int) -> c_int;
    pub fn lua_enablereadonlytable(l: *mut lua_State, idx: c_int, enabled: c_int);
    pub fn lua_isreadonlytable(l: *mut lua_State, idx: c_int) -> c_int;
    pub fn luaL_loadbuffer(l: *mut lua_State, buf: *const c_char, len: usize, name: *const c_char) -> c_int;
    pub fn luaL_error(l: *mut lua_State, fmt: *const c_char, ...) -> c_int;
    pub fn luaL_checkinteger(l: *mut lua_State, idx: c_int) -> isize;
    pub fn luaL_ref(l: *mut lua_State, t: c_int) -> c_int;
    pub fn luaL_unref(l: *mut lua_State, t: c_int, r: c_int);
    pub fn luaL_argerror(l: *mut lua_State, idx: c_int, msg: *const c_char) -> c_int;

    pub fn luaopen_base(l: *mut lua_State) -> c_int;
    pub fn luaopen_table(l: *mut lua_State) -> c_int;
    pub fn luaopen_string(l: *mut lua_State) -> c_int;
    pub fn luaopen_math(l: *mut lua_State) -> c_int;
    pub fn luaopen_debug(l: *mut lua_State) -> c_int;
    pub fn luaopen_cjson(l: *mut lua_State) -> c_int;
    pub fn luaopen_struct(l: *mut lua_State) -> c_int;
    pub fn luaopen_cmsgpack(l: *mut lua_State) -> c_int;
    pub fn luaopen_bit(l: *mut lua_State) -> c_int;
}

pub unsafe fn pop(l: *mut lua_State, n: c_int) {
    lua_settop(l, -n - 1)
}

pub unsafe fn new_table(l: *mut lua_State) {
    lua_createtable(l, 0, 0)
}

pub unsafe fn push_bytes(l: *mut lua_State, s: &[u8]) {
    lua_pushlstring(l, s.as_ptr().cast(), s.len())
}

pub unsafe fn push_fn(l: *mut lua_State, f: CFunction) {
    lua_pushcclosure(l, f, 0)
}

pub unsafe fn get_global(l: *mut lua_State, name: &CStr) {
    lua_getfield(l, GLOBALSINDEX, name.as_ptr())
}

pub unsafe fn set_global(l: *mut lua_State, name: &CStr) {
    lua_setfield(l, GLOBALSINDEX, name.as_ptr())
}

/// Sets `t[name] = f` for the table on top of the stack.
pub unsafe fn set_fn(l: *mut lua_State, name: &CStr, f: CFunction) {
    push_fn(l, f);
    lua_setfield(l, -2, name.as_ptr())
}

/// Sets `t[name] = n` for the table on top of the stack.
pub unsafe fn set_number(l: *mut lua_State, name: &CStr, n: f64) {
    lua_pushnumber(l, n);
    lua_setfield(l, -2, name.as_ptr())
}

/// The bytes of a string (or number, converted in place as Lua does).
/// Valid while the value stays on the stack.
pub unsafe fn to_bytes<'a>(l: *mut lua_State, idx: c_int) -> Option<&'a [u8]> {
    let mut len = 0usize;
    let p = lua_tolstring(l, idx, &mut len);
    if p.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(p.cast(), len))
    }
}

/// Loads a chunk; on failure the error message is on the stack.
pub unsafe fn load(l: *mut lua_State, code: &[u8], name: &CStr) -> bool {
    luaL_loadbuffer(l, code.as_ptr().cast(), code.len(), name.as_ptr()) == 0
}
