//! The latency histogram Redis 7.0 keeps per command: HdrHistogram with
//! Redis's parameters (1 ns .. 1 s, 2 significant figures), ported from
//! deps/hdr_histogram for the parts Redis uses (recording, percentiles, the
//! logarithmic iteration of LATENCY HISTOGRAM), so the figures are Redis's
//! for the same samples. Counts of several cores' histograms add up.

/// Redis's LATENCY_HISTOGRAM_MIN_VALUE / _MAX_VALUE (ns).
pub const MIN_VALUE: i64 = 1;
pub const MAX_VALUE: i64 = 1_000_000_000;

// hdr_calculate_bucket_config(1, 1e9, 2): 2 * 10^2 values at unit
// resolution -> 256 sub-buckets (magnitude 8), unit magnitude 0, and 23
// buckets to reach 1e9 (256 << 22 > 1e9).
const SUB_BUCKET_HALF_COUNT_MAGNITUDE: i32 = 7;
const SUB_BUCKET_COUNT: i32 = 256;
const SUB_BUCKET_HALF_COUNT: i32 = 128;
const SUB_BUCKET_MASK: i64 = 255;
const BUCKET_COUNT: i32 = 23;
/// Slots of the counts array (24 KiB of u64, allocated on first use).
pub const COUNTS_LEN: usize = ((BUCKET_COUNT + 1) * SUB_BUCKET_HALF_COUNT) as usize;

#[derive(Clone)]
pub struct Histogram {
    pub counts: Box<[u64]>,
    pub total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; COUNTS_LEN].into_boxed_slice(), total: 0 }
    }
}

fn bucket_index(value: i64) -> i32 {
    let pow2ceiling = 64 - (value | SUB_BUCKET_MASK).leading_zeros() as i32;
    pow2ceiling - (SUB_BUCKET_HALF_COUNT_MAGNITUDE + 1)
}

fn sub_bucket_index(value: i64, bucket: i32) -> i32 {
    (value >> bucket) as i32
}

fn counts_index(bucket: i32, sub: i32) -> i32 {
    ((bucket + 1) << SUB_BUCKET_HALF_COUNT_MAGNITUDE) + (sub - SUB_BUCKET_HALF_COUNT)
}

fn value_at_index(index: i32) -> i64 {
    let mut bucket = (index >> SUB_BUCKET_HALF_COUNT_MAGNITUDE) - 1;
    let mut sub = (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT;
    if bucket < 0 {
        sub -= SUB_BUCKET_HALF_COUNT;
        bucket = 0;
    }
    (sub as i64) << bucket
}

fn range_size(bucket: i32, sub: i32) -> i64 {
    let adjusted = if sub >= SUB_BUCKET_COUNT { bucket + 1 } else { bucket };
    1i64 << adjusted
}

fn lowest_equivalent(value: i64) -> i64 {
    let b = bucket_index(value);
    (sub_bucket_index(value, b) as i64) << b
}

fn highest_equivalent(value: i64) -> i64 {
    let b = bucket_index(value);
    let s = sub_bucket_index(value, b);
    ((s as i64) << b) + range_size(b, s) - 1
}

impl Histogram {
    /// Redis's updateCommandLatencyHistogram: `ns` clamped into the range.
    #[inline]
    pub fn record(&mut self, ns: i64) {
        let v = ns.clamp(MIN_VALUE, MAX_VALUE);
        let b = bucket_index(v);
        let i = counts_index(b, sub_bucket_index(v, b)) as usize;
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
            self.total += 1;
        }
    }

    pub fn add(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
    }

    /// hdr_value_at_percentile.
    pub fn value_at_percentile(&self, percentile: f64) -> i64 {
        let requested = percentile.min(100.0);
        let wanted = (((requested / 100.0) * self.total as f64) + 0.5) as i64;
        let wanted = wanted.max(1) as u64;
        let mut seen = 0u64;
        let mut value = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= wanted {
                value = value_at_index(i as i32);
                break;
            }
        }
        if percentile == 0.0 {
            lowest_equivalent(value)
        } else {
            highest_equivalent(value)
        }
    }

    /// LATENCY HISTOGRAM's buckets (Redis's fillCommandCDF over
    /// hdr_iter_log_init(1024, 2)): (µs, cumulative count) where the count
    /// grew.
    pub fn cumulative_buckets(&self) -> Vec<(i64, u64)> {
        let mut out = Vec::new();
        let mut it = LogIter::new(self);
        let mut previous = 0;
        while it.next() {
            let micros = it.highest_equivalent / 1000;
            if it.cumulative > previous {
                out.push((micros, it.cumulative));
            }
            previous = it.cumulative;
        }
        out
    }
}

