//! Safe exposure on the real binary: protected mode (a client from
//! 127.0.0.2 counts as remote, as in Redis), ACL users with AUTH and HELLO,
//! key patterns over shards, ACL SAVE/LOAD with an aclfile, `user` and
//! `rename-command` directives, and secrets kept out of `ps`.

mod common;

use common::{Raw, Server, TempDir};
use proxy::resp::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::process::{Command, Stdio};
use std::time::Duration;

const DENIED: &str = "DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.";

/// A connection to 127.0.0.1:`port` from 127.0.0.2: local to Linux, remote
/// to Redis's rule (only 127.0.0.1 and ::1 are loopback clients).
fn connect_from_127_0_0_2(port: u16) -> Raw {
    // SAFETY: plain socket calls on a socket this function owns; the fd is
    // handed to the TcpStream, which closes it.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let addr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(ip) },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        let local = addr([127, 0, 0, 2], 0);
        assert_eq!(libc::bind(fd, &local as *const _ as *const libc::sockaddr, len), 0, "bind 127.0.0.2");
        let remote = addr([127, 0, 0, 1], port);
        assert_eq!(libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len), 0, "connect");
        TcpStream::from_raw_fd(fd)
    };
    Raw::from_stream(stream)
}

fn err(text: &str) -> Value {
    Value::Error(text.as_bytes().to_vec())
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

fn bulk(text: &str) -> Value {
    Value::Bulk(text.as_bytes().to_vec())
}

#[test]
fn protected_mode_refuses_remote_clients_until_a_password_is_set() {
    let server = Server::start(&[]);
    let mut remote = connect_from_127_0_0_2(server.port);
    assert_eq!(remote.read(), Some(err(DENIED)));
    assert_eq!(remote.read(), None, "closed after the DENIED line");

    // From 127.0.0.1 everything works; a password opens the door.
    let mut local = server.raw();
    assert_eq!(local.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    assert_eq!(local.cmd_str("CONFIG SET requirepass s3cret"), ok());
    let mut remote = connect_from_127_0_0_2(server.port);
    assert_eq!(remote.cmd_str("PING"), err("NOAUTH Authentication required."));
    assert_eq!(remote.cmd_str("AUTH s3cret"), ok());
    assert_eq!(remote.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));

    // No password again, protected mode off: served too.
    assert_eq!(remote.cmd(&[b"CONFIG", b"SET", b"requirepass", b""]), ok());
    let mut refused = connect_from_127_0_0_2(server.port);
    assert_eq!(refused.read(), Some(err(DENIED)));
    assert_eq!(remote.cmd_str("CONFIG SET protected-mode no"), ok());
    let mut remote = connect_from_127_0_0_2(server.port);
    assert_eq!(remote.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    let Value::Bulk(info) = local.cmd_str("INFO stats") else { panic!() };
    assert!(String::from_utf8_lossy(&info).contains("rejected_connections:2"));
}

#[test]
fn auth_and_hello_auth_as_acl_users() {
    let server = Server::start(&["--requirepass", "dpass"]);
    let mut admin = server.raw();
    assert_eq!(admin.cmd_str("GET x"), err("NOAUTH Authentication required."));
    assert_eq!(admin.cmd_str("AUTH dpass"), ok());
    assert_eq!(admin.cmd_str("ACL SETUSER alice on >apass ~app:* +@read +@write +@connection -@dangerous"), ok());

    let mut alice = server.raw();
    assert_eq!(alice.cmd_str("AUTH alice wrong"), err("WRONGPASS invalid username-password pair or user is disabled."));
    assert_eq!(alice.cmd_str("AUTH alice apass"), ok());
    assert_eq!(alice.cmd_str("ACL WHOAMI"), err("NOPERM this user has no permissions to run the 'acl|whoami' command"));
    assert_eq!(alice.cmd_str("SET app:1 v"), ok());
    assert_eq!(
        alice.cmd_str("SET other v"),
        err("NOPERM this user has no permissions to access one of the keys used as arguments")
    );
    assert_eq!(alice.cmd_str("FLUSHALL"), err("NOPERM this user has no permissions to run the 'flushall' command"));

    let mut hello = server.raw();
    let Value::Map(fields) = hello.cmd_str("HELLO 3 AUTH alice apass SETNAME al") else { panic!("a RESP3 map") };
    assert!(fields.contains(&(bulk("proto"), Value::Int(3))));
    assert_eq!(hello.cmd_str("GET app:1"), bulk("v"));
    assert_eq!(
        hello.cmd_str("HELLO 3 AUTH alice nope"),
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );

    let Value::Bulk(list) = admin.cmd_str("CLIENT LIST") else { panic!() };
    let list = String::from_utf8_lossy(&list);
    assert!(list.contains("name=al ") && list.contains("user=alice"), "{list}");
    assert_eq!(admin.cmd_str("CLIENT KILL USER alice"), Value::Int(2));
    assert_eq!(admin.cmd_str("CLIENT KILL USER nobody"), err("ERR No such user 'nobody'"));

    // Failed AUTHs and denials are in the ACL log, newest first.
    let Value::Array(log) = admin.cmd_str("ACL LOG") else { panic!() };
    let reasons: Vec<Value> = log
        .iter()
        .map(|e| match e {
            Value::Array(f) => f[3].clone(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(reasons, vec![bulk("auth"), bulk("command"), bulk("key"), bulk("command"), bulk("auth")]);
}

#[test]
fn key_patterns_and_changes_reach_every_shard() {
    let server = Server::start(&["--shards", "2"]);
    let mut admin = server.raw();
    assert_eq!(admin.cmd_str("ACL SETUSER bob on >b ~a:* %R~ro:* +@all"), ok());
    // Keys spread over both shards; connections land on both cores.
    let keys: Vec<String> = (0..16).map(|i| format!("{i}")).collect();
    for k in &keys {
        assert_eq!(admin.cmd_str(&format!("SET a:{k} v")), ok());
        assert_eq!(admin.cmd_str(&format!("SET ro:{k} v")), ok());
    }
    let mut conns: Vec<Raw> = (0..8).map(|_| server.raw()).collect();
    for c in &mut conns {
        assert_eq!(c.cmd_str("AUTH bob b"), ok());
        for k in &keys {
            assert_eq!(c.cmd_str(&format!("GET a:{k}")), bulk("v"));
            assert_eq!(c.cmd_str(&format!("GET ro:{k}")), bulk("v"));
            assert_eq!(
                c.cmd_str(&format!("SET ro:{k} w")),
                err("NOPERM this user has no permissions to access one of the keys used as arguments")
            );
            assert_eq!(
                c.cmd_str(&format!("GET b:{k}")),
                err("NOPERM this user has no permissions to access one of the keys used as arguments")
            );
        }
        // One multi-key command over both shards: denied as a whole.
        assert_eq!(
            c.cmd_str("MGET a:1 a:2 a:3 b:4"),
            err("NOPERM this user has no permissions to access one of the keys used as arguments")
        );
    }
    // A change made on one core holds on every core at once.
    assert_eq!(admin.cmd_str("ACL SETUSER bob -get"), ok());
    for c in &mut conns {
        assert_eq!(c.cmd_str("GET a:1"), err("NOPERM this user has no permissions to run the 'get' command"));
        assert_eq!(c.cmd_str("EXISTS a:1"), Value::Int(1));
    }
    // Deleting the user closes its connections.
    assert_eq!(admin.cmd_str("ACL DELUSER bob"), Value::Int(1));
    for c in &mut conns {
        assert!(c.closed(), "a deleted user's connection is closed");
    }
    assert_eq!(admin.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    // A user deleting itself gets its reply, then the connection closes.
    assert_eq!(admin.cmd_str("ACL SETUSER root on >r +@all ~*"), ok());
    let mut root = server.raw();
    assert_eq!(root.cmd_str("AUTH root r"), ok());
    assert_eq!(root.cmd_str("ACL DELUSER root"), Value::Int(1));
    assert!(root.closed());
}

#[test]
fn acl_save_and_load_with_an_aclfile() {
    let dir = TempDir::new("aclfile");
    let aclfile = format!("{}/users.acl", dir.path());
    std::fs::write(&aclfile, "user carol on >c ~c:* +get\n").unwrap();
    let server = Server::start(&["--aclfile", &aclfile]);
    let mut admin = server.raw();
    assert_eq!(admin.cmd_str("ACL USERS"), Value::Array(vec![bulk("carol"), bulk("default")]));
    assert_eq!(admin.cmd_str("ACL SETUSER dan on nopass ~d:* +@hash"), ok());
    assert_eq!(admin.cmd_str("ACL SAVE"), ok());
    let saved = std::fs::read_to_string(&aclfile).unwrap();
    assert!(saved.contains("user dan on nopass ~d:* resetchannels -@all +@hash\n"), "{saved}");
    assert!(saved.contains("user default on nopass ~* &* +@all\n"), "{saved}");

    let mut carol = server.raw();
    assert_eq!(carol.cmd_str("AUTH carol c"), ok());
    // ACL LOAD replaces the table and closes the connections of its users.
    std::fs::write(&aclfile, "user erin on >e ~* +@all\nuser default on nopass ~* &* +@all\n").unwrap();
    assert_eq!(admin.cmd_str("ACL LOAD"), ok());
    assert_eq!(admin.cmd_str("ACL USERS"), Value::Array(vec![bulk("default"), bulk("erin")]));
    assert!(carol.closed());
    std::fs::write(&aclfile, "user broken on +nosuchcommand\nnot-a-user\n").unwrap();
    let Value::Error(e) = admin.cmd_str("ACL LOAD") else { panic!() };
    let e = String::from_utf8_lossy(&e).into_owned();
    assert!(e.starts_with("ERR ") && e.contains("Error in applying operation '+nosuchcommand'"), "{e}");
    assert!(e.ends_with("WARNING: ACL errors detected, no change to the previously active ACL rules was performed"));
    assert_eq!(admin.cmd_str("ACL USERS"), Value::Array(vec![bulk("default"), bulk("erin")]));
    drop(server);

    // A start with the saved file has its users.
    std::fs::write(&aclfile, saved).unwrap();
    let server = Server::start(&["--aclfile", &aclfile]);
    let mut c = server.raw();
    assert_eq!(c.cmd_str("AUTH dan any"), ok());
    assert_eq!(c.cmd_str("ACL WHOAMI"), err("NOPERM this user has no permissions to run the 'acl|whoami' command"));
    assert_eq!(c.cmd_str("HSET d:1 f v"), Value::Int(1));
}

/// Starts corekv with a config file (the file comes first, as for
/// redis-server).
fn start_with_config(conf: &str) -> Result<Server, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_corekv"))
        .args([conf, "--port", "0", "--save", ""])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.split("Ready to accept connections tcp on ").nth(1) {
                let _ = tx.send(addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()));
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(port)) => Ok(Server { child, port, log }),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            Err(err)
        }
    }
}

#[test]
fn rename_command_and_user_directives_in_the_config_file() {
    let dir = TempDir::new("rename");
    let conf = format!("{}/corekv.conf", dir.path());
    std::fs::write(
        &conf,
        "bind 127.0.0.1\nrename-command FLUSHALL \"\"\nrename-command config my-config\nuser frank on >f ~* +@all -flushdb\n",
    )
    .unwrap();
    let server = start_with_config(&conf).unwrap();
    let mut c = server.raw();
    assert_eq!(c.cmd_str("FLUSHALL"), err("ERR unknown command 'FLUSHALL', with args beginning with: "));
    assert_eq!(
        c.cmd_str("CONFIG GET port"),
        err("ERR unknown command 'CONFIG', with args beginning with: 'GET' 'port' ")
    );
    let Value::Array(port) = c.cmd_str("MY-CONFIG GET port") else { panic!() };
    assert_eq!(port[0], bulk("port"));
    assert_eq!(c.cmd_str("AUTH frank f"), ok());
    assert_eq!(c.cmd_str("FLUSHDB"), err("NOPERM this user has no permissions to run the 'flushdb' command"));
    // ACL rules name the original commands.
    assert_eq!(c.cmd_str("ACL SETUSER frank -config|get"), ok());
    assert_eq!(
        c.cmd_str("MY-CONFIG GET port"),
        err("NOPERM this user has no permissions to run the 'config|get' command")
    );
    drop(server);

    std::fs::write(&conf, "rename-command nosuch other\n").unwrap();
    let e = start_with_config(&conf).err().expect("refused");
    assert!(e.contains("No such command in rename-command"), "{e}");
    std::fs::write(&conf, "user a on +nosuch\n").unwrap();
    let e = start_with_config(&conf).err().expect("refused");
    assert!(e.contains("Unknown command or category name in ACL"), "{e}");
}

#[test]
fn passwords_stay_out_of_ps_and_config_dumps() {
    let server = Server::start(&["--requirepass", "hunter2-secret", "--masterauth", "m4ster-secret"]);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.child.id())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(!cmdline.contains("secret"), "{cmdline}");
    assert!(cmdline.starts_with(&format!("corekv 127.0.0.1:{}", server.port)), "{cmdline}");
    let ps = Command::new("ps").args(["-o", "args=", "-p", &server.child.id().to_string()]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(ps.contains("corekv") && !ps.contains("secret"), "{ps}");
    // CONFIG GET answers as Redis 7.0 does (to an authenticated admin).
    let mut c = server.raw();
    assert_eq!(c.cmd_str("AUTH hunter2-secret"), ok());
    assert_eq!(c.cmd_str("CONFIG GET requirepass"), Value::Array(vec![bulk("requirepass"), bulk("hunter2-secret")]));

    let checked = Command::new(env!("CARGO_BIN_EXE_corekv"))
        .args(["--check-config", "--requirepass", "hunter2-secret", "--masterauth", "m4ster-secret"])
        .output()
        .unwrap();
    assert!(checked.status.success());
    let out = String::from_utf8_lossy(&checked.stdout);
    assert!(out.contains("requirepass (redacted)") && out.contains("masterauth (redacted)"), "{out}");
    assert!(!out.contains("secret"));
    let bad = Command::new(env!("CARGO_BIN_EXE_corekv")).args(["--requirepass", "a-secret", "b"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("secret"));
}

#[test]
fn acl_log_groups_denials_from_every_core_as_one_log() {
    let server = Server::start(&["--shards", "2"]);
    let mut admin = server.raw();
    assert_eq!(admin.cmd_str("ACL SETUSER limited on >p +get ~*"), ok());
    // Connections on both cores (a client id tells its core).
    let mut on_core = [Vec::new(), Vec::new()];
    while on_core.iter().any(|c| c.len() < 3) {
        let mut c = server.raw();
        let Value::Int(id) = c.cmd_str("CLIENT ID") else { panic!() };
        let core = ((id - 1) % 2) as usize;
        if on_core[core].len() < 3 {
            assert_eq!(c.cmd_str("AUTH limited p"), ok());
            on_core[core].push(c);
        }
    }
    for c in on_core.iter_mut().flatten() {
        assert_eq!(c.cmd_str("SET k v"), err("NOPERM this user has no permissions to run the 'set' command"));
    }
    // Redis's one log: the six denials are one entry (same reason, context,
    // object and user), not one per core.
    let Value::Array(log) = admin.cmd_str("ACL LOG") else { panic!() };
    assert_eq!(log.len(), 1, "{log:?}");
    let Value::Array(fields) = &log[0] else { panic!() };
    assert_eq!(
        fields[0..6],
        [bulk("count"), Value::Int(6), bulk("reason"), bulk("command"), bulk("context"), bulk("toplevel")]
    );
    assert_eq!(admin.cmd_str("ACL LOG RESET"), ok());
    let Value::Array(log) = admin.cmd_str("ACL LOG") else { panic!() };
    assert!(log.is_empty());
}
