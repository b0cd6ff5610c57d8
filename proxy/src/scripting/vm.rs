//! A Lua VM set up as Redis 7.0 sets up its scripting VM (script_lua.c's
//! luaRegisterRedisAPI, eval.c's scriptingInit): the allowed libraries, the
//! `redis` table, the error handler, then globals locked (reading a missing
//! global and assigning one are errors) and every reachable table read-only.

use super::api;
use super::lua::*;
use std::ffi::{c_int, CStr};

/// Globals a library or Redis itself may add while the VM is set up.
const ALLOWED_GLOBALS: &[&[u8]] = &[
    // libraries
    b"string",
    b"cjson",
    b"bit",
    b"cmsgpack",
    b"math",
    b"table",
    b"struct",
    // the Redis API
    b"redis",
    b"__redis__err__handler",
    // Lua builtins
    b"xpcall",
    b"tostring",
    b"getfenv",
    b"setmetatable",
    b"next",
    b"assert",
    b"tonumber",
    b"rawequal",
    b"collectgarbage",
    b"getmetatable",
    b"rawset",
    b"pcall",
    b"coroutine",
    b"type",
    b"_G",
    b"select",
    b"unpack",
    b"gcinfo",
    b"pairs",
    b"rawget",
    b"loadstring",
    b"ipairs",
    b"_VERSION",
    b"setfenv",
    b"load",
    b"error",
    b"newproxy",
    // removed once the error handler holds it
    b"debug",
];

/// Globals known to be dropped on purpose (no warning).
const DENIED_GLOBALS: &[&[u8]] = &[b"dofile", b"loadfile", b"print"];

/// `__index` of the locked globals table.
unsafe extern "C" fn protected_table_error(l: *mut lua_State) -> c_int {
    if lua_gettop(l) != 2 {
        return luaL_error(l, c"Wrong number of arguments to luaProtectedTableError".as_ptr());
    }
    if lua_isstring(l, -1) == 0 && lua_isnumber(l, -1) == 0 {
        return luaL_error(l, c"Second argument to luaProtectedTableError must be a string or number".as_ptr());
    }
    let name = lua_tolstring(l, -1, std::ptr::null_mut());
    luaL_error(l, c"Script attempted to access nonexistent global variable '%s'".as_ptr(), name)
}

/// `__newindex` of the globals while libraries load: only known names.
unsafe extern "C" fn new_index_allow_list(l: *mut lua_State) -> c_int {
    if lua_gettop(l) != 3 {
        return luaL_error(l, c"Wrong number of arguments to luaNewIndexAllowList".as_ptr());
    }
    if lua_type(l, -3) != TTABLE {
        return luaL_error(l, c"first argument to luaNewIndexAllowList must be a table".as_ptr());
    }
    if lua_isstring(l, -2) == 0 && lua_isnumber(l, -2) == 0 {
        return luaL_error(l, c"Second argument to luaNewIndexAllowList must be a string or number".as_ptr());
    }
    let name = to_bytes(l, -2).unwrap_or_default();
    if ALLOWED_GLOBALS.contains(&name) {
        lua_rawset(l, -3);
    } else if !DENIED_GLOBALS.contains(&name) {
        let name = String::from_utf8_lossy(name).into_owned();
        crate::log::warning(&format!(
            "A key '{name}' was added to Lua globals which is not on the globals allow list nor listed on the deny list."
        ));
    }
    0
}

unsafe fn set_error_metatable(l: *mut lua_State) {
    new_table(l);
    push_fn(l, protected_table_error);
    lua_setfield(l, -2, c"__index".as_ptr());
    lua_setmetatable(l, -2);
}

unsafe fn set_allow_list_protection(l: *mut lua_State) {
    new_table(l);
    push_fn(l, new_index_allow_list);
    lua_setfield(l, -2, c"__newindex".as_ptr());
    lua_setmetatable(l, -2);
}

