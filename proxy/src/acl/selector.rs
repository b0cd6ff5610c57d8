//! One ACL selector, as Redis 7.0's `aclSelector`: the commands (a bit per
//! command id, plus first-args), key patterns with read/write permissions
//! and channel patterns; its rules (`ACLSetSelector`), its description
//! (`ACLDescribeSelector`, the same best-fit over categories) and its check.

use super::commands::{registry, CATEGORIES, KEY_READ, KEY_WRITE};
use shard::glob::glob_match;
use shard::Args;

/// Why a rule was refused: Redis's errno, worded by `message`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RuleError {
    /// EINVAL
    Syntax,
    /// ENOENT
    UnknownCommand,
    /// EEXIST
    KeysAfterAll,
    /// EISDIR
    ChannelsAfterAll,
    /// ENODEV
    NoSuchPassword,
    /// EBADMSG
    BadHash,
    /// ECHILD
    SubcommandFirstArg,
}

impl RuleError {
    /// `ACLSetUserStringError`.
    pub fn message(self) -> &'static str {
        match self {
            RuleError::Syntax => "Syntax error",
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::KeysAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::ChannelsAfterAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::SubcommandFirstArg => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// Why a command was refused, ordered as Redis ranks them when no
/// selector allows it (`ACL_DENIED_CMD < KEY < CHANNEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denied {
    Command,
    /// The argument index of the key.
    Key(usize),
    Channel(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct KeyPattern {
    /// KEY_READ | KEY_WRITE.
    pub access: u8,
    pub pattern: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    pub root: bool,
    pub all_keys: bool,
    pub all_channels: bool,
    pub all_commands: bool,
    /// Set by +@all: commands added later are allowed too (Redis's reserved
    /// last bit).
    future: bool,
    allowed: Vec<u64>,
    /// (command id, allowed first arguments) of commands otherwise denied.
    first_args: Vec<(usize, Vec<String>)>,
    pub patterns: Vec<KeyPattern>,
    pub channels: Vec<Vec<u8>>,
}

fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&c| c.is_ascii_whitespace() || c == 0 || c == 0x0b)
}

impl Selector {
    pub fn new(root: bool, all_channels: bool) -> Selector {
        Selector {
            root,
            all_keys: false,
            all_channels,
            all_commands: false,
            future: false,
            allowed: vec![0; registry().len().div_ceil(64)],
            first_args: Vec::new(),
            patterns: Vec::new(),
            channels: Vec::new(),
        }
    }

