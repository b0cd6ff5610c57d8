//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT. A script runs on the core
//! owning its declared keys (the connection's own core without keys):
//! inline when that is this core, else one mesh hop. The script cache is
//! the same on every core: a script new to this core is loaded on all of
//! them first, so EVALSHA works on any connection.

use super::reply::{help, reply};
use crate::acl::user::User;
use crate::coordinator::dispatch;
use crate::coordinator::locks::until;
use crate::coordinator::{Footprint, Unit};
use crate::core::Core;
use crate::scripting::context::{take_error_counted, CommandLine};
use crate::scripting::cross::Reach;
use crate::scripting::functions::RestorePolicy;
use crate::scripting::{self, host::CoreHost, with_engine, RunOptions};
use crate::session::{Connection, Deferred};
use crate::slot::key_slot;
use crate::tracking;
use shard::args::parse_i64;
use shard::tracking::Caller as TrackingCaller;
use shard::{Args, CommandSpec};
use std::rc::Rc;
use std::sync::atomic::Ordering;

/// A script invocation, owned so it can travel to another core.
#[derive(Clone)]
pub struct Job {
    pub kind: Kind,
    /// The body, the sha (EVALSHA) or the function name (FCALL).
    pub script: Vec<u8>,
    pub keys: Vec<Vec<u8>>,
    pub args: Vec<Vec<u8>>,
    pub db: usize,
    pub resp3: bool,
    pub port_node: Option<u16>,
    /// The caller's ACL user when it is restricted (checked per command).
    pub user: Option<Vec<u8>>,
    /// The caller's CLIENT TRACKING identity: the script's reads are
    /// remembered for it, its writes are its own (NOLOOP).
    pub tracking: TrackingCaller,
}

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Eval { by_sha: bool, read_only: bool },
    Fcall { read_only: bool },
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Eval { by_sha: false, read_only: false } => "eval",
            Kind::Eval { by_sha: true, read_only: false } => "evalsha",
            Kind::Eval { by_sha: false, read_only: true } => "eval_ro",
            Kind::Eval { by_sha: true, read_only: true } => "evalsha_ro",
            Kind::Fcall { read_only: false } => "fcall",
            Kind::Fcall { read_only: true } => "fcall_ro",
        }
    }
}

/// What a script run needs besides the script, keys and arguments.
#[derive(Clone)]
pub struct Caller {
    pub db: usize,
    pub resp3: bool,
    pub port_node: Option<u16>,
    /// A restricted ACL user: the script's commands are checked (Redis's
    /// scriptVerifyACL).
    pub user: Option<Rc<User>>,
    pub tracking: TrackingCaller,
}

/// The caller's user on this core, when restricted: a user deleted since
/// may run nothing.
fn restricted_user(core: &Core, name: Option<&[u8]>) -> Option<Rc<User>> {
    let name = name?;
    let users = core.acl.users();
    Some(users.get(name).cloned().unwrap_or_else(|| Rc::new(User::new(name, false))))
}

/// Runs a job on this core: the encoded reply, or `None` when the script
/// reached another shard and must run again holding every shard.
pub fn run_job(core: &Core, job: &Job, whole: bool) -> Option<Vec<u8>> {
    let keys: Vec<&[u8]> = job.keys.iter().map(Vec::as_slice).collect();
    let args: Vec<&[u8]> = job.args.iter().map(Vec::as_slice).collect();
    let user = restricted_user(core, job.user.as_deref());
    let caller = Caller { db: job.db, resp3: job.resp3, port_node: job.port_node, user, tracking: job.tracking };
    run_script(core, job.kind, &job.script, &keys, &args, caller, whole)
}

