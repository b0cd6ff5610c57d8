//! The RDB a primary sends after `+FULLRESYNC`, received into a temp file
//! in `dir`: `$<len>\r\n<bytes>` (disk-backed sync) or Redis's diskless
//! `$EOF:<40 chars>\r\n<bytes><the same 40 chars>`.

use super::io::{LinkIo, Read};
use crate::core::Core;
use crate::log;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

const EOF_MARK_SIZE: usize = 40;
const CHUNK: usize = 64 * 1024;

/// Receives the payload into `path`; returns its size. Gives up after
/// `timeout` without data, or when REPLICAOF changed the target.
pub async fn receive(
    core: &Core,
    io: &mut LinkIo,
    path: &Path,
    timeout: Duration,
    generation: u64,
) -> Result<u64, String> {
    let header = loop {
        let line = io.read_line(Instant::now() + timeout).await.map_err(|_| timeout_text())?;
        touch(core, 0);
        if !line.is_empty() {
            break line;
        }
    };
    if let Some(err) = header.strip_prefix('-') {
        return Err(format!("MASTER aborted replication with an error: {err}"));
    }
    let Some(size) = header.strip_prefix('$') else {
        return Err(format!(
            "Bad protocol from MASTER, the first byte is not '$' (we received '{header}'), are you sure the host and port are right?"
        ));
    };
    let eof_mark = size.strip_prefix("EOF:").filter(|m| m.len() == EOF_MARK_SIZE).map(|m| m.as_bytes().to_vec());
    let total: i64 = match &eof_mark {
        Some(_) => {
            log::notice("MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF to disk");
            -1
        }
        None => {
            let n = size.parse().map_err(|_| format!("Bad protocol from MASTER: '{header}'"))?;
            log::notice(&format!("MASTER <-> REPLICA sync: receiving {n} bytes from master to disk"));
            n
        }
    };
    core.repl.replica.link.borrow_mut().transfer_size = total;
    let mut file = std::fs::File::create(path)
        .map_err(|e| format!("Opening the temp file needed for MASTER <-> REPLICA synchronization: {e}"))?;
    let write_err = |e: std::io::Error| {
        format!(
            "Write error or short write writing to the DB dump file needed for MASTER <-> REPLICA synchronization: {e}"
        )
    };
    let mut chunk = vec![0u8; CHUNK];
    // EOF format: the last 40 bytes seen are held back until more arrive.
    let mut tail: Vec<u8> = Vec::new();
    let mut written = 0u64;
    let mut last_io = Instant::now();
    loop {
        if core.repl.replica.link.borrow().generation != generation || core.process.shutting_down() {
            return Err("Replication target changed during the transfer".into());
        }
        let want = match eof_mark {
            Some(_) => CHUNK,
            None => CHUNK.min((total as u64 - written) as usize),
        };
        if want == 0 {
            break;
        }
        let n = match io.read_some(&mut chunk[..want]).await? {
            Read::Bytes(n) => n,
            Read::Idle if last_io.elapsed() > timeout => return Err(timeout_text()),
            Read::Idle => continue,
        };
        last_io = Instant::now();
        touch(core, n as u64);
        match &eof_mark {
            None => {
                file.write_all(&chunk[..n]).map_err(write_err)?;
                written += n as u64;
            }
            Some(mark) => {
                tail.extend_from_slice(&chunk[..n]);
                let done = tail.ends_with(mark);
                let keep = if done { EOF_MARK_SIZE } else { EOF_MARK_SIZE.min(tail.len()) };
                let flush = tail.len() - keep;
                file.write_all(&tail[..flush]).map_err(write_err)?;
                written += flush as u64;
                tail.drain(..flush);
                if done {
                    break;
                }
            }
        }
    }
    file.sync_all().map_err(write_err)?;
    Ok(written)
}

fn timeout_text() -> String {
    "Timeout receiving bulk data from MASTER... If the problem persists try to set the 'repl-timeout' parameter in redis.conf to a larger value.".into()
}

/// Records transfer progress for INFO.
fn touch(core: &Core, bytes: u64) {
    let mut link = core.repl.replica.link.borrow_mut();
    let now = Some(Instant::now());
    link.transfer_read += bytes;
    link.transfer_last_io = now;
    link.last_io = now;
}
