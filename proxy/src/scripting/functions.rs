//! Functions (functions.c, function_lua.c): libraries loaded with FUNCTION
//! LOAD (`#!lua name=lib`), whose code runs once in a load-time sandbox
//! where only `redis.register_function` and `redis.log` exist, and whose
//! registered functions FCALL runs with the full API. One functions VM per
//! core, separate from the EVAL VM, as in Redis.

use super::context::{error_line, Host, RunOptions};
use super::convert::push_error;
use super::flags;
use super::lua::*;
use super::run::{prepare, push_array, run_function};
use super::vm::{self, Vm};
use std::collections::HashMap;
use std::ffi::c_int;
use std::time::Instant;

const LOAD_CTX: &std::ffi::CStr = c"__LIBRARY_CTX__";
/// FUNCTION LOAD's time limit (Redis's LOAD_TIMEOUT_MS).
const LOAD_TIMEOUT_MS: u128 = 500;

pub struct Function {
    pub name: String,
    pub desc: Option<Vec<u8>>,
    pub flags: u32,
    /// The callback, referenced from the Lua registry.
    func_ref: c_int,
    pub library: String,
}

pub struct Library {
    pub name: String,
    /// The whole code, shebang included (FUNCTION LIST WITHCODE, DUMP).
    pub code: Vec<u8>,
    /// Its functions' names, in registration order.
    pub functions: Vec<String>,
}

/// Functions registered while a library's code runs.
struct LoadCtx {
    started: Instant,
    registered: Vec<Function>,
}

pub struct Functions {
    vm: Vm,
    /// Libraries in load order. Their names are case-sensitive (Redis's
    /// librariesDictType).
    pub libraries: Vec<Library>,
    /// Every library's functions by their names as registered.
    pub functions: HashMap<String, Function>,
    /// Function names ASCII-lowercased -> as registered: FCALL and the
    /// name clash check ignore case (Redis's functionDictType); the first
    /// registered of names differing only in case holds the entry.
    folded: HashMap<String, String>,
}

impl Default for Functions {
    fn default() -> Self {
        Self::new()
    }
}

fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

const BAD_NAME: &str =
    "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// A library's header: engine, name, and the code after the shebang line
/// (its line feed kept, so line numbers stay).
struct Metadata<'a> {
    engine: Vec<u8>,
    name: Vec<u8>,
    body: &'a [u8],
}

/// `functionExtractLibMetaData`.
fn metadata(code: &[u8]) -> Result<Metadata<'_>, String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    let parts = match shard::config::split_args(&code[..end]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err("ERR Invalid library metadata".into()),
    };
    let engine = parts[0][2..].to_vec();
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err("ERR Invalid metadata value, name argument was given multiple times".into());
            }
            name = Some(part[5..].to_vec());
            continue;
        }
        return Err(format!("ERR Invalid metadata value given: {}", String::from_utf8_lossy(part)));
    }
    let Some(name) = name else { return Err("ERR Library name was not given".into()) };
    Ok(Metadata { engine, name, body: &code[end..] })
}

impl Functions {
    pub fn new() -> Functions {
        Functions {
            vm: Vm::for_functions(register_function),
            libraries: Vec::new(),
            functions: HashMap::new(),
            folded: HashMap::new(),
        }
    }

    /// The function FCALL `name` runs: its exact name, else one differing
    /// only in case.
    fn lookup(&self, name: &str) -> Option<&Function> {
        self.functions.get(name).or_else(|| self.functions.get(self.folded.get(&name.to_ascii_lowercase())?))
    }

    /// A function of another library than `library` already has `name`,
    /// case aside.
    fn clashes(&self, name: &str, library: &str) -> bool {
        self.lookup(name).is_some_and(|existing| existing.library != library)
    }

    /// Bytes the functions VM uses.
    pub fn memory(&self) -> u64 {
        unsafe { lua_gc(self.vm.l, GCCOUNT, 0) as u64 * 1024 }
    }

    pub fn exists(&self, name: &[u8]) -> bool {
        std::str::from_utf8(name).is_ok_and(|n| self.lookup(n).is_some())
    }

    /// FUNCTION FLUSH.
    pub fn flush(&mut self) {
        *self = Functions::new();
    }

