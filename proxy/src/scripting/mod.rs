//! Lua scripting (EVAL, EVALSHA, SCRIPT) and functions as Redis 7.0 runs
//! them, one synchronous engine per core. The engine knows nothing of
//! shards: scripts reach the data through [`Host`], which the caller
//! implements (the command layer, or a fake in the tests).
//!
//! lua.rs: the C API of Redis's own Lua 5.1 (third_party/lua);
//! vm.rs: the VM and its sandbox; api.rs: the `redis` table;
//! convert.rs: replies to Lua values and back; flags.rs: script flags;
//! functions.rs: libraries, FUNCTION and FCALL.

mod api;
mod convert;
pub mod cross;
pub mod flags;
pub mod functions;
pub mod host;
mod lua;
mod vm;

use api::RunCtx;
use convert::ReplyProtocols;
use lua::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Instant;

/// Where a script's commands run.
pub trait Host {
    /// Runs one command line of a script, with Redis's checks for script
    /// commands; returns its reply encoded in RESP3 when `call.resp3`, else
    /// RESP2, or the text of a rejection ("Unknown Redis command called from
    /// script"...) that `redis.call` raises as an error.
    fn call(&mut self, argv: &[&[u8]], call: &mut CallState) -> Result<Vec<u8>, String>;

    /// `redis.log`.
    fn log(&mut self, level: i32, msg: &[u8]) {
        let level = match level {
            0 => crate::log::Level::Debug,
            1 => crate::log::Level::Verbose,
            2 => crate::log::Level::Notice,
            _ => crate::log::Level::Warning,
        };
        crate::log::log(level, &String::from_utf8_lossy(msg));
    }
}

/// What the host must know about the running script, per command.
#[derive(Default, Debug)]
pub struct CallState {
    /// The protocol the script chose with redis.setresp (RESP2 at start).
    pub resp3: bool,
    /// EVAL_RO / FCALL_RO, or a script flagged no-writes.
    pub read_only: bool,
    /// May touch keys of different slots (scripts without a shebang, or
    /// flagged allow-cross-slot-keys).
    pub allow_cross_slot: bool,
    /// A write command ran.
    pub write_dirty: bool,
    /// EVAL rather than FCALL.
    pub eval_mode: bool,
    /// The slot of the first keyed command (cluster's cross-slot check).
    pub slot: Option<u16>,
    /// The database the script started in (SELECT inside a script changes
    /// it for the rest of the script).
    pub db: usize,
}

/// A core's running script as other cores see it (SCRIPT KILL, FUNCTION
/// KILL): control path only, written when a script passes the busy
/// threshold.
#[derive(Default)]
pub struct ScriptStatus {
    /// 0: none past the threshold; 1: an EVAL script; 2: a function.
    pub running: AtomicU8,
    /// The busy script has written (it can no longer be killed).
    pub dirty: AtomicBool,
    /// Kill requested.
    pub kill: AtomicBool,
}

impl ScriptStatus {
    fn reset(&self) {
        self.running.store(0, Ordering::Relaxed);
        self.dirty.store(false, Ordering::Relaxed);
        self.kill.store(false, Ordering::Relaxed);
    }
}

/// How a script is invoked.
pub struct RunOptions<'a> {
    pub client_resp3: bool,
    /// EVAL_RO, EVALSHA_RO, FCALL_RO.
    pub read_only_command: bool,
    pub cluster_enabled: bool,
    pub db: usize,
    pub busy_threshold_ms: u64,
    pub status: Option<&'a ScriptStatus>,
    /// Cluster mode: the slot of the declared keys.
    pub slot: Option<u16>,
}

pub struct Script {
    pub body: Vec<u8>,
    pub flags: u32,
}

/// The SHA1 of a script, in lower-case hex.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// Whether a command line names a command (`lookupCommand`).
pub fn command_exists(argv: &[Vec<u8>]) -> bool {
    let name = &argv[0];
    match shard::commands::all().find(|c| c.name.as_bytes().eq_ignore_ascii_case(name)) {
        Some(spec) if !spec.subcommands.is_empty() && argv.len() > 1 => spec.subcommand(&argv[1]).is_some(),
        Some(_) => true,
        None => false,
    }
}

pub const NOSCRIPT: &[u8] = b"-NOSCRIPT No matching script. Please use EVAL.\r\n";

/// A Redis error line from a message that may or may not carry its code.
pub fn error_line(msg: &str, out: &mut Vec<u8>) {
    out.push(b'-');
    if !msg.starts_with('-') {
        out.extend_from_slice(msg.as_bytes());
    } else {
        out.extend_from_slice(&msg.as_bytes()[1..]);
    }
    out.extend_from_slice(b"\r\n");
}

/// The EVAL side of a core: its VM and script cache.
pub struct Engine {
    vm: vm::Vm,
    scripts: HashMap<String, Script>,
    runs: u32,
    pub functions: functions::Functions,
}

