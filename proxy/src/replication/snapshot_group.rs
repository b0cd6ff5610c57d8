//! Replicas that share one snapshot, as Redis's replicas share one BGSAVE:
//! the first full resync leads a group; replicas asking while it gathers
//! (`repl-diskless-sync-delay` with a diskless sync) or while its save runs
//! join it, and every member is sent the same file with the same cut. The
//! groups live on core 0 (`Primary::snapshot_groups`); the file is removed
//! by the last member done with it.

use super::hub::HUB;
use super::primary::{Group, Primary, Stage};
use crate::coordinator::dispatch::call;
use crate::core::Core;
use std::rc::Rc;

/// What a full resync does: lead a new group or follow one.
pub enum Role {
    Lead(u64),
    Follow(u64),
}

impl Primary {
    /// Replica `id` (registered already) joins the group still taking
    /// members, or leads a new one. A joiner's stream is kept from the
    /// leader's position, which is before the group's cut.
    fn join_or_lead(&mut self, id: u64, gathering: bool) -> Role {
        let open = self.snapshot_groups.iter_mut().find(|g| matches!(g.stage, Stage::Gathering | Stage::Saving));
        if let Some(g) = open {
            g.users += 1;
            let (group, leader) = (g.id, g.leader);
            let from = self.replicas.iter().find(|r| r.id == leader).map(|r| r.pos);
            if let (Some(from), Some(me)) = (from, self.replicas.iter_mut().find(|r| r.id == id)) {
                me.pos = me.pos.min(from);
            }
            return Role::Follow(group);
        }
        self.groups_started += 1;
        let stage = if gathering { Stage::Gathering } else { Stage::Saving };
        self.snapshot_groups.push(Group { id: self.groups_started, leader: id, stage, users: 1 });
        Role::Lead(self.groups_started)
    }

    fn group(&mut self, group: u64) -> Option<&mut Group> {
        self.snapshot_groups.iter_mut().find(|g| g.id == group)
    }
}

/// Leads or joins; `gathering`: the leader waits for more replicas first.
pub async fn enter(core: &Rc<Core>, id: u64, gathering: bool) -> Role {
    let role = call(core, HUB, move |c| c.repl.primary.borrow_mut().as_mut().map(|p| p.join_or_lead(id, gathering)));
    role.await.flatten().unwrap_or(Role::Lead(0))
}

/// The leader moves its group on (Saving once it stops gathering; the
/// save's outcome once known).
pub async fn advance(core: &Rc<Core>, group: u64, stage: Stage) {
    call(core, HUB, move |c| {
        if let Some(g) = c.repl.primary.borrow_mut().as_mut().and_then(|p| p.group(group)) {
            g.stage = stage;
        }
    })
    .await;
}

/// Where a follower's group stands.
pub async fn stage(core: &Rc<Core>, group: u64) -> Stage {
    let stage = call(core, HUB, move |c| {
        c.repl.primary.borrow_mut().as_mut().and_then(|p| p.group(group)).map(|g| g.stage.clone())
    });
    stage.await.flatten().unwrap_or(Stage::Failed)
}

/// A member is done with the group's file: the last one removes it.
pub async fn leave(core: &Rc<Core>, group: u64, path: Option<std::path::PathBuf>) {
    let last = call(core, HUB, move |c| {
        let mut primary = c.repl.primary.borrow_mut();
        let Some(p) = primary.as_mut() else { return true };
        let Some(g) = p.group(group) else { return true };
        g.users -= 1;
        if g.users > 0 {
            return false;
        }
        p.snapshot_groups.retain(|g| g.id != group);
        true
    });
    if last.await.unwrap_or(true) {
        if let Some(path) = path {
            let _ = std::fs::remove_file(path);
        }
    }
}