/// Runs a script (EVAL body or sha, or function name) on this core; with
/// `whole`, holding every shard (see `scripting::cross`).
pub fn run_script(
    core: &Core,
    kind: Kind,
    script: &[u8],
    keys: &[&[u8]],
    args: &[&[u8]],
    caller: Caller,
    whole: bool,
) -> Option<Vec<u8>> {
    let cluster_enabled = core.cluster().enabled();
    let mut opts = RunOptions {
        client_resp3: caller.resp3,
        read_only_command: matches!(kind, Kind::Eval { read_only: true, .. } | Kind::Fcall { read_only: true }),
        cluster_enabled,
        db: caller.db,
        busy_threshold_ms: core.config().busy_reply_threshold,
        status: core.process.scripts.get(core.index),
        slot: if cluster_enabled { keys.first().map(|k| key_slot(k)) } else { None },
        oom: core.out_of_memory(),
        command: CommandLine { name: kind.name(), script, keys, args },
        engine_counts: (0, 0),
    };
    let now = shard::unix_ms();
    let reach = Reach { whole, ..Reach::default() };
    take_error_counted();
    let mut host = CoreHost {
        core,
        now,
        port_node: caller.port_node,
        reach,
        user: caller.user,
        tracking: caller.tracking,
        declared: keys,
    };
    // Blocked clients are served after the whole script (Redis), from what
    // the keys hold then.
    let hold = core.hold_serving();
    // What it writes on this shard reaches replicas as one MULTI/EXEC.
    group(core, true);
    let reply = with_engine(|engine| {
        opts.engine_counts = (engine.functions.libraries.len(), engine.functions.functions.len());
        match kind {
            Kind::Eval { by_sha, .. } => engine.eval(&mut host, script, by_sha, keys, args, &opts),
            Kind::Fcall { .. } => engine.fcall(&mut host, script, keys, args, &opts),
        }
    });
    group(core, false);
    drop(hold);
    if host.reach.reached_out {
        remember_wide(wide_key(kind, script));
    }
    (!host.reach.wants_whole).then_some(reply)
}

/// Opens or closes a group of effects in this shard's replication feed.
fn group(core: &Core, open: bool) {
    if let Some(feed) = core.shard.borrow_mut().repl_feed() {
        if open {
            feed.begin_group()
        } else {
            feed.end_group()
        }
    }
}

/// What a script run on another core sends back: its reply, whether an
/// error reply is counted already (`take_error_counted`), its run time.
type RanElsewhere = (Option<Vec<u8>>, bool, std::time::Duration);

/// Runs a job on another core (one hop), once no unit holds its keys there:
/// a script on one shard takes no lock, so it must not run in the middle
/// of a unit's work on them (a transaction or a script over several shards).
/// CLIENT TRACKING: what the run raises for this core (the caller's own
/// invalidations, BCAST changes) comes back with its reply, as
/// `dispatch::call`'s results bring it, so that the caller's own follow
/// the script's reply and not a later one's; the run is one step there, so
/// nothing else's lands in between.
async fn run_job_on(core: &Rc<Core>, shard: usize, job: Job) -> Option<RanElsewhere> {
    let (origin, _hold) = (core.index, tracking::hold(core));
    let (ran, back) = dispatch::call_task(core, shard, move |c| async move {
        until(&c.locks, |t| !t.is_idle() && job.keys.iter().any(|k| t.blocks(job.db, k, None))).await;
        let started = std::time::Instant::now();
        let mark = tracking::mark(&c);
        let reply = run_job(&c, &job, false);
        let ran = (reply, take_error_counted(), started.elapsed());
        (ran, tracking::take_returned(&c, mark, origin))
    })
    .await?;
    tracking::returned(core, back);
    Some(ran)
}

fn remember_wide(key: Vec<u8>) {
    let mut all = WIDE_ALL.lock().unwrap_or_else(|e| e.into_inner());
    if !all.contains(&key) {
        all.push(key);
        WIDE_GENERATION.fetch_add(1, Ordering::Release);
    }
}

/// Scripts (by sha) and functions (by name) seen reaching a shard other
/// than their keys': they run holding every shard from the start, on any
/// core. Learned rarely, read per script: each core keeps a copy and
/// refreshes it when the generation moves (one relaxed load per script).
static WIDE_ALL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
static WIDE_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    static WIDE: std::cell::RefCell<(u64, std::collections::HashSet<Vec<u8>>)> = Default::default();
}

fn is_wide(kind: Kind, script: &[u8]) -> bool {
    let generation = WIDE_GENERATION.load(Ordering::Acquire);
    WIDE.with(|w| {
        let mut w = w.borrow_mut();
        if w.0 != generation {
            let all = WIDE_ALL.lock().unwrap_or_else(|e| e.into_inner());
            *w = (generation, all.iter().cloned().collect());
        }
        !w.1.is_empty() && w.1.contains(&wide_key(kind, script))
    })
}

fn wide_key(kind: Kind, script: &[u8]) -> Vec<u8> {
    match kind {
        Kind::Eval { by_sha: false, .. } => scripting::sha1_hex(script).into_bytes(),
        Kind::Eval { by_sha: true, .. } => script.to_ascii_lowercase(),
        Kind::Fcall { .. } => [b"f:", script].concat(),
    }
}

