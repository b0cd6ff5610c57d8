//! Representations of values beyond plain strings.

pub mod hll;
