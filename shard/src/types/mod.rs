//! Value representations beyond plain strings: aggregate types and their
//! encodings, and the HyperLogLog string layout.

pub mod hash;
pub mod hll;
pub mod intset;
pub mod list;
pub mod pack;
pub mod segmap;
pub mod set;
pub mod stream;
pub mod zset;
