//! LATENCY LATEST | HISTORY | RESET | GRAPH | DOCTOR | HISTOGRAM | HELP
//! (Redis's latency.c) over every core: each core keeps its own events and
//! command histograms; these commands merge them (events second by second,
//! histograms by adding counts). DOCTOR's text and GRAPH's sparkline are
//! in `latency/report.rs`.

mod report;

use super::reply::{help, reply};
use crate::coordinator::dispatch::call_all;
use crate::session::Connection;
use shard::commands::numbered;
use shard::observe::hdr::Histogram;
use shard::observe::latency::Series;
use shard::Args;

pub fn latency_help(conn: &mut Connection) {
    help(
        conn,
        &[
            "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
            "HELP",
            "    Prints this help.",
        ],
    );
}

/// Every core's events merged: (event, series) in the order the cores
/// first saw them.
pub async fn events(conn: &Connection) -> Vec<(&'static str, Series)> {
    let parts = call_all(&conn.core, |core| {
        let shard = core.shard.borrow();
        shard.observe.latency.series.iter().map(|(e, s)| (*e, (**s).clone())).collect::<Vec<_>>()
    })
    .await;
    let parts: Vec<Vec<(&'static str, Series)>> = parts.into_iter().flatten().collect();
    let mut names: Vec<&'static str> = Vec::new();
    for (e, _) in parts.iter().flatten() {
        if !names.contains(e) {
            names.push(e);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let series = parts.iter().flatten().filter(|(e, _)| *e == name).map(|(_, s)| s);
            (name, Series::merge(series))
        })
        .collect()
}

/// The merged series of one event, by its exact name.
async fn event(conn: &Connection, name: &[u8]) -> Option<(&'static str, Series)> {
    events(conn).await.into_iter().find(|(e, _)| e.as_bytes() == name)
}

pub async fn latest(conn: &mut Connection) {
    let events = events(conn).await;
    reply(conn, |r| {
        r.array(events.len());
        for (name, s) in &events {
            let last = s.last();
            r.array(4);
            r.bulk(name.as_bytes());
            r.int(last.time as i64);
            r.int(last.latency as i64);
            r.int(s.max as i64);
        }
    });
}

pub async fn history(conn: &mut Connection, args: Args<'_>) {
    let samples: Vec<_> = match event(conn, args.get(2)).await {
        Some((_, s)) => s.in_order().collect(),
        None => Vec::new(),
    };
    reply(conn, |r| {
        r.array(samples.len());
        for s in &samples {
            r.array(2);
            r.int(s.time as i64);
            r.int(s.latency as i64);
        }
    });
}

pub async fn graph(conn: &mut Connection, args: Args<'_>) {
    match event(conn, args.get(2)).await {
        Some((name, series)) => {
            let text = report::graph(name, &series);
            reply(conn, |r| r.verbatim(text.as_bytes()));
        }
        None => conn.error(&format!("ERR No samples available for event '{}'", String::from_utf8_lossy(args.get(2)))),
    }
}

pub async fn doctor(conn: &mut Connection) {
    let events = events(conn).await;
    let text = {
        let config = conn.core.config();
        report::doctor(&events, &config)
    };
    reply(conn, |r| r.verbatim(text.as_bytes()));
}

/// RESET [event ...]: for each name, the events removed on any core
/// (counted once), as Redis sums latencyResetEvent over its arguments.
pub async fn reset(conn: &mut Connection, args: Args<'_>) {
    let names: Vec<Vec<u8>> = args.iter().skip(2).map(<[u8]>::to_vec).collect();
    let removed = call_all(&conn.core, move |core| {
        let mut shard = core.shard.borrow_mut();
        let events = &mut shard.observe.latency;
        match names.is_empty() {
            true => vec![events.reset(None)],
            false => names.iter().map(|n| events.reset(Some(n))).collect::<Vec<_>>(),
        }
    })
    .await;
    let removed: Vec<Vec<Vec<&'static str>>> = removed.into_iter().flatten().collect();
    let per_arg = removed.first().map_or(0, Vec::len);
    let mut total = 0;
    for i in 0..per_arg {
        let mut distinct: Vec<&'static str> = Vec::new();
        for core in &removed {
            for e in core.get(i).into_iter().flatten() {
                if !distinct.contains(e) {
                    distinct.push(e);
                }
            }
        }
        total += distinct.len();
    }
    reply(conn, |r| r.int(total as i64));
}

/// The commands LATENCY HISTOGRAM names (lookupCommandBySds: a name or
/// `container|sub`), each with its subcommands; unknown names are skipped.
fn histogram_targets(conn: &Connection, args: &Args) -> Vec<usize> {
    let mut wanted = Vec::new();
    for name in args.iter().skip(2) {
        let mut parts = name.splitn(2, |&b| b == b'|');
        let Some(top) = parts.next().and_then(|n| conn.core.commands.lookup(n)) else { continue };
        let spec = match parts.next() {
            Some(sub) => match top.subcommand(sub) {
                Some(s) => s,
                None => continue,
            },
            None => top,
        };
        wanted.push(spec.index());
        wanted.extend(spec.subcommands.iter().map(|s| s.index()));
    }
    wanted
}

pub async fn histogram(conn: &mut Connection, args: Args<'_>) {
    let wanted = (args.len() > 2).then(|| histogram_targets(conn, &args));
    let asked = wanted.clone();
    let parts = call_all(&conn.core, move |core| core.shard.borrow().observe.histograms(asked.as_deref())).await;
    let mut merged: Vec<(usize, Histogram)> = Vec::new();
    for (i, h) in parts.into_iter().flatten().flatten() {
        match merged.iter_mut().find(|(j, _)| *j == i) {
            Some((_, m)) => m.add(&h),
            None => merged.push((i, h)),
        }
    }
    // Named commands in the order asked, else table order.
    let order: Vec<usize> = match wanted {
        Some(w) => w,
        None => (0..numbered().len()).collect(),
    };
    let list: Vec<(&'static str, &Histogram)> = order
        .iter()
        .filter_map(|i| merged.iter().find(|(j, _)| j == i).map(|(_, h)| (numbered()[*i].name, h)))
        .collect();
    reply(conn, |r| {
        r.map(list.len());
        for (name, h) in &list {
            r.bulk(name.as_bytes());
            r.map(2);
            r.bulk(b"calls");
            r.int(h.total as i64);
            r.bulk(b"histogram_usec");
            let buckets = h.cumulative_buckets();
            r.map(buckets.len());
            for (us, count) in buckets {
                r.int(us);
                r.int(count as i64);
            }
        }
    });
}
