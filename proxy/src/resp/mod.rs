//! RESP: the request parser (multibulk and inline commands, resumable across
//! reads, with Redis's limits and error texts) and a general value codec used
//! for static metadata, merging shard replies and tests.

mod request;
mod value;

pub use request::{Limits, Parsed, RequestParser};
pub use value::{skip_value, Value};
