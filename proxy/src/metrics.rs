//! `metrics-port`: Prometheus's text exposition format (version 0.0.4) on
//! `GET /metrics`, plain HTTP/1.1, one response per connection. Served by
//! core 0 on glommio's reactor (a scrape every few seconds needs no ring);
//! each scrape gathers every core's figures over the mesh, as INFO does.

use crate::commands::server::{report, CoreReport};
use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use crate::latency::{LatencySnapshot, BOUNDS};
use crate::log;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use std::fmt::Write;
use std::rc::Rc;
use std::time::Duration;

/// Accepts scrapes until shutdown makes the pending accept fail.
pub async fn accept_loop(core: Rc<Core>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok(stream) if !core.process.shutting_down() => {
                glommio::spawn_local(scrape(core.clone(), stream)).detach();
            }
            Ok(_) => return,
            Err(_) if core.process.shutting_down() => return,
            Err(e) => {
                log::warning(&format!("Accepting metrics connection: {e}"));
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One request: its head read (8 KiB at most), one response, closed.
async fn scrape(core: Rc<Core>, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(n) if n > 0 && head.len() + n <= 8192 => head.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics") => ("200 OK", exposition(&core).await),
        (b"GET", _) => ("404 Not Found", "Not Found\n".to_string()),
        _ => ("405 Method Not Allowed", "Method Not Allowed\n".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.close().await;
}

/// Every metric, per shard where the figure is a shard's own.
pub async fn exposition(core: &Rc<Core>) -> String {
    let mut reports: Vec<(CoreReport, LatencySnapshot)> =
        call_all(core, |c| (report(c), c.stats.latency.snapshot())).await.into_iter().flatten().collect();
    reports.sort_by_key(|(r, _)| r.index);
    let mut out = String::with_capacity(8192);
    let per_shard = |out: &mut String, name: &str, kind: &str, help: &str, value: &dyn Fn(&CoreReport) -> f64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (r, _) in &reports {
            let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", r.index, value(r));
        }
    };
    per_shard(
        &mut out,
        "corekv_commands_processed_total",
        "counter",
        "Commands parsed on the shard's connections.",
        &|r| r.commands as f64,
    );
    per_shard(&mut out, "corekv_shard_commands_total", "counter", "Commands run on the shard's data.", &|r| {
        r.shard_commands as f64
    });
    per_shard(&mut out, "corekv_instantaneous_ops_per_sec", "gauge", "Commands per second, recent average.", &|r| {
        r.ops_per_sec as f64
    });
    per_shard(&mut out, "corekv_keyspace_hits_total", "counter", "Key lookups that found the key.", &|r| r.hits as f64);
    per_shard(&mut out, "corekv_keyspace_misses_total", "counter", "Key lookups that did not.", &|r| r.misses as f64);
    per_shard(&mut out, "corekv_expired_keys_total", "counter", "Keys removed because their TTL passed.", &|r| {
        r.expired as f64
    });
    per_shard(&mut out, "corekv_evicted_keys_total", "counter", "Keys evicted for maxmemory.", &|r| r.evicted as f64);
    per_shard(&mut out, "corekv_keys", "gauge", "Keys held, all databases.", &|r| {
        r.keyspace.iter().map(|k| k.0).sum::<usize>() as f64
    });
    per_shard(&mut out, "corekv_expiring_keys", "gauge", "Keys with a TTL, all databases.", &|r| {
        r.keyspace.iter().map(|k| k.1).sum::<usize>() as f64
    });
    per_shard(&mut out, "corekv_connected_clients", "gauge", "Client connections open on the shard's core.", &|r| {
        r.clients as f64
    });
    per_shard(&mut out, "corekv_blocked_clients", "gauge", "Clients blocked on the shard's core.", &|r| {
        r.blocked as f64
    });
    per_shard(&mut out, "corekv_connections_received_total", "counter", "Connections accepted.", &|r| {
        r.connections_received as f64
    });
    per_shard(&mut out, "corekv_rejected_connections_total", "counter", "Connections refused (maxclients).", &|r| {
        r.rejected as f64
    });
    per_shard(&mut out, "corekv_net_input_bytes_total", "counter", "Bytes read from clients.", &|r| r.net_in as f64);
    per_shard(&mut out, "corekv_net_output_bytes_total", "counter", "Bytes written to clients.", &|r| r.net_out as f64);
    per_shard(&mut out, "corekv_cross_core_batches_total", "counter", "Batches sent to other shards.", &|r| {
        r.hops_sent as f64
    });
    per_shard(&mut out, "corekv_cpu_user_seconds_total", "counter", "User CPU time of the shard's thread.", &|r| {
        r.cpu_user
    });
    per_shard(&mut out, "corekv_cpu_sys_seconds_total", "counter", "System CPU time of the shard's thread.", &|r| {
        r.cpu_sys
    });
    // Process-wide: a block freed on another core than its allocator's
    // moves bytes between threads' counters (ARCHITECTURE.md, "Memory").
    let _ = writeln!(
        out,
        "# HELP corekv_memory_used_bytes Bytes allocated (INFO used_memory).\n# TYPE corekv_memory_used_bytes gauge\ncorekv_memory_used_bytes {}",
        shard::memory::used()
    );
    let _ = writeln!(
        out,
        "# HELP corekv_maxmemory_bytes The maxmemory limit (0: none).\n# TYPE corekv_maxmemory_bytes gauge\ncorekv_maxmemory_bytes {}",
        core.config().maxmemory
    );
    let memory = (core.process.memory)();
    let _ = writeln!(
        out,
        "# HELP corekv_memory_rss_bytes Resident set size of the process.\n# TYPE corekv_memory_rss_bytes gauge\ncorekv_memory_rss_bytes {}",
        memory.rss
    );
    let _ = writeln!(
        out,
        "# HELP corekv_uptime_seconds Seconds since the start.\n# TYPE corekv_uptime_seconds gauge\ncorekv_uptime_seconds {}",
        core.process.started.elapsed().as_secs()
    );
    let name = "corekv_command_latency_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from a command's read to its reply, on the shard whose connection read it.\n# TYPE {name} histogram"
    );
    for (r, h) in &reports {
        let mut cumulative = 0;
        for (i, count) in h.counts.iter().enumerate() {
            cumulative += count;
            let le = BOUNDS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{shard=\"{}\",le=\"{le}\"}} {cumulative}", r.index);
        }
        let _ = writeln!(out, "{name}_sum{{shard=\"{}\"}} {}", r.index, h.sum_seconds);
        let _ = writeln!(out, "{name}_count{{shard=\"{}\"}} {cumulative}", r.index);
    }
    out
}
