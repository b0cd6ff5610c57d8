//! PLACEHOLDER until the `rdb-codec` branch is merged (it owns this module
//! and replaces this file): the contract's API with strings only, so the
//! snapshot orchestration can be built and exercised. Not the codec.

use crate::value::Value;

pub const RDB_VERSION: u16 = 10;

pub struct SaveOptions {
    pub compress: bool,
}

fn write_len(out: &mut Vec<u8>, len: u64) {
    if len < 64 {
        out.push(len as u8);
    } else if len < 16384 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if len <= u32::MAX as u64 {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    write_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

pub fn write_header(out: &mut Vec<u8>, aux: &[(&str, &[u8])]) {
    out.extend_from_slice(format!("REDIS{RDB_VERSION:04}").as_bytes());
    for (k, v) in aux {
        out.push(0xFA);
        write_string(out, k.as_bytes());
        write_string(out, v);
    }
}

pub fn write_select_db(out: &mut Vec<u8>, db: usize) {
    out.push(0xFE);
    write_len(out, db as u64);
}

pub fn write_resize_db(out: &mut Vec<u8>, keys: u64, expires: u64) {
    out.push(0xFB);
    write_len(out, keys);
    write_len(out, expires);
}

pub fn write_entry(out: &mut Vec<u8>, key: &[u8], value: &Value, expire_at_ms: Option<u64>, _opts: &SaveOptions) {
    let mut scratch = itoa::Buffer::new();
    let Some(bytes) = value.string_bytes(&mut scratch) else {
        return;
    };
    if let Some(at) = expire_at_ms {
        out.push(0xFC);
        out.extend_from_slice(&at.to_le_bytes());
    }
    out.push(0);
    write_string(out, key);
    write_string(out, bytes);
}

pub fn write_eof(out: &mut Vec<u8>) {
    out.push(0xFF);
}

const POLY: u64 = 0x95ac_9329_ac4b_c9b5;

fn table() -> [u64; 256] {
    let mut t = [0u64; 256];
    for (i, slot) in t.iter_mut().enumerate() {
        let mut c = i as u64;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        }
        *slot = c;
    }
    t
}

pub struct Crc64 {
    crc: u64,
    table: [u64; 256],
}

impl Default for Crc64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc64 {
    pub fn new() -> Self {
        Crc64 { crc: 0, table: table() }
    }
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.crc = self.table[((self.crc ^ b as u64) & 0xff) as usize] ^ (self.crc >> 8);
        }
    }
    pub fn value(&self) -> u64 {
        self.crc
    }
}

fn gf2_times(mat: &[u64; 64], mut vec: u64) -> u64 {
    let mut sum = 0;
    let mut i = 0;
    while vec != 0 {
        if vec & 1 != 0 {
            sum ^= mat[i];
        }
        vec >>= 1;
        i += 1;
    }
    sum
}

fn gf2_square(square: &mut [u64; 64], mat: &[u64; 64]) {
    for n in 0..64 {
        square[n] = gf2_times(mat, mat[n]);
    }
}

pub fn crc64_combine(mut crc_a: u64, crc_b: u64, mut len_b: u64) -> u64 {
    if len_b == 0 {
        return crc_a;
    }
    let mut even = [0u64; 64];
    let mut odd = [0u64; 64];
    odd[0] = POLY;
    let mut row = 1u64;
    for slot in odd.iter_mut().skip(1) {
        *slot = row;
        row <<= 1;
    }
    gf2_square(&mut even, &odd);
    gf2_square(&mut odd, &even);
    loop {
        gf2_square(&mut even, &odd);
        if len_b & 1 != 0 {
            crc_a = gf2_times(&even, crc_a);
        }
        len_b >>= 1;
        if len_b == 0 {
            break;
        }
        gf2_square(&mut odd, &even);
        if len_b & 1 != 0 {
            crc_a = gf2_times(&odd, crc_a);
        }
        len_b >>= 1;
        if len_b == 0 {
            break;
        }
    }
    crc_a ^ crc_b
}

#[derive(Debug)]
pub struct RdbError {
    pub offset: u64,
    pub message: String,
}

impl std::fmt::Display for RdbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at offset {}", self.message, self.offset)
    }
}

pub enum Item {
    Aux { key: Vec<u8>, value: Vec<u8> },
    SelectDb(usize),
    ResizeDb { keys: u64, expires: u64 },
    Entry { db: usize, key: Vec<u8>, expire_at_ms: Option<u64>, idle: Option<u64>, freq: Option<u8>, value: Value },
    Skipped,
    Function(Vec<u8>),
    Eof { checksum_ok: bool },
}

pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    db: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Result<Self, RdbError> {
        if data.len() < 9 || &data[..5] != b"REDIS" {
            return Err(RdbError { offset: 0, message: "Wrong signature trying to load DB from file".into() });
        }
        Ok(Reader { data, pos: 9, db: 0 })
    }

    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn err(&self, m: &str) -> RdbError {
        RdbError { offset: self.pos as u64, message: m.into() }
    }

    fn byte(&mut self) -> Result<u8, RdbError> {
        let b = *self.data.get(self.pos).ok_or_else(|| self.err("Unexpected EOF reading RDB file"))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RdbError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| self.err("Unexpected EOF reading RDB file"))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn len(&mut self) -> Result<u64, RdbError> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => (b & 0x3f) as u64,
            1 => (((b & 0x3f) as u64) << 8) | self.byte()? as u64,
            _ if b == 0x80 => u32::from_be_bytes(self.take(4)?.try_into().unwrap_or_default()) as u64,
            _ if b == 0x81 => u64::from_be_bytes(self.take(8)?.try_into().unwrap_or_default()),
            _ => return Err(self.err("unsupported length encoding")),
        })
    }

    fn string(&mut self) -> Result<&'a [u8], RdbError> {
        let n = self.len()?;
        self.take(usize::try_from(n).map_err(|_| self.err("length"))?)
    }

    pub fn next(&mut self) -> Result<Option<Item>, RdbError> {
        self.next_with(|_| true)
    }

    pub fn next_with(&mut self, mut wanted: impl FnMut(&[u8]) -> bool) -> Result<Option<Item>, RdbError> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let mut expire = None;
        loop {
            let op = self.byte()?;
            match op {
                0xFA => {
                    let key = self.string()?.to_vec();
                    let value = self.string()?.to_vec();
                    return Ok(Some(Item::Aux { key, value }));
                }
                0xFE => {
                    self.db = self.len()? as usize;
                    return Ok(Some(Item::SelectDb(self.db)));
                }
                0xFB => {
                    let (keys, expires) = (self.len()?, self.len()?);
                    return Ok(Some(Item::ResizeDb { keys, expires }));
                }
                0xFC => {
                    expire = Some(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()));
                }
                0xFF => {
                    let at = self.pos;
                    let stored = self.take(8)?;
                    let stored = u64::from_le_bytes(stored.try_into().unwrap_or_default());
                    let mut crc = Crc64::new();
                    crc.update(&self.data[..at]);
                    return Ok(Some(Item::Eof { checksum_ok: stored == 0 || stored == crc.value() }));
                }
                0 => {
                    let key = self.string()?;
                    let value = self.string()?;
                    if !wanted(key) {
                        return Ok(Some(Item::Skipped));
                    }
                    return Ok(Some(Item::Entry {
                        db: self.db,
                        key: key.to_vec(),
                        expire_at_ms: expire,
                        idle: None,
                        freq: None,
                        value: Value::from_bytes_encoded(value),
                    }));
                }
                _ => return Err(self.err("Unknown RDB encoding type")),
            }
        }
    }
}
