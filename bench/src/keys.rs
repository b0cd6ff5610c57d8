//! Key selection (uniform, sequential, gaussian) and key formatting.

use rand::rngs::SmallRng;
use rand::RngExt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum KeyPattern {
    /// Uniformly random over the range.
    #[value(name = "R", alias = "r")]
    Random,
    /// Sequential; each client starts at its own offset so clients don't
    /// all hit the same key at the same time.
    #[value(name = "S", alias = "s")]
    Sequential,
    /// Gaussian around the range's middle (or --key-median), stddev
    /// range/6 by default (or --key-stddev), clamped to the range.
    #[value(name = "G", alias = "g")]
    Gaussian,
}

/// Per-client key generator over the inclusive range `[min, max]`.
#[derive(Debug, Clone)]
pub struct KeyGen {
    pattern: KeyPattern,
    min: u64,
    max: u64,
    next: u64,
    mean: f64,
    stddev: f64,
}

impl KeyGen {
    /// `client`/`clients` spread sequential starting points over the range.
    pub fn new(pattern: KeyPattern, min: u64, max: u64, client: usize, clients: usize) -> Self {
        let span = u128::from(max - min) + 1;
        let offset = (span * client as u128 / clients.max(1) as u128) as u64;
        KeyGen {
            pattern,
            min,
            max,
            next: min + offset,
            mean: (min as f64 + max as f64) / 2.0,
            stddev: (max - min) as f64 / 6.0,
        }
    }

    pub fn with_gaussian(mut self, median: Option<f64>, stddev: Option<f64>) -> Self {
        if let Some(m) = median {
            self.mean = m;
        }
        if let Some(s) = stddev {
            self.stddev = s;
        }
        self
    }

    #[inline]
    pub fn next_key(&mut self, rng: &mut SmallRng) -> u64 {
        match self.pattern {
            KeyPattern::Random => rng.random_range(self.min..=self.max),
            KeyPattern::Sequential => {
                let k = self.next;
                self.next = if k >= self.max { self.min } else { k + 1 };
                k
            }
            KeyPattern::Gaussian => {
                // Box-Muller; one draw per key is plenty for a benchmark.
                let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: ln() stays finite
                let u2: f64 = rng.random();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let k = (self.mean + z * self.stddev).round();
                k.clamp(self.min as f64, self.max as f64) as u64
            }
        }
    }
}

/// Appends `prefix` + decimal `id` to `out`.
#[inline]
pub fn write_key(out: &mut Vec<u8>, prefix: &[u8], id: u64) {
    out.extend_from_slice(prefix);
    out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
}

/// Which keys hold a value written during this run (by any client, or by
/// the preload). Only GETs of such keys are verified: a value left by an
/// earlier run with other sizes is not an error, but a miss on a key whose
/// SET was acknowledged before the GET was sent is.
pub struct KnownKeys {
    min: u64,
    bits: Vec<std::sync::atomic::AtomicU64>,
    all: std::sync::atomic::AtomicBool,
}

impl KnownKeys {
    /// Key ranges above this many keys are not tracked (the bitmap would
    /// exceed 128 MiB); GETs are then verified only after --preload.
    pub const MAX_TRACKED: u64 = 1 << 30;

    pub fn new(min: u64, max: u64) -> Self {
        let span = (max - min).saturating_add(1);
        let words = if span <= Self::MAX_TRACKED { span.div_ceil(64) as usize } else { 0 };
        KnownKeys { min, bits: (0..words).map(|_| Default::default()).collect(), all: Default::default() }
    }

    #[inline]
    fn slot(&self, key: u64) -> Option<(&std::sync::atomic::AtomicU64, u64)> {
        let i = key.checked_sub(self.min)?;
        Some((self.bits.get((i / 64) as usize)?, 1 << (i % 64)))
    }

    #[inline]
    pub fn is_known(&self, key: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.all.load(Relaxed) || self.slot(key).is_some_and(|(w, m)| w.load(Relaxed) & m != 0)
    }

    #[inline]
    pub fn mark(&self, key: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some((w, m)) = self.slot(key) {
            // Test first: most SETs rewrite known keys, and a plain load keeps
            // the cache line shared between threads.
            if w.load(Relaxed) & m == 0 {
                w.fetch_or(m, Relaxed);
            }
        }
    }

    pub fn mark_all(&self) {
        self.all.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
