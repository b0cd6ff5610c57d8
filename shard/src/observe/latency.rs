//! The latency monitor's events on one core (Redis's latency.c): per event
//! ("command", "fast-command", "expire-cycle"...) the latest 160 samples,
//! one per second (the worst of that second), and the all-time worst.
//! Every core keeps its own; LATENCY merges them second by second.

/// Redis's LATENCY_TS_LEN.
pub const TS_LEN: usize = 160;

#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Sample {
    /// Unix seconds; 0: an empty slot.
    pub time: i32,
    /// Milliseconds.
    pub latency: u32,
}

/// One event's time series, laid out as Redis's `latencyTimeSeries`.
#[derive(Clone, Debug)]
pub struct Series {
    /// The slot of the next sample.
    pub idx: usize,
    pub max: u32,
    pub samples: [Sample; TS_LEN],
}

impl Default for Series {
    fn default() -> Self {
        Series { idx: 0, max: 0, samples: [Sample::default(); TS_LEN] }
    }
}

impl Series {
    /// latencyAddSample.
    pub fn add(&mut self, now: i32, latency: u32) {
        self.max = self.max.max(latency);
        let prev = (self.idx + TS_LEN - 1) % TS_LEN;
        if self.samples[prev].time == now {
            let s = &mut self.samples[prev];
            s.latency = s.latency.max(latency);
            return;
        }
        self.samples[self.idx] = Sample { time: now, latency };
        self.idx = (self.idx + 1) % TS_LEN;
    }

    /// The samples oldest first.
    pub fn in_order(&self) -> impl Iterator<Item = Sample> + '_ {
        (0..TS_LEN).map(move |j| self.samples[(self.idx + j) % TS_LEN]).filter(|s| s.time != 0)
    }

    /// The cores' series of one event as one: samples of the same second
    /// keep the worst, the latest 160 seconds stay.
    pub fn merge<'a>(parts: impl IntoIterator<Item = &'a Series>) -> Series {
        let mut all: Vec<Sample> = Vec::new();
        let mut max = 0;
        for p in parts {
            max = max.max(p.max);
            all.extend(p.in_order());
        }
        all.sort_by_key(|s| s.time);
        let mut merged = Series { max, ..Series::default() };
        let mut kept: Vec<Sample> = Vec::with_capacity(all.len());
        for s in all {
            match kept.last_mut() {
                Some(last) if last.time == s.time => last.latency = last.latency.max(s.latency),
                _ => kept.push(s),
            }
        }
        let from = kept.len().saturating_sub(TS_LEN);
        for (i, s) in kept[from..].iter().enumerate() {
            merged.samples[i] = *s;
        }
        merged.idx = (kept.len() - from) % TS_LEN;
        merged
    }

    /// The latest sample (LATENCY LATEST).
    pub fn last(&self) -> Sample {
        self.samples[(self.idx + TS_LEN - 1) % TS_LEN]
    }
}

/// A core's events, in the order they first happened.
#[derive(Default)]
pub struct Events {
    pub series: Vec<(&'static str, Box<Series>)>,
}

impl Events {
    /// latencyAddSampleIfNeeded: only at or over a non-zero threshold (ms).
    #[inline]
    pub fn add_if_needed(&mut self, threshold_ms: u64, event: &'static str, latency_ms: u64) {
        if threshold_ms != 0 && latency_ms >= threshold_ms {
            self.add(event, latency_ms);
        }
    }

    #[cold]
    fn add(&mut self, event: &'static str, latency_ms: u64) {
        let now = (crate::unix_ms() / 1000) as i32;
        let latency = latency_ms.min(u32::MAX as u64) as u32;
        match self.series.iter_mut().find(|(e, _)| *e == event) {
            Some((_, s)) => s.add(now, latency),
            None => {
                let mut s = Box::<Series>::default();
                s.add(now, latency);
                self.series.push((event, s));
            }
        }
    }

    /// latencyResetEvent: the named event (any case), or all of them for
    /// `None`. Returns the names removed.
    pub fn reset(&mut self, event: Option<&[u8]>) -> Vec<&'static str> {
        let mut removed = Vec::new();
        self.series.retain(|(e, _)| {
            let hit = event.is_none_or(|ev| ev.eq_ignore_ascii_case(e.as_bytes()));
            if hit {
                removed.push(*e);
            }
            !hit
        });
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_the_worst() {
        let mut s = Series::default();
        s.add(100, 5);
        s.add(100, 9);
        s.add(100, 3);
        s.add(101, 2);
        assert_eq!(
            s.in_order().collect::<Vec<_>>(),
            vec![Sample { time: 100, latency: 9 }, Sample { time: 101, latency: 2 }]
        );
        assert_eq!((s.max, s.last().latency), (9, 2));
    }

    #[test]
    fn merge_keeps_the_latest_160_seconds() {
        let mut a = Series::default();
        let mut b = Series::default();
        for t in 1..=200 {
            if t % 2 == 0 {
                a.add(t, t as u32)
            } else {
                b.add(t, 1)
            }
        }
        b.add(200, 500);
        let m = Series::merge([&a, &b]);
        let v: Vec<Sample> = m.in_order().collect();
        assert_eq!(v.len(), 160);
        assert_eq!(v[0].time, 41);
        assert_eq!(m.last(), Sample { time: 200, latency: 500 });
        assert_eq!(m.max, 500);
    }
}
