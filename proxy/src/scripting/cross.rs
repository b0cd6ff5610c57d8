//! A script's command whose keys live on another shard than the one the
//! script runs on. Every such access goes through this one function, so
//! the transaction coordinator can take it over.

use super::CallState;
use crate::core::Core;
use shard::CommandSpec;

/// Runs `argv` for a script on `core` when its keys are owned elsewhere
/// (`owners`: the shards owning them): the encoded reply, or a rejection.
pub fn remote_call(
    _core: &Core,
    _spec: &'static CommandSpec,
    _argv: &[&[u8]],
    _owners: &[usize],
    _call: &mut CallState,
) -> Result<Vec<u8>, String> {
    Ok(b"-ERR cross-shard script access is not supported yet\r\n".to_vec())
}
