//! Pub/Sub state (a leaf, plain data): this core's subscribers by channel,
//! pattern and shard channel, the summaries of the other cores'
//! subscriptions, the outbox of fire-and-forget publishes per destination
//! core, and what one connection is subscribed to.

use crate::push::queue::PushQueue;
use std::collections::HashMap;
use std::rc::Rc;

/// The three namespaces of Redis's Pub/Sub.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Channel = 0,
    Pattern = 1,
    Shard = 2,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Channel, Kind::Pattern, Kind::Shard];

    pub fn from_index(i: u8) -> Kind {
        match i {
            0 => Kind::Channel,
            1 => Kind::Pattern,
            _ => Kind::Shard,
        }
    }
}

type Map<V> = HashMap<Vec<u8>, V, ahash::RandomState>;

/// What another core subscribes to, as this core knows it: per name the
/// number of that core's subscribers, from the +1/-1 notices it sends for
/// each subscription and unsubscription. Notices may arrive in any order
/// (removals are sent without waiting), but the count is exact once all
/// arrived, and a core's notice for its first subscriber of a name is in
/// before that SUBSCRIBE is answered, so a publish never misses a core.
#[derive(Default)]
pub struct Summary {
    pub names: [Map<i32>; 3],
}

impl Summary {
    pub fn has(&self, kind: Kind, name: &[u8]) -> bool {
        self.names[kind as usize].get(name).is_some_and(|&n| n > 0)
    }

    /// A channel published here reaches that core: a subscriber of the
    /// channel, or of a pattern matching it.
    pub fn reaches(&self, channel: &[u8]) -> bool {
        self.has(Kind::Channel, channel)
            || self.names[Kind::Pattern as usize]
                .iter()
                .any(|(p, &n)| n > 0 && shard::glob::glob_match(p, channel, false))
    }

    /// How many of that core's subscribers a publish to `channel` reaches
    /// (a pattern subscriber once per matching pattern, as Redis counts).
    pub fn receivers(&self, kind: Kind, channel: &[u8]) -> usize {
        let count = |n: &i32| (*n).max(0) as usize;
        let direct = self.names[kind as usize].get(channel).map_or(0, count);
        if kind != Kind::Channel {
            return direct;
        }
        direct
            + self.names[Kind::Pattern as usize]
                .iter()
                .filter(|(p, _)| shard::glob::glob_match(p, channel, false))
                .map(|(_, n)| count(n))
                .sum::<usize>()
    }

    pub fn change(&mut self, kind: Kind, name: &[u8], delta: i32) {
        let names = &mut self.names[kind as usize];
        let n = names.entry(name.to_vec()).or_insert(0);
        *n += delta;
        if *n == 0 {
            names.remove(name);
        }
    }
}

/// This core's subscribers and its view of the other cores'.
pub struct Subscriptions {
    /// Per kind: name -> the queues of this core's subscribers, in order of
    /// subscription (Redis delivers in that order).
    pub local: [Map<Vec<Rc<PushQueue>>>; 3],
    /// Per core (this one's entry unused).
    pub remote: Vec<Summary>,
    /// Fire-and-forget publishes per destination core, sent by one task
    /// after the current one yields (`flush_scheduled`).
    pub outbox: Vec<PublishOutbox>,
    pub flush_scheduled: bool,
}

impl Subscriptions {
    pub fn new(cores: usize) -> Subscriptions {
        Subscriptions {
            local: Default::default(),
            remote: (0..cores).map(|_| Summary::default()).collect(),
            outbox: (0..cores).map(|_| PublishOutbox::default()).collect(),
            flush_scheduled: false,
        }
    }

    /// Adds a subscriber; true when it is the name's first on this core.
    pub fn add(&mut self, kind: Kind, name: &[u8], queue: &Rc<PushQueue>) -> bool {
        let list = self.local[kind as usize].entry(name.to_vec()).or_default();
        list.push(queue.clone());
        list.len() == 1
    }

    /// Removes a subscriber.
    pub fn remove(&mut self, kind: Kind, name: &[u8], client_id: u64) {
        let map = &mut self.local[kind as usize];
        let Some(list) = map.get_mut(name) else { return };
        list.retain(|q| q.client_id != client_id);
        if list.is_empty() {
            map.remove(name);
        }
    }

    /// The other cores a publish to `channel` of `kind` must reach.
    pub fn targets<'a>(&'a self, me: usize, kind: Kind, channel: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        self.remote.iter().enumerate().filter_map(move |(core, summary)| {
            let hit = core != me
                && match kind {
                    Kind::Shard => summary.has(Kind::Shard, channel),
                    _ => summary.reaches(channel),
                };
            hit.then_some(core)
        })
    }

    /// Per kind, the names with subscribers here that no lower-numbered
    /// core has (by its summary): summed over the cores, the server's
    /// distinct names (INFO's pubsub_channels...).
    pub fn distinct_here(&self, me: usize) -> [usize; 3] {
        Kind::ALL.map(|kind| {
            self.local[kind as usize].keys().filter(|n| !self.remote[..me].iter().any(|s| s.has(kind, n))).count()
        })
    }

    /// The other cores' subscribers a publish to `channel` reaches, as
    /// their summaries say.
    pub fn remote_receivers(&self, me: usize, kind: Kind, channel: &[u8]) -> usize {
        self.remote.iter().enumerate().filter(|&(core, _)| core != me).map(|(_, s)| s.receivers(kind, channel)).sum()
    }

    /// Whether any other core may have a subscriber for `channel` (the
    /// cheap test before collecting targets).
    pub fn any_remote(&self, me: usize, kind: Kind, channel: &[u8]) -> bool {
        self.targets(me, kind, channel).next().is_some()
    }
}

/// What one connection is subscribed to, in order of subscription (as
/// Redis lists them when unsubscribing from all).
#[derive(Default)]
pub struct ConnSubscriptions {
    pub names: [Vec<Vec<u8>>; 3],
}

impl ConnSubscriptions {
    /// SUBSCRIBE/UNSUBSCRIBE's count: channels plus patterns.
    pub fn count(&self) -> usize {
        self.names[0].len() + self.names[1].len()
    }

    /// SSUBSCRIBE/SUNSUBSCRIBE's count: shard channels.
    pub fn shard_count(&self) -> usize {
        self.names[2].len()
    }

    pub fn total(&self) -> usize {
        self.count() + self.shard_count()
    }

    pub fn has(&self, kind: Kind, name: &[u8]) -> bool {
        self.names[kind as usize].iter().any(|n| n == name)
    }
}

/// Fire-and-forget publishes for one other core, sent as one mesh message.
#[derive(Default)]
pub struct PublishOutbox {
    /// Channel and message bytes, back to back.
    pub data: Vec<u8>,
    /// (kind, end of channel, end of message) in `data`.
    pub items: Vec<(u8, u32, u32)>,
}

impl PublishOutbox {
    pub fn push(&mut self, kind: Kind, channel: &[u8], message: &[u8]) {
        self.data.extend_from_slice(channel);
        let channel_end = self.data.len() as u32;
        self.data.extend_from_slice(message);
        self.items.push((kind as u8, channel_end, self.data.len() as u32));
    }

    /// (kind, channel, message) in order.
    pub fn iter(&self) -> impl Iterator<Item = (Kind, &[u8], &[u8])> {
        let mut start = 0usize;
        self.items.iter().map(move |&(kind, channel_end, end)| {
            let (c, e) = (channel_end as usize, end as usize);
            let item = (Kind::from_index(kind), &self.data[start..c], &self.data[c..e]);
            start = e;
            item
        })
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}
