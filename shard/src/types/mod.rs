//! Aggregate value types and their encodings.

pub mod hash;
pub mod intset;
pub mod pack;
pub mod segmap;
pub mod set;
