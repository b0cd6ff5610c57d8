//! A core's replication state, held by `core::Core`: a leaf.

use super::replica::state::ReplicaState;

#[derive(Default)]
pub struct ReplState {
    /// This process as a replica (the link to its primary).
    pub replica: ReplicaState,
}
