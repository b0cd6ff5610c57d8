//! A block of the replication stream: whole commands of one shard, held
//! raw or compressed (lz4, zstd).
//!
//! While a replica waits for its snapshot, the stream for it piles up in
//! its output buffer; holding that stream as compressed blocks (issue 13,
//! the Ericsson study) lets the same `client-output-buffer-limit replica`
//! survive proportionally more writes. A block is sealed once, on the core
//! that produced the writes, shared read-only between cores (`Arc<Block>`)
//! and decompressed as it is sent. A block that does not shrink is kept raw,
//! so random data costs no decompression later.

use std::cell::RefCell;
use std::io::Cursor;

use shard::config::ReplCompression;

/// How a block's bytes are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Raw,
    Lz4,
    Zstd,
}

/// Stream bytes, raw or compressed; immutable once sealed.
pub struct Block {
    codec: Codec,
    raw_len: usize,
    bytes: Box<[u8]>,
}

impl Block {
    /// Raw bytes kept as they are.
    pub fn raw(bytes: Vec<u8>) -> Block {
        Block { codec: Codec::Raw, raw_len: bytes.len(), bytes: bytes.into_boxed_slice() }
    }

    /// `raw` compressed with `compression` at `level` (zstd only; 0 =
    /// zstd's default); kept raw when the output is not smaller.
    pub fn seal(raw: &[u8], compression: ReplCompression, level: i32) -> Block {
        let compressed = match compression {
            ReplCompression::No => None,
            ReplCompression::Lz4 => with_scratch(|out| lz4_into(raw, out)).map(|b| (Codec::Lz4, b)),
            ReplCompression::Zstd => with_scratch(|out| zstd_into(raw, level, out)).map(|b| (Codec::Zstd, b)),
        };
        match compressed {
            Some((codec, bytes)) => Block { codec, raw_len: raw.len(), bytes },
            None => Block::raw(raw.to_vec()),
        }
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Bytes of stream it stands for.
    pub fn raw_len(&self) -> usize {
        self.raw_len
    }

    /// Bytes it holds in memory (what client-output-buffer-limit replica
    /// counts).
    pub fn held(&self) -> usize {
        self.bytes.len()
    }

    /// Appends the raw stream bytes to `out` (decompressing). Errors only on
    /// corrupt data; `out` is then left as it was.
    pub fn decode_into(&self, out: &mut Vec<u8>) -> Result<(), String> {
        let start = out.len();
        let decoded = match self.codec {
            Codec::Raw => {
                out.extend_from_slice(&self.bytes);
                return Ok(());
            }
            Codec::Lz4 => {
                out.resize(start + self.raw_len, 0);
                lz4_flex::block::decompress_into(&self.bytes, &mut out[start..]).map_err(|e| e.to_string())
            }
            Codec::Zstd => {
                out.reserve(self.raw_len);
                zstd_decode(&self.bytes, out, start)
            }
        };
        match decoded {
            Ok(n) if n == self.raw_len => {
                out.truncate(start + n);
                Ok(())
            }
            Ok(n) => {
                out.truncate(start);
                Err(format!("corrupt {:?} block: {n} bytes decoded, {} expected", self.codec, self.raw_len))
            }
            Err(e) => {
                out.truncate(start);
                Err(format!("corrupt {:?} block: {e}", self.codec))
            }
        }
    }
}

thread_local! {
    /// The compressor's output before it is known to be smaller than the
    /// input: sized once for the largest block, so sealing allocates only
    /// the block's exact bytes.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// One zstd context per level in use: creating one costs more than
    /// compressing a 16 KB block.
    static ZSTD_COMPRESSORS: RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(Vec::new()) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Runs `compress` into this thread's scratch buffer and copies its output
/// out when it is smaller than the input it was given (`Some(len)` with
/// `len < input`), else `None`.
fn with_scratch(compress: impl FnOnce(&mut Vec<u8>) -> Option<()>) -> Option<Box<[u8]>> {
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        scratch.clear();
        compress(&mut scratch)?;
        Some(Box::from(&scratch[..]))
    })
}

/// lz4 block format, no size prefix (the block keeps `raw_len`).
fn lz4_into(raw: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.resize(lz4_flex::block::get_maximum_output_size(raw.len()), 0);
    let n = lz4_flex::block::compress_into(raw, out).ok()?;
    out.truncate(n);
    (n < raw.len()).then_some(())
}

fn zstd_into(raw: &[u8], level: i32, out: &mut Vec<u8>) -> Option<()> {
    ZSTD_COMPRESSORS.with(|compressors| {
        let mut compressors = compressors.borrow_mut();
        let at = match compressors.iter().position(|(l, _)| *l == level) {
            Some(at) => at,
            None => {
                compressors.push((level, zstd::bulk::Compressor::new(level).ok()?));
                compressors.len() - 1
            }
        };
        out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        let n = compressors[at].1.compress_to_buffer(raw, out).ok()?;
        (n < raw.len()).then_some(())
    })
}

