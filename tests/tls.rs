//! TLS end to end: certificates made by openssl at test time, the real
//! binary with `tls-port`, and real clients over TLS: redis-cli --tls, the
//! `redis` crate (rustls), a cluster client in both cluster modes, and
//! replication over TLS both ways (corekv primary → redis-server replica,
//! corekv replica with tls-replication → corekv primary).

mod common;

use common::{ensure_test_deps, Redis, Server, TempDir};
use redis::Commands;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

/// A CA, and a server and a client certificate it signed (both valid for
/// 127.0.0.1 and localhost), in `dir`.
fn make_certs(dir: &str) {
    ensure_test_deps();
    let run = |args: &[&str]| {
        let out =
            Command::new("openssl").args(args).current_dir(dir).output().expect("openssl (scripts/setup-test-deps.sh)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=corekv test CA",
    ]);
    std::fs::write(format!("{dir}/san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    for name in ["server", "client"] {
        let (key, csr, crt) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"));
        run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &format!("/CN={name}")]);
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]);
    }
}

struct Tls {
    dir: TempDir,
    port: u16,
}

impl Tls {
    fn new(name: &str) -> Tls {
        let dir = TempDir::new(name);
        make_certs(dir.path());
        Tls { dir, port: free_port() }
    }

    fn file(&self, name: &str) -> String {
        format!("{}/{name}", self.dir.path())
    }

    /// The server's TLS arguments.
    fn server_args(&self) -> Vec<String> {
        [
            ("--tls-port", self.port.to_string()),
            ("--tls-cert-file", self.file("server.crt")),
            ("--tls-key-file", self.file("server.key")),
            ("--tls-ca-cert-file", self.file("ca.crt")),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }

    fn start(&self, extra: &[&str]) -> Server {
        let mut args = self.server_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start(&args)
    }

    /// redis-cli over TLS; `cert`: present the client certificate.
    fn cli(&self, port: u16, cert: bool, command: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-p", &port.to_string(), "--tls", "--cacert", &self.file("ca.crt")]);
        if cert {
            cmd.args(["--cert", &self.file("client.crt"), "--key", &self.file("client.key")]);
        }
        let out = cmd.args(command).output().expect("redis-cli");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_string()
    }

    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: std::fs::read(self.file("client.crt")).unwrap(),
                client_key: std::fs::read(self.file("client.key")).unwrap(),
            }),
            root_cert: Some(std::fs::read(self.file("ca.crt")).unwrap()),
        }
    }

    fn client(&self, port: u16) -> redis::Connection {
        redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}/"), self.certificates())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn redis_cli_over_tls() {
    let tls = Tls::new("tls-cli");
    let server = tls.start(&["--shards", "2"]);
    assert_eq!(tls.cli(tls.port, true, &["PING"]), "PONG");
    assert_eq!(tls.cli(tls.port, true, &["SET", "greeting", "hello over tls"]), "OK");
    assert_eq!(tls.cli(tls.port, true, &["GET", "greeting"]), "hello over tls");
    // The plain port serves the same data.
    let mut plain = server.raw();
    assert_eq!(plain.cmd_str("GET greeting"), proxy::resp::Value::Bulk(b"hello over tls".to_vec()));
    assert!(server
        .log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains(&format!("Ready to accept connections tls on 127.0.0.1:{}", tls.port))));
}

#[test]
fn auth_clients_yes_refuses_a_client_without_certificate() {
    let tls = Tls::new("tls-auth");
    let _server = tls.start(&[]);
    assert_eq!(tls.cli(tls.port, true, &["PING"]), "PONG");
    let refused = tls.cli(tls.port, false, &["PING"]);
    assert!(!refused.contains("PONG"), "a client without a certificate was served: {refused}");

    let optional = Tls { dir: TempDir::new("tls-auth-opt"), port: free_port() };
    make_certs(optional.dir.path());
    let _server = optional.start(&["--tls-auth-clients", "optional"]);
    assert_eq!(optional.cli(optional.port, false, &["PING"]), "PONG");
    assert_eq!(optional.cli(optional.port, true, &["PING"]), "PONG");
}

