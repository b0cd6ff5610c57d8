//! Functions: libraries loaded with FUNCTION LOAD, called with FCALL.

use super::{Host, RunOptions};

/// This core's function libraries.
#[derive(Default)]
pub struct Functions {}

impl Functions {
    pub fn new() -> Functions {
        Functions {}
    }

    pub fn call(
        &mut self,
        _host: &mut dyn Host,
        _name: &[u8],
        _keys: &[&[u8]],
        _args: &[&[u8]],
        _opts: &RunOptions,
    ) -> Vec<u8> {
        b"-ERR Function not found\r\n".to_vec()
    }
}
