//! What a core knows of its primary while this process is a replica.

/// Per-core replica state (held by `core::Core`).
#[derive(Default)]
pub struct ReplicaState {}
