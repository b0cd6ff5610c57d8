//! A replica's connection after SYNC/PSYNC: a partial resync from the
//! backlog or a full one (snapshot, then the stream from its cut), then
//! the stream as it grows (`feeder.rs`). The connection stays on its own
//! core.

use super::feeder::stream_to;
use super::handoff::{ReplicaHello, SyncRequest};
use super::hub::{ensure_started, refresh_compression, HUB};
use super::primary::{LinkState, ReplicaLink, Stage};
use super::snapshot_group::{self, Role};
use crate::coordinator::dispatch::call;
use crate::core::Core;
use crate::log;
use crate::persistence::{save_for_replicas, SaveError};
use crate::stream::ClientStream;
use futures_lite::AsyncWriteExt;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Stream bytes sent per write at most.
const SEND_CHUNK: usize = 256 << 10;
/// How long a full resync waits for its cut's place in the stream (every
/// shard's marker is normally there within a mesh round trip).
const CUT_WAIT: Duration = Duration::from_secs(30);

/// Who the replica is, for the hub's link record.
pub struct Peer {
    pub id: u64,
    pub fd: i32,
    pub ip: String,
    pub hello: ReplicaHello,
    /// What the stream holds for it (its CLIENT LIST omem=).
    pub held: std::sync::Arc<AtomicU64>,
}

/// Serves a replica until its link ends. `input`: bytes it sent after PSYNC.
pub async fn serve_replica(
    core: &Rc<Core>,
    stream: &mut ClientStream,
    peer: Peer,
    request: SyncRequest,
    input: Vec<u8>,
) {
    ensure_started(core).await;
    let id = peer.id;
    let started = start(core, stream, &peer, request).await;
    if let Some((pos, eof)) = started {
        log::notice(&format!("Synchronization with replica {}:{} succeeded", peer.ip, peer.hello.listening_port));
        stream_to(core, stream, id, pos, input, eof).await;
    }
    call(core, HUB, move |c| {
        if let Some(p) = c.repl.primary.borrow_mut().as_mut() {
            p.replicas.retain(|r| r.id != id);
            p.wake_ack_waiters();
        }
    })
    .await;
    refresh_compression(core).await;
    log::notice(&format!("Connection with replica {}:{} lost.", peer.ip, peer.hello.listening_port));
}

/// The resync: returns the stream position to go on from (and whether the
/// snapshot went in the EOF-marker format), `None` when the link ended.
async fn start(core: &Rc<Core>, stream: &mut ClientStream, peer: &Peer, request: SyncRequest) -> Option<(u64, bool)> {
    let (replid, offset, psync) = match request {
        SyncRequest::Psync { replid, offset } => (replid, offset, true),
        SyncRequest::Sync => (String::new(), -1, false),
    };
    let link = |pos: u64, state: LinkState| ReplicaLink {
        id: peer.id,
        fd: peer.fd,
        ip: peer.ip.clone(),
        listening_port: peer.hello.listening_port,
        state,
        pos,
        ack: 0,
        ack_at: Instant::now(),
        loaded: false,
        killed: false,
        soft_since: None,
        waker: None,
        peak_held: 0,
        peak_raw: 0,
        held: peer.held.clone(),
    };
    // Partial: the replica's history is ours and still in the backlog.
    let continued = {
        let (link, replid) = (link(0, LinkState::Online), replid.clone());
        call(core, HUB, move |c| {
            let mut primary = c.repl.primary.borrow_mut();
            let p = primary.as_mut()?;
            let pos = (offset - 1).max(0) as u64;
            if psync && offset > 0 && p.can_continue(&replid, pos) {
                p.stats.partial_ok += 1;
                p.replicas.push(ReplicaLink { pos, ack: pos, loaded: true, ..link });
                return Some((pos, p.replid.clone(), p.backlog.end));
            }
            if psync && replid != "?" {
                p.stats.partial_err += 1;
            }
            None
        })
        .await
        .flatten()
    };
    if let Some((pos, ours, end)) = continued {
        log::notice(&format!(
            "Partial resynchronization request from {}:{} accepted. Sending {} bytes of backlog starting from offset {}.",
            peer.ip,
            peer.hello.listening_port,
            end - pos,
            pos + 1
        ));
        let line = if peer.hello.capa_psync2 { format!("+CONTINUE {ours}\r\n") } else { "+CONTINUE\r\n".into() };
        return stream.write_all(line.as_bytes()).await.ok().map(|_| (pos, false));
    }
    full_sync(core, stream, peer, psync, link(0, LinkState::WaitBgsave)).await
}

