//! The `redis` table scripts see (script_lua.c's luaRegisterRedisAPI and
//! eval.c's additions): call, pcall, log, setresp, sha1hex, error_reply,
//! status_reply, set_repl, replicate_commands, the constants, the
//! deterministic math.random, and the run context the callbacks reach
//! through the Lua registry.

use super::context::{CallState, Host, RunningScript, ScriptStatus};
use super::convert::{format_g17, mark_error_counted, push_error, push_reply};
use super::lua::*;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::time::Instant;

const RUN_CTX: &std::ffi::CStr = c"__RUN_CTX__";

/// The version scripts see, as redis-server 7.0.15 reports it.
pub const REDIS_VERSION: &std::ffi::CStr = c"7.0.15";
pub const REDIS_VERSION_NUM: f64 = ((7 << 16) | 15) as f64;

/// Redis's log levels and propagation flags.
pub const LL_DEBUG: i32 = 0;
pub const LL_WARNING: i32 = 3;
const PROPAGATE_AOF: i32 = 1;
const PROPAGATE_REPL: i32 = 2;

/// One script run: what redis.call needs and what the kill hook watches.
pub struct RunCtx<'h> {
    pub host: &'h mut dyn Host,
    pub call: CallState,
    /// The script's sha (EVAL) or function name (FCALL), for error texts.
    pub funcname: String,
    pub repl_flags: i32,
    pub started: Instant,
    pub busy_threshold_ms: u64,
    pub status: Option<&'h ScriptStatus>,
    /// Past the busy threshold: other clients may kill it.
    pub timed_out: bool,
    /// The client's command line and the engine's counts (FUNCTION STATS).
    pub command: super::context::CommandLine<'h>,
    pub engine_counts: (usize, usize),
}

pub unsafe fn set_run_ctx(l: *mut lua_State, ctx: Option<*mut RunCtx<'_>>) {
    lua_pushstring(l, RUN_CTX.as_ptr());
    match ctx {
        Some(p) => lua_pushlightuserdata(l, p.cast::<c_void>()),
        None => lua_pushnil(l),
    }
    lua_settable(l, REGISTRYINDEX);
}

unsafe fn run_ctx<'a>(l: *mut lua_State) -> Option<&'a mut RunCtx<'static>> {
    lua_pushstring(l, RUN_CTX.as_ptr());
    lua_gettable(l, REGISTRYINDEX);
    let p = lua_topointer(l, -1) as *mut RunCtx<'static>;
    pop(l, 1);
    p.as_mut()
}

/// Raises the error table on top of the stack.
unsafe fn raise(l: *mut lua_State, msg: &[u8]) -> c_int {
    push_error(l, msg);
    lua_error(l)
}

/// Command arguments from the Lua stack: strings, numbers as `%.17g`.
unsafe fn lua_args(l: *mut lua_State, argc: c_int) -> Option<Vec<Vec<u8>>> {
    let mut argv = Vec::with_capacity(argc as usize);
    for j in 1..=argc {
        if lua_type(l, j) == TNUMBER {
            argv.push(format_g17(lua_tonumber(l, j)));
        } else {
            match to_bytes(l, j) {
                Some(s) => argv.push(s.to_vec()),
                None => break,
            }
        }
    }
    pop(l, argc);
    (argv.len() == argc as usize).then_some(argv)
}