/// hdr_iter with the log_iter_next step, as Redis runs it.
struct LogIter<'a> {
    h: &'a Histogram,
    index: i32,
    cumulative: u64,
    value: i64,
    highest_equivalent: i64,
    next_level: i64,
    next_level_lowest: i64,
}

impl<'a> LogIter<'a> {
    fn new(h: &'a Histogram) -> Self {
        LogIter {
            h,
            index: -1,
            cumulative: 0,
            value: 0,
            highest_equivalent: 0,
            next_level: 1024,
            next_level_lowest: lowest_equivalent(1024),
        }
    }

    fn move_next(&mut self) -> bool {
        self.index += 1;
        if self.index as usize >= COUNTS_LEN {
            return false;
        }
        self.cumulative += self.h.counts[self.index as usize];
        let value = value_at_index(self.index);
        let b = bucket_index(value);
        let s = sub_bucket_index(value, b);
        let lowest = (s as i64) << b;
        self.value = value;
        self.highest_equivalent = lowest + range_size(b, s) - 1;
        true
    }

    fn next(&mut self) -> bool {
        let has_next = self.cumulative < self.h.total;
        let next_greater = self.index < COUNTS_LEN as i32 && value_at_index(self.index + 1) > self.next_level_lowest;
        if !(has_next || next_greater) {
            return false;
        }
        loop {
            if self.value >= self.next_level_lowest {
                self.next_level *= 2;
                self.next_level_lowest = lowest_equivalent(self.next_level);
                return true;
            }
            if !self.move_next() {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_redis_s() {
        assert_eq!(COUNTS_LEN, 3072);
        // Values below 256 ns are exact; above, 2 significant figures.
        assert_eq!(highest_equivalent(100), 100);
        assert_eq!(highest_equivalent(1000), 1003);
        assert_eq!(lowest_equivalent(1000), 1000);
        assert_eq!(highest_equivalent(1_000_000), 1_003_519);
    }

    // Expected figures printed by Redis 7.0's own deps/hdr_histogram for
    // the same samples.
    #[test]
    fn percentiles_and_buckets_match_redis() {
        let mut h = Histogram::default();
        for us in 1..=100 {
            h.record(us * 1000);
        }
        assert_eq!(h.total, 100);
        assert_eq!(h.value_at_percentile(50.0), 50175);
        assert_eq!(h.value_at_percentile(100.0), 100351);
        assert_eq!(h.value_at_percentile(0.0), 1000);
        assert_eq!(h.value_at_percentile(99.9), 100351);
        assert_eq!(
            h.cumulative_buckets(),
            vec![(1, 1), (2, 2), (4, 4), (8, 8), (16, 16), (33, 33), (66, 66), (132, 100)]
        );

        let mut g = Histogram::default();
        for ns in [1, 3000, 3000, 1_000_000_000] {
            g.record(ns);
        }
        assert_eq!(g.cumulative_buckets(), vec![(1, 1), (4, 3), (1073741, 4)]);

        let mut k = Histogram::default();
        for i in 0..1000i64 {
            k.record(if i % 7 == 0 { 1 } else { (i * 37 % 5000) * 1000 + 1 });
        }
        assert_eq!(
            k.cumulative_buckets(),
            vec![
                (1, 143),
                (2, 144),
                (8, 145),
                (16, 146),
                (33, 149),
                (66, 155),
                (132, 167),
                (264, 192),
                (528, 241),
                (1056, 339),
                (2113, 532),
                (4227, 875),
                (8454, 1000)
            ]
        );
        assert_eq!(k.value_at_percentile(50.0), 1925119);
        assert_eq!(k.value_at_percentile(99.0), 4947967);
        assert_eq!(k.value_at_percentile(99.9), 5013503);
    }
}