/// Checks numkeys; the number of keys, or the error already replied.
/// Redis answers an EVALSHA sha of the wrong length, and an FCALL of an
/// unknown function, before looking at numkeys.
fn numkeys(conn: &mut Connection, args: &Args, kind: Kind) -> Option<usize> {
    let fcall = matches!(kind, Kind::Fcall { .. });
    let sha_or_name = args.get(1);
    if matches!(kind, Kind::Eval { by_sha: true, .. }) && sha_or_name.len() != 40 {
        conn.pipeline.local(|o| o.extend_from_slice(scripting::NOSCRIPT));
        return None;
    }
    if fcall && !with_engine(|e| e.functions.exists(sha_or_name)) {
        conn.error("ERR Function not found");
        return None;
    }
    let Some(n) = parse_i64(args.get(2)) else {
        conn.error(if fcall { "ERR Bad number of keys provided" } else { shard::reply::errors::NOT_INTEGER });
        return None;
    };
    if n > args.len() as i64 - 3 {
        conn.error("ERR Number of keys can't be greater than number of args");
        return None;
    }
    if n < 0 {
        conn.error("ERR Number of keys can't be negative");
        return None;
    }
    Some(n as usize)
}

fn job(conn: &Connection, kind: Kind, args: &Args, numkeys: usize) -> Job {
    let all: Vec<Vec<u8>> = args.iter().skip(3).map(<[u8]>::to_vec).collect();
    let (keys, rest) = all.split_at(numkeys);
    Job {
        kind,
        script: args.get(1).to_vec(),
        keys: keys.to_vec(),
        args: rest.to_vec(),
        db: conn.state.db,
        resp3: conn.state.resp3,
        port_node: conn.state.port_node,
        user: (!conn.state.unrestricted).then(|| conn.state.user.name.clone()),
        tracking: conn.pipeline.caller,
    }
}

/// The core a script runs on: the owner of its keys, or `None` when it
/// runs here holding every shard: its keys span shards, it declares none
/// (so whatever it touches is undeclared), or it was seen reaching beyond
/// its keys' shard before.
fn placement(conn: &Connection, spec: &CommandSpec, args: &Args, kind: Kind, numkeys: usize) -> Option<usize> {
    if conn.core.count > 1 && (numkeys == 0 || is_wide(kind, args.get(1))) {
        return None;
    }
    conn.owner_of_keys(spec, args)
}

