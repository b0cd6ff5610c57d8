//! Reading an RDB file item by item (`rdbLoadRioWithLoadingCtx`): the
//! header, aux fields, database selectors, per-key opcodes, entries,
//! function libraries and the checksummed EOF. Each shard reads the whole
//! file and decodes only the keys it owns (`next_with`).

use super::crc64::crc64;
use super::decode::{is_value_type, read_value, skip_value, type_error, Input, Result};
use super::{opcode, Limits, RdbError, RDB_VERSION};
use crate::value::Value;
use std::borrow::Cow;

/// One thing read from the file.
#[derive(Debug)]
pub enum Item<'a> {
    Aux {
        key: Cow<'a, [u8]>,
        value: Cow<'a, [u8]>,
    },
    SelectDb(usize),
    /// The size hint before a database's keys.
    ResizeDb {
        keys: u64,
        expires: u64,
    },
    Entry {
        db: usize,
        key: Cow<'a, [u8]>,
        /// Absolute unix time in ms (may be in the past).
        expire_at_ms: Option<u64>,
        /// Seconds since last access (`IDLE`, written under an LRU policy).
        idle: Option<u64>,
        /// LFU counter (`FREQ`, written under an LFU policy).
        freq: Option<u8>,
        value: Value,
    },
    /// A key the caller did not want (its value was stepped over), or an
    /// empty aggregate, which Redis also drops on load.
    Skipped {
        db: usize,
        key: Cow<'a, [u8]>,
    },
    /// A function library's payload (`FUNCTION2`), kept as bytes.
    Function(Vec<u8>),
    /// The end. `checksum_ok` is true when the CRC-64 trailer matches, is
    /// zero (saved with `rdbchecksum no`), predates RDB 5, or checking was
    /// turned off.
    Eof {
        checksum_ok: bool,
    },
}

pub struct Reader<'a> {
    input: Input<'a>,
    version: u16,
    limits: Limits,
    verify_checksum: bool,
    db: usize,
    done: bool,
}

impl<'a> Reader<'a> {
    /// Checks the "REDIS000N" signature (versions 1 to 10).
    pub fn new(data: &'a [u8]) -> std::result::Result<Reader<'a>, RdbError> {
        Reader::with_limits(data, Limits::default())
    }

    pub fn with_limits(data: &'a [u8], limits: Limits) -> std::result::Result<Reader<'a>, RdbError> {
        if data.len() < 9 || &data[..5] != b"REDIS" {
            return Err(RdbError::new(0, "Wrong signature trying to load DB from file"));
        }
        let version = std::str::from_utf8(&data[5..9]).ok().and_then(|v| v.parse::<u16>().ok()).unwrap_or(0);
        if !(1..=RDB_VERSION).contains(&version) {
            return Err(RdbError::new(
                5,
                format!("Can't handle RDB format version {}", String::from_utf8_lossy(&data[5..9])),
            ));
        }
        Ok(Reader { input: Input::new(data, 9), version, limits, verify_checksum: true, db: 0, done: false })
    }

    /// Skips the CRC-64 over the whole file at EOF (when the caller checks
    /// it once for several readers of the same bytes).
    pub fn set_verify_checksum(&mut self, verify: bool) {
        self.verify_checksum = verify;
    }

    pub fn version(&self) -> u16 {
        self.version
    }

    /// Bytes consumed so far (for progress reports).
    pub fn offset(&self) -> usize {
        self.input.pos
    }

    /// The next item, decoding every entry; `None` after EOF.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Item<'a>>> {
        self.next_with(|_| true)
    }

    /// The next item; entries whose key `wanted` refuses are stepped over
    /// undecoded and come back as `Item::Skipped`.
    pub fn next_with(&mut self, mut wanted: impl FnMut(&[u8]) -> bool) -> Result<Option<Item<'a>>> {
        if self.done {
            return Ok(None);
        }
        let (mut expire_at_ms, mut idle, mut freq) = (None, None, None);
        loop {
            let at = self.input.pos;
            let op = self.input.u8()?;
            match op {
                opcode::EXPIRETIME => {
                    let secs = i32::from_le_bytes(self.input.array()?) as i64;
                    expire_at_ms = Some((secs.max(0) as u64) * 1000);
                }
                opcode::EXPIRETIME_MS => {
                    expire_at_ms = Some(i64::from_le_bytes(self.input.array()?).max(0) as u64);
                }
                opcode::FREQ => freq = Some(self.input.u8()?),
                opcode::IDLE => idle = Some(self.input.len()?),
                opcode::EOF => return self.eof(at).map(Some),
                opcode::SELECTDB => {
                    let db = self.input.len()?;
                    self.db = usize::try_from(db).map_err(|_| RdbError::new(at, "database index out of range"))?;
                    return Ok(Some(Item::SelectDb(self.db)));
                }
                opcode::RESIZEDB => {
                    let keys = self.input.len()?;
                    let expires = self.input.len()?;
                    return Ok(Some(Item::ResizeDb { keys, expires }));
                }
                opcode::AUX => {
                    let key = self.input.string()?;
                    let value = self.input.string()?;
                    return Ok(Some(Item::Aux { key, value }));
                }
                opcode::MODULE_AUX => {
                    return Err(RdbError::new(at, "module data is not supported (MODULE_AUX)"));
                }
                opcode::FUNCTION2 => return Ok(Some(Item::Function(self.input.string()?.into_owned()))),
                opcode::FUNCTION => return self.old_function().map(Some),
                t if is_value_type(t) => {
                    let key = self.input.string()?;
                    let db = self.db;
                    if !wanted(&key) {
                        skip_value(&mut self.input, t)?;
                        return Ok(Some(Item::Skipped { db, key }));
                    }
                    return Ok(Some(match read_value(&mut self.input, t, &self.limits)? {
                        Some(value) => Item::Entry { db, key, expire_at_ms, idle, freq, value },
                        None => Item::Skipped { db, key },
                    }));
                }
                t => return Err(type_error(at, t)),
            }
        }
    }

    /// A library in the format of Redis 7.0's release candidates, turned
    /// into the `FUNCTION2` payload as Redis turns it.
    fn old_function(&mut self) -> Result<Item<'a>> {
        let name = self.input.string()?;
        let engine = self.input.string()?;
        if self.input.len()? != 0 {
            self.input.string()?; // the description, dropped
        }
        let code = self.input.string()?;
        let mut payload = b"#!".to_vec();
        payload.extend_from_slice(&engine);
        payload.extend_from_slice(b" name=");
        payload.extend_from_slice(&name);
        payload.push(b'\n');
        payload.extend_from_slice(&code);
        Ok(Item::Function(payload))
    }

    fn eof(&mut self, at: usize) -> Result<Item<'a>> {
        self.done = true;
        if self.version < 5 {
            return Ok(Item::Eof { checksum_ok: true });
        }
        let stored = u64::from_le_bytes(
            self.input.array().map_err(|_| RdbError::new(at + 1, "Unexpected EOF reading the RDB checksum"))?,
        );
        let ok = !self.verify_checksum || stored == 0 || stored == crc64(&self.input.data()[..=at]);
        Ok(Item::Eof { checksum_ok: ok })
    }
}
