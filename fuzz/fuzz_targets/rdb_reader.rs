//! Arbitrary bytes as an RDB file and as a DUMP payload body: no panic, and
//! whatever decodes survives DUMP + RESTORE unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shard::rdb::{self, crc64::crc64, Reader, RDB_VERSION};

fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = Reader::new(data) {
        while let Ok(Some(_)) = reader.next() {}
    }
    let mut payload = data.to_vec();
    payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    if let Ok(value) = rdb::restore_payload(&payload) {
        let again = rdb::restore_payload(&rdb::dump_payload(&value)).expect("our own payload decodes");
        assert_eq!(again, value);
    }
});