/// Decompresses `bytes` into `out` after its first `start` bytes.
fn zstd_decode(bytes: &[u8], out: &mut Vec<u8>, start: usize) -> Result<usize, String> {
    ZSTD_DECOMPRESSOR.with(|decompressor| {
        let mut decompressor = decompressor.borrow_mut();
        if decompressor.is_none() {
            *decompressor = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let mut tail = Cursor::new(out);
        tail.set_position(start as u64);
        decompressor.as_mut().expect("created above").decompress_to_buffer(bytes, &mut tail).map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    // The bench's generator (`corekv-bench --data text`): the ratios here
    // hold there.
    use corekv_bench::data::{text_record, SplitMix};
    use proptest::prelude::*;

    const BLOCK_SIZE: usize = 16 * 1024;

    fn roundtrip(block: &Block) -> Vec<u8> {
        let mut out = b"before".to_vec();
        block.decode_into(&mut out).expect("decodes");
        assert_eq!(&out[..6], b"before");
        out.split_off(6)
    }

    /// A seeded replication stream: SET commands carrying text records.
    fn text_like_stream(seed: u64, len: usize) -> Vec<u8> {
        let mut rng = SplitMix(seed);
        let mut stream = Vec::new();
        while stream.len() < len {
            let key = format!("record:{:08}", rng.below(100_000_000));
            let mut record = text_record(&mut rng, 700);
            record.truncate(700);
            stream.extend_from_slice(
                format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n", key.len(), record.len()).as_bytes(),
            );
            stream.extend_from_slice(record.as_bytes());
            stream.extend_from_slice(b"\r\n");
        }
        stream.truncate(len);
        stream
    }

    fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    #[test]
    fn shared_between_cores() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Block>();
    }

    #[test]
    fn raw_is_kept_as_is() {
        let block = Block::raw(b"*1\r\n$4\r\nPING\r\n".to_vec());
        assert_eq!(block.codec(), Codec::Raw);
        assert_eq!(block.raw_len(), 14);
        assert_eq!(block.held(), 14);
        assert_eq!(roundtrip(&block), b"*1\r\n$4\r\nPING\r\n");
    }

    #[test]
    fn compression_no_keeps_raw() {
        let stream = text_like_stream(1, BLOCK_SIZE);
        let block = Block::seal(&stream, ReplCompression::No, 0);
        assert_eq!(block.codec(), Codec::Raw);
        assert_eq!(block.held(), stream.len());
    }

    #[test]
    fn empty_stays_raw() {
        for compression in [ReplCompression::Lz4, ReplCompression::Zstd] {
            let block = Block::seal(&[], compression, 0);
            assert_eq!(block.codec(), Codec::Raw);
            assert_eq!((block.raw_len(), block.held()), (0, 0));
            assert!(roundtrip(&block).is_empty());
        }
    }

    #[test]
    fn text_like_records_compress() {
        let stream = text_like_stream(7, BLOCK_SIZE);
        let lz4 = Block::seal(&stream, ReplCompression::Lz4, 0);
        let zstd = Block::seal(&stream, ReplCompression::Zstd, 0);
        let ratio = |block: &Block| block.raw_len() as f64 / block.held() as f64;
        assert_eq!((lz4.codec(), zstd.codec()), (Codec::Lz4, Codec::Zstd));
        assert!(ratio(&lz4) >= 2.0, "lz4 ratio {:.2}", ratio(&lz4));
        assert!(ratio(&zstd) >= 3.0, "zstd ratio {:.2}", ratio(&zstd));
        assert_eq!(roundtrip(&lz4), stream);
        assert_eq!(roundtrip(&zstd), stream);
    }

    #[test]
    fn a_repeated_character_compresses_far() {
        let stream = vec![b'x'; BLOCK_SIZE];
        for compression in [ReplCompression::Lz4, ReplCompression::Zstd] {
            let block = Block::seal(&stream, compression, 0);
            assert!(block.held() * 50 < stream.len(), "{compression:?}: {}", block.held());
            assert_eq!(roundtrip(&block), stream);
        }
    }

    #[test]
    fn random_bytes_stay_raw() {
        let stream = random_bytes(3, BLOCK_SIZE);
        for compression in [ReplCompression::Lz4, ReplCompression::Zstd] {
            let block = Block::seal(&stream, compression, 0);
            assert_eq!(block.codec(), Codec::Raw, "{compression:?}");
            assert_eq!(block.held(), stream.len());
            assert_eq!(roundtrip(&block), stream);
        }
    }

    #[test]
    fn zstd_levels_each_roundtrip() {
        let stream = text_like_stream(11, BLOCK_SIZE);
        let held: Vec<usize> = [-5, 0, 1, 3, 19, 1, -5]
            .iter()
            .map(|&level| {
                let block = Block::seal(&stream, ReplCompression::Zstd, level);
                assert_eq!(roundtrip(&block), stream, "level {level}");
                block.held()
            })
            .collect();
        // The same level reuses its context and gives the same bytes.
        assert_eq!(held[1], held[3]);
        assert_eq!(held[0], held[6]);
        assert!(held[4] < held[0], "level 19 smaller than level -5: {held:?}");
    }

    #[test]
    fn corrupt_blocks_error_and_leave_out_alone() {
        let stream = text_like_stream(5, BLOCK_SIZE);
        for compression in [ReplCompression::Lz4, ReplCompression::Zstd] {
            let sealed = Block::seal(&stream, compression, 0);
            let mut bytes = sealed.bytes.to_vec();
            let cut = bytes.len() / 2;
            bytes.truncate(cut);
            let corrupt = Block { codec: sealed.codec, raw_len: sealed.raw_len, bytes: bytes.into_boxed_slice() };
            let mut out = b"kept".to_vec();
            assert!(corrupt.decode_into(&mut out).is_err(), "{compression:?}");
            assert_eq!(out, b"kept");
            // A raw length that lies is corrupt too.
            let lying = Block { codec: sealed.codec, raw_len: sealed.raw_len - 1, bytes: sealed.bytes.clone() };
            assert!(lying.decode_into(&mut out).is_err(), "{compression:?}");
            assert_eq!(out, b"kept");
        }
    }

    fn compressions() -> impl Strategy<Value = ReplCompression> {
        prop_oneof![Just(ReplCompression::No), Just(ReplCompression::Lz4), Just(ReplCompression::Zstd),]
    }

    /// Costs per 16 KB block, to compare sealing with the per-call
    /// alternatives (`cargo test --release -p proxy --lib seal_cost --
    /// --ignored --nocapture`).
    #[test]
    #[ignore]
    fn seal_cost() {
        use std::time::Instant;
        let text = text_like_stream(7, BLOCK_SIZE);
        let random = random_bytes(3, BLOCK_SIZE);
        let rounds = 20_000;
        let time = |name: &str, raw: &[u8], f: &mut dyn FnMut() -> usize| {
            let start = Instant::now();
            let mut held = 0;
            for _ in 0..rounds {
                held = f();
            }
            let micros = start.elapsed().as_secs_f64() * 1e6 / rounds as f64;
            let ratio = raw.len() as f64 / held as f64;
            println!("{name:<36} {micros:6.2} µs/block  ratio {ratio:.2}");
        };
        for (data, raw) in [("text", &text), ("random", &random)] {
            for (name, compression) in [("lz4", ReplCompression::Lz4), ("zstd", ReplCompression::Zstd)] {
                time(&format!("seal {name} {data}"), raw, &mut || Block::seal(raw, compression, 0).held());
            }
        }
        // One SET of a record alone: what sealing each command apart gives.
        let one = &text[..text.windows(3).position(|w| w == b"\r\n*").expect("two commands") + 2];
        for (name, compression) in [("lz4", ReplCompression::Lz4), ("zstd", ReplCompression::Zstd)] {
            time(&format!("seal {name} one {}-byte SET", one.len()), one, &mut || {
                Block::seal(one, compression, 0).held()
            });
        }
        time("lz4_flex::block::compress (alloc)", &text, &mut || {
            lz4_flex::block::compress(&text).into_boxed_slice().len()
        });
        time("zstd::bulk::compress (new context)", &text, &mut || {
            zstd::bulk::compress(&text, 0).expect("compresses").len()
        });
        let mut out = Vec::with_capacity(BLOCK_SIZE);
        for compression in [ReplCompression::Lz4, ReplCompression::Zstd] {
            let block = Block::seal(&text, compression, 0);
            time(&format!("decode {compression:?} text"), &text, &mut || {
                out.clear();
                block.decode_into(&mut out).expect("decodes");
                block.held()
            });
        }
    }

    proptest! {
        #[test]
        fn any_bytes_roundtrip(
            raw in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..20_000),
                // Compressible: few distinct bytes in runs.
                proptest::collection::vec((0u8..4, 1usize..64), 0..600)
                    .prop_map(|runs| runs.into_iter().flat_map(|(b, n)| vec![b; n]).collect()),
            ],
            compression in compressions(),
            level in -3i32..6,
        ) {
            let block = Block::seal(&raw, compression, level);
            prop_assert_eq!(block.raw_len(), raw.len());
            prop_assert!(block.held() <= raw.len());
            if block.codec() != Codec::Raw {
                prop_assert!(block.held() < raw.len());
            }
            let mut out = vec![0xAA; 3];
            block.decode_into(&mut out).unwrap();
            prop_assert_eq!(&out[..3], &[0xAA; 3]);
            prop_assert_eq!(&out[3..], &raw[..]);
        }
    }
}
