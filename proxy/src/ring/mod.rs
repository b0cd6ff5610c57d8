//! The client data path on an io_uring this core owns (`client-ring yes`).
//!
//! One ring per shard: multishot accept on the listeners, multishot receive
//! into a ring of provided buffers, the replies every connection queued
//! since the last turn sent together, and one `io_uring_enter` per turn to
//! submit them and reap completions. Connections (`conn.rs`) read and
//! write through `stream::RingStream` and are the driver's own tasks
//! (`tasks.rs`): the driver ([`Ring::drive`]) polls the ones its turn's
//! input woke right after the turn. When there is nothing
//! to do the executor parks in this ring ([`ParkHook`]): one
//! `io_uring_enter` submits the replies queued since the last one and waits
//! for input, a timer, or glommio's own rings (the mesh's wake-ups). Where
//! the kernel lacks what that needs (`IORING_SQ_TASKRUN`, a wait timeout)
//! glommio parks instead, on the ring's eventfd.
//!
//! Lifecycle: a connection's slot is freed only once its receive and send
//! have completed (cancelled if need be), and the driver returns only when
//! every listener and connection is reaped, so nothing is left to the
//! kernel's asynchronous ring teardown.

mod bufring;
mod gather;
pub mod stream;
mod tasks;
#[cfg(test)]
mod tests;
mod wake;

use crate::fd_shed;
use crate::log;
use bufring::BufRing;
use gather::Gather;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use slab::Slab;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;
use wake::WakeSlot;

/// Sizes of one shard's ring.
#[derive(Clone, Copy, Debug)]
pub struct RingConfig {
    pub entries: u32,
    /// Provided buffers (a power of two) and their size.
    pub buffers: u16,
    pub buffer_size: u32,
    /// Registered-file slots; connections beyond use plain fds.
    pub fixed_files: u32,
    /// Kernel SQ polling thread idle time, ms (0: off).
    pub sqpoll_ms: u32,
    /// Queued reply bytes past which a connection's writes wait.
    pub write_high_water: usize,
    /// The longest a park waits for more than one completion under load
    /// (`gather.rs`; zero, the default: a park ends at the first).
    pub gather_bound: Duration,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            entries: 1024,
            // 1 MiB per shard: the kernel cycles through all of them, so
            // all become resident; requests larger than a buffer span
            // several completions, read in one go. 16 KiB as Redis's
            // reads (PROTO_IOBUF_LEN): with 4 KiB a 100 KB SET took 25
            // completions, and the skewed workload 7-10% more CPU per
            // request (bench/RESULTS.md, "Connections polled by the driver").
            buffers: 64,
            buffer_size: 16384,
            fixed_files: 16 * 1024,
            sqpoll_ms: 0,
            write_high_water: 1 << 20,
            gather_bound: Duration::ZERO,
        }
    }
}

/// Turns the driver runs back to back before it lets glommio's reactor
/// poll (timers, the mesh): the reactor costs syscalls of its own, so it
/// runs once per this many turns while clients keep the ring busy.
const TURNS_PER_REACTOR_POLL: u32 = 8;

/// Send buffer capacity a connection keeps once its output is all sent.
const IDLE_SEND_BUFFER: usize = 16 * 1024;

const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const IGNORED: u64 = 4;
/// A poll on one of glommio's ring fds, armed by a park.
const WAKE: u64 = 5;

fn user_data(kind: u64, key: usize) -> u64 {
    (key as u64) << 8 | kind
}

struct Listener {
    fd: OwnedFd,
    tag: usize,
    armed: bool,
    /// No longer wanted (`Ring::unlisten`): closed once its accept ends.
    retired: bool,
}

/// One connection's state on the ring side.
struct Conn {
    fd: RawFd,
    /// Registered-file slot (= the slab key) when there was room.
    fixed: bool,
    /// Received bytes not read yet: (buffer id, start, end).
    input: VecDeque<(u16, u32, u32)>,
    /// No more input: the peer closed, an error, or a cancel.
    eof: bool,
    recv_armed: bool,
    /// The receive stopped for want of buffers; re-armed when some return.
    starved: bool,
    /// The last `Gather` epoch this connection sent something in.
    gather_epoch: u32,
    reader: WakeSlot,
    /// Replies queued by the connection since its last send.
    queued: Vec<u8>,
    /// Replies the kernel is sending, and how much of them went.
    sending: Vec<u8>,
    sent: usize,
    send_inflight: bool,
    /// A send failed: the peer is gone.
    failed: bool,
    writer: WakeSlot,
    /// The stream was dropped: send what is queued, then close.
    released: bool,
    /// Listed in `State::dirty`.
    dirty: bool,
    /// An AsyncCancel of the receive is on its way.
    cancelling: bool,
}

struct State {
    /// Boxed: a slab keeps its peak capacity, so after a burst of
    /// connections only a pointer per slot stays allocated.
    conns: Slab<Box<Conn>>,
    listeners: Slab<Listener>,
    /// Connections with output to send or a receive to arm this turn.
    dirty: Vec<usize>,
    /// The list `prepare` works through (swapped with `dirty`, so neither
    /// is allocated again each turn).
    preparing: Vec<usize>,
    bufs: BufRing,
    /// Connections accepted this turn (key, listener tag), handed out
    /// once the state is no longer borrowed.
    accepted: Vec<(usize, usize)>,
    /// Input this reap received (buffer id, length), up to `LOOK_AHEAD`
    /// receives: shown to the `on_input` hook before the connections run.
    fresh: Vec<(u16, u32)>,
    stopping: bool,
}

