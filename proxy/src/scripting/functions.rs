//! Functions: libraries loaded with FUNCTION LOAD, called with FCALL.

/// This core's function libraries.
#[derive(Default)]
pub struct Functions {}

impl Functions {
    pub fn new() -> Functions {
        Functions {}
    }
}
