//! The engine driven by a fake host that answers a few commands.

use super::*;

/// Answers GET/SET/PING/ERR from a map, in RESP2 or RESP3.
#[derive(Default)]
struct FakeHost {
    data: HashMap<Vec<u8>, Vec<u8>>,
    calls: Vec<Vec<Vec<u8>>>,
}

impl Host for FakeHost {
    fn call(&mut self, argv: &[&[u8]], call: &mut CallState) -> Result<Vec<u8>, String> {
        self.calls.push(argv.iter().map(|a| a.to_vec()).collect());
        let name = String::from_utf8_lossy(argv[0]).to_ascii_lowercase();
        Ok(match name.as_str() {
            "ping" => b"+PONG\r\n".to_vec(),
            "set" => {
                if call.read_only {
                    return Err("Write commands are not allowed from read-only scripts.".into());
                }
                call.write_dirty = true;
                self.data.insert(argv[1].to_vec(), argv[2].to_vec());
                b"+OK\r\n".to_vec()
            }
            "get" => match self.data.get(argv[1]) {
                Some(v) => format!("${}\r\n{}\r\n", v.len(), String::from_utf8_lossy(v)).into_bytes(),
                None if call.resp3 => b"_\r\n".to_vec(),
                None => b"$-1\r\n".to_vec(),
            },
            "hgetall" if call.resp3 => b"%1\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec(),
            "hgetall" => b"*2\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec(),
            "double" => b",3.5\r\n".to_vec(),
            "wrongtype" => b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n".to_vec(),
            _ => return Err("Unknown Redis command called from script".into()),
        })
    }
}

fn opts(resp3: bool) -> RunOptions<'static> {
    RunOptions {
        client_resp3: resp3,
        read_only_command: false,
        cluster_enabled: false,
        db: 0,
        busy_threshold_ms: 5000,
        status: None,
        slot: None,
        oom: false,
        command: Default::default(),
        engine_counts: (0, 0),
    }
}

fn eval_with(
    engine: &mut Engine,
    host: &mut FakeHost,
    script: &str,
    keys: &[&str],
    args: &[&str],
    resp3: bool,
) -> String {
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let args: Vec<&[u8]> = args.iter().map(|k| k.as_bytes()).collect();
    String::from_utf8(engine.eval(host, script.as_bytes(), false, &keys, &args, &opts(resp3))).unwrap()
}

fn eval(script: &str) -> String {
    eval_with(&mut Engine::new(), &mut FakeHost::default(), script, &[], &[], false)
}

fn eval3(script: &str) -> String {
    eval_with(&mut Engine::new(), &mut FakeHost::default(), script, &[], &[], true)
}

#[test]
fn return_values_resp2() {
    assert_eq!(eval("return 1"), ":1\r\n");
    assert_eq!(eval("return 3.99"), ":3\r\n");
    assert_eq!(eval("return -3.99"), ":-3\r\n");
    assert_eq!(eval("return 'x'"), "$1\r\nx\r\n");
    assert_eq!(eval("return true"), ":1\r\n");
    assert_eq!(eval("return false"), "$-1\r\n");
    assert_eq!(eval("return nil"), "$-1\r\n");
    assert_eq!(eval("return {1,2,nil,4}"), "*2\r\n:1\r\n:2\r\n");
    assert_eq!(eval("return {1,{'a',{}}}"), "*2\r\n:1\r\n*2\r\n$1\r\na\r\n*0\r\n");
    assert_eq!(eval("return {ok='fine'}"), "+fine\r\n");
    assert_eq!(eval("return {err='bad thing'}"), "-bad thing\r\n");
    assert_eq!(eval("return redis.error_reply('My Error')"), "-My Error\r\n");
    assert_eq!(eval("return redis.error_reply('x')"), "-ERR x\r\n");
    assert_eq!(eval("return redis.status_reply('HI')"), "+HI\r\n");
    assert_eq!(eval("return {double=3.5}"), "$3\r\n3.5\r\n");
    assert_eq!(eval("return {big_number='123'}"), "$3\r\n123\r\n");
    assert_eq!(eval("return {map={a=1}}"), "*2\r\n$1\r\na\r\n:1\r\n");
    assert_eq!(eval("return {set={a=true}}"), "*1\r\n$1\r\na\r\n");
}

