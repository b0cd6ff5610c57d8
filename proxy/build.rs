//! Builds the Lua 5.1 interpreter Redis 7.0 ships (deps/lua: Lua 5.1.5 with
//! Redis's read-only tables, plus cjson, cmsgpack, bit and struct) with the
//! flags Redis's deps/Makefile uses, so scripts see the same language.

fn main() {
    let dir = std::path::Path::new("../third_party/lua/src");
    println!("cargo:rerun-if-changed=../third_party/lua/src");
    let files = [
        "lapi.c",
        "lcode.c",
        "ldebug.c",
        "ldo.c",
        "ldump.c",
        "lfunc.c",
        "lgc.c",
        "llex.c",
        "lmem.c",
        "lobject.c",
        "lopcodes.c",
        "lparser.c",
        "lstate.c",
        "lstring.c",
        "ltable.c",
        "ltm.c",
        "lundump.c",
        "lvm.c",
        "lzio.c",
        "strbuf.c",
        "fpconv.c",
        "lauxlib.c",
        "lbaselib.c",
        "ldblib.c",
        "liolib.c",
        "lmathlib.c",
        "loslib.c",
        "ltablib.c",
        "lstrlib.c",
        "loadlib.c",
        "linit.c",
        "lua_cjson.c",
        "lua_struct.c",
        "lua_cmsgpack.c",
        "lua_bit.c",
    ];
    // lua_cjson.c includes Redis's "../../../src/solarisfixes.h" (Solaris
    // only): an empty one, found through an include dir three levels down.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::create_dir_all(out.join("src")).unwrap();
    std::fs::create_dir_all(out.join("a/b/c")).unwrap();
    std::fs::write(out.join("src/solarisfixes.h"), "").unwrap();
    cc::Build::new()
        .files(files.iter().map(|f| dir.join(f)))
        .include(dir)
        .include(out.join("a/b/c"))
        .define("LUA_ANSI", None)
        .define("ENABLE_CJSON_GLOBAL", None)
        .define("REDIS_STATIC", Some(""))
        .define("LUA_USE_MKSTEMP", None)
        .opt_level(2)
        .warnings(false)
        .compile("corekv_lua");
}
