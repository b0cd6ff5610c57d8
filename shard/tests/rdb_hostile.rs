//! Damaged and hostile RDB input never panics and never makes the reader
//! allocate far beyond the input's own size: a counting allocator records
//! the largest single allocation while payloads and files are decoded.

use proptest::prelude::*;
use shard::rdb::{self, crc64::crc64, Item, Reader, SaveOptions, RDB_VERSION};
use shard::types::hash::{Hash, HashLimits};
use shard::types::list::{Fill, List};
use shard::types::set::Set;
use shard::types::zset::{Limits, ZSet};
use shard::value::Value;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn values() -> Vec<Value> {
    let mut list = List::new();
    let mut set = Set::new_intset();
    let mut hash = Hash::default();
    let mut small = Hash::default();
    let limits = Limits { entries: 128, value: 64 };
    let (mut zset, mut zsmall) = (ZSet::new(limits, 4), ZSet::new(limits, 4));
    let hl = HashLimits { max_entries: 512, max_value: 64 };
    for i in 0..700 {
        list.push_back(format!("item-{i}").as_bytes(), Fill(-2));
        set.add(i.to_string().as_bytes(), 512);
        hash.set(format!("f{i}").as_bytes(), i.to_string().as_bytes(), &hl);
        zset.insert(i as f64 / 3.0, format!("m{i}").as_bytes(), limits);
    }
    for i in 0..10 {
        small.set(format!("f{i}").as_bytes(), b"v", &hl);
        zsmall.insert(i as f64, format!("m{i}").as_bytes(), limits);
    }
    let mut ints = Set::new_intset();
    ints.add(b"5", 512);
    ints.add(b"-70000", 512);
    vec![
        Value::from_bytes(&b"abc".repeat(100)),
        Value::Int(-5),
        Value::List(Box::new(list)),
        Value::Set(Box::new(set)),
        Value::Set(Box::new(ints)),
        Value::Hash(Box::new(hash)),
        Value::Hash(Box::new(small)),
        Value::ZSet(Box::new(zset)),
        Value::ZSet(Box::new(zsmall)),
    ]
}

/// A body with a fresh, valid footer, so the decoders see the damage.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

fn file(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rdb::write_standard_header(&mut out, 0, 0, false);
    rdb::write_select_db(&mut out, 0);
    rdb::write_entry(&mut out, b"key", value, Some(1), rdb::Access::None, &SaveOptions { compress: true });
    rdb::write_eof(&mut out);
    out.extend_from_slice(&[0; 8]);
    out
}

/// Decodes `data` both as a payload and as a file; returns the largest
/// allocation made meanwhile.
fn largest_allocation_decoding(data: &[u8]) -> usize {
    let payload = sealed(data);
    LARGEST.with(|l| l.set(0));
    let _ = rdb::restore_payload(&payload);
    if let Ok(mut r) = Reader::new(data) {
        while let Ok(Some(item)) = r.next() {
            if matches!(item, Item::Eof { .. }) {
                break;
            }
        }
    }
    LARGEST.with(|l| l.get())
}

/// What decoding may allocate at once: the decoded data is bounded by
/// the input (LZF expands at most ~90x; hash sets reserve ~40 bytes per
/// element, each element at least one input byte).
fn bound(len: usize) -> usize {
    (1 << 20) + 100 * len
}

#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    /// Overwrite with 0xff or 0x80/0x81 length prefixes: huge lengths.
    Huge(usize, u8),
    Cut(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(a, b)| Damage::Flip(a, b)),
        (any::<usize>(), prop_oneof![Just(0xffu8), Just(0x80), Just(0x81), Just(0x7f)])
            .prop_map(|(a, b)| Damage::Huge(a, b)),
        any::<usize>().prop_map(Damage::Cut),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn damaged_input_is_refused_within_bounded_memory(which in 0usize..9, damages in proptest::collection::vec(damage(), 1..5), as_file in any::<bool>()) {
        let value = &values()[which];
        let mut data = if as_file { file(value) } else {
            let p = rdb::dump_payload(value);
            p[..p.len() - 10].to_vec()
        };
        for d in damages {
            let n = data.len();
            if n == 0 {
                break;
            }
            match d {
                Damage::Flip(at, bit) => data[at % n] ^= 1 << bit,
                Damage::Huge(at, byte) => {
                    let at = at % n;
                    for b in data[at..].iter_mut().take(9) {
                        *b = byte;
                    }
                }
                Damage::Cut(at) => data.truncate(at % n),
            }
        }
        let largest = largest_allocation_decoding(&data);
        prop_assert!(largest <= bound(data.len()), "{largest} bytes at once for {} bytes of input", data.len());
    }
}

#[test]
fn announced_lengths_are_not_allocated() {
    let cases: Vec<Vec<u8>> = vec![
        // A string of 2^40 bytes, a set of 2^62 members, LZF claiming 4 GB.
        vec![0, 0x81, 0, 0, 1, 0, 0, 0, 0, 0, b'a'],
        vec![2, 0x81, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, b'a'],
        vec![0, 0xc3, 2, 0x80, 0xff, 0xff, 0xff, 0xff, 0, b'a'],
        vec![5, 0x80, 0xff, 0xff, 0xff, 0xff, 1, b'a'],
        vec![4, 0x80, 0xff, 0xff, 0xff, 0xff, 1, b'a', 1, b'b'],
        vec![14, 0x80, 0xff, 0xff, 0xff, 0xff, 1, b'a'],
    ];
    // The counter sees the decoder's allocations.
    let list = rdb::dump_payload(&values()[2]);
    assert!(largest_allocation_decoding(&list[..list.len() - 10]) > 1000);
    for body in cases {
        let largest = largest_allocation_decoding(&body);
        assert!(largest <= bound(body.len()), "{largest} bytes for {body:?}");
        assert!(rdb::restore_payload(&sealed(&body)).is_err());
    }
}