/// A full resync: snapshot, +FULLRESYNC with the cut's offset, the file,
/// then the stream from the cut. Replicas asking together share one
/// snapshot (`snapshot_group`): with a diskless sync the first waits
/// `repl-diskless-sync-delay` for others, as Redis does.
async fn full_sync(
    core: &Rc<Core>,
    stream: &mut ClientStream,
    peer: &Peer,
    psync: bool,
    link: ReplicaLink,
) -> Option<(u64, bool)> {
    let id = peer.id;
    log::notice(&format!("Replica {}:{} asks for synchronization", peer.ip, peer.hello.listening_port));
    // Registered before the cut, at the stream's end: nothing after it is
    // dropped until the cut's position is known.
    call(core, HUB, move |c| {
        if let Some(p) = c.repl.primary.borrow_mut().as_mut() {
            p.stats.full += 1;
            p.replicas.push(ReplicaLink { pos: p.backlog.end, ..link });
        }
    })
    .await;
    refresh_compression(core).await;
    let (diskless, delay) = {
        let config = core.config();
        (config.repl_diskless_sync && peer.hello.capa_eof, config.repl_diskless_sync_delay)
    };
    let gathering = diskless && delay > 0;
    let mut waiting = Waiting { stream, keepalive: Instant::now(), gone: false };
    let (group, saved) = match snapshot_group::enter(core, id, gathering).await {
        Role::Lead(group) => (group, lead(core, &mut waiting, group, gathering.then_some(delay)).await),
        Role::Follow(group) => (group, follow(core, &mut waiting, group).await),
    };
    let sent = match (&saved, waiting.gone) {
        (Some((seq, path)), false) => send_snapshot(core, waiting.stream, peer, psync, *seq, path).await,
        _ => None,
    };
    snapshot_group::leave(core, group, saved.map(|(_, path)| path)).await;
    let (pos, eof) = sent?;
    call(core, HUB, move |c| {
        if let Some(r) = c.repl.primary.borrow_mut().as_mut().and_then(|p| p.link(id)) {
            r.state = LinkState::Online;
        }
    })
    .await;
    Some((pos, eof))
}

/// A replica waiting for its snapshot: Redis sends it newlines meanwhile,
/// so its read timeout stays quiet.
struct Waiting<'a> {
    stream: &'a mut ClientStream,
    keepalive: Instant,
    /// The replica went away (its group's save still finishes).
    gone: bool,
}

impl Waiting<'_> {
    async fn keep_alive(&mut self) {
        if !self.gone && self.keepalive.elapsed() >= Duration::from_secs(1) {
            self.keepalive = Instant::now();
            self.gone = self.stream.write_all(b"\n").await.is_err();
        }
    }
}