/// EVAL, EVALSHA, their _RO forms, FCALL, FCALL_RO: they place themselves
/// (one shard, or a unit over every shard), whatever keys they declare.
pub fn is_script(spec: &CommandSpec) -> bool {
    matches!(spec.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro")
}

fn kind_of(spec: &CommandSpec) -> Kind {
    match spec.name {
        "evalsha" => Kind::Eval { by_sha: true, read_only: false },
        "eval_ro" => Kind::Eval { by_sha: false, read_only: true },
        "evalsha_ro" => Kind::Eval { by_sha: true, read_only: true },
        "fcall" => Kind::Fcall { read_only: false },
        "fcall_ro" => Kind::Fcall { read_only: true },
        _ => Kind::Eval { by_sha: false, read_only: false },
    }
}

/// EVAL*/FCALL*: inline when the script runs here and needs no loading
/// elsewhere, else deferred.
pub fn run_now(conn: &mut Connection, spec: &'static CommandSpec, args: Args) -> Option<Deferred> {
    let kind = kind_of(spec);
    let numkeys = numkeys(conn, &args, kind)?;
    let script = args.get(1);
    let target = placement(conn, spec, &args, kind, numkeys);
    let new_script = matches!(kind, Kind::Eval { by_sha: false, .. });
    // Inside EXEC the transaction's unit holds every shard already. The
    // commands queued before it must have run on their shards first: the
    // script reads and writes there at once.
    let whole = conn.pipeline.unit.is_some();
    if (target != Some(conn.core.index) && !whole)
        || (whole && conn.pipeline.has_remote())
        || (new_script && !with_engine(|e| e.exists_body(script)))
    {
        return Some(Deferred::Command(spec));
    }
    let keys: Vec<&[u8]> = (3..3 + numkeys).map(|i| args.get(i)).collect();
    let rest: Vec<&[u8]> = (3 + numkeys..args.len()).map(|i| args.get(i)).collect();
    let user = (!conn.state.unrestricted).then(|| conn.state.user.clone());
    let caller = Caller {
        db: conn.state.db,
        resp3: conn.state.resp3,
        port_node: conn.state.port_node,
        user,
        tracking: conn.pipeline.caller,
    };
    match run_script(&conn.core, kind, script, &keys, &rest, caller, whole) {
        Some(out) => {
            conn.tally.error_counted = take_error_counted();
            conn.pipeline.local(|o| o.extend_from_slice(&out))
        }
        // It reached another shard: again, holding every shard.
        None => return Some(Deferred::Command(spec)),
    }
    None
}

/// EVAL*/FCALL* that load a script everywhere or run on another core.
pub async fn run_deferred(conn: &mut Connection, spec: &'static CommandSpec, args: Args<'_>) {
    let kind = kind_of(spec);
    let Some(numkeys) = numkeys(conn, &args, kind) else { return };
    let job = job(conn, kind, &args, numkeys);
    let target = placement(conn, spec, &args, kind, numkeys);
    if let Kind::Eval { by_sha: false, .. } = kind {
        if let Err(e) = load_everywhere(&conn.core, job.script.clone()).await {
            return conn.error(&e);
        }
    }
    let in_unit = conn.pipeline.unit.is_some();
    if let (Some(target), false) = (target, in_unit) {
        // Its keys' shard, with no lock: unless it reaches another shard.
        let one = job.clone();
        match run_job_on(&conn.core, target, one).await {
            Some((Some(reply), counted, took)) => {
                conn.tally.error_counted = counted;
                conn.tally.elsewhere += took;
                return conn.pipeline.local(|o| o.extend_from_slice(&reply));
            }
            None => return conn.error("ERR the script's core is shutting down"),
            Some((None, _, took)) => conn.tally.elsewhere += took,
        }
    }
    // Keys on several shards, or keys it did not declare: it runs here as
    // one coordinator unit holding every shard.
    let unit = match in_unit {
        true => None,
        false => Some(Unit::acquire(&conn.core, &Footprint { keys: Vec::new(), whole: true }).await),
    };
    if let Some(u) = &unit {
        conn.pipeline.unit = Some(u.id);
    }
    let reply = run_job(&conn.core, &job, true).unwrap_or_else(|| b"-ERR script could not reach its keys\r\n".to_vec());
    conn.tally.error_counted = take_error_counted();
    conn.pipeline.local(|o| o.extend_from_slice(&reply));
    if let Some(u) = unit {
        conn.pipeline.unit = None;
        u.release().await;
    }
}

/// Compiles a script into every core's cache: its sha, or the error.
async fn load_everywhere(core: &Rc<Core>, body: Vec<u8>) -> Result<String, String> {
    let results = dispatch::call_all(core, move |_| with_engine(|e| e.load(&body))).await;
    results.into_iter().flatten().next().unwrap_or_else(|| Err("ERR shutting down".into()))
}

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

/// SCRIPT subcommands answered on this core; the others are deferred.
pub fn script_now(conn: &mut Connection, spec: &'static CommandSpec, args: Args) -> Option<Deferred> {
    match spec.name {
        "script|help" => help(conn, SCRIPT_HELP),
        "script|exists" => {
            let found: Vec<bool> = with_engine(|e| args.iter().skip(2).map(|sha| e.exists(sha)).collect());
            reply(conn, |r| {
                r.array(found.len());
                for f in found {
                    r.int(f as i64);
                }
            });
        }
        "script|kill" => kill(conn, true),
        "script|debug" => conn.error("ERR SCRIPT DEBUG is not supported by corekv"),
        "script|flush" if !flush_mode_ok(&args) => conn.error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
        _ => return Some(Deferred::Command(spec)),
    }
    None
}

/// `[ASYNC|SYNC]`: nothing, or one of the two.
pub fn flush_mode_ok(args: &Args) -> bool {
    args.len() == 2
        || (args.len() == 3
            && (args.get(2).eq_ignore_ascii_case(b"sync") || args.get(2).eq_ignore_ascii_case(b"async")))
}

pub async fn script_deferred(conn: &mut Connection, spec: &'static CommandSpec, args: Args<'_>) {
    match spec.name {
        "script|load" => match load_everywhere(&conn.core, args.get(2).to_vec()).await {
            Ok(sha) => reply(conn, |r| r.bulk(sha.as_bytes())),
            Err(e) => conn.error(&e),
        },
        "script|flush" => {
            dispatch::call_all(&conn.core, |_| with_engine(|e| e.flush())).await;
            reply(conn, |r| r.ok());
        }
        _ => conn.error("ERR unknown subcommand"),
    }
}

/// SCRIPT KILL / FUNCTION KILL: stops a read-only script that has run past
/// busy-reply-threshold on any core (`scriptKill`).
pub fn kill(conn: &mut Connection, is_eval: bool) {
    let running = conn.core.process.scripts.iter().find(|s| s.running.load(Ordering::Relaxed) != 0);
    let Some(status) = running else {
        return conn.error("NOTBUSY No scripts in execution right now.");
    };
    if status.dirty.load(Ordering::Relaxed) {
        return conn.error(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
        );
    }
    let eval_running = status.running.load(Ordering::Relaxed) == 1;
    if is_eval && !eval_running {
        return conn.error("BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.");
    }
    if !is_eval && eval_running {
        return conn.error("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.");
    }
    status.kill.store(true, Ordering::Relaxed);
    reply(conn, |r| r.ok());
}

/// FUNCTION STATS: the busy script (on any core) with what Redis shows of
/// it; refused while it is an EVAL script, as Redis does.
fn function_stats(conn: &mut Connection) {
    // A busy script holds its core's engine: its counts were taken when it
    // started.
    let busy = conn.core.process.scripts.iter().find(|s| s.running.load(Ordering::Relaxed) != 0);
    if busy.is_some_and(|s| s.running.load(Ordering::Relaxed) == 1) {
        return conn.error("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.");
    }
    let running = busy.and_then(|s| s.detail.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let (libs, funcs) = match &running {
        Some(r) => (r.libraries, r.functions),
        None => with_engine(|e| (e.functions.libraries.len(), e.functions.functions.len())),
    };
    reply(conn, |r| {
        r.map(2);
        r.bulk(b"running_script");
        match &running {
            None => r.null(),
            Some(script) => {
                r.map(3);
                r.bulk(b"name");
                r.bulk(script.name.as_bytes());
                r.bulk(b"command");
                r.array(script.command.len());
                for a in &script.command {
                    r.bulk(a);
                }
                r.bulk(b"duration_ms");
                r.int(script.started.elapsed().as_millis() as i64);
            }
        }
        r.bulk(b"engines");
        r.map(1);
        r.bulk(b"LUA");
        r.map(2);
        r.bulk(b"libraries_count");
        r.int(libs as i64);
        r.bulk(b"functions_count");
        r.int(funcs as i64);
    });
}

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

fn subcommand_syntax_error(conn: &mut Connection, args: &Args) {
    let msg = format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&args.get(1)[..args.get(1).len().min(128)]),
        String::from_utf8_lossy(args.get(0)).to_uppercase()
    );
    conn.error(&msg);
}