#[test]
fn bad_certificate_files_stop_the_start() {
    let tls = Tls::new("tls-bad");
    let port = tls.port.to_string();
    let ca = tls.file("ca.crt");
    let missing = tls.file("missing.crt");
    let key = tls.file("server.key");
    let err = Server::try_start(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &missing,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
    ])
    .err()
    .expect("started with a missing certificate");
    assert!(err.contains(&format!("Failed to load certificate: {missing}: No such file or directory")), "{err}");
    // A certificate given as the key.
    let cert = tls.file("server.crt");
    let err = Server::try_start(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &cert,
        "--tls-ca-cert-file",
        &ca,
    ])
    .err()
    .expect("started with a certificate as its key");
    assert!(err.contains(&format!("Failed to load private key: {cert}")), "{err}");
    // tls-auth-clients yes (the default) needs a CA.
    let err = Server::try_start(&["--tls-port", &port, "--tls-cert-file", &cert, "--tls-key-file", &key])
        .err()
        .expect("started with no CA");
    assert!(err.contains("Either tls-ca-cert-file or tls-ca-cert-dir must be specified"), "{err}");
    let err = Server::try_start(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-protocols",
        "SSLv3",
    ])
    .err()
    .expect("started with a bad tls-protocols");
    assert!(err.contains("Invalid tls-protocols specified"), "{err}");
}

#[test]
fn redis_crate_over_tls_big_values_and_pipelines() {
    let tls = Tls::new("tls-crate");
    for ring in ["yes", "no"] {
        let port = free_port();
        let args = ["--shards", "2", "--client-ring", ring, "--tls-port", &port.to_string()];
        let mut all = tls.server_args();
        all.extend(args.iter().map(|s| s.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let _server = Server::start(&all);
        let mut c = tls.client(port);
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let _: () = c.set("big", &big).unwrap();
        let got: Vec<u8> = c.get("big").unwrap();
        assert!(got == big, "3 MB value through TLS ({ring})");
        // Replies from both shards, many per read.
        let mut pipe = redis::pipe();
        for i in 0..2000 {
            pipe.set(format!("k{i}"), i).ignore();
        }
        for i in 0..2000 {
            pipe.get(format!("k{i}"));
        }
        let values: Vec<i64> = pipe.query(&mut c).unwrap();
        assert_eq!(values, (0..2000).collect::<Vec<i64>>());
        // Large replies in one pipeline: more than the TLS layer's buffer.
        let mut pipe = redis::pipe();
        for _ in 0..8 {
            pipe.get("big");
        }
        let bigs: Vec<Vec<u8>> = pipe.query(&mut c).unwrap();
        assert!(bigs.iter().all(|b| *b == big));
    }
}

fn cluster_over_tls(tls: &Tls, args: &[&str], entry: u16) {
    let mut all = tls.server_args();
    all.extend(args.iter().map(|s| s.to_string()));
    all.extend(["--tls-cluster", "yes", "--shards", "2"].iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let _server = Server::start(&all);
    let client = redis::cluster::ClusterClient::builder(vec![format!("rediss://127.0.0.1:{entry}/")])
        .certs(tls.certificates())
        .build()
        .unwrap();
    let mut conn = client.get_connection().unwrap();
    for i in 0..500 {
        let _: () = conn.set(format!("key:{i}"), i).unwrap();
    }
    for i in 0..500 {
        let v: i64 = conn.get(format!("key:{i}")).unwrap();
        assert_eq!(v, i);
    }
}

#[test]
fn cluster_client_over_tls() {
    let tls = Tls::new("tls-cluster");
    // Emulated: one node, announced at the TLS port.
    cluster_over_tls(&tls, &["--cluster-mode", "emulated"], tls.port);
    // Per-core: every shard's node port speaks TLS.
    let base = loop {
        let base = free_port();
        if base < 60000 && (0..2).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            break base;
        }
    };
    let tls = Tls { port: free_port(), ..tls };
    cluster_over_tls(&tls, &["--cluster-mode", "per-core", "--cluster-port-base", &base.to_string()], base);
}

fn info_field(c: &mut redis::Connection, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg("replication").query(c).ok()?;
    info.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
}

#[test]
fn replication_over_tls() {
    let tls = Tls::new("tls-repl");
    let primary = tls.start(&["--shards", "2"]);
    let mut p = primary.client();
    for i in 0..100 {
        let _: () = p.set(format!("before:{i}"), i).unwrap();
    }
    // A corekv replica whose link to the primary is TLS.
    let replica_dir = TempDir::new("tls-repl-replica");
    let mut args = vec![
        "--replicaof".to_string(),
        "127.0.0.1".into(),
        tls.port.to_string(),
        "--tls-replication".into(),
        "yes".into(),
        "--tls-cert-file".into(),
        tls.file("client.crt"),
        "--tls-key-file".into(),
        tls.file("client.key"),
        "--tls-ca-cert-file".into(),
        tls.file("ca.crt"),
        "--dir".into(),
        replica_dir.path().into(),
    ];
    args.extend(["--shards".into(), "2".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replica = Server::start(&args);
    let mut r = replica.client();
    wait_for("the corekv replica's TLS link", || info_field(&mut r, "master_link_status").as_deref() == Some("up"));
    for i in 0..100 {
        let _: () = p.set(format!("after:{i}"), i).unwrap();
    }
    wait_for("the corekv replica to catch up", || r.get::<_, Option<i64>>("after:99").unwrap() == Some(99));
    assert_eq!(r.get::<_, i64>("before:42").unwrap(), 42);

    // redis-server as the replica, its link to corekv's TLS port.
    let redis_dir = TempDir::new("tls-repl-redis");
    let (port, cert, key, ca) =
        (tls.port.to_string(), tls.file("client.crt"), tls.file("client.key"), tls.file("ca.crt"));
    let redis = Redis::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--tls-replication",
        "yes",
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--dir",
        redis_dir.path(),
    ]);
    let mut rr = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port)).unwrap().get_connection().unwrap();
    wait_for("redis-server's TLS link", || info_field(&mut rr, "master_link_status").as_deref() == Some("up"));
    let _: () = p.set("last", "over tls").unwrap();
    wait_for("redis-server to catch up", || {
        rr.get::<_, Option<String>>("last").unwrap().as_deref() == Some("over tls")
    });
    assert_eq!(rr.get::<_, i64>("after:7").unwrap(), 7);
}