    fn bit(&self, id: usize) -> bool {
        self.allowed[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.allowed[id / 64] |= 1 << (id % 64);
        } else {
            self.allowed[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// `ACLChangeSelectorPerm`: the command and all its subcommands.
    fn change(&mut self, id: usize, on: bool) {
        self.set_bit(id, on);
        self.first_args.retain(|(c, _)| *c != id);
        for &sub in &registry().commands[id].subcommands {
            self.set_bit(sub, on);
        }
    }

    fn change_category(&mut self, cat: usize, on: bool) {
        let reg = registry();
        for (id, c) in reg.commands.iter().enumerate() {
            if c.categories & (1 << cat) != 0 {
                self.change(id, on);
            }
        }
    }

    fn all(&mut self, on: bool) {
        self.allowed.iter_mut().for_each(|w| *w = if on { u64::MAX } else { 0 });
        self.all_commands = on;
        self.future = on;
        self.first_args.clear();
    }

    /// One rule (`ACLSetSelector`).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let text = String::from_utf8_lossy(op);
        let lower = text.to_ascii_lowercase();
        match lower.as_str() {
            "allkeys" | "~*" => {
                self.all_keys = true;
                self.patterns.clear();
            }
            "resetkeys" => {
                self.all_keys = false;
                self.patterns.clear();
            }
            "allchannels" | "&*" => {
                self.all_channels = true;
                self.channels.clear();
            }
            "resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
            }
            "allcommands" | "+@all" => self.all(true),
            "nocommands" | "-@all" => self.all(false),
            _ => return self.apply_pattern_or_command(op, &text),
        }
        Ok(())
    }

    fn apply_pattern_or_command(&mut self, op: &[u8], text: &str) -> Result<(), RuleError> {
        match op.first() {
            Some(b'~' | b'%') => {
                if self.all_keys {
                    return Err(RuleError::KeysAfterAll);
                }
                let (mut access, mut offset) = (0u8, 1);
                if op[0] == b'%' {
                    loop {
                        match op.get(offset) {
                            Some(b'R' | b'r') if access & KEY_READ == 0 => access |= KEY_READ,
                            Some(b'W' | b'w') if access & KEY_WRITE == 0 => access |= KEY_WRITE,
                            Some(b'~') => {
                                offset += 1;
                                break;
                            }
                            // Redis leaves its loop at the end of the op
                            // without a '~' and keeps what it read.
                            None => break,
                            _ => return Err(RuleError::Syntax),
                        }
                        offset += 1;
                    }
                } else {
                    access = KEY_READ | KEY_WRITE;
                }
                let pattern = &op[offset.min(op.len())..];
                if has_spaces(pattern) {
                    return Err(RuleError::Syntax);
                }
                match self.patterns.iter_mut().find(|p| p.pattern == pattern) {
                    Some(p) => p.access |= access,
                    None => self.patterns.push(KeyPattern { access, pattern: pattern.to_vec() }),
                }
                self.all_keys = false;
            }
            Some(b'&') => {
                if self.all_channels {
                    return Err(RuleError::ChannelsAfterAll);
                }
                if has_spaces(&op[1..]) {
                    return Err(RuleError::Syntax);
                }
                if !self.channels.iter().any(|c| c == &op[1..]) {
                    self.channels.push(op[1..].to_vec());
                }
                self.all_channels = false;
            }
            Some(b'+') if op.get(1) != Some(&b'@') => return self.allow_command(&text[1..]),
            Some(b'-') if op.get(1) != Some(&b'@') => {
                let id = registry().lookup(&text[1..]).ok_or(RuleError::UnknownCommand)?;
                self.change(id, false);
            }
            Some(b'+' | b'-') => {
                let cat = super::commands::category(&text[2..]).ok_or(RuleError::UnknownCommand)?;
                self.change_category(cat, op[0] == b'+');
            }
            _ => return Err(RuleError::Syntax),
        }
        Ok(())
    }

    fn allow_command(&mut self, name: &str) -> Result<(), RuleError> {
        let reg = registry();
        let Some((base, sub)) = name.rsplit_once('|') else {
            let id = reg.lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(id, true);
            return Ok(());
        };
        let id = reg.lookup(base).ok_or(RuleError::UnknownCommand)?;
        if reg.commands[id].parent.is_some() {
            return Err(RuleError::SubcommandFirstArg);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !reg.commands[id].subcommands.is_empty() {
            let sid = reg.lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(sid, true);
            return Ok(());
        }
        crate::log::warning(&format!("Deprecation warning: Allowing a first arg of an otherwise blocked command is a misuse of ACL and may get disabled in the future (offender: +{name})"));
        match self.first_args.iter_mut().find(|(c, _)| *c == id) {
            Some((_, args)) if args.iter().any(|a| a.eq_ignore_ascii_case(sub)) => {}
            Some((_, args)) => args.push(sub.to_string()),
            None => self.first_args.push((id, vec![sub.to_string()])),
        }
        Ok(())
    }

    /// Nothing to check: every command, key and channel.
    pub fn unrestricted(&self) -> bool {
        self.all_commands && self.all_keys && self.all_channels
    }

    /// `ACLCheckChannelAgainstList`: a channel matches an allowed pattern;
    /// a pattern subscription (`literal`) must be one of them exactly.
    pub fn allows_channel(&self, channel: &[u8], literal: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|p| match literal {
                true => p.as_slice() == channel,
                false => glob_match(p, channel, false),
            })
    }

    /// `ACLSelectorCheckCmd`.
    pub fn check(&self, id: usize, args: &Args) -> Result<(), Denied> {
        let reg = registry();
        let command = &reg.commands[id];
        if !self.all_commands && !command.spec.has_flag(shard::commands::flags::NO_AUTH) && !self.bit(id) {
            let arg = if command.parent.is_some() { 2 } else { 1 };
            let allowed = args.len() >= 2
                && self.first_args.iter().any(|(c, list)| {
                    *c == id
                        && args.len() > arg
                        && list.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(args.get(arg)))
                });
            if !allowed {
                return Err(Denied::Command);
            }
        }
        // Shard channels sit where keys do (Redis's not_key key specs).
        let shard_channels = matches!(command.spec.name, "ssubscribe" | "sunsubscribe" | "spublish");
        if !self.all_keys && !shard_channels {
            for (n, i) in command.spec.key_indexes(args).enumerate() {
                let access = reg.key_access(id, n, args);
                let key = args.get(i);
                if !self.patterns.iter().any(|p| p.access & access == access && glob_match(&p.pattern, key, false)) {
                    return Err(Denied::Key(i));
                }
            }
        }
        if !self.all_channels {
            // ACLCheckChannelAgainstList: a pattern subscription must name
            // an allowed pattern literally; a channel must match one.
            let (channels, literal) = match command.spec.name {
                "publish" | "spublish" => (1..2, false),
                "subscribe" | "ssubscribe" => (1..args.len(), false),
                "psubscribe" => (1..args.len(), true),
                _ => (0..0, false),
            };
            for i in channels {
                if !self.allows_channel(args.get(i), literal) {
                    return Err(Denied::Channel(i));
                }
            }
        }
        Ok(())
    }

