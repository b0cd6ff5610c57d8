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
pub mod context;
mod convert;
pub mod cross;
pub mod flags;
pub mod functions;
pub mod host;
mod lua;
mod run;
mod vm;

pub use context::{command_exists, error_line, sha1_hex, CallState, Host, RunOptions, ScriptStatus, NOSCRIPT};
use lua::*;
use run::{prepare, push_array, run_function};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

pub struct Script {
    pub body: Vec<u8>,
    pub flags: u32,
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