/// redis.call / redis.pcall (`luaRedisGenericCommand`): leaves the result
/// on the stack; true when it is an error to raise.
unsafe fn generic_command(l: *mut lua_State, mut raise_error: bool) -> bool {
    let Some(ctx) = run_ctx(l) else {
        push_error(l, b"redis.call/pcall can only be called inside a script invocation");
        return true;
    };
    let argc = lua_gettop(l);
    if argc == 0 {
        push_error(l, b"Please specify at least one argument for this redis lib call");
        return raise_error;
    }
    let Some(argv) = lua_args(l, argc) else {
        push_error(l, b"Lua redis lib command arguments must be strings or integers");
        return raise_error;
    };
    let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    match ctx.host.call(&argv, &mut ctx.call) {
        Err(msg) => {
            push_error(l, msg.as_bytes());
            mark_error_counted(l);
        }
        Ok(reply) => {
            if reply.first() != Some(&b'-') {
                raise_error = false;
            }
            push_reply(l, &reply);
        }
    }
    if ctx.call.write_dirty && ctx.timed_out {
        if let Some(status) = ctx.status {
            status.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    raise_error
}

pub unsafe extern "C" fn redis_call(l: *mut lua_State) -> c_int {
    if generic_command(l, true) {
        return lua_error(l);
    }
    1
}

pub unsafe extern "C" fn redis_pcall(l: *mut lua_State) -> c_int {
    if generic_command(l, false) {
        return lua_error(l);
    }
    1
}

/// The global `pcall`: an error table comes back as the table itself.
pub unsafe extern "C" fn lua_pcall_global(l: *mut lua_State) -> c_int {
    let argc = lua_gettop(l);
    lua_pushboolean(l, 1);
    lua_insert(l, 1);
    if lua_pcall(l, argc - 1, MULTRET, 0) != 0 {
        lua_remove(l, 1);
        if lua_type(l, -1) == TTABLE {
            lua_getfield(l, -1, c"err".as_ptr());
            if lua_isstring(l, -1) != 0 {
                lua_replace(l, -2);
            } else {
                pop(l, 1);
            }
        }
        lua_pushboolean(l, 0);
        lua_insert(l, 1);
    }
    lua_gettop(l)
}

pub unsafe extern "C" fn sha1hex(l: *mut lua_State) -> c_int {
    if lua_gettop(l) != 1 {
        return raise(l, b"wrong number of arguments");
    }
    let digest = {
        let s = to_bytes(l, 1).unwrap_or_default();
        super::context::sha1_hex(s)
    };
    push_bytes(l, digest.as_bytes());
    1
}

unsafe fn single_field_table(l: *mut lua_State, field: &std::ffi::CStr) -> c_int {
    if lua_gettop(l) != 1 || lua_type(l, -1) != TSTRING {
        push_error(l, b"wrong number or type of arguments");
        return 1;
    }
    new_table(l);
    lua_pushvalue(l, -2);
    lua_setfield(l, -2, field.as_ptr());
    1
}

pub unsafe extern "C" fn error_reply(l: *mut lua_State) -> c_int {
    if lua_gettop(l) != 1 || lua_type(l, -1) != TSTRING {
        push_error(l, b"wrong number or type of arguments");
        return 1;
    }
    let text = {
        // A C string: it ends at the first NUL.
        let s = to_bytes(l, -1).unwrap_or_default();
        let s = s.split(|&b| b == 0).next().unwrap_or_default();
        let mut t = Vec::with_capacity(s.len() + 1);
        if s.first() != Some(&b'-') {
            t.push(b'-');
        }
        t.extend_from_slice(s);
        t
    };
    push_error(l, &text);
    1
}

pub unsafe extern "C" fn status_reply(l: *mut lua_State) -> c_int {
    single_field_table(l, c"ok")
}

pub unsafe extern "C" fn set_repl(l: *mut lua_State) -> c_int {
    let Some(ctx) = run_ctx(l) else {
        return raise(l, b"redis.set_repl can only be called inside a script invocation");
    };
    if lua_gettop(l) != 1 {
        return raise(l, b"redis.set_repl() requires two arguments.");
    }
    let flags = lua_tonumber(l, -1) as i32;
    if flags & !(PROPAGATE_AOF | PROPAGATE_REPL) != 0 {
        return raise(l, b"Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.");
    }
    ctx.repl_flags = flags;
    0
}

pub unsafe extern "C" fn replicate_commands(l: *mut lua_State) -> c_int {
    lua_pushboolean(l, 1);
    1
}

pub unsafe extern "C" fn acl_check_cmd(l: *mut lua_State) -> c_int {
    if run_ctx(l).is_none() {
        return raise(l, b"redis.acl_check_cmd can only be called inside a script invocation");
    }
    let argc = lua_gettop(l);
    if argc == 0 {
        return raise(l, b"Please specify at least one argument for this redis lib call");
    }
    let Some(argv) = lua_args(l, argc) else {
        return raise(l, b"Lua redis lib command arguments must be strings or integers");
    };
    let allowed = match run_ctx(l) {
        Some(ctx) => ctx.host.acl_allows(&argv),
        None => None,
    };
    match allowed {
        None => raise(l, b"Invalid command passed to redis.acl_check_cmd()"),
        Some(allowed) => {
            lua_pushboolean(l, allowed as c_int);
            1
        }
    }
}

pub unsafe extern "C" fn log(l: *mut lua_State) -> c_int {
    let argc = lua_gettop(l);
    if argc < 2 {
        return raise(l, b"redis.log() requires two arguments or more.");
    }
    if lua_isnumber(l, -argc) == 0 {
        return raise(l, b"First argument must be a number (log level).");
    }
    let level = lua_tonumber(l, -argc) as i32;
    if !(LL_DEBUG..=LL_WARNING).contains(&level) {
        return raise(l, b"Invalid debug level.");
    }
    let mut line = Vec::new();
    for j in 1..argc {
        if let Some(s) = to_bytes(l, -argc + j) {
            if j != 1 {
                line.push(b' ');
            }
            line.extend_from_slice(s);
        }
    }
    if let Some(ctx) = run_ctx(l) {
        ctx.host.log(level, &line);
    }
    0
}

pub unsafe extern "C" fn setresp(l: *mut lua_State) -> c_int {
    let Some(ctx) = run_ctx(l) else {
        return raise(l, b"redis.setresp can only be called inside a script invocation");
    };
    if lua_gettop(l) != 1 {
        return raise(l, b"redis.setresp() requires one argument.");
    }
    let resp = lua_tonumber(l, -1) as i32;
    if resp != 2 && resp != 3 {
        return raise(l, b"RESP version must be 2 or 3.");
    }
    ctx.call.resp3 = resp == 3;
    0
}

pub unsafe extern "C" fn breakpoint(l: *mut lua_State) -> c_int {
    lua_pushboolean(l, 0);
    1
}

pub unsafe extern "C" fn debug(_l: *mut lua_State) -> c_int {
    0
}

thread_local! {
    /// Redis's `redisLrand48` state: one per process there, one per core
    /// here; never reseeded between scripts.
    static RAND48: Cell<u64> = const { Cell::new(0x1234_ABCD_330E) };
}

fn lrand48() -> i32 {
    RAND48.with(|x| {
        let next = x.get().wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB) & 0xFFFF_FFFF_FFFF;
        x.set(next);
        (next >> 17) as i32
    })
}

fn srand48(seed: i32) {
    RAND48.with(|x| x.set((((seed as u32) as u64) << 16) | 0x330E));
}

pub unsafe extern "C" fn math_random(l: *mut lua_State) -> c_int {
    if run_ctx(l).is_none() {
        return luaL_error(l, c"math.random can only be called inside a script invocation".as_ptr());
    }
    let max = i32::MAX as f64;
    let r = (lrand48() as f64 % max) / max;
    match lua_gettop(l) {
        0 => lua_pushnumber(l, r),
        1 => {
            let u = luaL_checkinteger(l, 1) as c_int;
            if u < 1 {
                luaL_argerror(l, 1, c"interval is empty".as_ptr());
            }
            lua_pushnumber(l, (r * u as f64).floor() + 1.0);
        }
        2 => {
            let lo = luaL_checkinteger(l, 1) as c_int;
            let u = luaL_checkinteger(l, 2) as c_int;
            if lo > u {
                luaL_argerror(l, 2, c"interval is empty".as_ptr());
            }
            lua_pushnumber(l, (r * (u as f64 - lo as f64 + 1.0)).floor() + lo as f64);
        }
        _ => return luaL_error(l, c"wrong number of arguments".as_ptr()),
    }
    1
}

pub unsafe extern "C" fn math_randomseed(l: *mut lua_State) -> c_int {
    if run_ctx(l).is_none() {
        return luaL_error(l, c"math.randomseed can only be called inside a script invocation".as_ptr());
    }
    srand48(luaL_checkinteger(l, 1) as i32);
    0
}

/// Every 100000 instructions: notes a script past the busy threshold and
/// stops one that SCRIPT KILL / FUNCTION KILL marked (`luaMaskCountHook`).
pub unsafe extern "C" fn count_hook(l: *mut lua_State, _ar: *mut lua_Debug) {
    let killed = match run_ctx(l) {
        Some(ctx) => ctx.check_busy(),
        None => false,
    };
    if killed {
        lua_sethook(l, Some(count_hook), MASKLINE, 0);
        push_error(l, b"Script killed by user with SCRIPT KILL...");
        lua_error(l);
    }
}

impl RunCtx<'_> {
    /// True when the script must stop now. Past the busy threshold, every
    /// hook serves the other clients first (Redis's scriptInterrupt).
    fn check_busy(&mut self) -> bool {
        let Some(status) = self.status else { return false };
        use std::sync::atomic::Ordering::Relaxed;
        if !self.timed_out && self.started.elapsed().as_millis() as u64 >= self.busy_threshold_ms {
            self.timed_out = true;
            status.kill.store(false, Relaxed);
            status.dirty.store(self.call.write_dirty, Relaxed);
            let (libraries, functions) = self.engine_counts;
            *status.detail.lock().unwrap_or_else(|e| e.into_inner()) = Some(RunningScript {
                name: self.funcname.clone(),
                command: self.command.to_vec(),
                started: self.started,
                libraries,
                functions,
            });
            status.set_busy(if self.call.eval_mode { 1 } else { 2 });
            crate::log::warning(&format!(
                "Slow script detected: still in execution after {} milliseconds. You can try killing the script using the {} command. Script name is: {}.",
                self.started.elapsed().as_millis(),
                if self.call.eval_mode { "SCRIPT KILL" } else { "FUNCTION KILL" },
                self.funcname
            ));
        }
        if !self.timed_out {
            return false;
        }
        if self.host.while_busy() {
            if self.call.write_dirty {
                // Its writes so far must not outlive it (Redis exits with
                // them unpropagated): this core's shutdown would log them.
                crate::log::warning("Shutdown during a script that wrote: exiting without its effects.");
                std::process::exit(0);
            }
            crate::log::warning("Lua script ended by the server's shutdown.");
            return true;
        }
        if status.kill.load(Relaxed) && !self.call.write_dirty {
            crate::log::warning("Lua script killed by user with SCRIPT KILL.");
            return true;
        }
        false
    }
}
