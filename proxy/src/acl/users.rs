//! The table of users: built from the configuration (`requirepass`, `user`
//! directives, `aclfile`), read and written in the ACL file format. Plain
//! data: every core holds its own copy (`AclState`), replaced whole when
//! an ACL command changes it.

use super::user::{merge_selectors, User};
use std::collections::BTreeMap;
use std::rc::Rc;

#[derive(Clone)]
pub struct Users {
    /// By name, in byte order (Redis's rax order for ACL LIST/USERS/SAVE).
    pub map: BTreeMap<Vec<u8>, Rc<User>>,
    pub all_channels_default: bool,
}

/// A table as it travels between cores.
pub type Plain = (Vec<User>, bool);

impl Default for Users {
    fn default() -> Self {
        let mut map = BTreeMap::new();
        map.insert(b"default".to_vec(), Rc::new(User::default_user()));
        Users { map, all_channels_default: false }
    }
}

fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&c| c.is_ascii_whitespace() || c == 0 || c == 0x0b)
}

impl Users {
    pub fn to_plain(&self) -> Plain {
        (self.map.values().map(|u| (**u).clone()).collect(), self.all_channels_default)
    }

    pub fn from_plain(plain: Plain) -> Users {
        let map = plain.0.into_iter().map(|u| (u.name.clone(), Rc::new(u))).collect();
        Users { map, all_channels_default: plain.1 }
    }

    pub fn get(&self, name: &[u8]) -> Option<&Rc<User>> {
        self.map.get(name)
    }

    pub fn default_user(&self) -> Rc<User> {
        self.map.get(&b"default"[..]).cloned().unwrap_or_else(|| Rc::new(User::default_user()))
    }

    /// `requirepass`: the default user's only password, or nopass.
    pub fn set_default_password(&mut self, password: &str) {
        let mut user = (*self.default_user()).clone();
        let _ = user.apply(b"resetpass");
        if password.is_empty() {
            let _ = user.apply(b"nopass");
        } else {
            let _ = user.apply(format!(">{password}").as_bytes());
        }
        self.map.insert(b"default".to_vec(), Rc::new(user));
    }

    /// ACL SETUSER: all the rules or none.
    pub fn set_user(&mut self, name: &[u8], rules: &[&[u8]]) -> Result<(), String> {
        if has_spaces(name) {
            return Err("Usernames can't contain spaces or null characters".into());
        }
        let mut user = match self.map.get(name) {
            Some(u) => (**u).clone(),
            None => User::new(name, self.all_channels_default),
        };
        user.apply_all(rules)?;
        self.map.insert(name.to_vec(), Rc::new(user));
        Ok(())
    }

    /// The startup table (`ACLLoadUsersAtStartup`); Err: Redis's reason to
    /// refuse to start.
    pub fn from_config(config: &shard::Config) -> Result<Users, String> {
        let mut users = Users { all_channels_default: config.acl_pubsub_default_all, ..Users::default() };
        if !config.requirepass.is_empty() {
            users.set_default_password(&config.requirepass);
        }
        if !config.aclfile.is_empty() && !config.users.is_empty() {
            return Err("Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.".into());
        }
        for words in &config.users {
            let Some((name, rules)) = words.split_first() else { continue };
            let rules: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
            if let Err(e) = users.set_user(name.as_bytes(), &rules) {
                return Err(format!("Error in user declaration '{name}': {e}"));
            }
        }
        if !config.aclfile.is_empty() {
            users = users
                .load_file(&config.aclfile)
                .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))?;
        }
        Ok(users)
    }

    /// ACL LOAD (`ACLLoadFromFile`): a new table, or every error found.
    pub fn load_file(&self, path: &str) -> Result<Users, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("Error loading ACLs, opening file '{path}': {}", shard::config::os_reason(&e)))?;
        let mut loaded = Users { map: BTreeMap::new(), all_channels_default: self.all_channels_default };
        let mut errors = String::new();
        for (i, line) in text.split(|&c| c == b'\n').enumerate() {
            let linenum = i + 1;
            let line = trim(line);
            if line.is_empty() {
                continue;
            }
            let argv: Vec<&[u8]> = line.split(|&c| c == b' ').filter(|w| !w.is_empty()).collect();
            if argv.is_empty() {
                continue;
            }
            if argv[0] != b"user" || argv.len() < 2 {
                errors.push_str(&format!("{path}:{linenum} should start with user keyword followed by the username. "));
                continue;
            }
            let name = argv[1];
            if loaded.map.contains_key(name) {
                errors.push_str(&format!(
                    "WARNING: Duplicate user '{}' found on line {linenum}. ",
                    String::from_utf8_lossy(name)
                ));
                continue;
            }
            let mut user = User::new(name, self.all_channels_default);
            match merge_selectors(&argv[2..]) {
                Err(_) => errors.push_str(&format!("{path}:{linenum}: Unmatched parenthesis in selector definition.")),
                Ok(ops) => {
                    let mut syntax_error = false;
                    for op in ops {
                        if let Err(e) = user.apply(trim(&op)) {
                            if e == super::selector::RuleError::UnknownCommand {
                                errors.push_str(&format!(
                                    "{path}:{linenum}: Error in applying operation '{}': {}. ",
                                    String::from_utf8_lossy(&op),
                                    e.message()
                                ));
                            } else if !syntax_error {
                                errors.push_str(&format!("{path}:{linenum}: {}. ", e.message()));
                                syntax_error = true;
                            }
                        }
                    }
                }
            }
            loaded.map.insert(name.to_vec(), Rc::new(user));
        }
        if !errors.is_empty() {
            errors.push_str("WARNING: ACL errors detected, no change to the previously active ACL rules was performed");
            return Err(errors);
        }
        if !loaded.map.contains_key(&b"default"[..]) {
            loaded.map.insert(b"default".to_vec(), Rc::new(User::default_user()));
        }
        Ok(loaded)
    }

    /// The ACL file's text (`ACLSaveToFile`), one `user` line each.
    pub fn file_text(&self) -> String {
        self.map.values().map(|u| format!("user {} {}\n", String::from_utf8_lossy(&u.name), u.describe())).collect()
    }

    /// ACL SAVE: a temporary file renamed over the ACL file.
    pub fn save_file(&self, path: &str) -> std::io::Result<()> {
        let tmp = format!("{path}.tmp-{}-{}", std::process::id(), shard::unix_ms());
        let written = std::fs::write(&tmp, self.file_text()).and_then(|_| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let is_space = |c: &u8| matches!(c, b' ' | b'\t' | b'\r' | b'\n');
    let start = b.iter().position(|c| !is_space(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !is_space(c)).map_or(start, |e| e + 1);
    &b[start..end]
}