fn restore_policy(args: &Args) -> Option<RestorePolicy> {
    if args.len() < 4 {
        return Some(RestorePolicy::Append);
    }
    let p = args.get(3);
    [(&b"append"[..], RestorePolicy::Append), (b"replace", RestorePolicy::Replace), (b"flush", RestorePolicy::Flush)]
        .into_iter()
        .find(|(name, _)| p.eq_ignore_ascii_case(name))
        .map(|(_, policy)| policy)
}

/// FUNCTION LOAD's options: REPLACE, then the code.
fn load_options(args: &Args) -> Result<bool, String> {
    let mut replace = false;
    let mut at = 2;
    while at < args.len() - 1 {
        let arg = args.get(at);
        at += 1;
        if arg.eq_ignore_ascii_case(b"replace") {
            replace = true;
            continue;
        }
        return Err(format!("ERR Unknown option given: {}", String::from_utf8_lossy(arg)));
    }
    if at >= args.len() {
        return Err("ERR Function code is missing".into());
    }
    Ok(replace)
}

/// FUNCTION subcommands answered on this core (every core holds the same
/// libraries); the ones that change them are deferred and run everywhere.
pub fn function_now(conn: &mut Connection, spec: &'static CommandSpec, args: Args) -> Option<Deferred> {
    match spec.name {
        "function|kill" => kill(conn, false),
        "function|help" => help(conn, FUNCTION_HELP),
        "function|list" => function_list(conn, &args),
        "function|dump" => {
            let payload = with_engine(|e| shard::rdb::functions_dump_payload(&e.functions.codes()));
            reply(conn, |r| r.bulk(&payload));
        }
        "function|stats" => function_stats(conn),
        "function|flush" if args.len() > 3 => subcommand_syntax_error(conn, &args),
        "function|flush" if !flush_mode_ok(&args) => conn.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
        "function|restore" if args.len() > 4 => subcommand_syntax_error(conn, &args),
        "function|restore" if restore_policy(&args).is_none() => {
            conn.error("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
        }
        "function|load" => match load_options(&args) {
            Err(e) => conn.error(&e),
            Ok(_) => return Some(Deferred::Command(spec)),
        },
        _ => return Some(Deferred::Command(spec)),
    }
    None
}

fn function_list(conn: &mut Connection, args: &Args) {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let arg = args.get(i);
        if !with_code && arg.eq_ignore_ascii_case(b"withcode") {
            with_code = true;
        } else if pattern.is_none() && arg.eq_ignore_ascii_case(b"libraryname") {
            if i >= args.len() - 1 {
                return conn.error("ERR library name argument was not given");
            }
            i += 1;
            pattern = Some(args.get(i));
        } else {
            return conn.error(&format!("ERR Unknown argument {}", String::from_utf8_lossy(arg)));
        }
        i += 1;
    }
    let resp3 = conn.state.resp3;
    let mut out = Vec::new();
    with_engine(|e| {
        let functions = &e.functions;
        let libs: Vec<_> = functions
            .libraries
            .iter()
            .filter(|l| pattern.is_none_or(|p| shard::glob::glob_match(p, l.name.as_bytes(), true)))
            .collect();
        let mut r = shard::Reply::new(&mut out, resp3);
        r.array(libs.len());
        for lib in libs {
            r.map(if with_code { 4 } else { 3 });
            r.bulk(b"library_name");
            r.bulk(lib.name.as_bytes());
            r.bulk(b"engine");
            r.bulk(b"LUA");
            r.bulk(b"functions");
            r.array(lib.functions.len());
            for name in &lib.functions {
                let f = &functions.functions[name];
                r.map(3);
                r.bulk(b"name");
                r.bulk(f.name.as_bytes());
                r.bulk(b"description");
                match &f.desc {
                    Some(d) => r.bulk(d),
                    None => r.null(),
                }
                r.bulk(b"flags");
                let names: Vec<&str> =
                    scripting::flags::NAMES.iter().filter(|(bit, _)| f.flags & bit != 0).map(|(_, n)| *n).collect();
                r.set(names.len());
                for n in names {
                    r.simple(n);
                }
            }
            if with_code {
                r.bulk(b"library_code");
                r.bulk(&lib.code);
            }
        }
    });
    conn.pipeline.local(|o| o.extend_from_slice(&out));
}

