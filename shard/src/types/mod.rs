//! Aggregate value types and their encodings.

pub mod zset;
