//! Starting and stopping: clean shutdown by SHUTDOWN and by signal, clear
//! start-up errors (bad config, taken port, io_uring blocked), --check-config.

mod common;

use common::Server;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn shutdown_command_exits_cleanly() {
    let server = Server::shards(2);
    let mut raw = server.raw();
    raw.send(b"SHUTDOWN\r\n");
    assert!(raw.closed());
    let log = server.log.clone();
    let status = server.wait_exit(Duration::from_secs(10)).expect("corekv exits after SHUTDOWN");
    assert!(status.success(), "{status:?}");
    assert!(log.lock().unwrap().iter().any(|l| l.contains("bye bye")));
}

#[test]
fn sigterm_exits_cleanly() {
    let server = Server::shards(2);
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
}

fn corekv(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_corekv")).args(args).stdin(Stdio::null()).output().unwrap()
}

#[test]
fn bad_configuration_names_the_line() {
    let dir = std::env::temp_dir().join(format!("corekv-lifecycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.conf");
    std::fs::write(&file, "port 7000\n# fine\nmaxclients lots\n").unwrap();
    let out = corekv(&[file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("at line 3") && err.contains("maxclients lots"), "{err}");
    let out = corekv(&["--port", "notaport"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port notaport"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_config_prints_the_effective_settings() {
    let out = corekv(&["--check-config", "--port", "7777", "--shards", "3"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == "port 7777"), "{text}");
    assert!(text.lines().any(|l| l == "shards 3"), "{text}");
}

#[test]
fn a_taken_port_is_reported() {
    let server = Server::shards(1);
    let out = corekv(&["--port", &server.port.to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Failed listening on port"), "{err}");
}

/// Runs corekv with io_uring_setup failing with `errno` (a seccomp filter
/// installed in the child), as a container runtime or sysctl would.
fn run_without_io_uring(errno: i32) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corekv"));
    cmd.args(["--port", "0"]).stdin(Stdio::null());
    // SAFETY: only async-signal-safe calls (prctl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            const IO_URING_SETUP: u32 = 425;
            let filter = [
                // A = syscall number
                libc::sock_filter { code: 0x20, jt: 0, jf: 0, k: 0 },
                // if A == io_uring_setup: return ERRNO(errno) else ALLOW
                libc::sock_filter { code: 0x15, jt: 0, jf: 1, k: IO_URING_SETUP },
                libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x0005_0000 | (errno as u32 & 0xffff) },
                libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 },
            ];
            let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &prog as *const _ as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

#[test]
fn blocked_io_uring_gives_one_clear_message() {
    for (errno, words) in [(libc::ENOSYS, "ENOSYS"), (libc::EPERM, "EPERM"), (libc::ENOMEM, "RLIMIT_MEMLOCK")] {
        let out = run_without_io_uring(errno);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("io_uring") && err.contains(words) && err.contains("Fix:"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Stop (SIGTERM, with a client connected and one idle) and start again at
/// once on the same port, as a supervisor restarting the service would: the
/// port is free the moment the process is gone, every time.
#[test]
fn restart_on_the_same_port_at_once() {
    let first = Server::shards(2);
    let port = first.port.to_string();
    let mut server = first;
    for round in 0..100 {
        let mut busy = server.raw();
        assert_eq!(busy.cmd_str("SET k v"), proxy::resp::Value::Simple(b"OK".to_vec()));
        let _idle = server.raw();
        let status = server.terminate_now();
        assert!(status.success(), "round {round}: {status:?}");
        server = Server::try_start(&["--shards", "2", "--port", &port])
            .unwrap_or_else(|e| panic!("round {round}: restart on port {port} failed: {e}"));
    }
}

/// Every client path serves the same: glommio's reactor, the client ring,
/// and the ring with a kernel SQ polling thread.
#[test]
fn every_client_path_serves() {
    for args in [&["--client-ring", "no"][..], &["--client-ring", "yes"], &["--client-ring-sqpoll", "10"]] {
        let server = Server::start(&[&["--shards", "2"][..], args].concat());
        let mut c = server.raw();
        let mut batch = Vec::new();
        for i in 0..100 {
            batch.extend(common::Raw::encode(&[b"SET", format!("k{i}").as_bytes(), format!("v{i}").as_bytes()]));
        }
        c.send(&batch);
        for _ in 0..100 {
            assert_eq!(c.read(), Some(proxy::resp::Value::Simple(b"OK".to_vec())), "{args:?}");
        }
        assert_eq!(c.cmd_str("GET k42"), proxy::resp::Value::Bulk(b"v42".to_vec()), "{args:?}");
        assert!(server.terminate().success(), "{args:?}");
    }
}
