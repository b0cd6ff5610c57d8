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

    pub fn users(&self) -> Rc<Users> {
        self.users.borrow().clone()
    }
}
