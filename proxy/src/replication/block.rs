//! A block of the replication stream: whole commands of one shard, held
//! raw or compressed (lz4, zstd).
//! (Stand-in until the codec lands: every block is kept raw.)

use shard::config::ReplCompression;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Raw,
    Lz4,
    Zstd,
}

pub struct Block {
    codec: Codec,
    raw_len: usize,
    bytes: Box<[u8]>,
}

impl Block {
    pub fn raw(bytes: Vec<u8>) -> Block {
        Block { codec: Codec::Raw, raw_len: bytes.len(), bytes: bytes.into_boxed_slice() }
    }

    pub fn seal(raw: &[u8], _compression: ReplCompression, _level: i32) -> Block {
        Block::raw(raw.to_vec())
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    pub fn raw_len(&self) -> usize {
        self.raw_len
    }

    pub fn held(&self) -> usize {
        self.bytes.len()
    }

    pub fn decode_into(&self, out: &mut Vec<u8>) -> Result<(), String> {
        out.extend_from_slice(&self.bytes);
        Ok(())
    }
}