/// Makes the table on top of the stack, and every table reachable from
/// it (metatables included), read-only.
pub unsafe fn protect_recursively(l: *mut lua_State) {
    if lua_isreadonlytable(l, -1) != 0 {
        return;
    }
    lua_enablereadonlytable(l, -1, 1);
    lua_checkstack(l, 2);
    lua_pushnil(l);
    while lua_next(l, -2) != 0 {
        if lua_type(l, -1) == TTABLE {
            protect_recursively(l);
        }
        pop(l, 1);
    }
    if lua_getmetatable(l, -1) != 0 {
        protect_recursively(l);
        pop(l, 1);
    }
}

unsafe fn load_lib(l: *mut lua_State, name: &CStr, open: CFunction) {
    push_fn(l, open);
    lua_pushstring(l, name.as_ptr());
    lua_call(l, 1, 0);
}

pub unsafe fn register_log(l: *mut lua_State) {
    set_fn(l, c"log", api::log);
    set_number(l, c"LOG_DEBUG", 0.0);
    set_number(l, c"LOG_VERBOSE", 1.0);
    set_number(l, c"LOG_NOTICE", 2.0);
    set_number(l, c"LOG_WARNING", 3.0);
}

pub unsafe fn register_version(l: *mut lua_State) {
    set_number(l, c"REDIS_VERSION_NUM", api::REDIS_VERSION_NUM);
    lua_pushstring(l, api::REDIS_VERSION.as_ptr());
    lua_setfield(l, -2, c"REDIS_VERSION".as_ptr());
}

/// Libraries, the global `pcall`, the `redis` table and math.random.
unsafe fn register_redis_api(l: *mut lua_State) {
    lua_pushvalue(l, GLOBALSINDEX);
    set_allow_list_protection(l);
    pop(l, 1);

    load_lib(l, c"", luaopen_base);
    load_lib(l, c"table", luaopen_table);
    load_lib(l, c"string", luaopen_string);
    load_lib(l, c"math", luaopen_math);
    load_lib(l, c"debug", luaopen_debug);
    load_lib(l, c"cjson", luaopen_cjson);
    load_lib(l, c"struct", luaopen_struct);
    load_lib(l, c"cmsgpack", luaopen_cmsgpack);
    load_lib(l, c"bit", luaopen_bit);

    push_fn(l, api::lua_pcall_global);
    set_global(l, c"pcall");

    new_table(l);
    set_fn(l, c"call", api::redis_call);
    set_fn(l, c"pcall", api::redis_pcall);
    register_log(l);
    register_version(l);
    set_fn(l, c"setresp", api::setresp);
    set_fn(l, c"sha1hex", api::sha1hex);
    set_fn(l, c"error_reply", api::error_reply);
    set_fn(l, c"status_reply", api::status_reply);
    set_fn(l, c"set_repl", api::set_repl);
    set_number(l, c"REPL_NONE", 0.0);
    set_number(l, c"REPL_AOF", 1.0);
    set_number(l, c"REPL_SLAVE", 2.0);
    set_number(l, c"REPL_REPLICA", 2.0);
    set_number(l, c"REPL_ALL", 3.0);
    set_fn(l, c"acl_check_cmd", api::acl_check_cmd);
    set_global(l, c"redis");

    get_global(l, c"math");
    set_fn(l, c"random", api::math_random);
    set_fn(l, c"randomseed", api::math_randomseed);
    set_global(l, c"math");
}

/// The error handler: adds the failing line's source and number (the text
/// of Redis's, which the levels it inspects depend on).
const EVAL_ERROR_HANDLER: &str = concat!(
    "local dbg = debug\n",
    "debug = nil\n",
    "function __redis__err__handler(err)\n",
    "  local i = dbg.getinfo(2,'nSl')\n",
    "  if i and i.what == 'C' then\n",
    "    i = dbg.getinfo(3,'nSl')\n",
    "  end\n",
    "  if type(err) ~= 'table' then\n",
    "    err = {err='ERR ' .. tostring(err)}",
    "  end",
    "  if i then\n",
    "    err['source'] = i.source\n",
    "    err['line'] = i.currentline\n",
    "  end",
    "  return err\n",
    "end\n",
);