/// The group's leader: waits `gather` seconds for more replicas, then
/// saves; the snapshot's cut and file (also the followers').
async fn lead(
    core: &Rc<Core>,
    waiting: &mut Waiting<'_>,
    group: u64,
    gather: Option<u64>,
) -> Option<(u64, std::path::PathBuf)> {
    if let Some(secs) = gather {
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until {
            glommio::timer::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_secs(1))).await;
            waiting.keep_alive().await;
        }
        snapshot_group::advance(core, group, Stage::Saving).await;
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let file = format!("temp-replsync-{}-{}.rdb", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let path = std::path::Path::new(&core.config().dir).join(&file);
    // One save, polled between keepalives (dropping it would not stop it).
    let mut save = Box::pin(save_for_replicas(core, file.clone()));
    let outcome = loop {
        let tick = glommio::timer::sleep(Duration::from_secs(1));
        match futures_lite::future::or(async { Some(save.as_mut().await) }, async {
            tick.await;
            None
        })
        .await
        {
            Some(Ok(seq)) => break Some(seq),
            // Another save or rewrite runs: ours starts after it.
            Some(Err(SaveError::InProgress | SaveError::Rewriting)) => {
                glommio::timer::sleep(Duration::from_millis(20)).await;
                save = Box::pin(save_for_replicas(core, file.clone()));
            }
            Some(Err(SaveError::Failed(e))) => {
                log::warning(&format!("BGSAVE for replication failed: {e}"));
                break None;
            }
            None => {}
        }
        waiting.keep_alive().await;
    };
    let stage = match outcome {
        Some(seq) => Stage::Saved { seq, file: path.to_string_lossy().into_owned() },
        None => Stage::Failed,
    };
    snapshot_group::advance(core, group, stage).await;
    Some((outcome?, path))
}

/// A follower: waits for its group's snapshot.
async fn follow(core: &Rc<Core>, waiting: &mut Waiting<'_>, group: u64) -> Option<(u64, std::path::PathBuf)> {
    log::notice("Waiting for the snapshot another replica's synchronization is taking");
    loop {
        match snapshot_group::stage(core, group).await {
            Stage::Saved { seq, file } => return Some((seq, file.into())),
            Stage::Failed => return None,
            Stage::Gathering | Stage::Saving => {}
        }
        glommio::timer::sleep(Duration::from_millis(10)).await;
        waiting.keep_alive().await;
    }
}

/// Waits for the cut's stream position, answers +FULLRESYNC and sends the
/// file. Returns the position the stream goes on from and whether the
/// file went in the EOF-marker format.
async fn send_snapshot(
    core: &Rc<Core>,
    stream: &mut ClientStream,
    peer: &Peer,
    psync: bool,
    seq: u64,
    path: &std::path::Path,
) -> Option<(u64, bool)> {
    let (id, waited) = (peer.id, Instant::now());
    let (replid, pos) = loop {
        let found = call(core, HUB, move |c| {
            let mut primary = c.repl.primary.borrow_mut();
            let p = primary.as_mut()?;
            let (_, pos) = *p.cuts.iter().find(|(s, _)| *s == seq)?;
            let link = p.link(id)?;
            link.pos = pos;
            link.ack = pos;
            link.state = LinkState::SendBulk;
            Some((p.replid.clone(), pos))
        })
        .await
        .flatten();
        match found {
            Some(f) => break f,
            None if waited.elapsed() > CUT_WAIT => {
                log::warning("The snapshot's cut did not reach the replication stream in time: sync aborted");
                return None;
            }
            None => glommio::timer::sleep(Duration::from_millis(5)).await,
        }
    };
    // Sent a chunk at a time: memory stays one chunk, whatever the
    // dataset's size (the file was just written: it is in the page cache).
    let mut file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let diskless = core.config().repl_diskless_sync && peer.hello.capa_eof;
    let mut head = String::new();
    if psync {
        head.push_str(&format!("+FULLRESYNC {replid} {pos}\r\n"));
    }
    let mark = crate::core::random_id();
    if diskless {
        head.push_str(&format!("$EOF:{mark}\r\n"));
    } else {
        head.push_str(&format!("${size}\r\n"));
    }
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut chunk = vec![0u8; SEND_CHUNK];
    let mut sent = 0u64;
    while sent < size {
        let n = std::io::Read::read(&mut file, &mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        stream.write_all(&chunk[..n]).await.ok()?;
        sent += n as u64;
    }
    if diskless {
        stream.write_all(mark.as_bytes()).await.ok()?;
    }
    log::notice(&format!(
        "Synchronization with replica {}:{}: sent {size} bytes of snapshot",
        peer.ip, peer.hello.listening_port
    ));
    Some((pos, diskless))
}
