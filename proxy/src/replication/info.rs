//! INFO replication and ROLE, as Redis 7.0 words them; each replica's
//! line also says what its output buffer holds (raw and in memory).

use super::hub::HUB;
use super::primary::LinkState;
use crate::coordinator::dispatch::call;
use crate::core::Core;
use std::fmt::Write;
use std::rc::Rc;

/// ROLE of a primary: its offset and each replica's (ip, port, ack).
pub struct PrimaryRole {
    pub offset: u64,
    pub replicas: Vec<(String, u16, u64)>,
}

pub async fn primary_role(core: &Rc<Core>) -> PrimaryRole {
    call(core, HUB, |c| {
        let primary = c.repl.primary.borrow();
        match primary.as_ref() {
            None => PrimaryRole { offset: 0, replicas: Vec::new() },
            Some(p) => PrimaryRole {
                offset: p.backlog.end,
                replicas: p
                    .replicas
                    .iter()
                    .filter(|r| r.state == LinkState::Online)
                    .map(|r| (r.ip.clone(), r.listening_port, r.ack))
                    .collect(),
            },
        }
    })
    .await
    .unwrap_or(PrimaryRole { offset: 0, replicas: Vec::new() })
}

/// The section's text (without its `# Replication` header).
pub async fn section(core: &Rc<Core>) -> String {
    let mut out = String::new();
    if super::replica::is_replica(core) {
        out.push_str("role:slave\r\n");
        let lines = call(core, HUB, |c| {
            let mut lines = String::new();
            super::replica::info_lines(c, &mut lines);
            lines
        })
        .await
        .unwrap_or_default();
        out.push_str(&lines);
    } else {
        out.push_str("role:master\r\n");
    }
    let (backlog_size, min_to_write, max_lag) = {
        let c = core.config();
        (c.repl_backlog_size, c.min_replicas_to_write, c.min_replicas_max_lag)
    };
    let primary = call(core, HUB, move |c| {
        let primary = c.repl.primary.borrow();
        let mut out = String::new();
        let failover = c.repl.failover.borrow().phase.word();
        // A replica shows its primary's id and the offset it applied (a
        // demoted primary's own stream goes on with what it applies).
        let replica = c.repl.replica.link.borrow().master.is_some();
        let (replid, offset) = super::replica::master_replid_offset(c)
            .filter(|_| replica || primary.is_none())
            .or_else(|| primary.as_ref().map(|p| (p.replid.clone(), p.backlog.end)))
            .unwrap_or_else(|| (c.repl.replid.borrow_mut().get_or_insert_with(crate::core::random_id).clone(), 0));
        let Some(p) = primary.as_ref() else {
            return format!(
                "connected_slaves:0\r\nmaster_failover_state:{failover}\r\nmaster_replid:{replid}\r\nmaster_replid2:{}\r\nmaster_repl_offset:{offset}\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:0\r\nrepl_backlog_size:{backlog_size}\r\nrepl_backlog_first_byte_offset:0\r\nrepl_backlog_histlen:0\r\n",
                "0".repeat(40)
            );
        };
        let now = std::time::Instant::now();
        let good = p.good_replicas(max_lag);
        let _ = write!(out, "connected_slaves:{}\r\n", p.replicas.len());
        if min_to_write > 0 && max_lag > 0 {
            let _ = write!(out, "min_slaves_good_slaves:{good}\r\n");
        }
        for (i, r) in p.replicas.iter().enumerate() {
            let (held, raw) = r.stream_held(&p.backlog);
            let (ratio, peak_ratio) = (ratio(raw, held), ratio(r.peak_raw, r.peak_held));
            let _ = write!(
                out,
                "slave{i}:ip={},port={},state={},offset={},lag={},buffer_raw={raw},buffer_held={held},buffer_ratio={ratio:.2},buffer_peak_raw={},buffer_peak_held={},buffer_peak_ratio={peak_ratio:.2}\r\n",
                r.ip,
                r.listening_port,
                r.state.name(),
                r.ack,
                now.duration_since(r.ack_at).as_secs(),
                r.peak_raw,
                r.peak_held,
            );
        }
        let first = if p.backlog.histlen() > 0 { p.backlog.first() + 1 } else { 0 };
        let stream_ratio = ratio(p.raw_in, p.held_in);
        let _ = write!(
            out,
            "master_failover_state:{failover}\r\nmaster_replid:{replid}\r\nmaster_replid2:{}\r\nmaster_repl_offset:{offset}\r\nsecond_repl_offset:{}\r\nrepl_backlog_active:1\r\nrepl_backlog_size:{backlog_size}\r\nrepl_backlog_first_byte_offset:{first}\r\nrepl_backlog_histlen:{}\r\nrepl_stream_compression_ratio:{stream_ratio:.2}\r\n",
            p.replid2,
            p.second_offset,
            p.backlog.histlen(),
        );
        out
    })
    .await
    .unwrap_or_default();
    out.push_str(&primary);
    out
}

/// Raw bytes per byte held (1 when nothing is held).
fn ratio(raw: u64, held: u64) -> f64 {
    if held > 0 {
        raw as f64 / held as f64
    } else {
        1.0
    }
}

/// INFO stats' sync_full, sync_partial_ok, sync_partial_err.
pub async fn sync_stats(core: &Rc<Core>) -> (u64, u64, u64) {
    call(core, HUB, |c| {
        c.repl.primary.borrow().as_ref().map_or((0, 0, 0), |p| (p.stats.full, p.stats.partial_ok, p.stats.partial_err))
    })
    .await
    .unwrap_or((0, 0, 0))
}
