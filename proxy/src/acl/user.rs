//! One ACL user, as Redis 7.0's `user`: flags, password hashes and
//! selectors (the root one first); its rules (`ACLSetUser`), the
//! description ACL LIST prints, the password check and the command check.

use super::selector::{Denied, RuleError, Selector};
use sha2::{Digest, Sha256};
use shard::Args;

#[derive(Clone, Debug, PartialEq)]
pub struct User {
    pub name: Vec<u8>,
    pub enabled: bool,
    pub nopass: bool,
    /// `skip-sanitize-payload` (Some(true)) or `sanitize-payload`.
    pub skip_sanitize: Option<bool>,
    /// SHA-256 hex of each password.
    pub passwords: Vec<String>,
    /// The root selector first.
    pub selectors: Vec<Selector>,
    /// `acl-pubsub-default allchannels` when the user was made.
    pub all_channels_default: bool,
}

pub fn hash_password(password: &[u8]) -> String {
    Sha256::digest(password).iter().map(|b| format!("{b:02x}")).collect()
}

fn valid_hash(hash: &[u8]) -> bool {
    hash.len() == 64 && hash.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// A rule the user refused: its words as given, and why.
pub struct SetError {
    pub op: Vec<u8>,
    pub error: RuleError,
}

impl User {
    /// A new user: off, no passwords, no commands, keys or channels.
    pub fn new(name: &[u8], all_channels_default: bool) -> User {
        User {
            name: name.to_vec(),
            enabled: false,
            nopass: false,
            skip_sanitize: None,
            passwords: Vec::new(),
            selectors: vec![Selector::new(true, all_channels_default)],
            all_channels_default,
        }
    }

    /// `default`: on, nopass, every command, key and channel.
    pub fn default_user() -> User {
        let mut u = User::new(b"default", false);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            let _ = u.apply(op.as_bytes());
        }
        u
    }

    /// One rule (`ACLSetUser`).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let lower = String::from_utf8_lossy(op).to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "skip-sanitize-payload" => self.skip_sanitize = Some(true),
            "sanitize-payload" => self.skip_sanitize = Some(false),
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "clearselectors" => self.selectors.truncate(1),
            "reset" => {
                for op in ["resetpass", "resetkeys", "resetchannels"] {
                    self.apply(op.as_bytes())?;
                }
                if self.all_channels_default {
                    self.apply(b"allchannels")?;
                }
                for op in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                    self.apply(op.as_bytes())?;
                }
            }
            _ => match op[0] {
                b'>' | b'#' => {
                    let hash = if op[0] == b'>' {
                        hash_password(&op[1..])
                    } else if valid_hash(&op[1..]) {
                        String::from_utf8_lossy(&op[1..]).into_owned()
                    } else {
                        return Err(RuleError::BadHash);
                    };
                    if !self.passwords.contains(&hash) {
                        self.passwords.push(hash);
                    }
                    self.nopass = false;
                }
                b'<' | b'!' => {
                    let hash = if op[0] == b'<' {
                        hash_password(&op[1..])
                    } else if valid_hash(&op[1..]) {
                        String::from_utf8_lossy(&op[1..]).into_owned()
                    } else {
                        return Err(RuleError::BadHash);
                    };
                    let at = self.passwords.iter().position(|p| *p == hash).ok_or(RuleError::NoSuchPassword)?;
                    self.passwords.remove(at);
                }
                b'(' if op.ends_with(b")") => {
                    let inner = &op[1..op.len() - 1];
                    let words = shard::config::split_args(inner).unwrap_or_default();
                    let mut selector = Selector::new(false, self.all_channels_default);
                    for w in words {
                        selector.apply(&w)?;
                    }
                    self.selectors.push(selector);
                }
                _ => self.selectors[0].apply(op)?,
            },
        }
        Ok(())
    }

    /// Every rule or none (`ACLStringSetUser`): the words are merged into
    /// selectors first, as `ACLMergeSelectorArguments`.
    pub fn apply_all(&mut self, words: &[&[u8]]) -> Result<(), String> {
        let ops = merge_selectors(words).map_err(|start| {
            format!("Unmatched parenthesis in acl selector starting at '{}'.", String::from_utf8_lossy(start))
        })?;
        let mut staged = self.clone();
        for op in &ops {
            if let Err(e) = staged.apply(op) {
                return Err(format!(
                    "Error in ACL SETUSER modifier '{}': {}",
                    String::from_utf8_lossy(op),
                    e.message()
                ));
            }
        }
        *self = staged;
        Ok(())
    }

    pub fn check_password(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let hash = hash_password(password);
        // Every hash compared in full: the time does not tell which matched.
        self.passwords.iter().fold(false, |found, p| found | constant_time_eq(p.as_bytes(), hash.as_bytes()))
    }

    /// Nothing to check on the data path.
    #[inline]
    pub fn unrestricted(&self) -> bool {
        self.selectors.iter().any(Selector::unrestricted)
    }

    /// Some selector allows `channel` (a pattern subscription: `literal`).
    pub fn allows_channel(&self, channel: &[u8], literal: bool) -> bool {
        self.selectors.iter().any(|s| s.allows_channel(channel, literal))
    }

    /// `ACLCheckAllUserCommandPerm`: allowed when any selector allows it;
    /// otherwise the error Redis picks (the highest kind, the last key).
    pub fn check(&self, id: usize, args: &Args) -> Result<(), Denied> {
        let mut relevant = Denied::Command;
        for s in &self.selectors {
            match s.check(id, args) {
                Ok(()) => return Ok(()),
                Err(d) if d > relevant => relevant = d,
                Err(_) => {}
            }
        }
        Err(relevant)
    }

    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.skip_sanitize {
            Some(true) => flags.push("skip-sanitize-payload"),
            Some(false) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// `ACLDescribeUser`: the rules that rebuild this user.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for f in self.flags() {
            out.push_str(f);
            out.push(' ');
        }
        for p in &self.passwords {
            out.push('#');
            out.push_str(p);
            out.push(' ');
        }
        for s in &self.selectors {
            if s.root {
                out.push_str(&s.describe());
            } else {
                out.push_str(&format!(" ({})", s.describe()));
            }
        }
        out
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Joins `(a b c)` spread over several words into one selector op. Err:
/// the word that opened an unmatched parenthesis.
pub fn merge_selectors<'a>(words: &[&'a [u8]]) -> Result<Vec<Vec<u8>>, &'a [u8]> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, w) in words.iter().enumerate() {
        if let Some((_, sel)) = &mut open {
            sel.push(b' ');
            sel.extend_from_slice(w);
            if w.last() == Some(&b')') {
                out.push(open.take().map(|o| o.1).unwrap_or_default());
            }
            continue;
        }
        if w.first() == Some(&b'(') && w.last() != Some(&b')') {
            open = Some((i, w.to_vec()));
            continue;
        }
        out.push(w.to_vec());
    }
    match open {
        Some((i, _)) => Err(words[i]),
        None => Ok(out),
    }
}