/// FUNCTION LOAD, DELETE, FLUSH, RESTORE: on every core; the reply of the
/// first (all cores hold the same libraries, so they answer alike).
pub async fn function_deferred(conn: &mut Connection, spec: &'static CommandSpec, args: Args<'_>) {
    let result: Result<Option<String>, String> = match spec.name {
        "function|load" => {
            let replace = load_options(&args).unwrap_or(false);
            let code = args.get(args.len() - 1).to_vec();
            everywhere(&conn.core, move || with_engine(|e| e.functions.load(&code, replace).map(Some))).await
        }
        "function|delete" => {
            let name = args.get(2).to_vec();
            everywhere(&conn.core, move || with_engine(|e| e.functions.delete(&name).map(|_| None))).await
        }
        "function|flush" => {
            everywhere(&conn.core, || {
                with_engine(|e| e.functions.flush());
                Ok(None)
            })
            .await
        }
        "function|restore" => match shard::rdb::functions_restore_payload(args.get(2)) {
            Err(e) => Err(e),
            Ok(codes) => {
                let policy = restore_policy(&args).unwrap_or(RestorePolicy::Append);
                everywhere(&conn.core, move || with_engine(|e| e.functions.restore(&codes, policy).map(|_| None))).await
            }
        },
        _ => Err("ERR unknown subcommand".into()),
    };
    match result {
        Ok(Some(name)) => reply(conn, |r| r.bulk(name.as_bytes())),
        Ok(None) => reply(conn, |r| r.ok()),
        Err(e) => conn.error(&e),
    }
}

/// Runs `f` on every core; the first core's result.
async fn everywhere<F>(core: &Rc<Core>, f: F) -> Result<Option<String>, String>
where
    F: Fn() -> Result<Option<String>, String> + Send + Clone + 'static,
{
    let results = dispatch::call_all(core, move |_| f()).await;
    results.into_iter().flatten().next().unwrap_or_else(|| Err("ERR shutting down".into()))
}