const FUNCTION_ERROR_HANDLER: &str = concat!(
    "local dbg = debug\n",
    "debug = nil\n",
    "local error_handler = function (err)\n",
    "  local i = dbg.getinfo(2,'nSl')\n",
    "  if i and i.what == 'C' then\n",
    "    i = dbg.getinfo(3,'nSl')\n",
    "  end\n",
    "  if type(err) ~= 'table' then\n",
    "    err = {err='ERR ' .. tostring(err)}",
    "  end",
    "  if i then\n",
    "    err['source'] = i.source\n",
    "    err['line'] = i.currentline\n",
    "  end",
    "  return err\n",
    "end\n",
    "return error_handler",
);

/// Registry names of the functions VM.
pub const LIBRARY_API: &CStr = c"__LIBRARY_API__";
pub const GLOBALS_API: &CStr = c"__GLOBALS_API__";
pub const ERROR_HANDLER: &CStr = c"__ERROR_HANDLER__";

/// One Lua interpreter, owned by one core.
pub struct Vm {
    pub l: *mut lua_State,
}

impl Vm {
    /// The EVAL VM (`scriptingInit`).
    pub fn for_eval() -> Vm {
        unsafe {
            let l = luaL_newstate();
            register_redis_api(l);
            get_global(l, c"redis");
            set_fn(l, c"breakpoint", api::breakpoint);
            set_fn(l, c"debug", api::debug);
            set_fn(l, c"replicate_commands", api::replicate_commands);
            set_global(l, c"redis");
            if load(l, EVAL_ERROR_HANDLER.as_bytes(), c"@err_handler_def") {
                lua_pcall(l, 0, 0, 0);
            }
            lua_pushvalue(l, GLOBALSINDEX);
            set_error_metatable(l);
            protect_recursively(l);
            pop(l, 1);
            Vm { l }
        }
    }

    /// The functions VM (`luaEngineInitEngine`): libraries load with a
    /// `redis` table that only registers functions and logs.
    pub fn for_functions(register_function: CFunction) -> Vm {
        unsafe {
            let l = luaL_newstate();
            register_redis_api(l);

            new_table(l); // the load-time globals
            new_table(l); // the load-time `redis`
            set_fn(l, c"register_function", register_function);
            register_log(l);
            register_version(l);
            set_error_metatable(l);
            lua_setfield(l, -2, c"redis".as_ptr());
            set_error_metatable(l);
            protect_recursively(l);
            lua_setfield(l, REGISTRYINDEX, LIBRARY_API.as_ptr());

            lua_pushstring(l, ERROR_HANDLER.as_ptr());
            if load(l, FUNCTION_ERROR_HANDLER.as_bytes(), c"@err_handler_def") {
                lua_pcall(l, 0, 1, 0);
            }
            lua_settable(l, REGISTRYINDEX);

            lua_pushvalue(l, GLOBALSINDEX);
            set_error_metatable(l);
            protect_recursively(l);
            pop(l, 1);

            lua_pushvalue(l, GLOBALSINDEX);
            lua_setfield(l, REGISTRYINDEX, GLOBALS_API.as_ptr());

            // New, empty globals whose metatable's __index is swapped between
            // the real globals (run time) and the load-time API.
            new_table(l);
            new_table(l);
            lua_pushvalue(l, GLOBALSINDEX);
            lua_setfield(l, -2, c"__index".as_ptr());
            lua_enablereadonlytable(l, -1, 1);
            lua_setmetatable(l, -2);
            lua_enablereadonlytable(l, -1, 1);
            lua_replace(l, GLOBALSINDEX);
            Vm { l }
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        unsafe { lua_close(self.l) }
    }
}
