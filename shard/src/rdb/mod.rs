//! Redis's RDB format, version 10 (Redis 7.0): pure and synchronous.
//! `encode` writes files and DUMP payloads in the encodings Redis 7.0
//! writes; `reader` reads them back, and also the older encodings of Redis
//! 2.4–6.2 dumps (zipmap, ziplist, quicklist v1, RDB versions 1–9).
//! Everything read is checked as Redis's `sanitize-dump-payload yes` checks
//! it, and no length announced by the input is allocated before the bytes
//! are there: a bad file is an `RdbError` naming the offset, never a panic.

pub mod crc64;
mod decode;
mod encode;
mod input;
mod intset;
pub mod listpack;
pub mod lzf;
mod output;
mod payload;
mod reader;
mod stream;
pub mod ziplist;
pub mod zipmap;

#[cfg(test)]
mod tests;

pub use crc64::{crc64_combine, Crc64};
pub use encode::{
    write_entry, write_eof, write_header, write_resize_db, write_select_db, write_standard_header, write_value,
};
pub use payload::{
    dump_payload, dump_payload_with, functions_dump_payload, functions_restore_payload, restore_payload,
    restore_payload_with, verify_payload,
};
pub use reader::{Item, Reader};

use crate::types::hash::HashLimits;
use crate::types::list::Fill;
use crate::types::zset;

/// The RDB version written (Redis 7.0's).
pub const RDB_VERSION: u16 = 10;

/// The Redis version corekv's files claim (as INFO's `redis_version`).
pub const REDIS_VER: &str = "7.0.15";

/// Value types (`rdb.h`).
pub mod kind {
    pub const STRING: u8 = 0;
    pub const LIST: u8 = 1;
    pub const SET: u8 = 2;
    pub const ZSET: u8 = 3;
    pub const HASH: u8 = 4;
    pub const ZSET_2: u8 = 5;
    pub const MODULE: u8 = 6;
    pub const MODULE_2: u8 = 7;
    pub const HASH_ZIPMAP: u8 = 9;
    pub const LIST_ZIPLIST: u8 = 10;
    pub const SET_INTSET: u8 = 11;
    pub const ZSET_ZIPLIST: u8 = 12;
    pub const HASH_ZIPLIST: u8 = 13;
    pub const LIST_QUICKLIST: u8 = 14;
    pub const STREAM_LISTPACKS: u8 = 15;
    pub const HASH_LISTPACK: u8 = 16;
    pub const ZSET_LISTPACK: u8 = 17;
    pub const LIST_QUICKLIST_2: u8 = 18;
    pub const STREAM_LISTPACKS_2: u8 = 19;
}

/// Opcodes between entries (`rdb.h`).
pub mod opcode {
    pub const FUNCTION2: u8 = 245;
    pub const FUNCTION: u8 = 246;
    pub const MODULE_AUX: u8 = 247;
    pub const IDLE: u8 = 248;
    pub const FREQ: u8 = 249;
    pub const AUX: u8 = 250;
    pub const RESIZEDB: u8 = 251;
    pub const EXPIRETIME_MS: u8 = 252;
    pub const EXPIRETIME: u8 = 253;
    pub const SELECTDB: u8 = 254;
    pub const EOF: u8 = 255;
}

/// What a saved key carries of its last access (`rdbSaveKeyValuePair`):
/// the idle seconds under an LRU policy, the LFU counter under an LFU one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    None,
    Idle(u64),
    Freq(u8),
}

/// How values are written.
#[derive(Clone, Copy, Debug)]
pub struct SaveOptions {
    /// `rdbcompression`: LZF for strings longer than 20 bytes when it pays.
    pub compress: bool,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions { compress: true }
    }
}

/// The encoding thresholds a loaded value is fitted to, as Redis fits a
/// loaded object to its configuration.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub hash: HashLimits,
    pub zset: zset::Limits,
    pub set_max_intset_entries: usize,
    pub list_fill: Fill,
    /// `list-compress-depth` of the lists made.
    pub list_depth: i64,
}

impl Default for Limits {
    /// Redis's defaults.
    fn default() -> Self {
        Limits {
            hash: HashLimits { max_entries: 512, max_value: 64 },
            zset: zset::Limits { entries: 128, value: 64 },
            set_max_intset_entries: 512,
            list_fill: Fill(-2),
            list_depth: 0,
        }
    }
}

impl Limits {
    pub fn of(config: &crate::config::Config) -> Limits {
        let size = |v: u64| v.min(usize::MAX as u64) as usize;
        Limits {
            hash: HashLimits {
                max_entries: size(config.hash_max_listpack_entries),
                max_value: size(config.hash_max_listpack_value),
            },
            zset: zset::Limits::of(config),
            set_max_intset_entries: size(config.set_max_intset_entries),
            list_fill: Fill(config.list_max_listpack_size),
            list_depth: config.list_compress_depth,
        }
    }
}

/// Why input could not be read, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdbError {
    /// Byte offset in the file (or payload) where the problem was found.
    pub offset: u64,
    pub message: String,
}

impl RdbError {
    pub fn new(offset: usize, message: impl Into<String>) -> RdbError {
        RdbError { offset: offset as u64, message: message.into() }
    }
}

impl std::fmt::Display for RdbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at offset {}", self.message, self.offset)
    }
}

impl std::error::Error for RdbError {}
