//! Reply accounting: matching replies to requests, verification, latency
//! recording, and following cluster redirects.

use super::{Redirect, Worker, AUTH, MAX_REDIRECTS};
use crate::cluster::{self, RedirectKind};
use crate::conn::{Pending, KNOWN, MEASURED, SETUP};
use crate::protocol::{self, Reply};
use crate::workload::{Kind, Workload};
use std::time::{Duration, Instant};

impl Worker<'_> {
    /// Parses every complete reply buffered on `idx` and accounts for it.
    pub(super) fn process_replies(&mut self, idx: usize, now: Instant) -> Result<(), String> {
        let Worker { conns, clients, stats, shared, phase, redirects, completed, .. } = self;
        let conn = &mut conns[idx];
        let ci = conn.client;
        let client = &mut clients[ci];
        let values = &phase.workload.values;
        let (data, pending, partial) = conn.parts();
        let per_request = phase.workload.replies_per_custom_request();
        let mut used = 0;
        let result = loop {
            let (reply, n) = match protocol::parse_reply(&data[used..]) {
                Ok(Some(r)) => r,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e.to_string()),
            };
            used += n;
            // A request of several commands completes with its last reply;
            // the others (MULTI's +OK, +QUEUED...) only count an error.
            if pending.front().is_some_and(|p| p.req.kind == Kind::Custom && p.flags & SETUP == 0)
                && *partial + 1 < per_request
            {
                *partial += 1;
                if let Reply::Error(e) = reply {
                    stats.note_error(|| format!("error reply: {}", String::from_utf8_lossy(e)));
                }
                continue;
            }
            *partial = 0;
            let Some(p) = pending.pop_front() else {
                break Err("reply received with no request outstanding".into());
            };
            if p.flags & SETUP != 0 {
                if let Reply::Error(e) = reply {
                    let e = String::from_utf8_lossy(e);
                    if p.flags & AUTH != 0 {
                        break Err(format!("AUTH failed: {e}"));
                    }
                    stats.note_error(|| format!("ASKING: {e}"));
                }
                continue;
            }
            let cmd = &mut stats.cmds[Workload::stat_index(p.req.kind)];
            let measured = p.flags & MEASURED != 0;
            match reply {
                Reply::Error(msg) => {
                    if shared.cluster && p.redirects < MAX_REDIRECTS {
                        if let Some((kind, slot, host, port)) = cluster::parse_redirect(msg) {
                            redirects.push(Redirect { client: ci, pending: p, kind, slot, host, port });
                            continue;
                        }
                    }
                    cmd.errors += 1;
                    stats.note_error(|| format!("error reply: {}", String::from_utf8_lossy(msg)));
                }
                Reply::Simple(b"OK") if p.req.kind == Kind::Set => shared.known.mark(p.req.key),
                Reply::Bulk(v) if p.req.kind == Kind::Get => {
                    cmd.hits += u64::from(measured);
                    if p.flags & KNOWN != 0 && !values.check(v, p.req.key) {
                        cmd.mismatches += 1;
                        stats.note_mismatch(|| {
                            format!("GET returned a wrong value: {}", values.describe_mismatch(v, p.req.key))
                        });
                    }
                }
                Reply::Nil if p.req.kind == Kind::Get => {
                    cmd.misses += u64::from(measured);
                    if p.flags & KNOWN != 0 {
                        cmd.mismatches += 1;
                        stats.note_mismatch(|| {
                            format!("GET of key id {} missed although it was set earlier", p.req.key)
                        });
                    }
                }
                _ if p.req.kind == Kind::Custom => {}
                other => {
                    cmd.mismatches += 1;
                    stats.note_mismatch(|| format!("unexpected reply to {:?}: {other:?}", p.req.kind));
                }
            }
            let cmd = &mut stats.cmds[Workload::stat_index(p.req.kind)];
            if measured {
                cmd.record(now.saturating_duration_since(p.t0), u64::from(p.req_bytes), n as u64);
                stats.last_completion = Some(now);
            }
            client.inflight -= 1;
            *completed += 1;
        };
        conn.consume(used);
        result
    }

    pub(super) fn follow_redirects(&mut self) {
        for r in std::mem::take(&mut self.redirects) {
            let host = if r.host.is_empty() { self.shared.seed_host.clone() } else { r.host };
            let node = match self.map.node_index(&host, r.port) {
                Ok(n) => n,
                Err(e) => {
                    self.stats.note_error(|| format!("redirect to {host}:{}: {e}", r.port));
                    self.give_up(r.client);
                    continue;
                }
            };
            let asking = r.kind == RedirectKind::Ask;
            if asking {
                self.stats.ask += 1;
            } else {
                self.stats.moved += 1;
                self.map.assign(r.slot, node);
                self.masters = self.map.masters();
                self.refresh_from = Some((host, r.port));
            }
            let p = Pending { redirects: r.pending.redirects + 1, ..r.pending };
            self.send(r.client, p, Some(node), asking);
            self.flush_client(r.client);
        }
    }

    /// After a -MOVED, re-reads the whole slot map (at most every 100 ms):
    /// one MOVED usually means many slots moved.
    pub(super) fn refresh_map(&mut self, now: Instant) {
        if self.last_refresh.is_some_and(|t| now.duration_since(t) < Duration::from_millis(100)) {
            return;
        }
        let Some((host, port)) = self.refresh_from.take() else {
            return;
        };
        self.last_refresh = Some(now);
        if let Err(e) = self.map.fetch(&host, port, self.shared.auth.as_deref()) {
            self.stats.note_error(|| format!("refreshing the slot map from {host}:{port}: {e}"));
        }
        self.masters = self.map.masters();
    }
}
