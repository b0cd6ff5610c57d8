//! This process as a replica of a Redis (or corekv) primary.

pub mod state;
