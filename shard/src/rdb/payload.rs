//! DUMP and RESTORE payloads (`createDumpPayload`, `verifyDumpPayload`):
//! the value's type byte and body, the RDB version (u16 LE), then the
//! CRC-64 of everything before it (u64 LE).

use super::crc64::crc64;
use super::decode::{is_value_type, read_value, type_error, Input};
use super::encode::write_value;
use super::{Limits, RdbError, SaveOptions, RDB_VERSION};
use crate::value::Value;

const FOOTER: usize = 10;

pub fn dump_payload(value: &Value) -> Vec<u8> {
    dump_payload_with(value, &SaveOptions { compress: true })
}

/// DUMP's payload; `opts.compress` is `rdbcompression`, which Redis's DUMP
/// follows too (rdbSaveRawString).
pub fn dump_payload_with(value: &Value, opts: &SaveOptions) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&mut out, value, opts);
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The footer check: a version this server reads and a matching CRC.
pub fn verify_payload(bytes: &[u8]) -> bool {
    if bytes.len() < FOOTER {
        return false;
    }
    let footer = &bytes[bytes.len() - FOOTER..];
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..].try_into().unwrap_or_default());
    version <= RDB_VERSION && crc == crc64(&bytes[..bytes.len() - 8])
}

/// Decodes a payload for Redis's default encoding thresholds.
pub fn restore_payload(bytes: &[u8]) -> Result<Value, RdbError> {
    restore_payload_with(bytes, &Limits::default())
}

pub fn restore_payload_with(bytes: &[u8], limits: &Limits) -> Result<Value, RdbError> {
    if !verify_payload(bytes) {
        return Err(RdbError::new(bytes.len().saturating_sub(FOOTER), "DUMP payload version or checksum are wrong"));
    }
    let mut input = Input::new(&bytes[..bytes.len() - FOOTER], 0);
    let t = input.u8()?;
    if !is_value_type(t) {
        return Err(type_error(0, t));
    }
    read_value(&mut input, t, limits)?.ok_or_else(|| RdbError::new(1, "empty value"))
}

/// FUNCTION DUMP's payload: each library's code as an RDB string after
/// `RDB_OPCODE_FUNCTION2`, then the same footer as DUMP.
pub fn functions_dump_payload(codes: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(super::opcode::FUNCTION2);
        super::output::write_string(&mut out, code, &SaveOptions { compress: true });
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// FUNCTION RESTORE: the library codes of a payload, or Redis's error text.
pub fn functions_restore_payload(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if !verify_payload(bytes) {
        return Err("ERR DUMP payload version or checksum are wrong".into());
    }
    let mut input = Input::new(&bytes[..bytes.len() - FOOTER], 0);
    let mut codes = Vec::new();
    while input.remaining() > 0 {
        let kind = input.u8().map_err(|_| "ERR can not read data type".to_string())?;
        if kind != super::opcode::FUNCTION2 && kind != super::opcode::FUNCTION {
            return Err("ERR given type is not a function".into());
        }
        if kind == super::opcode::FUNCTION {
            return Err("ERR Pre-GA function format not supported".into());
        }
        let code = input.string().map_err(|_| "ERR Failed loading library payload".to_string())?;
        codes.push(code.into_owned());
    }
    Ok(codes)
}