#[test]
fn return_values_resp3() {
    assert_eq!(eval3("return false"), "_\r\n");
    assert_eq!(eval3("redis.setresp(3) return false"), "#f\r\n");
    assert_eq!(eval3("redis.setresp(3) return true"), "#t\r\n");
    assert_eq!(eval3("return {double=3.5}"), ",3.5\r\n");
    assert_eq!(eval3("return {double=1/0}"), ",inf\r\n");
    assert_eq!(eval3("return {big_number='12'}"), "(12\r\n");
    assert_eq!(eval3("return {map={a=1}}"), "%1\r\n$1\r\na\r\n:1\r\n");
    assert_eq!(eval3("return {set={a=true}}"), "~1\r\n$1\r\na\r\n");
    assert_eq!(eval3("return {verbatim_string={format='txt', string='hi'}}"), "=6\r\ntxt:hi\r\n");
    assert_eq!(eval("return {verbatim_string={format='txt', string='hi'}}"), "$2\r\nhi\r\n");
}

#[test]
fn calls_and_conversions() {
    let (mut e, mut h) = (Engine::new(), FakeHost::default());
    assert_eq!(
        eval_with(&mut e, &mut h, "return redis.call('set', KEYS[1], ARGV[1])", &["k"], &["v"], false),
        "+OK\r\n"
    );
    assert_eq!(eval_with(&mut e, &mut h, "return redis.call('get', 'k')", &[], &[], false), "$1\r\nv\r\n");
    assert_eq!(eval_with(&mut e, &mut h, "return redis.call('get', 'nope')", &[], &[], false), "$-1\r\n");
    assert_eq!(
        eval_with(&mut e, &mut h, "return type(redis.call('get', 'nope'))", &[], &[], false),
        "$7\r\nboolean\r\n"
    );
    assert_eq!(
        eval_with(&mut e, &mut h, "redis.setresp(3) return type(redis.call('get', 'nope'))", &[], &[], false),
        "$3\r\nnil\r\n"
    );
    assert_eq!(eval_with(&mut e, &mut h, "return redis.call('ping')['ok']", &[], &[], false), "$4\r\nPONG\r\n");
    assert_eq!(
        eval_with(&mut e, &mut h, "redis.setresp(3) return redis.call('hgetall', 'h')", &[], &[], true),
        "%1\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        eval_with(&mut e, &mut h, "redis.setresp(3) return redis.call('double')['double']", &[], &[], false),
        ":3\r\n"
    );
    // Numbers go out as %.17g.
    eval_with(&mut e, &mut h, "redis.call('set', 'n', 1.5)", &[], &[], false);
    assert_eq!(h.calls.last().unwrap()[2], b"1.5");
    eval_with(&mut e, &mut h, "redis.call('set', 'n', 10)", &[], &[], false);
    assert_eq!(h.calls.last().unwrap()[2], b"10");
}