/// `server.key` encrypted as OpenSSL writes PKCS#8 (PBES2, AES-256-CBC).
fn encrypt_key(tls: &Tls, pass: &str) -> String {
    let out = Command::new("openssl")
        .args(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "server.key", "-out", "server-enc.key"])
        .args(["-passout", &format!("pass:{pass}")])
        .current_dir(tls.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    tls.file("server-enc.key")
}

#[test]
fn encrypted_key_with_tls_key_file_pass() {
    let tls = Tls::new("tls-pass");
    let key = encrypt_key(&tls, "sesame");
    assert!(std::fs::read_to_string(&key).unwrap().contains("BEGIN ENCRYPTED PRIVATE KEY"));
    let args = |port: u16, pass: &str| {
        let mut a = vec!["--tls-port".to_string(), port.to_string(), "--tls-cert-file".into(), tls.file("server.crt")];
        a.extend(["--tls-key-file".into(), key.clone(), "--tls-ca-cert-file".into(), tls.file("ca.crt")]);
        if !pass.is_empty() {
            a.extend(["--tls-key-file-pass".into(), pass.into()]);
        }
        a
    };
    let start = |pass: &str| {
        let a = args(tls.port, pass);
        Server::try_start(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let err = start("wrong").err().expect("started with a wrong passphrase");
    assert!(err.contains(&format!("Failed to load private key: {key}: bad decrypt")), "{err}");
    let err = start("").err().expect("started with no passphrase");
    assert!(err.contains("no passphrase is set (tls-key-file-pass)"), "{err}");
    let _server = start("sesame").unwrap();
    assert_eq!(tls.cli(tls.port, true, &["PING"]), "PONG");
    // The replica link's key (tls-client-key-file-pass), checked at start.
    let client = |pass: &str| {
        let mut a =
            vec!["--tls-replication", "yes", "--tls-ca-cert-file"].into_iter().map(String::from).collect::<Vec<_>>();
        a.extend([tls.file("ca.crt"), "--tls-cert-file".into(), tls.file("server.crt")]);
        a.extend(["--tls-key-file".into(), tls.file("server.key")]);
        a.extend(["--tls-client-cert-file".into(), tls.file("server.crt")]);
        a.extend(["--tls-client-key-file".into(), key.clone(), "--tls-client-key-file-pass".into(), pass.into()]);
        Server::try_start(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let err = client("wrong").err().expect("started with a wrong client key passphrase");
    assert!(err.contains(&format!("Failed to load private key: {key}: bad decrypt")), "{err}");
    let _replica_side = client("sesame").unwrap();
    // redis-server serves with the same file and passphrase.
    let redis_port = free_port();
    let a = args(redis_port, "sesame");
    let _redis = Redis::start_with(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(tls.cli(redis_port, true, &["PING"]), "PONG");
}

#[test]
fn config_set_tls_applies_to_new_connections() {
    let tls = Tls::new("tls-config-set");
    let server = tls.start(&["--shards", "2"]);
    let redis_tls = Tls { dir: TempDir::new("tls-config-set-redis"), port: free_port() };
    make_certs(redis_tls.dir.path());
    let a = redis_tls.server_args();
    let redis = Redis::start_with(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let mut plain = server.raw();
    let mut redis_plain = redis.raw();
    assert!(!tls.cli(tls.port, false, &["PING"]).contains("PONG"));
    // tls-auth-clients no: new connections need no certificate, on every core.
    let ok = proxy::resp::Value::Simple(b"OK".to_vec());
    assert_eq!(plain.cmd(&[b"CONFIG", b"SET", b"tls-auth-clients", b"no"]), ok);
    for _ in 0..4 {
        assert_eq!(tls.cli(tls.port, false, &["PING"]), "PONG");
    }
    // A configuration that cannot be built is refused, Redis's reply, and
    // the setting keeps its value.
    let missing = tls.file("missing.crt");
    let reply = plain.cmd(&[b"CONFIG", b"SET", b"tls-cert-file", missing.as_bytes()]);
    let redis_reply = redis_plain.cmd(&[b"CONFIG", b"SET", b"tls-cert-file", missing.as_bytes()]);
    assert_eq!(reply, redis_reply);
    assert_eq!(
        reply,
        proxy::resp::Value::Error(
            b"ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - Unable to update TLS configuration. Check server logs."
                .to_vec()
        )
    );
    let cert = plain.cmd(&[b"CONFIG", b"GET", b"tls-cert-file"]);
    let server_crt = proxy::resp::Value::Bulk(tls.file("server.crt").into_bytes());
    assert_eq!(cert, proxy::resp::Value::Array(vec![proxy::resp::Value::Bulk(b"tls-cert-file".to_vec()), server_crt]));
    assert_eq!(tls.cli(tls.port, false, &["PING"]), "PONG");
    // An encrypted key and its passphrase in one CONFIG SET.
    let key = encrypt_key(&tls, "sesame");
    let set = [b"CONFIG".as_slice(), b"SET", b"tls-key-file", key.as_bytes(), b"tls-key-file-pass", b"sesame"];
    assert_eq!(plain.cmd(&set), ok);
    assert_eq!(tls.cli(tls.port, false, &["PING"]), "PONG");
}

/// Whether an `openssl s_client` TLSv1.2 connection resumed the session in
/// `sess` (saving the new one there).
fn resumed(tls: &Tls, sess: &str) -> bool {
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-tls1_2", "-connect", &format!("127.0.0.1:{}", tls.port)]);
    cmd.args(["-CAfile", &tls.file("ca.crt"), "-cert", &tls.file("client.crt"), "-key", &tls.file("client.key")]);
    if std::path::Path::new(sess).exists() {
        cmd.args(["-sess_in", sess]);
    }
    let out = cmd.args(["-sess_out", sess]).stdin(std::process::Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Reused,") || text.contains("New,"), "{text}");
    text.contains("Reused,")
}

#[test]
fn session_cache_timeout_expires_resumption() {
    let tls = Tls::new("tls-session");
    // One core: tickets and the session cache are each core's own.
    let server = tls.start(&["--shards", "1"]);
    let sess = tls.file("session.pem");
    assert!(!resumed(&tls, &sess));
    assert!(resumed(&tls, &sess), "the default timeout (300 s) resumes");
    let mut plain = server.raw();
    plain.cmd(&[b"CONFIG", b"SET", b"tls-session-cache-timeout", b"2"]);
    let _ = std::fs::remove_file(&sess);
    assert!(!resumed(&tls, &sess));
    assert!(resumed(&tls, &sess), "resumed within the timeout");
    std::thread::sleep(Duration::from_secs(4));
    assert!(!resumed(&tls, &sess), "a session older than tls-session-cache-timeout resumed");
}
