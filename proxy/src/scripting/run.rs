//! Running one script or function on a VM: the checks before a run
//! (`scriptPrepareForRun`) and the protected call that writes its reply
//! (`luaCallFunction`), shared by EVAL and FCALL.

use super::api::{self, RunCtx};
use super::context::{error_line, CallState, Host, RunOptions};
use super::convert::{self, ReplyProtocols};
use super::flags;
use super::lua::*;
use std::time::Instant;

/// `scriptPrepareForRun`'s checks and the run's starting state.
pub fn prepare(flags: u32, opts: &RunOptions) -> Result<CallState, String> {
    let compat = flags & flags::EVAL_COMPAT_MODE != 0;
    if !compat {
        if flags & flags::NO_CLUSTER != 0 && opts.cluster_enabled {
            return Err("ERR Can not run script on cluster, 'no-cluster' flag is set.".into());
        }
        if flags & flags::NO_WRITES == 0 && opts.read_only_command {
            return Err("ERR Can not execute a script with write flag using *_ro command.".into());
        }
        // With a shebang a script is `denyoom` unless flagged otherwise
        // (no-writes implies allow-oom): refused as the command would be.
        if opts.oom && flags & (flags::NO_WRITES | flags::ALLOW_OOM) == 0 {
            return Err(shard::reply::errors::OOM.into());
        }
    }
    Ok(CallState {
        resp3: false,
        read_only: opts.read_only_command || (!compat && flags & flags::NO_WRITES != 0),
        allow_cross_slot: compat || flags & flags::ALLOW_CROSS_SLOT != 0,
        write_dirty: false,
        deny_oom: opts.oom && (compat || flags & flags::ALLOW_OOM == 0),
        eval_mode: false,
        slot: opts.slot,
        db: opts.db,
    })
}

pub unsafe fn push_array(l: *mut lua_State, items: &[&[u8]]) {
    lua_createtable(l, items.len() as i32, 0);
    for (j, item) in items.iter().enumerate() {
        push_bytes(l, item);
        lua_rawseti(l, -2, j as i32 + 1);
    }
}

/// Calls the function on top of the stack (the error handler below it, and
/// `nargs` arguments above it) and writes its reply (`luaCallFunction`).
pub unsafe fn run_function(
    l: *mut lua_State,
    host: &mut dyn Host,
    call: CallState,
    funcname: String,
    nargs: i32,
    opts: &RunOptions,
    out: &mut Vec<u8>,
) {
    let mut ctx = RunCtx {
        host,
        call,
        funcname,
        repl_flags: 3,
        started: Instant::now(),
        busy_threshold_ms: opts.busy_threshold_ms,
        status: opts.status,
        timed_out: false,
        command: opts.command,
        engine_counts: opts.engine_counts,
    };
    api::set_run_ctx(l, Some(&mut ctx as *mut RunCtx));
    let hooked = opts.busy_threshold_ms > 0 && opts.status.is_some();
    if hooked {
        lua_sethook(l, Some(api::count_hook), MASKCOUNT, 100_000);
    }
    let err = lua_pcall(l, nargs, 1, -2 - nargs);
    let protocols = ReplyProtocols { client_resp3: opts.client_resp3, script_resp3: ctx.call.resp3 };
    if err != 0 {
        if lua_type(l, -1) != TTABLE {
            let msg = to_bytes(l, -1).map(|m| String::from_utf8_lossy(&m[..m.len().min(100)]).into_owned());
            let msg = msg.unwrap_or_else(|| "execution failure".into());
            error_line(&format!("ERR Error running script {}, {} ", ctx.funcname, msg), out);
        } else {
            let info = convert::error_info(l);
            if info.counted {
                super::context::note_error_counted();
            }
            let mut line = info.msg;
            if let (Some(source), Some(number)) = (info.source, info.line) {
                line.extend_from_slice(format!(" script: {}, on ", ctx.funcname).as_bytes());
                line.extend_from_slice(&source);
                line.push(b':');
                line.extend_from_slice(&number);
                line.push(b'.');
            }
            out.push(b'-');
            out.extend(line.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
            out.extend_from_slice(b"\r\n");
        }
        pop(l, 1);
    } else {
        convert::write_reply(l, &protocols, out);
    }
    if hooked {
        lua_sethook(l, None, 0, 0);
    }
    if ctx.timed_out {
        if let Some(status) = opts.status {
            status.reset();
        }
    }
    api::set_run_ctx(l, None);
}