/// Handed each accepted connection: (ring, connection key, listener tag).
type OnAccept = Box<dyn Fn(Rc<Ring>, usize, usize)>;
type OnTurn = Box<dyn Fn(bool)>;
/// Shown what one reap received on several connections, before they run.
type OnInput = Box<dyn Fn(&[&[u8]])>;

/// The most receives of one reap the `on_input` hook is shown.
const LOOK_AHEAD: usize = 16;

pub struct Ring {
    uring: IoUring,
    state: RefCell<State>,
    config: RingConfig,
    /// Signalled when completions wait; only without `parks_here`.
    eventfd: Option<OwnedFd>,
    /// What `io_uring_enter` is given: the ring's registered index, or its fd.
    enter_fd: EnterFd,
    /// The executor parks in this ring (see [`ParkHook`]): the kernel sets
    /// `IORING_SQ_TASKRUN` when completions wait and takes a wait timeout.
    parks_here: bool,
    /// The poll on glommio's ring fd `i` is armed.
    wake_armed: [Cell<bool>; 2],
    /// The last turn left the driver busy: the next one submits at once
    /// rather than leaving its entries to the park.
    busy: Cell<bool>,
    /// The submission queue held entries at the executor's last poll.
    flush_due: Cell<bool>,
    /// IORING_SQ_TASKRUN was set with nothing to post (see `turn`).
    taskrun_stale: Cell<bool>,
    /// How many completions a park waits for.
    gather: Gather,
    fixed_files: u32,
    /// What the kernel accepted of the setup flags we asked for.
    pub setup: &'static str,
    /// A connection queued output while the driver was parked.
    kicked: Cell<bool>,
    driver: RefCell<WakeSlot>,
    on_accept: RefCell<Option<OnAccept>>,
    /// Told `true` after each turn that leaves the driver busy (it yields
    /// and runs again at once), `false` before it waits (the turn clock).
    on_turn: RefCell<Option<OnTurn>>,
    on_input: RefCell<Option<OnInput>>,
    /// Connection tasks the driver polls ([`Ring::spawn`]).
    tasks: Rc<tasks::Queue>,
    /// Those tasks, run by the driver's turns and by a park's (`serve_parked`).
    running: tasks::Tasks,
    me: std::rc::Weak<Ring>,
}

