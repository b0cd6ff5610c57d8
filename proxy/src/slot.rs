//! Cluster slots: CRC16 (XMODEM, as Redis Cluster) of the key or of its
//! `{hash tag}`, modulo 16384, and the map from slot to owning shard.

pub const SLOTS: usize = 16384;

/// The part of a key that is hashed: the first `{...}` with something inside,
/// else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[inline]
pub fn key_slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) & (SLOTS as u16 - 1)
}

/// Slot → shard. Each shard owns one contiguous range of slots.
#[derive(Clone)]
pub struct SlotMap {
    owner: Box<[u16]>,
    shards: usize,
}

impl SlotMap {
    pub fn contiguous(shards: usize) -> Self {
        let owner = (0..SLOTS).map(|s| (s * shards / SLOTS) as u16).collect();
        SlotMap { owner, shards }
    }

    #[inline]
    pub fn shard_of_slot(&self, slot: u16) -> usize {
        self.owner[slot as usize] as usize
    }

    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        if self.shards == 1 {
            return 0;
        }
        self.shard_of_slot(key_slot(key))
    }

    /// The slot range `[first, last]` of each shard, in shard order.
    pub fn ranges(&self) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = Vec::new();
        for (slot, &shard) in self.owner.iter().enumerate() {
            match out.get_mut(shard as usize) {
                Some(r) => r.1 = slot as u16,
                None => out.push((slot as u16, slot as u16)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on Redis.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn contiguous_ranges_cover_all_slots() {
        for n in [1, 2, 3, 7, 16] {
            let m = SlotMap::contiguous(n);
            let r = m.ranges();
            assert_eq!(r.len(), n);
            assert_eq!(r[0].0, 0);
            assert_eq!(r[n - 1].1 as usize, SLOTS - 1);
            for w in r.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
        }
    }
}