thread_local! {
    /// Each core's engine (Lua states belong to one thread).
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

/// Runs `f` with this core's engine, created on first use.
pub fn with_engine<T>(f: impl FnOnce(&mut Engine) -> T) -> T {
    ENGINE.with(|e| {
        let mut e = e.borrow_mut();
        f(e.get_or_insert_with(Engine::new))
    })
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl Engine {
    pub fn new() -> Engine {
        Engine { vm: vm::Vm::for_eval(), scripts: HashMap::new(), runs: 0, functions: functions::Functions::new() }
    }

    /// SCRIPT FLUSH: a fresh VM and an empty cache.
    pub fn flush(&mut self) {
        self.vm = vm::Vm::for_eval();
        self.scripts.clear();
    }

    pub fn exists(&self, sha: &[u8]) -> bool {
        std::str::from_utf8(sha).is_ok_and(|s| self.scripts.contains_key(&s.to_ascii_lowercase()))
    }

    /// Whether a script body is in the cache.
    pub fn exists_body(&self, body: &[u8]) -> bool {
        self.scripts.contains_key(&sha1_hex(body))
    }

    pub fn script(&self, sha: &str) -> Option<&Script> {
        self.scripts.get(sha)
    }

    /// Compiles a script into the cache (`luaCreateFunction`); returns its
    /// sha, or the error reply text.
    pub fn load(&mut self, body: &[u8]) -> Result<String, String> {
        let sha = sha1_hex(body);
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let (flags, shebang_len) = flags::parse_shebang(body)?;
        let l = self.vm.l;
        unsafe {
            if !load(l, &body[shebang_len..], c"@user_script") {
                let msg = String::from_utf8_lossy(to_bytes(l, -1).unwrap_or_default()).into_owned();
                pop(l, 1);
                return Err(format!("ERR Error compiling script (new function): {msg}"));
            }
            let name = CString::new(format!("f_{sha}")).unwrap_or_default();
            lua_setfield(l, REGISTRYINDEX, name.as_ptr());
        }
        self.scripts.insert(sha.clone(), Script { body: body.to_vec(), flags });
        Ok(sha)
    }

    /// EVAL / EVALSHA: the reply for the client, encoded. `script` is the
    /// body, or the sha when `by_sha`.
    pub fn eval(
        &mut self,
        host: &mut dyn Host,
        script: &[u8],
        by_sha: bool,
        keys: &[&[u8]],
        args: &[&[u8]],
        opts: &RunOptions,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let sha = if by_sha {
            if script.len() != 40 {
                return NOSCRIPT.to_vec();
            }
            String::from_utf8_lossy(script).to_ascii_lowercase()
        } else {
            sha1_hex(script)
        };
        if !self.scripts.contains_key(&sha) {
            if by_sha {
                return NOSCRIPT.to_vec();
            }
            if let Err(e) = self.load(script) {
                error_line(&e, &mut out);
                return out;
            }
        }
        let flags = self.scripts[&sha].flags;
        let call = match prepare(flags, opts) {
            Ok(mut call) => {
                call.eval_mode = true;
                call
            }
            Err(e) => {
                error_line(&e, &mut out);
                return out;
            }
        };
        let l = self.vm.l;
        unsafe {
            get_global(l, c"__redis__err__handler");
            let name = CString::new(format!("f_{sha}")).unwrap_or_default();
            lua_getfield(l, REGISTRYINDEX, name.as_ptr());
            // KEYS and ARGV are globals in EVAL.
            push_array(l, keys);
            lua_enablereadonlytable(l, GLOBALSINDEX, 0);
            set_global(l, c"KEYS");
            lua_enablereadonlytable(l, GLOBALSINDEX, 1);
            push_array(l, args);
            lua_enablereadonlytable(l, GLOBALSINDEX, 0);
            set_global(l, c"ARGV");
            lua_enablereadonlytable(l, GLOBALSINDEX, 1);
            run_function(l, host, call, sha, 0, opts, &mut out);
            pop(l, 1);
        }
        self.collect_garbage();
        out
    }

    /// Redis steps the collector every 50 runs.
    fn collect_garbage(&mut self) {
        self.runs += 1;
        if self.runs == 50 {
            unsafe { lua_gc(self.vm.l, GCSTEP, 50) };
            self.runs = 0;
        }
    }

    /// Bytes the EVAL VM uses.
    pub fn memory(&self) -> u64 {
        unsafe { lua_gc(self.vm.l, GCCOUNT, 0) as u64 * 1024 }
    }

    pub fn script_count(&self) -> usize {
        self.scripts.len()
    }
}

/// `scriptPrepareForRun`'s checks and the run's starting state.
pub fn prepare(flags: u32, opts: &RunOptions) -> Result<CallState, String> {
    let compat = flags & flags::EVAL_COMPAT_MODE != 0;
    if !compat {
        if flags & flags::NO_CLUSTER != 0 && opts.cluster_enabled {
            return Err("ERR Can not run script on cluster, 'no-cluster' flag is set.".into());
        }
        if flags & flags::NO_WRITES == 0 && opts.read_only_command {
            return Err("ERR Can not execute a script with write flag using *_ro command.".into());
        }
    }
    Ok(CallState {
        resp3: false,
        read_only: opts.read_only_command || (!compat && flags & flags::NO_WRITES != 0),
        allow_cross_slot: compat || flags & flags::ALLOW_CROSS_SLOT != 0,
        write_dirty: false,
        eval_mode: false,
        slot: opts.slot,
        db: opts.db,
    })
}

unsafe fn push_array(l: *mut lua_State, items: &[&[u8]]) {
    lua_createtable(l, items.len() as i32, 0);
    for (j, item) in items.iter().enumerate() {
        push_bytes(l, item);
        lua_rawseti(l, -2, j as i32 + 1);
    }
}

/// Calls the function on top of the stack (the error handler below it, and
/// `nargs` arguments above it) and writes its reply (`luaCallFunction`).
unsafe fn run_function(
    l: *mut lua_State,
    host: &mut dyn Host,
    call: CallState,
    funcname: String,
    nargs: i32,
    opts: &RunOptions,
    out: &mut Vec<u8>,
) {
    let mut ctx = RunCtx {
        host,
        call,
        funcname,
        repl_flags: 3,
        started: Instant::now(),
        busy_threshold_ms: opts.busy_threshold_ms,
        status: opts.status,
        timed_out: false,
    };
    api::set_run_ctx(l, Some(&mut ctx as *mut RunCtx));
    let hooked = opts.busy_threshold_ms > 0 && opts.status.is_some();
    if hooked {
        lua_sethook(l, Some(api::count_hook), MASKCOUNT, 100_000);
    }
    let err = lua_pcall(l, nargs, 1, -2 - nargs);
    let protocols = ReplyProtocols { client_resp3: opts.client_resp3, script_resp3: ctx.call.resp3 };
    if err != 0 {
        if lua_type(l, -1) != TTABLE {
            let msg = to_bytes(l, -1).map(|m| String::from_utf8_lossy(&m[..m.len().min(100)]).into_owned());
            let msg = msg.unwrap_or_else(|| "execution failure".into());
            error_line(&format!("ERR Error running script {}, {} ", ctx.funcname, msg), out);
        } else {
            let info = api::error_info(l);
            let mut line = info.msg;
            if let (Some(source), Some(number)) = (info.source, info.line) {
                line.extend_from_slice(format!(" script: {}, on ", ctx.funcname).as_bytes());
                line.extend_from_slice(&source);
                line.push(b':');
                line.extend_from_slice(&number);
                line.push(b'.');
            }
            out.push(b'-');
            out.extend(line.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
            out.extend_from_slice(b"\r\n");
        }
        pop(l, 1);
    } else {
        convert::write_reply(l, &protocols, out);
    }
    if hooked {
        lua_sethook(l, None, 0, 0);
    }
    if ctx.timed_out {
        if let Some(status) = opts.status {
            status.reset();
        }
    }
    api::set_run_ctx(l, None);
}

#[cfg(test)]
mod tests;

impl Engine {
    /// FCALL / FCALL_RO: the reply for the client, encoded.
    pub fn fcall(
        &mut self,
        host: &mut dyn Host,
        name: &[u8],
        keys: &[&[u8]],
        args: &[&[u8]],
        opts: &RunOptions,
    ) -> Vec<u8> {
        self.functions.call(host, name, keys, args, opts)
    }
}

/// This core's scripting figures for INFO memory.
#[derive(Clone, Copy, Default, Debug)]
pub struct Usage {
    pub vm_eval: u64,
    pub vm_functions: u64,
    pub cached_scripts: usize,
    /// Bytes of cached script bodies and their shas.
    pub scripts_eval: u64,
    pub functions: usize,
    pub libraries: usize,
    /// Bytes of library codes and function names.
    pub functions_bytes: u64,
}

/// The figures of this core's engine (zeros before its first script; the
/// engine is not created for INFO).
pub fn usage() -> Usage {
    ENGINE.with(|e| {
        let e = e.borrow();
        let Some(e) = e.as_ref() else { return Usage::default() };
        let f = &e.functions;
        Usage {
            vm_eval: e.memory(),
            vm_functions: f.memory(),
            cached_scripts: e.scripts.len(),
            scripts_eval: e.scripts.values().map(|s| s.body.len() as u64 + 40).sum(),
            functions: f.functions.len(),
            libraries: f.libraries.len(),
            functions_bytes: f.libraries.iter().map(|l| l.code.len() as u64).sum::<u64>()
                + f.functions.keys().map(|n| n.len() as u64).sum::<u64>(),
        }
    })
}
