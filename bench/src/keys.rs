//! Key selection (uniform, sequential, gaussian, zipf) and key formatting.

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
    /// Zipf over the range: the key at rank k (k = 1 is --key-minimum) is
    /// drawn with probability proportional to 1 / k^s, s = --key-zipf-exp
    /// (0.99 by default): a cache's skewed popularity.
    #[value(name = "Z", alias = "z")]
    Zipf,
}

/// Zipf by rejection-inversion (Hörmann and Derflinger 1996, as Apache
/// Commons' sampler): O(1) per draw, no table over the range.
#[derive(Debug, Clone)]
struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    cut: f64,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut z = Zipf { n: n as f64, s, h_x1: 0.0, h_n: 0.0, cut: 0.0 };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(n as f64 + 0.5);
        z.cut = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// A rank in 1..=n.
    fn sample(&self, rng: &mut SmallRng) -> u64 {
        loop {
            let u = self.h_n + rng.random::<f64>() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.cut || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// ln(1 + x) / x, continuous at 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1) / x, continuous at 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
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
    zipf: Option<Zipf>,
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
            zipf: (pattern == KeyPattern::Zipf).then(|| Zipf::new(max - min + 1, 0.99)),
        }
    }

    /// The Zipf pattern's exponent.
    pub fn with_zipf_exponent(mut self, s: Option<f64>) -> Self {
        if let (Some(s), true) = (s, self.zipf.is_some()) {
            self.zipf = Some(Zipf::new(self.max - self.min + 1, s));
        }
        self
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
            KeyPattern::Zipf => match &self.zipf {
                Some(z) => self.min + z.sample(rng) - 1,
                None => self.min,
            },
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

#[cfg(test)]
mod zipf_tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zipf_ranks_follow_one_over_k_to_the_s() {
        let mut keys = KeyGen::new(KeyPattern::Zipf, 1, 1000, 0, 1);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u64; 1001];
        let draws = 200_000;
        for _ in 0..draws {
            let k = keys.next_key(&mut rng);
            assert!((1..=1000).contains(&k));
            counts[k as usize] += 1;
        }
        let h: f64 = (1..=1000).map(|k| (k as f64).powf(-0.99)).sum();
        for k in [1usize, 2, 10, 100] {
            let want = (k as f64).powf(-0.99) / h * draws as f64;
            let got = counts[k] as f64;
            assert!((got - want).abs() < want * 0.1 + 30.0, "rank {k}: {got} vs {want:.0}");
        }
    }
}