    /// FUNCTION LOAD [REPLACE]: the library's name, or the error text
    /// (`functionsCreateWithLibraryCtx`).
    pub fn load(&mut self, code: &[u8], replace: bool) -> Result<String, String> {
        let Metadata { engine, name, body } = metadata(code)?;
        if !valid_name(&name) {
            return Err(format!("ERR {BAD_NAME}"));
        }
        let name = String::from_utf8_lossy(&name).into_owned();
        if !engine.eq_ignore_ascii_case(b"lua") {
            return Err(format!("ERR Engine '{}' not found", String::from_utf8_lossy(&engine)));
        }
        let old = self.libraries.iter().position(|l| l.name == name);
        if old.is_some() && !replace {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        let registered = self.run_library_code(body)?;
        if registered.is_empty() {
            return Err("ERR No functions registered".into());
        }
        for f in &registered {
            if self.clashes(&f.name, &name) {
                let msg = format!("ERR Function {} already exists", f.name);
                self.release(registered);
                return Err(msg);
            }
        }
        if let Some(i) = old {
            let lib = self.libraries.remove(i);
            self.unlink(&lib);
        }
        let mut library = Library { name: name.clone(), code: code.to_vec(), functions: Vec::new() };
        for mut f in registered {
            f.library = name.clone();
            library.functions.push(f.name.clone());
            self.folded.entry(f.name.to_ascii_lowercase()).or_insert_with(|| f.name.clone());
            self.functions.insert(f.name.clone(), f);
        }
        self.libraries.push(library);
        Ok(name)
    }

    fn unlink(&mut self, lib: &Library) {
        for name in &lib.functions {
            let folded = name.to_ascii_lowercase();
            if self.folded.get(&folded) == Some(name) {
                self.folded.remove(&folded);
            }
        }
        let removed: Vec<Function> = lib.functions.iter().filter_map(|f| self.functions.remove(f)).collect();
        self.release(removed);
    }

    fn release(&mut self, functions: Vec<Function>) {
        for f in functions {
            unsafe { luaL_unref(self.vm.l, REGISTRYINDEX, f.func_ref) };
        }
    }

    /// FUNCTION DELETE.
    pub fn delete(&mut self, name: &[u8]) -> Result<(), String> {
        let Some(i) = self.libraries.iter().position(|l| l.name.as_bytes() == name) else {
            return Err("ERR Library not found".into());
        };
        let lib = self.libraries.remove(i);
        self.unlink(&lib);
        Ok(())
    }

    /// Runs a library's code in the load-time sandbox (`luaEngineCreate`).
    fn run_library_code(&mut self, body: &[u8]) -> Result<Vec<Function>, String> {
        let l = self.vm.l;
        unsafe {
            set_globals_index(l, vm::LIBRARY_API);
            let result = if !load(l, body, c"@user_function") {
                let msg = String::from_utf8_lossy(to_bytes(l, -1).unwrap_or_default()).into_owned();
                pop(l, 1);
                Err(format!("ERR Error compiling function: {msg}"))
            } else {
                let mut ctx = LoadCtx { started: Instant::now(), registered: Vec::new() };
                lua_pushstring(l, LOAD_CTX.as_ptr());
                lua_pushlightuserdata(l, (&mut ctx as *mut LoadCtx).cast());
                lua_settable(l, REGISTRYINDEX);
                lua_sethook(l, Some(load_hook), MASKCOUNT, 100_000);
                let failed = lua_pcall(l, 0, 0, 0) != 0;
                lua_sethook(l, None, 0, 0);
                lua_pushstring(l, LOAD_CTX.as_ptr());
                lua_pushnil(l);
                lua_settable(l, REGISTRYINDEX);
                if failed {
                    let info = super::convert::error_info(l);
                    pop(l, 1);
                    self.release(std::mem::take(&mut ctx.registered));
                    Err(format!("ERR Error registering functions: {}", String::from_utf8_lossy(&info.msg)))
                } else {
                    Ok(ctx.registered)
                }
            };
            set_globals_index(l, vm::GLOBALS_API);
            result
        }
    }

    /// FCALL / FCALL_RO.
    pub fn call(
        &mut self,
        host: &mut dyn Host,
        name: &[u8],
        keys: &[&[u8]],
        args: &[&[u8]],
        opts: &RunOptions,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let Some(f) = std::str::from_utf8(name).ok().and_then(|n| self.lookup(n)) else {
            return b"-ERR Function not found\r\n".to_vec();
        };
        let call = match prepare(f.flags, opts) {
            Ok(call) => call,
            Err(e) => {
                error_line(&e, &mut out);
                return out;
            }
        };
        let l = self.vm.l;
        unsafe {
            lua_pushstring(l, vm::ERROR_HANDLER.as_ptr());
            lua_gettable(l, REGISTRYINDEX);
            lua_rawgeti(l, REGISTRYINDEX, f.func_ref);
            push_array(l, keys);
            push_array(l, args);
            run_function(l, host, call, f.name.clone(), 2, opts, &mut out);
            pop(l, 1);
        }
        out
    }

    /// FUNCTION DUMP's libraries: their codes, in load order.
    pub fn codes(&self) -> Vec<Vec<u8>> {
        self.libraries.iter().map(|l| l.code.clone()).collect()
    }

    /// FUNCTION RESTORE of already decoded library codes.
    pub fn restore(&mut self, codes: &[Vec<u8>], policy: RestorePolicy) -> Result<(), String> {
        // Build the restored set aside, then join it (`libraryJoin`).
        let mut restored = Functions::new();
        for code in codes {
            restored.load(code, false)?;
        }
        if policy == RestorePolicy::Flush {
            self.flush();
        }
        for lib in &restored.libraries {
            if self.libraries.iter().any(|l| l.name == lib.name) && policy != RestorePolicy::Replace {
                return Err(format!("ERR Library {} already exists", lib.name));
            }
        }
        for lib in &restored.libraries {
            for f in &lib.functions {
                if self.clashes(f, &lib.name) {
                    return Err(format!("ERR Function {f} already exists"));
                }
            }
        }
        for code in codes {
            self.load(code, true)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum RestorePolicy {
    Append,
    Replace,
    Flush,
}

/// Points the globals' metatable `__index` at a registry table (the
/// load-time API or the real globals).
unsafe fn set_globals_index(l: *mut lua_State, registry_name: &std::ffi::CStr) {
    lua_getmetatable(l, GLOBALSINDEX);
    lua_enablereadonlytable(l, -1, 0);
    lua_getfield(l, REGISTRYINDEX, registry_name.as_ptr());
    lua_setfield(l, -2, c"__index".as_ptr());
    lua_enablereadonlytable(l, GLOBALSINDEX, 1);
    pop(l, 1);
}

unsafe fn load_ctx<'a>(l: *mut lua_State) -> Option<&'a mut LoadCtx> {
    lua_pushstring(l, LOAD_CTX.as_ptr());
    lua_gettable(l, REGISTRYINDEX);
    let p = lua_topointer(l, -1) as *mut LoadCtx;
    pop(l, 1);
    p.as_mut()
}

unsafe extern "C" fn load_hook(l: *mut lua_State, _ar: *mut lua_Debug) {
    let timed_out = load_ctx(l).is_some_and(|ctx| ctx.started.elapsed().as_millis() > LOAD_TIMEOUT_MS);
    if timed_out {
        lua_sethook(l, Some(load_hook), MASKLINE, 0);
        push_error(l, b"FUNCTION LOAD timeout");
        lua_error(l);
    }
}

/// A registration's arguments, or the error text.
struct Registration {
    name: Vec<u8>,
    desc: Option<Vec<u8>>,
    flags: u32,
}

/// Reads the flags table on top of the stack.
unsafe fn read_flags(l: *mut lua_State) -> Option<u32> {
    let mut f = 0;
    let mut j = 1;
    loop {
        lua_pushnumber(l, j as f64);
        j += 1;
        lua_gettable(l, -2);
        if lua_type(l, -1) == TNIL {
            pop(l, 1);
            return Some(f);
        }
        if lua_isstring(l, -1) == 0 {
            pop(l, 1);
            return None;
        }
        let flag = flags::by_name(to_bytes(l, -1).unwrap_or_default(), true);
        pop(l, 1);
        f |= flag?;
    }
}

/// Named arguments: `{function_name=..., callback=..., flags=..., description=...}`.
/// On success the callback is on top of the stack.
unsafe fn named_args(l: *mut lua_State) -> Result<Registration, &'static str> {
    if lua_type(l, 1) != TTABLE {
        return Err("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
    }
    let mut reg = Registration { name: Vec::new(), desc: None, flags: 0 };
    let (mut name, mut callback) = (false, false);
    lua_pushnil(l);
    while lua_next(l, 1) != 0 {
        if lua_isstring(l, -2) == 0 {
            return Err("named argument key given to redis.register_function is not a string");
        }
        // lua_tolstring would convert a number key in place and break lua_next.
        lua_pushvalue(l, -2);
        let key = to_bytes(l, -1).unwrap_or_default().to_ascii_lowercase();
        pop(l, 1);
        match key.as_slice() {
            b"function_name" => {
                if lua_isstring(l, -1) == 0 {
                    return Err("function_name argument given to redis.register_function must be a string");
                }
                reg.name = to_bytes(l, -1).unwrap_or_default().to_vec();
                name = true;
            }
            b"description" => {
                if lua_isstring(l, -1) == 0 {
                    return Err("description argument given to redis.register_function must be a string");
                }
                reg.desc = Some(to_bytes(l, -1).unwrap_or_default().to_vec());
            }
            b"callback" => {
                if lua_type(l, -1) != TFUNCTION {
                    return Err("callback argument given to redis.register_function must be a function");
                }
                // Keep it at stack slot 2.
                lua_pushvalue(l, -1);
                lua_replace(l, 2);
                callback = true;
            }
            b"flags" => {
                if lua_type(l, -1) != TTABLE {
                    return Err(
                        "flags argument to redis.register_function must be a table representing function flags",
                    );
                }
                match read_flags(l) {
                    Some(f) => reg.flags = f,
                    None => return Err("unknown flag given"),
                }
            }
            _ => return Err("unknown argument given to redis.register_function"),
        }
        pop(l, 1);
    }
    if !name {
        return Err("redis.register_function must get a function name argument");
    }
    if !callback {
        return Err("redis.register_function must get a callback argument");
    }
    lua_settop(l, 2);
    Ok(reg)
}

unsafe fn read_registration(l: *mut lua_State) -> Result<Registration, &'static str> {
    let argc = lua_gettop(l);
    if !(1..=2).contains(&argc) {
        return Err("wrong number of arguments to redis.register_function");
    }
    if argc == 1 {
        lua_pushnil(l); // slot 2 for the callback
        return named_args(l);
    }
    if lua_isstring(l, 1) == 0 {
        return Err("first argument to redis.register_function must be a string");
    }
    if lua_type(l, 2) != TFUNCTION {
        return Err("second argument to redis.register_function must be a function");
    }
    Ok(Registration { name: to_bytes(l, 1).unwrap_or_default().to_vec(), desc: None, flags: 0 })
}

/// `redis.register_function` (`luaRegisterFunction`).
unsafe extern "C" fn register_function(l: *mut lua_State) -> c_int {
    let error: Option<String> = match load_ctx(l) {
        None => Some("redis.register_function can only be called on FUNCTION LOAD command".into()),
        Some(ctx) => match read_registration(l) {
            Err(e) => Some(e.into()),
            Ok(reg) if !valid_name(&reg.name) => Some(BAD_NAME.into()),
            Ok(reg) => {
                let name = String::from_utf8_lossy(&reg.name).into_owned();
                if ctx.registered.iter().any(|f| f.name == name) {
                    Some("Function already exists in the library".into())
                } else {
                    lua_settop(l, 2);
                    let func_ref = luaL_ref(l, REGISTRYINDEX);
                    ctx.registered.push(Function {
                        name,
                        desc: reg.desc,
                        flags: reg.flags,
                        func_ref,
                        library: String::new(),
                    });
                    None
                }
            }
        },
    };
    match error {
        Some(msg) => {
            push_error(l, msg.as_bytes());
            drop(msg);
            lua_error(l)
        }
        None => 0,
    }
}
