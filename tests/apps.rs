//! Real client libraries, used as their users use them, against corekv (3
//! shards) and against redis-server: redis-py's `Lock` and WATCH/MULTI
//! pipelines, node's `redlock` and `rate-limiter-flexible`, Pub/Sub from
//! both; and whole job-queue stacks, each processing a few thousand jobs
//! with its own workers (streams, Lua over one queue's keys on several
//! shards, MULTI, Pub/Sub and blocking pops together): BullMQ, RQ and
//! Celery (Redis broker and result backend). Each app script lives in
//! tests/apps/, takes the server's port as its argument, checks its own
//! counts and exits non-zero with the reason when one is off.
//! scripts/setup-app-deps.sh installs the libraries (run here when needed).

mod common;

use common::{ensure_test_deps, Redis, Server};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const APP_TIMEOUT: Duration = Duration::from_secs(120);

static APP_DEPS: Once = Once::new();

fn ensure_app_deps() {
    ensure_test_deps();
    APP_DEPS.call_once(|| {
        let script = Path::new(ROOT).join("scripts/setup-app-deps.sh");
        let status = Command::new("bash").arg(&script).status().expect("run scripts/setup-app-deps.sh");
        assert!(status.success(), "scripts/setup-app-deps.sh failed: the app tests need redis-py and node packages");
    });
}

enum App {
    Python(&'static str),
    Node(&'static str),
}

impl App {
    fn command(&self) -> Command {
        match self {
            App::Python(script) => {
                let mut cmd = Command::new(PathBuf::from(ROOT).join("target/app-deps/venv/bin/python"));
                cmd.arg(PathBuf::from(ROOT).join("tests/apps/python").join(script));
                cmd
            }
            App::Node(script) => {
                let mut cmd = Command::new("node");
                cmd.arg(PathBuf::from(ROOT).join("tests/apps/node").join(script));
                cmd
            }
        }
    }
}

/// Runs `app` against the server on `port`; fails with its output unless
/// it exits 0 within the time limit.
fn run_app(app: App, port: u16, server: &str) {
    ensure_app_deps();
    let mut cmd = app.command();
    cmd.arg(port.to_string()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().expect("start the app script");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > APP_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = format!("{}{}", stdout.join().unwrap(), stderr.join().unwrap());
    match status {
        Some(status) if status.success() => {
            println!("{server} ({:.1}s):\n{output}", started.elapsed().as_secs_f64())
        }
        Some(status) => panic!("app against {server} exited with {status}:\n{output}"),
        None => panic!("app against {server} ran past {APP_TIMEOUT:?}:\n{output}"),
    }
}

macro_rules! app_tests {
    ($app:expr, $redis:ident, $corekv:ident) => {
        #[test]
        fn $redis() {
            let redis = Redis::start();
            run_app($app, redis.port, "redis-server");
        }

        #[test]
        fn $corekv() {
            let server = Server::start(&["--shards", "3"]);
            run_app($app, server.port, "corekv (3 shards)");
        }
    };
}

app_tests!(App::Python("locks_and_transactions.py"), redis_py_redis, redis_py_corekv);
app_tests!(App::Node("redlock.mjs"), node_redlock_redis, node_redlock_corekv);
app_tests!(App::Node("rate-limiter.mjs"), node_rate_limiter_redis, node_rate_limiter_corekv);
app_tests!(App::Python("pubsub.py"), redis_py_pubsub_redis, redis_py_pubsub_corekv);
app_tests!(App::Node("pubsub.mjs"), node_ioredis_pubsub_redis, node_ioredis_pubsub_corekv);
app_tests!(App::Node("bullmq.mjs"), bullmq_redis, bullmq_corekv);
app_tests!(App::Python("rq_app.py"), rq_redis, rq_corekv);
app_tests!(App::Python("celery_app.py"), celery_redis, celery_corekv);