#[test]
fn errors() {
    let sha = sha1_hex(b"return redis.call('nosuch')");
    assert_eq!(
        eval("return redis.call('nosuch')"),
        format!("-ERR Unknown Redis command called from script script: {sha}, on @user_script:1.\r\n")
    );
    let sha = sha1_hex(b"return redis.call('wrongtype')");
    assert_eq!(
        eval("return redis.call('wrongtype')"),
        format!(
            "-WRONGTYPE Operation against a key holding the wrong kind of value script: {sha}, on @user_script:1.\r\n"
        )
    );
    assert_eq!(
        eval("return redis.pcall('wrongtype')"),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    let body = "\n\nerror('boom')";
    let sha = sha1_hex(body.as_bytes());
    assert_eq!(eval(body), format!("-ERR user_script:3: boom script: {sha}, on @user_script:3.\r\n"));
    assert!(eval("return +").starts_with("-ERR Error compiling script (new function): user_script:1:"));
    let body = "return x";
    let sha = sha1_hex(body.as_bytes());
    assert_eq!(
        eval(body),
        format!("-ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: {sha}, on @user_script:1.\r\n")
    );
    assert!(eval("x = 1").contains("Attempt to modify a readonly table"));
    assert!(eval("string.len = nil").contains("Attempt to modify a readonly table"));
    assert!(eval("return loadfile").contains("nonexistent global variable 'loadfile'"));
    assert!(eval("redis.call()").contains("Please specify at least one argument for this redis lib call"));
    assert!(eval("redis.call({})").contains("Lua redis lib command arguments must be strings or integers"));
    assert_eq!(
        eval("local ok, e = pcall(redis.call, 'nosuch') return e"),
        "$44\r\nERR Unknown Redis command called from script\r\n"
    );
}

#[test]
fn read_only_scripts() {
    let (mut e, mut h) = (Engine::new(), FakeHost::default());
    let o = RunOptions { read_only_command: true, ..opts(false) };
    let out = e.eval(&mut h, b"#!lua\nreturn 1", false, &[], &[], &o);
    assert_eq!(out, b"-ERR Can not execute a script with write flag using *_ro command.\r\n");
    let out = e.eval(&mut h, b"#!lua flags=no-writes\nreturn redis.call('set','a','b')", false, &[], &[], &opts(false));
    assert!(String::from_utf8_lossy(&out).starts_with("-ERR Write commands are not allowed from read-only scripts."));
    let out = e.eval(&mut h, b"return redis.call('set','a','b')", false, &[], &[], &o);
    assert!(String::from_utf8_lossy(&out).starts_with("-ERR Write commands are not allowed from read-only scripts."));
}

#[test]
fn cache_and_evalsha() {
    let (mut e, mut h) = (Engine::new(), FakeHost::default());
    let sha = e.load(b"return 'cached'").unwrap();
    assert!(e.exists(sha.as_bytes()));
    assert!(e.exists(sha.to_uppercase().as_bytes()));
    assert_eq!(e.eval(&mut h, sha.to_uppercase().as_bytes(), true, &[], &[], &opts(false)), b"$6\r\ncached\r\n");
    assert_eq!(e.eval(&mut h, b"abc", true, &[], &[], &opts(false)), NOSCRIPT);
    e.flush();
    assert!(!e.exists(sha.as_bytes()));
    assert_eq!(e.eval(&mut h, sha.as_bytes(), true, &[], &[], &opts(false)), NOSCRIPT);
}

#[test]
fn libraries() {
    assert_eq!(eval("return cjson.encode({1,2,'x'})"), "$9\r\n[1,2,\"x\"]\r\n");
    assert_eq!(eval("return cjson.decode('{\"a\":[1,2]}').a[2]"), ":2\r\n");
    assert_eq!(eval("return cmsgpack.unpack(cmsgpack.pack({1,2,3}))"), "*3\r\n:1\r\n:2\r\n:3\r\n");
    assert_eq!(eval("return bit.band(0xff, 0x0f)"), ":15\r\n");
    assert_eq!(eval("return struct.unpack('>I2', struct.pack('>I2', 513))"), ":513\r\n");
    assert_eq!(eval("return redis.sha1hex('')"), "$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n");
    assert_eq!(eval("return redis.REDIS_VERSION"), "$6\r\n7.0.15\r\n");
}

#[test]
fn deterministic_random() {
    // Redis 7.0's first two math.random() values on a fresh server.
    let (mut e, mut h) = (Engine::new(), FakeHost::default());
    let script = "return {math.random(), tostring(math.random())}";
    let out = eval_with(&mut e, &mut h, script, &[], &[], false);
    assert_eq!(out, "*2\r\n:0\r\n$16\r\n0.84048536971234\r\n");
}

fn fcall(engine: &mut Engine, host: &mut FakeHost, name: &str, keys: &[&str], args: &[&str]) -> String {
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let args: Vec<&[u8]> = args.iter().map(|k| k.as_bytes()).collect();
    String::from_utf8(engine.fcall(host, name.as_bytes(), &keys, &args, &opts(false))).unwrap()
}

#[test]
fn functions_load_and_call() {
    let (mut e, mut h) = (Engine::new(), FakeHost::default());
    let lib = b"#!lua name=lib\nredis.register_function('echo', function(keys, args) return {keys[1], args[1]} end)\nredis.register_function{function_name='ro', callback=function(keys) return redis.call('set', keys[1], 'x') end, flags={'no-writes'}}";
    assert_eq!(e.functions.load(lib, false), Ok("lib".to_string()));
    assert_eq!(e.functions.load(lib, false), Err("ERR Library 'lib' already exists".to_string()));
    assert_eq!(e.functions.load(lib, true), Ok("lib".to_string()));
    assert_eq!(fcall(&mut e, &mut h, "echo", &["k"], &["a"]), "*2\r\n$1\r\nk\r\n$1\r\na\r\n");
    assert!(fcall(&mut e, &mut h, "ro", &["k"], &[])
        .starts_with("-ERR Write commands are not allowed from read-only scripts. script: ro, on @user_function:3."));
    assert_eq!(fcall(&mut e, &mut h, "nosuch", &[], &[]), "-ERR Function not found\r\n");
    let clash = b"#!lua name=other\nredis.register_function('echo', function() end)";
    assert_eq!(e.functions.load(clash, false), Err("ERR Function echo already exists".to_string()));
    assert_eq!(e.functions.delete(b"lib"), Ok(()));
    assert_eq!(e.functions.delete(b"lib"), Err("ERR Library not found".to_string()));
    assert_eq!(e.functions.load(clash, false), Ok("other".to_string()));
}

#[test]
fn functions_load_errors() {
    let mut f = functions::Functions::new();
    let mut load = |code: &str| f.load(code.as_bytes(), false).unwrap_err();
    assert_eq!(load("return 1"), "ERR Missing library metadata");
    assert_eq!(load("#!lua"), "ERR Invalid library metadata");
    assert_eq!(load("#!lua\n"), "ERR Library name was not given");
    assert_eq!(load("#!lua name=a-b\n"), "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long");
    assert_eq!(load("#!js name=a\n"), "ERR Engine 'js' not found");
    assert_eq!(load("#!lua name=a\nreturn 1"), "ERR No functions registered");
    assert!(load("#!lua name=a\nlocal x = +").starts_with("ERR Error compiling function: user_function:2:"));
    assert_eq!(
        load("#!lua name=a\nredis.call('ping')"),
        "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'"
    );
    assert_eq!(
        load("#!lua name=a\nredis.register_function('f', 1)"),
        "ERR Error registering functions: ERR second argument to redis.register_function must be a function"
    );
}

#[test]
fn function_dump_payload_round_trip() {
    let (mut e, _) = (Engine::new(), FakeHost::default());
    let lib = b"#!lua name=lib\nredis.register_function('f', function() return 1 end)".to_vec();
    e.functions.load(&lib, false).unwrap();
    let payload = shard::rdb::functions_dump_payload(&e.functions.codes());
    assert_eq!(shard::rdb::functions_restore_payload(&payload), Ok(vec![lib.clone()]));
    let mut other = functions::Functions::new();
    other.restore(std::slice::from_ref(&lib), functions::RestorePolicy::Append).unwrap();
    assert_eq!(
        other.restore(std::slice::from_ref(&lib), functions::RestorePolicy::Append),
        Err("ERR Library lib already exists".into())
    );
    assert_eq!(other.restore(&[lib], functions::RestorePolicy::Replace), Ok(()));
}
