//! A core's ACL: its copy of the users table, a generation that tells
//! connections their user may have changed, and its part of the ACL log.

use super::log::AclLog;
use super::users::Users;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

#[derive(Default)]
pub struct AclState {
    pub users: RefCell<Rc<Users>>,
    /// Bumped on every change; the table's version as core 0 numbered it.
    pub generation: Cell<u64>,
    pub log: RefCell<AclLog>,
}

impl AclState {
    pub fn new(users: Users) -> AclState {
        AclState { users: RefCell::new(Rc::new(users)), generation: Cell::new(1), log: Default::default() }
    }

    /// Installs a table numbered `generation` unless a newer one is in.
    pub fn install(&self, users: Users, generation: u64) -> bool {
        if generation <= self.generation.get() {
            return false;
        }
        *self.users.borrow_mut() = Rc::new(users);
        self.generation.set(generation);
        true
    }

    /// CONFIG SET requirepass or acl-pubsub-default, applied by every core
    /// to its own copy.
    pub fn apply_config(&self, config: &shard::Config, password: bool) {
        let mut users = (*self.users()).clone();
        if password {
            users.set_default_password(&config.requirepass);
        }
        users.all_channels_default = config.acl_pubsub_default_all;
        self.install(users, self.generation.get() + 1);
    }

    pub fn users(&self) -> Rc<Users> {
        self.users.borrow().clone()
    }
}
