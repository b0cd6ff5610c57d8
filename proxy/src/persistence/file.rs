//! The files of a save: each shard streams its part through glommio's
//! io_uring files; the coordinator joins header, parts, EOF and CRC-64 into
//! `temp-<pid>.rdb`, fsyncs it and renames it over `dbfilename`.

use super::status::PartResult;
use super::walk::walk_step;
use crate::core::Core;
use futures_lite::AsyncWriteExt;
use glommio::io::{BufferedFile, StreamWriterBuilder};
use shard::rdb;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

/// Bytes a shard serializes before handing them to the file.
const CHUNK: usize = 256 << 10;
/// Work a shard does per step before letting its clients run.
const SLICE: Duration = Duration::from_micros(300);

pub(super) fn part_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("temp-{}.part{index}.rdb", std::process::id()))
}

/// Streams this shard's part to `path`, a step at a time.
pub(super) async fn write_part(core: &Rc<Core>, path: &Path) -> PartResult {
    let io = |e: std::io::Error| format!("writing {}: {e}", path.display());
    let file = BufferedFile::create(path).await.map_err(|e| io(e.into()))?;
    let mut out = StreamWriterBuilder::new(file).with_buffer_size(CHUNK).build();
    let mut buf = Vec::with_capacity(CHUNK * 2);
    let mut crc = rdb::Crc64::new();
    let mut len = 0u64;
    loop {
        let done = walk_step(core, &mut buf, CHUNK, SLICE).await;
        crc.update(&buf);
        len += buf.len() as u64;
        out.write_all(&buf).await.map_err(io)?;
        buf.clear();
        if done {
            break;
        }
        glommio::executor().yield_task_queue_now().await;
    }
    out.close().await.map_err(io)?;
    Ok((len, crc.value()))
}

/// Joins header, parts, EOF and checksum into `temp-<pid>.rdb`, fsyncs it
/// and renames it over `dir/file_name`.
pub(super) async fn join(
    core: &Rc<Core>,
    dir: &Path,
    file_name: &str,
    parts: &[(u64, u64)],
    checksum: bool,
) -> Result<(), String> {
    let temp = dir.join(format!("temp-{}.rdb", std::process::id()));
    let io = |e: glommio::GlommioError<()>| format!("writing {}: {e}", temp.display());
    let mut head = Vec::new();
    let ctime = (shard::unix_ms() / 1000).to_string();
    // Allocated bytes, as Redis's used_memory (INFO memory sums the same).
    let used: i64 = crate::coordinator::dispatch::call_all(core, |c| (c.process.thread_allocated)())
        .await
        .into_iter()
        .flatten()
        .sum();
    let used = used.max(0).to_string();
    rdb::write_header(
        &mut head,
        &[
            ("redis-ver", b"7.0.15"),
            ("redis-bits", b"64"),
            ("ctime", ctime.as_bytes()),
            ("used-mem", used.as_bytes()),
            ("aof-base", b"0"),
        ],
    );
    let mut crc = rdb::Crc64::new();
    crc.update(&head);
    let mut crc = crc.value();
    let file = BufferedFile::create(&temp).await.map_err(io)?;
    let result: Result<(), String> = async {
        let mut pos = head.len() as u64;
        file.write_at(head, 0).await.map_err(io)?;
        for (i, &(len, part_crc)) in parts.iter().enumerate() {
            let from = part_path(dir, i);
            let to = file.as_raw_fd();
            let at = pos;
            // The kernel copies (copy_file_range): no pass through this core.
            glommio::executor()
                .spawn_blocking(move || copy_range(&from, to, at, len))
                .await
                .map_err(|e| format!("copying shard {i}'s part: {e}"))?;
            crc = rdb::crc64_combine(crc, part_crc, len);
            pos += len;
        }
        let mut tail = Vec::new();
        rdb::write_eof(&mut tail);
        let mut eof_crc = rdb::Crc64::new();
        eof_crc.update(&tail);
        crc = rdb::crc64_combine(crc, eof_crc.value(), tail.len() as u64);
        tail.extend_from_slice(&if checksum { crc } else { 0 }.to_le_bytes());
        file.write_at(tail, pos).await.map_err(io)?;
        file.fdatasync().await.map_err(io)?;
        Ok(())
    }
    .await;
    let _ = file.close().await;
    if let Err(e) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    let target = dir.join(file_name);
    if let Err(e) = std::fs::rename(&temp, &target) {
        let _ = std::fs::remove_file(&temp);
        return Err(format!("renaming {} to {}: {e}", temp.display(), target.display()));
    }
    let directory = glommio::io::Directory::open(dir).await.map_err(|e| format!("{e}"))?;
    directory.sync().await.map_err(|e| format!("fsync of {}: {e}", dir.display()))?;
    let _ = directory.close().await;
    Ok(())
}

/// Copies all of `from` to `to` at offset `at` with copy_file_range.
fn copy_range(from: &Path, to: std::os::fd::RawFd, at: u64, len: u64) -> std::io::Result<()> {
    let src = std::fs::File::open(from)?;
    let (mut src_off, mut dst_off) = (0i64, at as i64);
    let mut left = len;
    while left > 0 {
        let chunk = left.min(1 << 30) as usize;
        // SAFETY: both descriptors are open for the duration of the call and
        // the offsets are plain integers the kernel advances.
        let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut src_off, to, &mut dst_off, chunk, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                // No kernel copy here (old kernel, odd filesystem): by hand.
                Some(libc::ENOSYS | libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP) => {
                    copy_by_hand(&src, to, src_off as u64, dst_off as u64, left)
                }
                _ => Err(e),
            };
        }
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "part shorter than written"));
        }
        left -= n as u64;
    }
    Ok(())
}

/// `copy_range` without copy_file_range: pread/pwrite through a buffer.
fn copy_by_hand(
    src: &std::fs::File,
    to: std::os::fd::RawFd,
    mut from: u64,
    mut at: u64,
    mut left: u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    // SAFETY: `to` stays open for the call; ManuallyDrop keeps it open after.
    let dst = std::mem::ManuallyDrop::new(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(to) });
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = src.read_at(&mut buf[..left.min(1 << 20) as usize], from)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "part shorter than written"));
        }
        dst.write_all_at(&buf[..n], at)?;
        (from, at, left) = (from + n as u64, at + n as u64, left - n as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn parts_are_copied_at_their_offset_either_way() {
        let dir = std::env::temp_dir().join(format!("corekv-copy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let part = dir.join("part");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&part, &data).unwrap();
        for by_hand in [false, true] {
            let out = dir.join(format!("out{by_hand}"));
            std::fs::write(&out, b"HEAD").unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&out).unwrap();
            if by_hand {
                let src = std::fs::File::open(&part).unwrap();
                copy_by_hand(&src, file.as_raw_fd(), 0, 4, data.len() as u64).unwrap();
            } else {
                copy_range(&part, file.as_raw_fd(), 4, data.len() as u64).unwrap();
            }
            let got = std::fs::read(&out).unwrap();
            assert_eq!(&got[..4], b"HEAD");
            assert!(got[4..] == data[..], "by hand: {by_hand}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