fn build(config: &RingConfig) -> std::io::Result<(IoUring, &'static str)> {
    // TASKRUN_FLAG: the kernel flags waiting completions in the shared
    // ring, so a turn or a park tells without a system call.
    let mut attempts: Vec<(&'static str, io_uring::Builder)> = Vec::new();
    if config.sqpoll_ms > 0 {
        let mut b = IoUring::builder();
        b.setup_sqpoll(config.sqpoll_ms).setup_single_issuer();
        attempts.push(("SQPOLL|SINGLE_ISSUER", b));
    }
    let mut b = IoUring::builder();
    b.setup_single_issuer().setup_defer_taskrun().setup_taskrun_flag();
    attempts.push(("SINGLE_ISSUER|DEFER_TASKRUN|TASKRUN_FLAG", b));
    let mut b = IoUring::builder();
    b.setup_single_issuer().setup_defer_taskrun();
    attempts.push(("SINGLE_ISSUER|DEFER_TASKRUN", b));
    let mut b = IoUring::builder();
    b.setup_coop_taskrun().setup_taskrun_flag();
    attempts.push(("COOP_TASKRUN|TASKRUN_FLAG", b));
    attempts.push(("no setup flags", IoUring::builder()));
    let mut last = None;
    for (i, (name, mut b)) in attempts.into_iter().enumerate() {
        match b.setup_cqsize(config.entries * 4).build(config.entries) {
            Ok(ring) => {
                if i > 0 {
                    log::warning(&format!(
                        "client ring: the kernel refused the preferred setup flags ({}); using {name}",
                        last.map_or(String::new(), |e: std::io::Error| e.to_string())
                    ));
                }
                return Ok((ring, name));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

impl Ring {
    /// The connection's owner let go of it (its `RingStream` dropped): what
    /// is queued is still sent, then the socket closes.
    pub(super) fn release(&self, key: usize) {
        let mut st = self.state.borrow_mut();
        let State { conns, bufs, .. } = &mut *st;
        let c = &mut conns[key];
        c.released = true;
        c.reader.clear();
        c.writer.clear();
        for (bid, _, _) in c.input.drain(..) {
            bufs.recycle(bid);
        }
        self.maybe_finish(&mut st, key);
        drop(st);
        self.kick();
    }

    pub fn new(config: RingConfig) -> std::io::Result<Rc<Ring>> {
        let (uring, setup) = build(&config)?;
        let submitter = uring.submitter();
        let enter_fd = register_ring_fd(&uring);
        let fixed_files = match submitter.register_files_sparse(config.fixed_files) {
            Ok(()) => config.fixed_files,
            Err(e) => {
                log::warning(&format!("client ring: no registered files ({e}); using plain fds"));
                0
            }
        };
        let parks_here = setup.contains("TASKRUN_FLAG") && config.sqpoll_ms == 0 && uring.params().is_feature_ext_arg();
        let eventfd = if parks_here {
            None
        } else {
            // SAFETY: eventfd returns a new fd or -1.
            let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if efd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            uring.submitter().register_eventfd(efd)?;
            // SAFETY: a fresh fd we own.
            Some(unsafe { OwnedFd::from_raw_fd(efd) })
        };
        let bufs = BufRing::register(&uring, 0, config.buffers, config.buffer_size)?;
        // Waiting for several needs the bound (IORING_FEAT_MIN_TIMEOUT):
        // without it a park for more than one could wait for ever.
        let gather = Gather::new(if parks_here && uring.params().is_feature_min_timeout() {
            config.gather_bound
        } else {
            Duration::ZERO
        });
        Ok(Rc::new_cyclic(|me| Ring {
            uring,
            state: RefCell::new(State {
                conns: Slab::new(),
                listeners: Slab::new(),
                dirty: Vec::new(),
                preparing: Vec::new(),
                bufs,
                accepted: Vec::new(),
                fresh: Vec::with_capacity(LOOK_AHEAD),
                stopping: false,
            }),
            config,
            eventfd,
            enter_fd,
            parks_here,
            wake_armed: [Cell::new(false), Cell::new(false)],
            busy: Cell::new(false),
            flush_due: Cell::new(false),
            taskrun_stale: Cell::new(false),
            gather,
            fixed_files,
            setup,
            kicked: Cell::new(false),
            driver: RefCell::new(WakeSlot::default()),
            on_accept: RefCell::new(None),
            on_turn: RefCell::new(None),
            on_input: RefCell::new(None),
            tasks: Rc::default(),
            running: tasks::Tasks::default(),
            me: me.clone(),
        }))
    }

    /// Runs `future` as one of this ring's tasks, polled by its driver
    /// (`tasks.rs`) rather than scheduled by glommio.
    pub fn spawn(&self, future: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>) {
        self.tasks.spawn(future);
    }

    /// What each accepted connection is handed to (`stream::on_accept`
    /// wraps it in its `RingStream`).
    pub(super) fn set_on_accept(&self, f: OnAccept) {
        *self.on_accept.borrow_mut() = Some(f);
    }

    /// Called after every busy turn (`true`) and before waiting (`false`).
    pub fn on_turn(&self, f: impl Fn(bool) + 'static) {
        *self.on_turn.borrow_mut() = Some(Box::new(f));
    }

    /// Called when one reap received input on two or more connections,
    /// with the first bytes of each (up to `LOOK_AHEAD`), before the
    /// connections run: a look at what they are about to ask for
    /// (`prefetch::received`). The ring's state is borrowed meanwhile:
    /// the hook must not call back into the ring.
    pub fn on_input(&self, f: impl Fn(&[&[u8]]) + 'static) {
        *self.on_input.borrow_mut() = Some(Box::new(f));
    }

    fn tell_turn(&self, busy: bool) {
        if let Some(f) = self.on_turn.borrow().as_ref() {
            f(busy);
        }
    }

    /// Accepts on `fd` (a listening socket the ring now owns), multishot;
    /// the listener's key for [`Ring::unlisten`].
    pub fn listen(&self, fd: OwnedFd, tag: usize) -> usize {
        let mut st = self.state.borrow_mut();
        let index = st.listeners.vacant_key();
        self.push(
            opcode::AcceptMulti::new(types::Fd(fd.as_raw_fd()))
                .flags(libc::SOCK_CLOEXEC)
                .build()
                .user_data(user_data(ACCEPT, index)),
        );
        st.listeners.insert(Listener { fd, tag, armed: true, retired: false });
        drop(st);
        // Submitted at the driver's next turn or park.
        self.kick();
        index
    }

    /// Stops accepting on listener `key` (CONFIG SET port/bind): out of
    /// LISTEN at once (connections still in its queue are reset, as when
    /// Redis closes a listener), closed when its accept completes; the
    /// connections it accepted go on.
    pub fn unlisten(&self, key: usize) {
        let mut st = self.state.borrow_mut();
        let Some(l) = st.listeners.get_mut(key) else { return };
        l.retired = true;
        // SAFETY: the listener's own open fd; its pending accept completes.
        unsafe { libc::shutdown(l.fd.as_raw_fd(), libc::SHUT_RDWR) };
        drop(st);
        self.kick();
    }

    /// Stops accepting; the driver returns once every connection is gone.
    pub fn stop(&self) {
        let mut st = self.state.borrow_mut();
        st.stopping = true;
        for (_, l) in &st.listeners {
            // SAFETY: the listener's own open fd: out of LISTEN at once,
            // and its pending accept completes.
            unsafe { libc::shutdown(l.fd.as_raw_fd(), libc::SHUT_RDWR) };
        }
        drop(st);
        self.kick();
    }

    pub fn connections(&self) -> usize {
        self.state.borrow().conns.len()
    }

    /// Each open connection's state, for a test that finds one left open.
    #[cfg(test)]
    pub fn describe_connections(&self) -> String {
        let st = self.state.borrow();
        let flag = |name: &str, on: bool| if on { format!(" {name}") } else { String::new() };
        st.conns
            .iter()
            .map(|(k, c)| {
                format!(
                    "{k}:{}{}{}{}{}{}{}{} queued {} input {}\n",
                    flag("released", c.released),
                    flag("eof", c.eof),
                    flag("recv_armed", c.recv_armed),
                    flag("starved", c.starved),
                    flag("cancelling", c.cancelling),
                    flag("send_inflight", c.send_inflight),
                    flag("failed", c.failed),
                    flag("dirty", c.dirty),
                    c.queued.len(),
                    c.input.len()
                )
            })
            .collect()
    }

    fn push(&self, sqe: squeue::Entry) {
        // SAFETY: single-threaded; every buffer an entry points to lives in
        // a `Conn` (or `State`) until the entry's completion is reaped.
        unsafe {
            let mut sq = self.uring.submission_shared();
            while sq.push(&sqe).is_err() {
                sq.sync();
                drop(sq);
                let _ = self.uring.submitter().submit();
                sq = self.uring.submission_shared();
            }
        }
    }

    fn kick(&self) {
        self.kicked.set(true);
        self.driver.borrow_mut().wake();
    }

    fn target(&self, key: usize, fd: RawFd, fixed: bool) -> Target {
        if fixed {
            Target::Fixed(types::Fixed(key as u32))
        } else {
            Target::Fd(types::Fd(fd))
        }
    }

    fn arm_recv(&self, key: usize, c: &mut Conn, group: u16) {
        let e = match self.target(key, c.fd, c.fixed) {
            Target::Fixed(f) => opcode::RecvMulti::new(f, group).build(),
            Target::Fd(f) => opcode::RecvMulti::new(f, group).build(),
        };
        self.push(e.user_data(user_data(RECV, key)));
        c.recv_armed = true;
        c.starved = false;
    }

    fn arm_send(&self, key: usize, c: &mut Conn) {
        let rest = &c.sending[c.sent..];
        let (ptr, len) = (rest.as_ptr(), rest.len() as u32);
        let e = match self.target(key, c.fd, c.fixed) {
            Target::Fixed(f) => opcode::Send::new(f, ptr, len).flags(libc::MSG_NOSIGNAL).build(),
            Target::Fd(f) => opcode::Send::new(f, ptr, len).flags(libc::MSG_NOSIGNAL).build(),
        };
        self.push(e.user_data(user_data(SEND, key)));
        c.send_inflight = true;
    }

    /// Marks `key` for the next turn's submissions (and asks for that turn).
    fn mark(&self, st: &mut State, key: usize) {
        self.kicked.set(true);
        if let Some(c) = st.conns.get_mut(key) {
            if !c.dirty {
                c.dirty = true;
                st.dirty.push(key);
            }
        }
    }

    /// Queues this turn's sends and receive re-arms.
    fn prepare(&self, st: &mut State) {
        let State { conns, dirty, preparing, bufs, .. } = st;
        let group = bufs.group();
        let have_buffers = bufs.lent < bufs.count() as u32;
        std::mem::swap(dirty, preparing);
        for key in preparing.drain(..) {
            let Some(c) = conns.get_mut(key) else { continue };
            c.dirty = false;
            if !c.send_inflight && !c.queued.is_empty() && !c.failed {
                std::mem::swap(&mut c.queued, &mut c.sending);
                c.sent = 0;
                self.arm_send(key, c);
            }
            if !c.recv_armed && !c.eof && !c.released {
                if c.starved && !have_buffers {
                    // Still nothing to receive into: when a buffer returns.
                    c.dirty = true;
                    dirty.push(key);
                } else {
                    self.arm_recv(key, c, group);
                }
            }
        }
    }

    /// One turn: submit what is queued, run the kernel's deferred work and
    /// reap every completion. Returns the completions handled.
    /// Parking here, a turn enters the kernel only when completions wait
    /// in it or the last turn was busy; otherwise what it queued goes with
    /// the park's one `io_uring_enter`. After a park, what the park posted
    /// is handled before what arrived since (`left_in_kernel`): the first
    /// replies then leave while their clients are still awake, where
    /// collecting every request first sent them to clients that had gone
    /// to sleep, and each such reply paid the wake-up (an IPI) of its
    /// client's CPU (bench/RESULTS.md, "The first reply first").
    fn turn(&self) -> usize {
        self.prepare(&mut self.state.borrow_mut());
        // SAFETY: only this thread touches the completion queue.
        let posted = || !unsafe { self.uring.completion_shared() }.is_empty();
        if self.parks_here && !self.busy.get() && (!self.kernel_has_completions() || posted()) {
            return self.reap();
        }
        self.enter();
        let mut n = self.reap();
        // SAFETY: flags read only.
        if n == 0 && self.parks_here && unsafe { self.uring.submission_shared() }.taskrun() {
            // IORING_SQ_TASKRUN set, yet an enter with min_complete 0 posted
            // nothing: the kernel (6.18) runs at most a batch of deferred
            // work per enter and can leave the rest, flag set, to a wait.
            // One completion asked for with a zero timeout runs it; skipping
            // this, a burst of large requests left every connection
            // unanswered while the driver spun on the flag. `taskrun_stale`
            // keeps a flag with nothing behind it from spinning the driver.
            warn_enter(self.enter_fd.enter(0, 1, IORING_ENTER_GETEVENTS, Some(Duration::ZERO), None));
            n = self.reap();
            self.taskrun_stale.set(n == 0);
        } else if n > 0 {
            self.taskrun_stale.set(false);
        }
        n
    }

    /// Completions wait in the kernel (flagged when `parks_here`).
    fn kernel_has_completions(&self) -> bool {
        // SAFETY: only this thread touches the submission queue.
        let sq = unsafe { self.uring.submission_shared() };
        (sq.taskrun() && !self.taskrun_stale.get()) || sq.cq_overflow()
    }

    /// Completions wait in the kernel or the completion queue.
    fn has_completions(&self) -> bool {
        // SAFETY: only this thread touches the completion queue.
        self.kernel_has_completions() || !unsafe { self.uring.completion_shared() }.is_empty()
    }

    /// Submits what is queued and runs the kernel's deferred work, without
    /// waiting.
    fn enter(&self) {
        // GETEVENTS with min_complete 0 never blocks; it runs the deferred
        // task work that posts completions (DEFER_TASKRUN).
        let entered = if self.config.sqpoll_ms > 0 {
            self.uring.submitter().submit()
        } else {
            // SAFETY: only this thread touches the submission queue.
            let pending = unsafe { self.uring.submission_shared().len() } as u32;
            self.enter_fd.enter(pending, 0, IORING_ENTER_GETEVENTS, None, None)
        };
        warn_enter(entered);
    }

    /// The driver, if it waits for work, is woken: returns 1 if it was.
    fn wake_driver(&self) -> usize {
        usize::from(self.driver.borrow_mut().wake())
    }

    fn reap(&self) -> usize {
        let mut handled = 0;
        let mut st = self.state.borrow_mut();
        // SAFETY: only this thread touches the completion queue.
        let cq = unsafe { self.uring.completion_shared() };
        for cqe in cq {
            handled += 1;
            let (data, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            let key = (data >> 8) as usize;
            match data & 0xff {
                ACCEPT => self.accepted(&mut st, key, res, flags),
                RECV => self.received(&mut st, key, res, flags),
                SEND => self.sent(&mut st, key, res),
                WAKE => {
                    if let Some(armed) = self.wake_armed.get(key) {
                        armed.set(false);
                    }
                }
                _ => {}
            }
        }
        if st.fresh.len() >= 2 {
            if let Some(f) = self.on_input.borrow().as_ref() {
                let mut inputs: [&[u8]; LOOK_AHEAD] = [&[]; LOOK_AHEAD];
                for (slot, &(bid, len)) in inputs.iter_mut().zip(&st.fresh) {
                    *slot = st.bufs.bytes(bid, len as usize);
                }
                f(&inputs[..st.fresh.len()]);
            }
        }
        st.fresh.clear();
        // Buffers recycled here (a closed or released connection's input)
        // do not pass `RingStream::poll_read`'s kick: a receive starved of
        // them gets its turn now, not at some unrelated later traffic.
        if !st.dirty.is_empty() && st.bufs.lent < st.bufs.count() as u32 {
            self.kicked.set(true);
        }
        let accepted = std::mem::take(&mut st.accepted);
        drop(st);
        if !accepted.is_empty() {
            let on_accept = self.on_accept.borrow();
            let me = self.me.upgrade().expect("the ring is alive while it drives");
            for (key, tag) in accepted {
                match on_accept.as_ref() {
                    Some(f) => f(me.clone(), key, tag),
                    None => me.release(key),
                }
            }
        }
        handled
    }

    fn accepted(&self, st: &mut State, index: usize, res: i32, flags: u32) {
        let more = cqueue::more(flags);
        if res >= 0 {
            let fd = res;
            if st.stopping {
                // SAFETY: a new connected socket nobody else knows of.
                unsafe { libc::close(fd) };
            } else {
                let key = st.conns.vacant_key();
                let fixed = (key as u32) < self.fixed_files
                    && self.uring.submitter().register_files_update(key as u32, &[fd]).is_ok();
                let mut c = Conn {
                    fd,
                    fixed,
                    input: VecDeque::new(),
                    eof: false,
                    recv_armed: false,
                    starved: false,
                    gather_epoch: 0,
                    reader: WakeSlot::default(),
                    queued: Vec::new(),
                    sending: Vec::new(),
                    sent: 0,
                    send_inflight: false,
                    failed: false,
                    writer: WakeSlot::default(),
                    released: false,
                    dirty: false,
                    cancelling: false,
                };
                self.arm_recv(key, &mut c, st.bufs.group());
                st.conns.insert(Box::new(c));
                let tag = st.listeners.get(index).map_or(0, |l| l.tag);
                st.accepted.push((key, tag));
            }
            if !more {
                self.accept_ended(st, index);
            }
            return;
        }
        let Some(l) = st.listeners.get(index) else { return };
        if st.stopping || l.retired {
            // Shut down on purpose: its accept ends here.
        } else if fd_shed::exhausted(-res) {
            fd_shed::shed(l.fd.as_raw_fd(), &std::io::Error::from_raw_os_error(-res));
        } else if res != -libc::ECANCELED {
            log::warning(&format!("Accepting client connection: {}", std::io::Error::from_raw_os_error(-res)));
        }
        if !more {
            self.accept_ended(st, index);
        }
    }

    /// Listener `index`'s multishot accept ended: armed again, unless the
    /// ring stops or the listener was retired (then it is closed).
    fn accept_ended(&self, st: &mut State, index: usize) {
        let Some(l) = st.listeners.get_mut(index) else { return };
        l.armed = false;
        if l.retired {
            // Its last completion: the socket closes with it.
            st.listeners.remove(index);
        } else if !st.stopping {
            l.armed = true;
            self.push(
                opcode::AcceptMulti::new(types::Fd(l.fd.as_raw_fd()))
                    .flags(libc::SOCK_CLOEXEC)
                    .build()
                    .user_data(user_data(ACCEPT, index)),
            );
        }
    }

    fn received(&self, st: &mut State, key: usize, res: i32, flags: u32) {
        let more = cqueue::more(flags);
        let bid = cqueue::buffer_select(flags);
        if bid.is_some() {
            st.bufs.lent += 1;
        }
        let Some(c) = st.conns.get_mut(key) else {
            if let Some(bid) = bid {
                st.bufs.recycle(bid);
            }
            return;
        };
        if !more {
            c.recv_armed = false;
        }
        match (res, bid) {
            (n, Some(bid)) if n > 0 => {
                if c.released {
                    st.bufs.recycle(bid);
                } else {
                    self.gather.received(&mut c.gather_epoch);
                    c.input.push_back((bid, 0, n as u32));
                    if st.fresh.len() < LOOK_AHEAD {
                        st.fresh.push((bid, n as u32));
                    }
                }
            }
            (n, None) if n > 0 => {}
            (0, _) => c.eof = true,
            (e, _) if e == -libc::ENOBUFS => c.starved = true,
            _ => c.eof = true,
        }
        c.reader.wake();
        if !c.recv_armed && !c.eof && !c.released {
            self.mark(st, key);
        }
        self.maybe_finish(st, key);
    }

    fn sent(&self, st: &mut State, key: usize, res: i32) {
        let Some(c) = st.conns.get_mut(key) else { return };
        c.send_inflight = false;
        if res < 0 {
            // The peer is gone, and its receive may never tell: after a
            // reset that failed a send, the multishot receive was seen to
            // stay armed with no completion (`connections_closing_mid_batch
            // _are_reaped`: a connection left open in 2 of 10 runs), the
            // connection's task waiting on it for ever. Its reader gets the
            // input left and then the end, as Redis frees a client whose
            // write fails.
            c.failed = true;
            c.eof = true;
            c.reader.wake();
            c.queued.clear();
            c.sending.clear();
            c.sent = 0;
        } else {
            c.sent += res as usize;
            if c.sent < c.sending.len() {
                // A short write: the rest goes now.
                self.arm_send(key, c);
                return;
            }
            c.sending.clear();
            c.sent = 0;
            // A large buffer is not kept by a connection that has
            // nothing more to send.
            if c.sending.capacity() > self.config.write_high_water
                || (c.queued.is_empty() && c.sending.capacity() > IDLE_SEND_BUFFER)
            {
                c.sending = Vec::new();
            }
            if !c.queued.is_empty() {
                self.mark(st, key);
            }
        }
        if let Some(c) = st.conns.get_mut(key) {
            c.writer.wake();
        }
        self.maybe_finish(st, key);
    }

    /// A released connection whose output is out (or undeliverable): cancel
    /// its receive; once nothing is in flight, close it and free the slot.
    fn maybe_finish(&self, st: &mut State, key: usize) {
        let Some(c) = st.conns.get_mut(key) else { return };
        if !c.released || c.send_inflight || (!c.queued.is_empty() && !c.failed) {
            return;
        }
        if c.recv_armed {
            if std::mem::replace(&mut c.cancelling, true) {
                return;
            }
            self.push(opcode::AsyncCancel::new(user_data(RECV, key)).build().user_data(user_data(IGNORED, key)));
            return;
        }
        let c = st.conns.remove(key);
        for (bid, _, _) in c.input {
            st.bufs.recycle(bid);
        }
        if c.fixed {
            let _ = self.uring.submitter().register_files_update(key as u32, &[-1]);
        }
        // SAFETY: the connection's own fd; nothing in flight uses it.
        unsafe { libc::close(c.fd) };
    }

    fn finished(&self) -> bool {
        let st = self.state.borrow();
        st.stopping && st.conns.is_empty() && st.listeners.iter().all(|(_, l)| !l.armed)
    }

    /// One turn and the connections its input woke; returns whether
    /// another must follow at once (the driver is busy).
    fn pass(&self) -> bool {
        self.kicked.set(false);
        self.turn();
        if self.tasks.has_work() {
            // The connections this turn's input woke run now, inside the
            // driver, sharing one turn clock.
            self.tell_turn(true);
            self.running.run(&self.tasks);
        }
        // Another turn at once only when there is more to do: completions
        // that woke connections bring them back through a kick when they
        // have written; the rest needs nothing more.
        // SAFETY: only this thread touches the submission queue.
        let sq = unsafe { self.uring.submission_shared() };
        // Completions the CQ had no room for wait in the kernel's overflow
        // list until the next enter: nothing signals the eventfd for them,
        // so a park here would strand them (a send's completion among them
        // leaves that connection's replies queued). Entries still queued go
        // with the park when it is ours.
        let (unsubmitted, overflowed) = (!sq.is_empty() && !self.parks_here, sq.cq_overflow());
        drop(sq);
        // Work the kernel holds (a turn after a park left it there) is the
        // next turn's, not a park's: that turn's enter runs it with this
        // one's sends.
        let left_in_kernel = self.parks_here && self.kernel_has_completions();
        let busy = unsubmitted || overflowed || left_in_kernel || self.kicked.get() || self.tasks.has_work();
        self.busy.set(busy);
        busy
    }

    /// What a park woke to, handled where it woke, as the driver would
    /// (its waits are off meanwhile, so nothing here wakes its glommio
    /// task): a request on an idle shard then costs no trip through
    /// glommio's loop, its wake-up of the driver and its next park's
    /// polls. Returns whether the park goes on: the driver is idle, and
    /// glommio has nothing to do (no task runnable, no timer set or I/O
    /// queued since `since`, no completion on its rings). Otherwise the
    /// driver, if still busy, is woken to go on.
    fn serve_parked(&self, since: u64) -> bool {
        self.driver.borrow_mut().cancel();
        self.tasks.cancel_wait();
        let glommio_has_work = || !self.wake_armed.iter().all(Cell::get) || glommio::park_hook::wanted(since);
        let mut turns = 0;
        let busy = loop {
            turns += 1;
            if !self.pass() {
                break false;
            }
            if turns == TURNS_PER_REACTOR_POLL || glommio_has_work() {
                break true;
            }
        };
        self.driver.borrow_mut().resume();
        self.tasks.resume_wait();
        if busy || self.finished() {
            self.kicked.set(true);
            self.wake_driver();
            return false;
        }
        // The driver waits: the turn clock must not outlive the park.
        self.tell_turn(false);
        !glommio_has_work()
    }

    /// Serves this ring's connections from inside a long synchronous run on
    /// this thread, as Redis's processEventsWhileBlocked does for a busy
    /// script: what was queued goes out, input comes in, the connections it
    /// woke run (the task running the caller is skipped: it is polled
    /// further up the stack), and their replies go out. A few passes at
    /// most, as Redis's four iterations; it never waits.
    pub fn serve_while_blocked(&self) {
        for _ in 0..4 {
            self.prepare(&mut self.state.borrow_mut());
            self.enter();
            let reaped = self.reap();
            let woken = self.tasks.has_work();
            if woken {
                self.running.run(&self.tasks);
            }
            if reaped == 0 && !woken {
                break;
            }
        }
        self.prepare(&mut self.state.borrow_mut());
        self.enter();
    }

    /// The driver: runs turns while there is work and waits when there is
    /// none, the executor parking in this ring (or, without `parks_here`,
    /// on its eventfd). Returns after [`Ring::stop`] once everything is
    /// reaped.
    pub async fn drive(self: Rc<Self>) {
        let _hook = self.parks_here.then(|| ParkHere::install(self.clone()));
        let own_waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        let _registered = self.tasks.register(&own_waker);
        // Declared after the registration, so dropped first: a task's drop
        // that wakes another still finds its ring.
        let _tasks = DropTasks(&self.running);
        let mut readiness = self.eventfd.as_ref().map(|fd| glommio::net::ReadReadiness::new(fd.as_raw_fd()));
        let mut busy_turns = 0u32;
        loop {
            let busy = self.pass();
            if self.finished() && self.running.is_empty() && !self.tasks.has_work() {
                return;
            }
            if busy {
                self.tell_turn(true);
                busy_turns += 1;
                if busy_turns.is_multiple_of(TURNS_PER_REACTOR_POLL) {
                    glommio::executor().yield_task_queue_now().await;
                } else if glommio::executor().others_runnable() {
                    futures_lite::future::yield_now().await;
                }
                // Else a yield would only bring the driver straight back
                // through glommio's queue: the next turn starts now.
                continue;
            }
            // Wait for a kick (woken connections run first) or completions,
            // which the park (or the eventfd) reports. The turn clock goes
            // first: it must not outlive a park.
            self.tell_turn(false);
            let signalled = std::future::poll_fn(|cx| {
                if self.kicked.get() || self.tasks.has_work() || (self.parks_here && self.has_completions()) {
                    return Poll::Ready(false);
                }
                self.driver.borrow_mut().wait(cx);
                self.tasks.wait(cx);
                match readiness.as_mut() {
                    Some(r) => r.poll_ready(cx).map(|()| true),
                    None => Poll::Pending,
                }
            })
            .await;
            self.driver.borrow_mut().cancel();
            self.tasks.cancel_wait();
            if let (true, Some(fd)) = (signalled, &self.eventfd) {
                // Reset the eventfd before the next turn's enter drains the
                // kernel's work: with DEFER_TASKRUN it is signalled only when
                // that work list goes from empty to not empty, so a reset
                // after the enter could swallow the one signal of work added
                // since.
                let mut count = 0u64;
                // SAFETY: reads 8 bytes into `count` from our eventfd.
                unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
            }
        }
    }
}

/// This thread's executor parks in the ring while the driver runs.
struct ParkHere;

impl ParkHere {
    fn install(ring: Rc<Ring>) -> ParkHere {
        glommio::park_hook::set_park_hook(Some(ring));
        ParkHere
    }
}

impl Drop for ParkHere {
    fn drop(&mut self) {
        glommio::park_hook::set_park_hook(None);
    }
}

impl glommio::park_hook::ParkHook for Ring {
    fn poll(&self) -> usize {
        if self.has_completions() {
            self.wake_driver()
        } else {
            0
        }
    }

    /// Entries queued before the executor's previous poll are submitted:
    /// ones queued since usually go with the park that follows, and a
    /// busy executor that never parks delays them by one poll at most.
    fn flush(&self) {
        // SAFETY: only this thread touches the submission queue.
        let queued = !unsafe { self.uring.submission_shared() }.is_empty();
        if queued && self.flush_due.replace(true) {
            self.enter();
            self.flush_due.set(false);
        } else if !queued {
            self.flush_due.set(false);
        }
    }

    /// Waits in the kernel (`wait_parked`) and serves what comes there
    /// itself (`serve_parked`), as long as the driver and glommio have
    /// nothing else to do and glommio's next timer is not due.
    fn park(&self, timeout: Option<Duration>, wake_fds: [RawFd; 2]) {
        let since = glommio::park_hook::activity();
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut timeout = timeout;
        loop {
            self.wait_parked(timeout, wake_fds);
            if !self.has_completions() {
                // The timeout (a glommio timer is due) or a signal.
                return;
            }
            if !self.serve_parked(since) {
                return;
            }
            if let Some(deadline) = deadline {
                match deadline.checked_duration_since(std::time::Instant::now()) {
                    Some(left) if !left.is_zero() => timeout = Some(left),
                    _ => return,
                }
            }
        }
    }
}

impl Ring {
    /// One `io_uring_enter`: submits what the turns queued and waits for a
    /// completion; glommio's rings reach it through one-shot polls on
    /// their fds (a remote wake-up completes the latency ring's eventfd
    /// read).
    fn wait_parked(&self, timeout: Option<Duration>, wake_fds: [RawFd; 2]) {
        for (i, fd) in wake_fds.into_iter().enumerate() {
            if !self.wake_armed[i].replace(true) {
                self.push(
                    opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build().user_data(user_data(WAKE, i)),
                );
            }
        }
        self.flush_due.set(false);
        let (want, bound) = if self.has_completions() { (0, None) } else { self.gather.want() };
        // A wait bounded for more than one always has a timeout: what a
        // bound without one does is the kernel's to decide.
        let timeout = if bound.is_some() { Some(timeout.unwrap_or(GATHERING_TIMEOUT)) } else { timeout };
        // SAFETY: only this thread touches the submission queue.
        let pending = unsafe { self.uring.submission_shared().len() } as u32;
        // The clock is read only when the count may move.
        let started = (want > 0 && self.gather.is_on()).then(std::time::Instant::now);
        warn_enter(self.enter_fd.enter(pending, want, IORING_ENTER_GETEVENTS, timeout, bound));
        if let Some(started) = started {
            // SAFETY: only this thread touches the completion queue.
            let found = unsafe { self.uring.completion_shared() }.len();
            self.gather.woke(want, found, started.elapsed());
        }
    }
}

/// Drops the driver's tasks when the driver ends (they hold the ring).
struct DropTasks<'a>(&'a tasks::Tasks);

impl Drop for DropTasks<'_> {
    fn drop(&mut self) {
        self.0.drop_all();
    }
}

fn warn_enter(entered: std::io::Result<usize>) {
    if let Err(e) = entered {
        if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::ETIME)) {
            log::warning(&format!("client ring: io_uring_enter: {e}"));
        }
    }
}

/// The timeout of a park waiting for several completions when glommio
/// gave it none (a timer-less park): it ends the wait once idle.
const GATHERING_TIMEOUT: Duration = Duration::from_secs(1);

const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_ENTER_EXT_ARG: u32 = 1 << 3;
const IORING_ENTER_REGISTERED_RING: u32 = 1 << 4;
const IORING_REGISTER_RING_FDS: libc::c_uint = 20;

/// The ring as `io_uring_enter` names it. The io-uring crate keeps a
/// registered ring fd in one `Submitter` value, and `IoUring::submitter()`
/// makes a new one each time, so its registration never reached an enter:
/// every turn paid the kernel's fd lookup (`fget`/`fput`) instead.
#[derive(Clone, Copy)]
enum EnterFd {
    Registered(u32),
    Plain(RawFd),
}

impl EnterFd {
    /// `io_uring_enter(2)`; a `timeout` bounds the wait for `min_complete`
    /// (`IORING_ENTER_EXT_ARG`, 5.11: the kernel answers ETIME), and after
    /// `min_wait` (with a timeout; 6.12) one completion is enough.
    fn enter(
        self,
        to_submit: u32,
        min_complete: u32,
        flags: u32,
        timeout: Option<Duration>,
        min_wait: Option<Duration>,
    ) -> std::io::Result<usize> {
        let (fd, mut flags) = match self {
            EnterFd::Registered(index) => (index as libc::c_long, flags | IORING_ENTER_REGISTERED_RING),
            EnterFd::Plain(fd) => (fd as libc::c_long, flags),
        };
        // `struct io_uring_getevents_arg` and `__kernel_timespec`.
        #[repr(C)]
        struct GeteventsArg {
            sigmask: u64,
            sigmask_sz: u32,
            min_wait_usec: u32,
            ts: u64,
        }
        let ts: [i64; 2];
        let arg;
        let (argp, argsz) = match timeout {
            Some(d) => {
                ts = [d.as_secs() as i64, i64::from(d.subsec_nanos())];
                let min_wait_usec = min_wait.map_or(0, |w| w.as_micros().clamp(1, u32::MAX.into()) as u32);
                arg = GeteventsArg { sigmask: 0, sigmask_sz: 0, min_wait_usec, ts: ts.as_ptr() as u64 };
                flags |= IORING_ENTER_EXT_ARG;
                (&arg as *const GeteventsArg as *const u8, std::mem::size_of::<GeteventsArg>())
            }
            None => (std::ptr::null(), 0),
        };
        // SAFETY: io_uring_enter(2) reads `arg` and `ts` (alive until it
        // returns) and nothing else of ours.
        let r = unsafe { libc::syscall(libc::SYS_io_uring_enter, fd, to_submit, min_complete, flags, argp, argsz) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

/// Registers the ring's fd (`IORING_REGISTER_RING_FDS`, Linux 5.18) so
/// `io_uring_enter` skips the fd lookup; the plain fd where the kernel
/// refuses.
fn register_ring_fd(uring: &IoUring) -> EnterFd {
    #[repr(C)]
    struct RsrcUpdate {
        offset: u32,
        resv: u32,
        data: u64,
    }
    let fd = uring.as_raw_fd();
    let mut update = RsrcUpdate { offset: u32::MAX, resv: 0, data: fd as u64 };
    // SAFETY: registers one ring fd, described by `update`, which the kernel
    // fills with the index it chose.
    let r = unsafe {
        libc::syscall(libc::SYS_io_uring_register, fd, IORING_REGISTER_RING_FDS, &mut update as *mut RsrcUpdate, 1)
    };
    if r == 1 {
        EnterFd::Registered(update.offset)
    } else {
        EnterFd::Plain(fd)
    }
}

enum Target {
    Fixed(types::Fixed),
    Fd(types::Fd),
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.state.borrow().bufs.unregister(&self.uring);
    }
}
