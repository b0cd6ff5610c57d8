//! The description of one run (the preload or the measured run) that all
//! worker threads share, and their start-line synchronisation.

use crate::cluster::SlotMap;
use crate::keys::{KeyGen, KnownKeys};
use crate::workload::Workload;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// State shared by all worker threads for the whole process.
pub struct Shared {
    pub auth: Option<String>,
    pub cluster: bool,
    pub seed_host: String,
    pub map: SlotMap,
    pub known: KnownKeys,
    pub abort: AtomicBool,
}

/// What one run (the preload or the measured run) asks of the workers.
pub struct Phase {
    pub workload: Workload,
    /// Closed-loop depth per client.
    pub pipeline: usize,
    /// Closed loop: top the pipeline up after every reply instead of
    /// refilling it only once it has drained.
    pub eager_refill: bool,
    /// Open loop: total requests per second.
    pub rate: Option<f64>,
    pub max_inflight: usize,
    pub warmup: Duration,
    /// Measured run time after the warm-up (None: run until requests are done).
    pub duration: Option<Duration>,
    pub drain_timeout: Duration,
    pub threads: usize,
    pub clients_per_thread: usize,
    /// Per global client: its key generator, RNG seed and request budget.
    pub clients: Vec<ClientSpec>,
    pub sync: PhaseSync,
    /// Completed requests per thread, for the progress display.
    pub progress: Vec<AtomicU64>,
}

pub struct ClientSpec {
    pub keys: KeyGen,
    pub seed: u64,
    pub requests: u64,
}

/// All threads connect first, then start together from one shared instant.
pub struct PhaseSync {
    barrier: Barrier,
    start: OnceLock<Instant>,
}

impl PhaseSync {
    /// `parties`: worker threads plus the coordinating thread.
    pub fn new(parties: usize) -> Self {
        PhaseSync { barrier: Barrier::new(parties), start: OnceLock::new() }
    }

    /// Called by the coordinator: releases the workers and returns the start.
    pub fn start_now(&self) -> Instant {
        self.barrier.wait();
        let t = *self.start.get_or_init(Instant::now);
        self.barrier.wait();
        t
    }

    pub(crate) fn wait_start(&self) -> Instant {
        self.barrier.wait();
        self.barrier.wait();
        *self.start.get().expect("start set between the barriers")
    }
}