    fn count_category(&self, cat: usize) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for (id, c) in registry().commands.iter().enumerate() {
            if c.categories & (1 << cat) != 0 {
                if self.bit(id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// `ACLDescribeSelectorCommandRules`: +@all or -@all, the categories
    /// that fit best, then single commands until the bits match.
    pub fn describe_commands(&self) -> String {
        let mut rules = String::new();
        let additive = !self.future;
        let mut fake = Selector::new(false, false);
        if additive {
            rules.push_str("-@all ");
        } else {
            rules.push_str("+@all ");
            fake.all(true);
        }
        let mut temp = Selector::new(false, false);
        temp.allowed = self.allowed.clone();
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for (j, done) in applied.iter().enumerate() {
                if *done {
                    continue;
                }
                let (on, off) = temp.count_category(j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(best) = best else { break };
            fake.change_category(best, additive);
            temp.change_category(best, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(CATEGORIES[best]);
            rules.push(' ');
            applied[best] = true;
        }
        for (id, c) in registry().commands.iter().enumerate() {
            let bit = self.bit(id);
            if bit != fake.bit(id) {
                rules.push(if bit { '+' } else { '-' });
                rules.push_str(c.name);
                rules.push(' ');
                fake.change(id, bit);
            }
            if !bit {
                if let Some((_, args)) = self.first_args.iter().find(|(i, _)| *i == id) {
                    for a in args {
                        rules.push_str(&format!("+{}|{} ", c.name, a));
                    }
                }
            }
        }
        rules.pop();
        rules
    }

    pub fn describe_keys(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let words: Vec<String> = self.patterns.iter().map(pattern_text).collect();
        words.join(" ")
    }

    pub fn describe_channels(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let words: Vec<String> = self.channels.iter().map(|c| format!("&{}", String::from_utf8_lossy(c))).collect();
        words.join(" ")
    }

    /// `ACLDescribeSelector`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if self.all_keys {
            out.push_str("~* ");
        } else {
            for p in &self.patterns {
                out.push_str(&pattern_text(p));
                out.push(' ');
            }
        }
        if self.all_channels {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            for c in &self.channels {
                out.push('&');
                out.push_str(&String::from_utf8_lossy(c));
                out.push(' ');
            }
        }
        out.push_str(&self.describe_commands());
        out
    }
}

fn pattern_text(p: &KeyPattern) -> String {
    let prefix = match p.access {
        a if a == KEY_READ | KEY_WRITE => "~",
        KEY_READ => "%R~",
        _ => "%W~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(&p.pattern))
}
