//! Access control lists, as Redis 7.0: users, selectors and their rules,
//! the command registry they are written against, the per-core table and
//! the ACL log. Plain data with no knowledge of connections or cores; the
//! ACL command is `commands/acl.rs`, the check on each command is in the
//! router.

pub mod commands;
pub mod log;
pub mod protected;
pub mod selector;
pub mod state;
pub mod user;
pub mod users;

#[cfg(test)]
mod tests;
