//! Persistence: files on disk, written through glommio's io_uring file API.
//! `aof`: the per-shard append-only files.

pub mod aof;
