//! What the engine and its host share: the `Host` trait, a run's state and
//! options, a core's running-script status, and small helpers (sha1, error
//! lines). A leaf: it imports nothing of the engine.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Where a script's commands run.
pub trait Host {
    /// Runs one command line of a script, with Redis's checks for script
    /// commands; returns its reply encoded in RESP3 when `call.resp3`, else
    /// RESP2, or the text of a rejection ("Unknown Redis command called from
    /// script"...) that `redis.call` raises as an error.
    fn call(&mut self, argv: &[&[u8]], call: &mut CallState) -> Result<Vec<u8>, String>;

    /// Called by a script past the busy threshold, every hook: serves
    /// other clients meanwhile (Redis's processEventsWhileBlocked). True
    /// when the server is shutting down and the script must end.
    fn while_busy(&mut self) -> bool {
        false
    }

    /// `redis.acl_check_cmd`: whether the script's user may run `argv`
    /// (its command, keys and channels); `None` when no such command.
    fn acl_allows(&mut self, argv: &[Vec<u8>]) -> Option<bool> {
        command_exists(argv).then_some(true)
    }

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
    /// Over maxmemory when the script started and not flagged allow-oom:
    /// its first `denyoom` command fails unless it already wrote.
    pub deny_oom: bool,
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
    /// What FUNCTION STATS shows of it while busy.
    pub detail: std::sync::Mutex<Option<RunningScript>>,
}

/// A busy script as FUNCTION STATS shows it (Redis's `running_script`),
/// with the engine's counts: the engine itself is in use meanwhile.
#[derive(Clone)]
pub struct RunningScript {
    pub name: String,
    pub command: Vec<Vec<u8>>,
    pub started: std::time::Instant,
    pub libraries: usize,
    pub functions: usize,
}

thread_local! {
    /// The last script's error reply was raised by a command it called
    /// (counted in the error stats already, as Redis's
    /// `ignore_error_stats_update`).
    static ERROR_COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub fn note_error_counted() {
    ERROR_COUNTED.with(|c| c.set(true));
}

/// Whether the script that just ran replied an error counted already;
/// clears the note.
pub fn take_error_counted() -> bool {
    ERROR_COUNTED.with(|c| c.replace(false))
}

/// Scripts past `busy-reply-threshold` on all cores: while any is, every
/// core refuses what Redis refuses during a busy script (one relaxed load
/// per command otherwise).
pub static BUSY_SCRIPTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl ScriptStatus {
    /// The script on this core became busy (1: EVAL, 2: a function).
    pub(crate) fn set_busy(&self, kind: u8) {
        if self.running.swap(kind, Ordering::Relaxed) == 0 {
            BUSY_SCRIPTS.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn reset(&self) {
        if self.running.swap(0, Ordering::Relaxed) != 0 {
            BUSY_SCRIPTS.fetch_sub(1, Ordering::Relaxed);
            *self.detail.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
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
    /// Out of memory at the script's start (Redis's pre_command_oom_state).
    pub oom: bool,
    /// The client's command line, for FUNCTION STATS while it is busy.
    pub command: CommandLine<'a>,
    /// The engine's libraries and functions, for FUNCTION STATS meanwhile.
    pub engine_counts: (usize, usize),
}

/// EVAL*/FCALL*'s command line in its parts (nothing copied unless a
/// script turns busy).
#[derive(Clone, Copy, Default)]
pub struct CommandLine<'a> {
    pub name: &'static str,
    pub script: &'a [u8],
    pub keys: &'a [&'a [u8]],
    pub args: &'a [&'a [u8]],
}

impl CommandLine<'_> {
    pub fn to_vec(&self) -> Vec<Vec<u8>> {
        let mut argv =
            vec![self.name.as_bytes().to_vec(), self.script.to_vec(), self.keys.len().to_string().into_bytes()];
        argv.extend(self.keys.iter().chain(self.args).map(|a| a.to_vec()));
        argv
    }
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

/// A command line as one buffer and the ranges of its arguments (what
/// `shard::Args` reads).
pub fn flatten<A: AsRef<[u8]>>(argv: &[A]) -> (Vec<u8>, Vec<(u32, u32)>) {
    let mut buf = Vec::with_capacity(argv.iter().map(|a| a.as_ref().len()).sum());
    let mut ranges = Vec::with_capacity(argv.len());
    for a in argv {
        let start = buf.len() as u32;
        buf.extend_from_slice(a.as_ref());
        ranges.push((start, buf.len() as u32));
    }
    (buf, ranges)
}
