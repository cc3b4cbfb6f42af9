//! [`Runner`]: binds a [`JobMachine`], a [`BatchStore`] and a [`Fetch`].

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use rota_core::machine::{
    Completion, Dispatch, ERR_CLOSED, ERR_INTERNAL, ERR_INTERRUPTED, ERR_NOT_ADMITTED,
    ERR_NOT_STORED, Event, JobKey, KeyHasher, MachineConfig, Outcome, Store, Terminal,
};
use rota_core::{
    Admission, BatchStore, Caller, CallerClass, Caps, Clock, Config, FetchError, Hooks, JobMachine,
    JobOutcome, JobStatus, JobView, NewJob, Options, StoreError, SubmitError, SystemClock, Target,
    TargetRow, TargetWrite, idem_key,
};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Fetch;
use crate::callers::Callers;
use crate::catch::{CatchUnwind, Panicked, catching};
use crate::guarded::Guarded;
use crate::housekeeping::{Busy, Housekeeping};

/// The answer to a submit.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The job's id.
    pub id: String,
    /// Whether an existing job was returned (idempotency) rather than a new one stored.
    pub reused: bool,
}

/// A running batch job runner: a cheap, cloneable handle (`Send + Sync`).
///
/// Dropping every handle without [`close`](Runner::close) cancels the fetches' token, as
/// `close` does, and stops the workers after their in-flight targets are stored; jobs still
/// live stay live in the store until the next [`start`](Runner::start) fails them
/// `interrupted`. Until those targets are stored the workers hold the store: a file store
/// dropped with it stays open (another open of its file fails `InUse`) until a fetch that
/// does not heed the token returns. There is nothing to await for that: call `close` to know
/// when the runner is done with the store.
///
/// **Dropping a call's future** (a timeout, a client gone away) loses no write: `close` goes
/// on in a task of its own; so do a `submit` whose store writes did not finish in one poll
/// (a job the store took is always registered and run, never left `queued` unrun) and a
/// `cancel` whose store did not write `cancelled` in one poll. (The bundled stores finish
/// every call in one poll, so their calls cannot be dropped midway.) The tasks are spawned on
/// the runtime the runner started on, so this holds too for calls polled by another executor.
///
/// **When `close` returns**, no write of a worker, a submit or a cancel is under way or left
/// to come: close waits for its workers, then for the submits and cancels already writing (a
/// submit that the closing runner refuses to register fails its stored job `runner closed`),
/// and then makes its own writes. (A `touch` is not waited for. A close called from inside a
/// fetch returns at once: it cannot wait for that fetch; see [`close`](Runner::close).)
///
/// **A store call that panics** (when called, while its future runs, or when that future or
/// the panic's value is dropped) is a [`StoreError`] (`<operation>: the store panicked`) to
/// the runner, handled as a failed call: no panic of the store's reaches a worker, which it
/// would end, or a caller (unless built with `panic = "abort"`, or a destructor panics while a
/// panic unwinds: Rust aborts then). A call that answered and whose future then panics when
/// dropped keeps its answer. The runner goes on using the store. The panic's value is never
/// logged or stored.
///
/// **A clock that panics** (`Config::clock`) is logged (at warn the first time, then at debug),
/// without its value (the process's panic hook still prints it), and the system's time is used
/// for that read: no worker ends and no call fails for it.
///
/// The runner's workers are tokio tasks: [`start`](Runner::start) needs a tokio runtime with
/// timers.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
    _guard: Arc<DropGuard>,
}

struct DropGuard(CancellationToken);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

struct Inner {
    store: Arc<dyn BatchStore>,
    fetch: Arc<dyn Fetch>,
    cfg: Config,
    caps: Caps,
    epoch: Instant,
    state: Mutex<State>,
    wake: Notify,
    /// Told when a job leaves [`State::registering`], if a cancel waits for one.
    registered: Notify,
    /// Cancels waiting for a registration: counted (under the state lock) before they let go
    /// of the lock to wait, so a registration after that sees them.
    awaiting_registration: AtomicUsize,
    /// Workers between arming `wake` and waking from it: a change that may give them work
    /// notifies only while this is not 0 (see [`Inner::wake_idle`]).
    idle: AtomicUsize,
    /// How many jobs [`State::cancelled_in_flight`] holds.
    cancelled_in_flight: AtomicUsize,
    /// The evicts and sweeps under way, which a cancel of a job with a target in flight waits
    /// for before it writes `cancelled` (see [`Inner::evict`]).
    housekeeping: Housekeeping,
    cancel: CancellationToken,
    closing: AtomicBool,
    /// The clock has panicked: later panics are logged at debug (see [`unix_now`]).
    clock_warned: AtomicBool,
    closed: Arc<watch::Sender<bool>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Terminal statuses whose store write failed (an error, not a refusal): written again
    /// before each submit, after each stored target and at close, so that a job the machine
    /// has ended does not stay live in the store, holding its caller's caps, until the next
    /// start. `unsettled_any` tells, without the lock, whether there are any.
    unsettled: Mutex<UnsettledList>,
    unsettled_any: AtomicBool,
    /// The runtime the runner started on: `close`, and a submit or cancel whose store call
    /// did not finish in one poll, go on in tasks spawned here (from any thread).
    rt: tokio::runtime::Handle,
    /// Submits and cancels writing to the store now (see [`Inner::op`]): close waits for
    /// them before its last writes, so none lands after close returns.
    ops: Arc<watch::Sender<usize>>,
}

/// A submit or cancel under way, counted in [`Inner::ops`] until dropped.
struct Op(Arc<watch::Sender<usize>>);

impl Drop for Op {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A submit's job id in [`State::registering`]: taken out by the registration, or when this
/// is dropped (the admit came to nothing, or its future was dropped unpolled), and then the
/// cancels waiting for it are told.
struct Registering {
    inner: Arc<Inner>,
    key: u64,
    /// The registration took the id out.
    done: bool,
}

impl Registering {
    /// Puts the id in, under the lock that counts the submit (`st`).
    fn new(inner: &Arc<Inner>, st: &mut State, id: &str) -> Registering {
        let key = registering_key(id).unwrap_or_default();
        *st.registering.entry(key).or_default() += 1;
        Registering {
            inner: inner.clone(),
            key,
            done: false,
        }
    }

    /// Takes the id out, under the lock that registers the job (`st`).
    fn registered(&mut self, st: &mut State) {
        if !self.done {
            Self::take_out(st, self.key);
            self.done = true;
        }
    }

    fn take_out(st: &mut State, key: u64) {
        if let Some(n) = st.registering.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.registering.remove(&key);
            }
        }
    }

    /// Tells the cancels waiting for a registration (if any) that one is over.
    fn tell(inner: &Inner) {
        if inner.awaiting_registration.load(Ordering::SeqCst) > 0 {
            inner.registered.notify_waiters();
        }
    }
}

impl Drop for Registering {
    fn drop(&mut self) {
        if !self.done {
            Self::take_out(&mut self.inner.lock(), self.key);
        }
        Registering::tell(&self.inner);
    }
}

/// A cancel waiting for a registration, counted in [`Inner::awaiting_registration`] until
/// dropped.
struct Awaiting<'a>(&'a AtomicUsize);

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Now in unix seconds, by `clock`. A clock that panics is the embedder's bug, not a reason to
/// end a worker (or fail a call): the panic is caught and the system clock answers instead.
/// The first panic of a runner's clock (start's read included) is logged at warn, later ones at
/// debug (`warned`), all without the panic's value (the process's panic hook still prints it).
fn unix_now(clock: &dyn Clock, warned: &AtomicBool) -> i64 {
    catching(|| clock.now_unix()).unwrap_or_else(|Panicked| {
        if warned.swap(true, Ordering::Relaxed) {
            debug!("the clock panicked: the system clock answers instead");
        } else {
            warn!("the clock panicked: the system clock answers instead (later panics of it are logged at debug)");
        }
        SystemClock.now_unix()
    })
}

tokio::task_local! {
    /// In a worker task, the [`Inner::address`] of the runner it works for: a close called
    /// from inside a worker (by a fetch) cannot wait for it.
    static WORKER_OF: usize;
}

/// Tells close's waiters that close is over, when dropped (see [`Inner::close_now`]).
struct ToldClosed(Arc<watch::Sender<bool>>);

impl Drop for ToldClosed {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// A status write to make again (see [`Inner::settle`]).
#[derive(Clone)]
struct Unsettled {
    id: String,
    status: JobStatus,
    error: String,
}

/// The status writes to make again, in the order their first tries failed, each with a number
/// of its own (a write leaves the list only once made, by whichever settle made it).
#[derive(Default)]
struct UnsettledList {
    writes: Vec<(u64, Unsettled)>,
    next: u64,
}

/// A status write in hand: if it is still here when dropped (it failed, or it was not made
/// because the future making it was dropped), it goes on the runner's list to make again.
struct Kept<'a> {
    inner: &'a Inner,
    due: Option<Unsettled>,
}

impl Drop for Kept<'_> {
    fn drop(&mut self) {
        let Some(w) = self.due.take() else {
            return;
        };
        let mut u = lock(&self.inner.unsettled);
        let n = u.next;
        u.next += 1;
        u.writes.push((n, w));
        self.inner.unsettled_any.store(true, Ordering::SeqCst);
    }
}

struct State {
    machine: JobMachine,
    callers: Callers,
    /// The live jobs an outcome of which the store failed to take: they must not end `done`
    /// or `partial` in the store, which would then show a job ended whole with targets that
    /// never got their outcome.
    lost: HashSet<JobKey, BuildHasherDefault<KeyHasher>>,
    /// The ids of the jobs that submits are admitting, from before the store call until the job
    /// is registered in the machine (or the admit came to nothing): the store may hold such a
    /// job, and give its id to another submit of the same targets (`Reused`), before the
    /// machine knows it. A cancel of one waits for its registration (see [`Runner::cancel`]).
    /// Keyed by [`registering_key`], with how many submits hold the key.
    registering: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    /// The cancelled jobs whose target in flight is not yet stored: terminal in the store, so
    /// evictable, but that target "finishes and is stored" (SPEC §5). An evict waits until
    /// none is left but the job whose target was just stored (see [`Inner::evict`]).
    /// Mirrored in [`Inner::cancelled_in_flight`] for a look without the lock.
    cancelled_in_flight: HashSet<JobKey, BuildHasherDefault<KeyHasher>>,
    /// An evict, and a sweep, put off for a job in `cancelled_in_flight`: made once none is
    /// left there (see [`State::owed`]).
    evict_owed: bool,
    sweep_owed: bool,
}

impl State {
    /// Forgets job `key`'s caller, lost outcomes and cancelled target in flight: the machine
    /// let go of it.
    fn let_go(&mut self, inner: &Inner, key: JobKey) {
        self.callers.remove(key);
        self.lost.remove(&key);
        if self.cancelled_in_flight.remove(&key) {
            inner
                .cancelled_in_flight
                .store(self.cancelled_in_flight.len(), Ordering::SeqCst);
            // A cancel waiting to write may now.
            inner.housekeeping.wake();
        }
    }

    /// The evict and the sweep put off for cancelled jobs' targets in flight, now that none is
    /// left, to be made by the caller: (evict, sweep).
    fn owed(&mut self) -> (bool, bool) {
        if !self.cancelled_in_flight.is_empty() {
            return (false, false);
        }
        (
            std::mem::take(&mut self.evict_owed),
            std::mem::take(&mut self.sweep_owed),
        )
    }
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// Recovers the store (every queued or running job it holds becomes `failed` with error
    /// `interrupted`), then starts `cfg.workers` workers on the current tokio runtime. Outside
    /// a runtime, or on one built without timers (the workers sleep on a timer until a busy
    /// target is due again), it fails with `StoreError::Backend` ("starting the runner's
    /// workers: …"). tokio tells a runtime without timers only by panicking where a timer is
    /// made: that panic is caught here, but the process's panic hook still reports it, and a
    /// build with `panic = "abort"` aborts instead of getting the error.
    ///
    /// One runner per store: a runner started on a store another runner still uses fails
    /// that runner's live jobs under it (the file stores keep a second process out; within
    /// one process nothing does).
    pub async fn start(
        store: Arc<dyn BatchStore>,
        fetch: impl Fetch,
        cfg: Config,
    ) -> Result<Runner, StoreError> {
        let cfg = cfg.normalized();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| StoreError::backend("starting the runner's workers", e))?;
        // A worker sleeps until a busy target's retry is due: on a runtime without timers that
        // sleep would panic, so such a runtime is refused here. (tokio tells only by panicking
        // where the timer is missing; the panic is caught.)
        let timers = {
            let _in = runtime.enter();
            catching(|| drop(tokio::time::sleep(Duration::ZERO))).is_ok()
        };
        if !timers {
            return Err(StoreError::backend(
                "starting the runner's workers",
                std::io::Error::other(
                    "the tokio runtime has no timers: build it with enable_time or enable_all",
                ),
            ));
        }
        let clock_warned = AtomicBool::new(false);
        let recovered = Guarded(&*store)
            .recover(ERR_INTERRUPTED, unix_now(&*cfg.clock, &clock_warned))
            .await?;
        if recovered > 0 {
            info!(jobs = recovered, "failed the jobs left live as interrupted");
        }
        let caps = Caps {
            targets_per_job: cfg.targets_per_job,
            jobs_per_caller: cfg.jobs_per_caller,
            jobs_total: cfg.jobs_total,
            ttl_secs: cfg.ttl_secs(),
        };
        let inner = Arc::new(Inner {
            store,
            fetch: Arc::new(fetch),
            caps,
            epoch: Instant::now(),
            state: Mutex::new(State {
                machine: JobMachine::new(MachineConfig::from(&cfg)),
                callers: Callers::default(),
                lost: HashSet::default(),
                registering: HashMap::default(),
                cancelled_in_flight: HashSet::default(),
                evict_owed: false,
                sweep_owed: false,
            }),
            wake: Notify::new(),
            registered: Notify::new(),
            awaiting_registration: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            cancelled_in_flight: AtomicUsize::new(0),
            housekeeping: Housekeeping::new(cfg.workers),
            cancel: CancellationToken::new(),
            closing: AtomicBool::new(false),
            clock_warned,
            closed: Arc::new(watch::Sender::new(false)),
            workers: Mutex::new(Vec::new()),
            unsettled: Mutex::new(UnsettledList::default()),
            unsettled_any: AtomicBool::new(false),
            rt: runtime.clone(),
            ops: Arc::new(watch::Sender::new(0)),
            cfg,
        });
        let handles: Vec<JoinHandle<()>> = (0..inner.cfg.workers)
            .map(|n| {
                let of = inner.address();
                runtime.spawn(WORKER_OF.scope(of, worker(inner.clone(), n)))
            })
            .collect();
        *lock(&inner.workers) = handles;
        debug!(workers = inner.cfg.workers, "runner started");
        Ok(Runner {
            _guard: Arc::new(DropGuard(inner.cancel.clone())),
            inner,
        })
    }

    /// Submits a job of `targets` for `caller` (SPEC §3): reuses a job of the same caller and
    /// targets while it is reusable, else checks the caps and stores a new job `queued` before
    /// returning. The caller is kept in memory for the fetch, never stored.
    ///
    /// If the store answers the admit with a backend error, the submit fails with it, and the
    /// runner tries once to set the job `failed` ([`machine::ERR_NOT_ADMITTED`](rota_core::machine::ERR_NOT_ADMITTED))
    /// in case the store wrote it before it failed.
    ///
    /// With a store that answers in one poll (the bundled ones), a submit ends in one poll: a
    /// caller that drops it unfinished has made no job. Called from a task, a submit that wakes
    /// an idle worker lets another of the runtime's threads take that worker, so that it starts
    /// at once rather than when the calling task next yields.
    pub async fn submit(
        &self,
        caller: Caller,
        class: CallerClass,
        targets: Vec<Target>,
    ) -> Result<Submitted, SubmitError> {
        self.submit_with(caller, class, targets, Reuse::Allowed)
            .await
    }

    /// [`submit`](Self::submit) without its reuse (SPEC §3 step 2): a new job even if the store
    /// holds a reusable one of the same caller and targets, so that they are fetched again. The
    /// caps apply as to any new job; `reused` is `false`. The older job is kept (until `ttl`,
    /// as any), and a later [`submit`](Self::submit) of the same targets reuses the newest
    /// reusable job, which is this one once it is created, unless the older was created in the
    /// same second: the stores order those by id, and ids are random.
    pub async fn submit_fresh(
        &self,
        caller: Caller,
        class: CallerClass,
        targets: Vec<Target>,
    ) -> Result<Submitted, SubmitError> {
        self.submit_with(caller, class, targets, Reuse::Refused)
            .await
    }

    async fn submit_with(
        &self,
        caller: Caller,
        class: CallerClass,
        targets: Vec<Target>,
        reuse: Reuse,
    ) -> Result<Submitted, SubmitError> {
        let inner = &*self.inner;
        if targets.is_empty() {
            return Err(SubmitError::NoTargets);
        }
        if inner.closing.load(Ordering::SeqCst) {
            return Err(SubmitError::Store(StoreError::Closed));
        }
        let idem_key = idem_key(&caller.name, &targets);
        // The URLs move into the rows: the targets are not needed after the key.
        let rows = targets
            .into_iter()
            .map(|t| {
                let options = t.options.to_json();
                (t.url, options)
            })
            .collect();
        let now = inner.now_unix();
        let job = NewJob {
            id: new_id(),
            caller: caller.name.clone(),
            class,
            idem_key,
            targets: rows,
            now,
        };
        // Counted from here until the job is registered (or failed, if close came first), so
        // that close waits for this submit's writes.
        let (op, registering) = {
            let mut st = inner.lock();
            if st.machine.is_closed() {
                return Err(SubmitError::Store(StoreError::Closed));
            }
            let registering = Registering::new(&self.inner, &mut st, &job.id);
            (inner.op(&st), registering)
        };
        // The writes (the settle, the admit and what follows it) run to the end even if this
        // future is dropped (a caller that gave up): a job the store took is then always
        // registered to run, so it never stays `queued` unrun, holding its caller's cap. A
        // store that answers in one poll (the bundled ones) runs here; one that suspends goes
        // on in a task of its own (which close, waiting for it, never waits on a caller that
        // stopped polling).
        let admitting = self.inner.clone().admit(job, caller, registering, reuse);
        let admitting = async move {
            let r = admitting.await;
            drop(op);
            r
        };
        match inner.to_the_end(admitting).await {
            Ok(Ok(Admitted { submitted, woke })) => {
                if woke && tokio::task::try_id().is_some() {
                    // Else the worker waits for the calling task to yield, which a loop of
                    // submits on the bundled stores never does.
                    hand_on_woken_workers();
                }
                Ok(submitted)
            }
            Ok(Err(e)) => Err(e),
            Err(e) => {
                // Not the error's text: a panic's would carry its value.
                warn!(panicked = e.is_panic(), "a submit's admit ended abnormally");
                Err(SubmitError::Store(StoreError::backend(
                    "submitting",
                    std::io::Error::other("the admit task ended abnormally"),
                )))
            }
        }
    }

    /// Cancels the live job `id`: it is `cancelled` in the store at once (should the store fail
    /// that write, the runner makes it again before the next submit, after each stored target and
    /// at close); its in-flight target, if any, finishes and is stored; no further target starts. A
    /// job with its target in flight is written `cancelled` only once no evict or sweep is under
    /// way (one that began before the cancel could delete the job, terminal then, under that
    /// target), or once that target is stored; later ones are put off while a cancelled job has its
    /// target in flight, and the cancel makes one more evict after its write (the one after that
    /// target's store may have come before it). (A target is in flight from when a worker takes it,
    /// before its `running` is written: one whose write is being made as the cancel comes is still
    /// fetched.) `false` for an unknown id or a job that is already terminal, to the runner: once a
    /// close has begun, every job with no target in flight is ended (to be written `failed`,
    /// `runner closed`, when the fetches in flight have returned), so a cancel of one answers
    /// `false` while the store still shows it live. A job whose submit is still registering it to
    /// run (the store holds it, and may have given its id to another submit of the same targets as
    /// reused) is waited for, then cancelled; or `false` if that submit fails or the runner closes
    /// meanwhile (the job then ends `failed` in the store).
    pub async fn cancel(&self, id: &str) -> bool {
        let inner = &*self.inner;
        let cancelled = loop {
            // Armed before the look, so that a registration after it is not missed.
            let registered = inner.registered.notified();
            tokio::pin!(registered);
            registered.as_mut().enable();
            let _awaiting = {
                let mut st = inner.lock();
                let key = st.machine.job_key(id);
                if key.is_none()
                    && registering_key(id).is_some_and(|k| st.registering.contains_key(&k))
                {
                    // The store holds the job and a submit is registering it to run (another
                    // submit may have had its id back as reused): not an unknown id. Once it
                    // is registered, it is cancelled as any live job.
                    debug!(job = %id, "cancel waits for the job's registration");
                    inner.awaiting_registration.fetch_add(1, Ordering::SeqCst);
                    Awaiting(&inner.awaiting_registration)
                } else {
                    let c = st.machine.cancel(id, inner.mono());
                    if let (Some(c), Some(key)) = (&c, key) {
                        if c.inflight {
                            st.cancelled_in_flight.insert(key);
                            inner
                                .cancelled_in_flight
                                .store(st.cancelled_in_flight.len(), Ordering::SeqCst);
                        } else {
                            st.let_go(inner, key);
                        }
                    }
                    inner.drain(&mut st);
                    // Counted under the lock that cancelled the job (so the machine was
                    // open), so a close waits for the write below.
                    break c.map(|c| (c, key, inner.op(&st)));
                }
            };
            registered.await;
        };
        let Some((c, key, op)) = cancelled else {
            return false;
        };
        // Reported and woken for before the store write, so that both happen even if this
        // future is dropped during it (the write itself is then kept and made again).
        debug!(job = %id, inflight = c.inflight, "job cancelled");
        inner.hook(|h| {
            h.job(JobOutcome::Cancelled);
            h.job_seconds(c.elapsed);
        });
        inner.wake_idle();
        // The write, like a submit's admit, goes on in a task of its own if the store does not
        // make it in one poll, so that close, which waits for it, never waits on a caller
        // that stopped polling. (A failed write is kept and made again, see `set_status`.)
        let writing = {
            let inner = self.inner.clone();
            let id = id.to_owned();
            async move {
                if c.inflight {
                    // An evict or sweep that looked before the job was counted as cancelled
                    // with a target in flight would delete it once `cancelled`: it ends first,
                    // unless that target is stored first.
                    let out = || key.is_none_or(|k| !inner.lock().cancelled_in_flight.contains(&k));
                    inner.housekeeping.quiet(out).await;
                }
                inner.set_status(&id, JobStatus::Cancelled, "").await;
                if c.inflight {
                    // The evict after that target was stored may have come before this write
                    // made the job terminal, and kept it: one more, as that evict would have
                    // been (put off, if the target is still in flight).
                    inner
                        .evict_marked(inner.housekeeping.other(), None, &id)
                        .await;
                }
                // The runner (and so the store) let go of before close is told.
                drop(inner);
                drop(op);
            }
        };
        if let Err(e) = inner.to_the_end(writing).await {
            // Not the error's text: a panic's would carry its value.
            warn!(job = %id, panicked = e.is_panic(), "a cancel's status write ended abnormally");
        }
        true
    }

    /// The stored job `id` and its targets (results decoded), or `None`. Writes nothing. One
    /// read of the store ([`BatchStore::view`]): the job's counts agree with its targets even
    /// while a worker stores them.
    pub async fn status(&self, id: &str) -> Result<Option<JobView>, StoreError> {
        let Some((job, targets)) = self.inner.store().view(id).await? else {
            return Ok(None);
        };
        Ok(Some(JobView {
            job: job.to_job(),
            targets: targets.iter().map(TargetRow::to_status).collect(),
        }))
    }

    /// Sets job `id`'s lease to now: its TTL counts from here. The embedding API calls it after
    /// an owner's read.
    pub async fn touch(&self, id: &str) {
        let now = self.inner.now_unix();
        match self.inner.store().touch(id, now).await {
            Ok(true) => {}
            Ok(false) => debug!(job = %shown_id(id), "touch: no such job"),
            Err(e) => warn!(job = %shown_id(id), error = %e, "store: touch failed"),
        }
    }

    /// Stops the runner: no target starts any more, the fetch token is cancelled, the in-flight
    /// fetches return and their outcomes are stored, then every job still live is `failed` with
    /// error `runner closed`; returns once the submits and cancels writing when it began have
    /// written too. Idempotent: a second call waits for the first to finish.
    ///
    /// **From inside a fetch** (or anything else a worker runs), close cannot wait for the
    /// fetch that called it, which is still in flight: it begins the close (or finds it begun)
    /// and returns at once, without waiting. The close goes on, cancelling the fetch token;
    /// it ends, as above, once that fetch has returned and its outcome is stored. (A fetch
    /// that waits for a close made elsewhere, say by a task it awaits, still waits for
    /// itself: a close waits for every in-flight fetch.)
    pub async fn close(&self) {
        let inner = &self.inner;
        let mut rx = inner.closed.subscribe();
        let in_worker = inner.in_worker();
        // Begun here, before anything else runs: no target starts after this line, even on
        // this thread (a fetch calling close may return without yielding). A close that finds
        // one begun finds the machine closed and the token cancelled too.
        if let Some(ended) = inner.begin_close() {
            // Closes' waiters are told even if the task below is dropped before it ends, or
            // before it first runs (its runtime shutting down).
            let told = ToldClosed(inner.closed.clone());
            // The rest runs in a task of its own, so that a caller dropping its close does not
            // stop it.
            let closing = inner.rt.spawn(inner.clone().close_now(ended, told));
            let closed = inner.closed.clone();
            let ended_well = async move {
                if let Err(e) = closing.await {
                    // Not the error's text: a panic's would carry its value. (Or a runtime shut
                    // down before the close ran.) Told closed all the same (the task's own
                    // `told` did so as it dropped): a later close must not wait for ever.
                    warn!(
                        panicked = e.is_panic(),
                        "closing the runner ended abnormally"
                    );
                    closed.send_replace(true);
                }
            };
            if in_worker {
                // Not awaited here: the close waits for this worker.
                debug!("close called from a worker: not waiting for it");
                drop(inner.rt.spawn(ended_well));
                return;
            }
            ended_well.await;
        }
        if !in_worker {
            let _ = rx.wait_for(|done| *done).await;
        }
    }
}

/// One worker: takes the next target the machine dispatches, runs it, and sleeps while nothing
/// is due.
async fn worker(inner: Arc<Inner>, n: usize) {
    // The token this worker's fetches get clones of: a child of the runner's, so cancelled
    // with it, but this worker's own. A token's clone, drop and look each take its lock: on
    // one token shared by the workers, each of them would take the lock's line from the other
    // core several times a target.
    let cancel = inner.cancel.child_token();
    let mut next = inner.next_work(&cancel);
    loop {
        // The fast path: take work without arming a wake-up (a stored target hands over the
        // next one, dispatched under the same lock).
        match next {
            Next::Work(w) => {
                next = inner.run_target(n, w, &cancel).await;
                continue;
            }
            Next::Stop => break,
            Next::Idle(_) => {}
        }
        // Nothing due: arm the wake-up, count this worker idle, then ask again, so that a
        // submit, cancel or stored outcome between the two questions is not lost: its state
        // change either comes before this question (which then sees it) or after, and then its
        // `wake_idle` sees the count (both orders are fixed by the state lock).
        let notified = inner.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        inner.idle.fetch_add(1, Ordering::SeqCst);
        next = inner.next_work(&cancel);
        if let Next::Idle(timeout) = next {
            let deadline = timeout.and_then(|t| retry_deadline(inner.epoch, t));
            tokio::select! {
                () = &mut notified => {}
                () = sleep_until(deadline) => {}
                () = cancel.cancelled() => {}
            }
        }
        inner.idle.fetch_sub(1, Ordering::SeqCst);
        if let Next::Idle(_) = next {
            next = inner.next_work(&cancel);
        }
    }
    debug!(worker = n, "worker stopped");
}

/// Whether a submit may reuse a stored job ([`Runner::submit`]) or not
/// ([`Runner::submit_fresh`]).
#[derive(Debug, Clone, Copy)]
enum Reuse {
    Allowed,
    Refused,
}

/// What a submit's admit produced: the answer, and whether it woke an idle worker.
struct Admitted {
    submitted: Submitted,
    woke: bool,
}

/// Lets another thread take the workers the calling task just woke. Tokio keeps the task last
/// woken from one of its threads in that thread's next-task slot, which other threads may not
/// take, and tells no other thread; a task spawned from the thread takes the slot, and the
/// task it held goes to the thread's queue, which other threads take from, and a parked
/// thread is told. The spawned task does nothing. The caller goes on without yielding: a
/// submit whose store answers in one poll still ends in that poll, so a caller that drops it
/// unfinished has not made a job. (Yielding instead would let the worker run here now, but a
/// submit dropped at that yield would have made a job its caller never hears of.)
fn hand_on_woken_workers() {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        drop(rt.spawn(async {}));
    }
}

/// A dispatched target, ready to run.
struct Work {
    d: Dispatch,
    /// The caller of its job (held since the submit).
    caller: Option<Arc<Caller>>,
    /// The machine's time of the dispatch: the fetch's duration counts from here.
    at: Duration,
}

/// What a worker is to do next.
enum Next {
    /// Fetch this target for this caller.
    Work(Work),
    /// Nothing is due; the machine's next retry time, if any.
    Idle(Option<Duration>),
    /// The runner is closing.
    Stop,
}

/// A retry time this far after the runner's start is never (a `retry_wait` of decades).
const NEVER_AFTER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// When an idle worker is to wake for the machine's next retry time `at` (since `epoch`):
/// `None`, never, for one [`NEVER_AFTER`] or later. (tokio adds up to a millisecond to every
/// deadline without checking for overflow: a deadline that is just representable would panic
/// in the worker's sleep.)
fn retry_deadline(epoch: Instant, at: Duration) -> Option<Instant> {
    if at >= NEVER_AFTER {
        return None;
    }
    epoch.checked_add(at)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// What one fetch produced, ready to store.
struct Fetched {
    outcome: Outcome,
    /// The write for a final outcome (done or failed).
    write: TargetWrite,
    err: Option<FetchError>,
    result_bytes: usize,
}

impl Fetched {
    fn failed(err: FetchError) -> Self {
        let (error, hint) = match &err {
            FetchError::Target(t) => (t.msg.clone(), t.hint.clone()),
            FetchError::RetryLater(s) | FetchError::Other(s) => (s.clone(), String::new()),
        };
        Fetched {
            outcome: Outcome::Failed,
            write: TargetWrite::Failed { error, hint },
            err: Some(err),
            result_bytes: 0,
        }
    }
}

impl Inner {
    /// Makes the status writes still due, admits `job` and, if the store created it,
    /// registers it to run (see [`Runner::submit`]). `registering` holds the job's id in
    /// [`State::registering`] until then.
    async fn admit(
        self: Arc<Self>,
        job: NewJob,
        caller: Caller,
        mut registering: Registering,
        reuse: Reuse,
    ) -> Result<Admitted, SubmitError> {
        let inner = &*self;
        // A job ended by the machine but still live in the store would count against the caps.
        inner.settle().await;
        let caps = match reuse {
            Reuse::Allowed => inner.caps,
            // A reuse window of none: `now - lease < i64::MIN` holds for no job, even one
            // whose lease is later than now (the clock having gone back), and the stores'
            // admits read `ttl_secs` for nothing else.
            Reuse::Refused => Caps {
                ttl_secs: i64::MIN,
                ..inner.caps
            },
        };
        let admission = match inner.store().admit(&job, &caps).await {
            Ok(a) => a,
            Err(e) => {
                if let StoreError::Backend { .. } = e {
                    // The store may have written the job before it failed (a write made but
                    // not acknowledged; a store that panicked after it): the job must not stay
                    // `queued`, never run, holding its caller's caps and handed out as reused.
                    // (Not after a refusal such as a conflict: that id is another job's.) One
                    // try, not kept to make again: a store that keeps failing would make every
                    // failed submit one more write to retry; a job it did store and still
                    // holds live is failed by the next start's recovery.
                    warn!(job = %job.id, error = %e, "store: admit failed; the job is failed in case it was stored");
                    if let Err(e) = inner
                        .write_status(&job.id, JobStatus::Failed, ERR_NOT_ADMITTED)
                        .await
                    {
                        debug!(job = %job.id, error = %e, "store: failing the unadmitted job failed too");
                    }
                }
                return Err(e.into());
            }
        };
        match admission {
            Admission::Reused { id } => {
                debug!(job = %id, "submit reused a job");
                inner.hook(|h| h.job(JobOutcome::Reused));
                Ok(Admitted {
                    submitted: Submitted { id, reused: true },
                    woke: false,
                })
            }
            Admission::TooManyTargets { max, got } => Err(SubmitError::TooManyTargets { max, got }),
            Admission::CallerBusy => Err(SubmitError::CallerBusy),
            Admission::Busy => Err(SubmitError::Busy),
            Admission::Created => {
                let accepted = {
                    let mut st = inner.lock();
                    registering.registered(&mut st);
                    let r = st.machine.submit(&job.id, job.targets.len(), inner.mono());
                    if let Ok(key) = r {
                        st.callers.insert(key, caller);
                        // Under the lock that made the job dispatchable: before any worker
                        // can take it, and so before its terminal outcome is reported.
                        inner.hook(|h| h.job(JobOutcome::Created));
                    }
                    inner.drain(&mut st);
                    r.is_ok()
                };
                // A cancel that waited for the job finds it now (or, closed, finds it gone).
                Registering::tell(inner);
                if !accepted {
                    // Closed between the admit and now: the job must not stay live.
                    inner
                        .set_status(&job.id, JobStatus::Failed, ERR_CLOSED)
                        .await;
                    return Err(SubmitError::Store(StoreError::Closed));
                }
                // The job is dispatchable now: an idle worker need not wait out the sweep.
                let woke = inner.wake_idle();
                debug!(job = %job.id, targets = job.targets.len(), "job created");
                inner.sweep(job.now, Some(&job.id)).await;
                Ok(Admitted {
                    submitted: Submitted {
                        id: job.id,
                        reused: false,
                    },
                    woke,
                })
            }
        }
    }

    /// The start of a close: closes the machine (nothing starts any more; the jobs it ended
    /// are returned, for [`close_now`](Inner::close_now) to fail in the store), cancels the
    /// fetch token and wakes the idle workers, which then stop. `None` if a close had begun:
    /// the machine is closed and the token cancelled all the same when this returns.
    fn begin_close(&self) -> Option<Vec<Terminal>> {
        let Some(ended) = self.close_machine() else {
            // The first close may not have cancelled it yet.
            self.cancel.cancel();
            return None;
        };
        self.cancel.cancel();
        self.wake.notify_waiters();
        Some(ended)
    }

    /// The part of [`begin_close`](Inner::begin_close) under the state lock: marks the close
    /// begun and closes the machine, returning the jobs it ended; `None` if a close had begun.
    fn close_machine(&self) -> Option<Vec<Terminal>> {
        let mut st = self.lock();
        // Marked under the lock that closes the machine, so that a close that finds the mark
        // finds the machine closed.
        if self.closing.swap(true, Ordering::SeqCst) {
            return None;
        }
        let ended = st.machine.close(self.mono());
        self.drain(&mut st);
        Some(ended)
    }

    /// The rest of a close after [`begin_close`](Inner::begin_close), which ended the jobs
    /// `ended`: waits for the workers and the writes under way, fails `ended` in the store,
    /// then tells close's waiters by dropping `told` (also if this is dropped midway, its
    /// runtime shutting down, so that a later close does not wait for ever).
    async fn close_now(self: Arc<Self>, ended: Vec<Terminal>, told: ToldClosed) {
        let inner = &*self;
        let handles = std::mem::take(&mut *lock(&inner.workers));
        for h in handles {
            if let Err(e) = h.await {
                // Not the error's text: a panic's would carry its value.
                warn!(panicked = e.is_panic(), "a worker ended abnormally");
            }
        }
        // The submits and cancels counted before the machine closed make their writes (a
        // submit the closed machine refuses fails its job); none can start now.
        let _ = inner.ops.subscribe().wait_for(|n| *n == 0).await;
        for t in ended {
            inner.set_status(&t.id, JobStatus::Failed, t.error).await;
            inner.report_terminal(&t);
        }
        // One more try for the writes that failed; what still fails is left to the next
        // start's recovery (which fails a live job as `interrupted`).
        inner.settle().await;
        {
            let mut st = inner.lock();
            st.callers.clear();
            st.lost.clear();
        }
        debug!("runner closed");
        // Told only once this task's share of the runner (and so of the store) is dropped, so
        // that a file store is free to reopen when close returns and the handles are gone.
        drop(self);
        drop(told);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Whether the caller runs in one of this runner's worker tasks.
    fn in_worker(&self) -> bool {
        WORKER_OF
            .try_with(|of| *of == self.address())
            .unwrap_or(false)
    }

    /// This runner's address, which marks its worker tasks (see [`WORKER_OF`]).
    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Runs `fut` to its end even if the caller stops polling or drops this future: polled
    /// once here (a store that answers in one poll finishes here, with no task), else it goes
    /// on in a task of its own on the runner's runtime, whose end is awaited. `Err` if that
    /// task ended abnormally (a panic, or the runtime shut down).
    async fn to_the_end<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        let mut fut = Box::pin(fut);
        if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
        {
            return Ok(r);
        }
        self.rt.spawn(fut).await
    }

    /// Counts a submit or cancel under way. Taken under the state lock while the machine is
    /// open: by a submit, which checks; by a cancel, which ends a job the machine has live, and
    /// a closed machine has none (its close moves every live job out of `Live`). So close,
    /// which closes the machine under that lock and later waits for the count to be 0, waits
    /// for every op counted.
    fn op(&self, _st: &State) -> Op {
        self.ops.send_modify(|n| *n += 1);
        Op(self.ops.clone())
    }

    /// The store, each call of which is guarded (see `guarded`): a panic in it is a store error.
    /// Called on the `dyn` store, not through the `Arc<S>` forwarder (one more boxed future a
    /// call).
    fn store(&self) -> Guarded<'_> {
        Guarded(&*self.store)
    }

    /// Asks the machine for the next target to fetch, for the worker whose token is `cancel`.
    fn next_work(&self, cancel: &CancellationToken) -> Next {
        let mut st = self.lock();
        self.dispatch(&mut st, self.mono(), cancel)
    }

    /// The next target to fetch, dispatched at `at` (under the state lock), for the worker
    /// whose token is `cancel` (a child of the runner's: cancelled with it).
    fn dispatch(&self, st: &mut State, at: Duration, cancel: &CancellationToken) -> Next {
        if st.machine.is_closed() || cancel.is_cancelled() {
            return Next::Stop;
        }
        match st.machine.poll_dispatch(at) {
            Some(d) => {
                let caller = st.callers.get(d.key);
                self.drain(st);
                Next::Work(Work { d, caller, at })
            }
            None => Next::Idle(st.machine.poll_timeout()),
        }
    }

    /// Wakes the idle workers, if any, after a change that may give them work (or a nearer
    /// retry time); whether there were any. A worker counts itself idle before its last look at
    /// the state, under the state lock, so a change made under that lock before this call is
    /// never missed.
    fn wake_idle(&self) -> bool {
        let idle = self.idle.load(Ordering::SeqCst) > 0;
        if idle {
            self.wake.notify_waiters();
        }
        idle
    }

    /// Now in unix seconds, by the embedder's clock (see [`unix_now`]).
    fn now_unix(&self) -> i64 {
        unix_now(&*self.cfg.clock, &self.clock_warned)
    }

    /// Monotonic time since the runner started: the machine's clock.
    fn mono(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Reports the machine's depth and in-flight changes, in order, under the state lock so
    /// that the hooks see them in the order they happened.
    fn drain(&self, st: &mut State) {
        while let Some(ev) = st.machine.poll_event() {
            match ev {
                Event::Depth(n) => self.hook(|h| h.depth(n)),
                Event::Inflight(n) => self.hook(|h| h.inflight(n)),
            }
        }
    }

    /// Calls a hook. A hook that panics is the embedder's bug, not a reason to stop a worker or
    /// lose an outcome: the panic is caught (and its value, like a fetch's, never logged).
    fn hook(&self, f: impl FnOnce(&dyn Hooks)) {
        let hooks = &*self.cfg.hooks;
        if catching(|| f(hooks)).is_err() {
            warn!("a metrics hook panicked");
        }
    }

    /// Writes job `id`'s terminal `status`; if the store fails, or this future is dropped
    /// before the write is made (a caller of `cancel` that gave up while a store that suspends
    /// was writing), keeps the write to make again (see [`settle`](Self::settle)).
    async fn set_status(&self, id: &str, status: JobStatus, error: &str) {
        let mut kept = Kept {
            inner: self,
            due: Some(Unsettled {
                id: id.to_owned(),
                status,
                error: error.to_owned(),
            }),
        };
        match self.write_status(id, status, error).await {
            Ok(()) => kept.due = None,
            Err(e) => {
                warn!(job = %id, %status, error = %e, "store: set status failed, to be written again");
            }
        }
    }

    /// One status write: an error only if the store failed (a job missing or already final is
    /// fine: nothing is left to do).
    async fn write_status(
        &self,
        id: &str,
        status: JobStatus,
        error: &str,
    ) -> Result<(), StoreError> {
        let now = self.now_unix();
        if !self.store().set_status(id, status, error, now).await? {
            debug!(job = %id, %status, "status unchanged: job missing or final");
        }
        Ok(())
    }

    /// Makes the status writes that failed again, each once, in order: those that fail again
    /// stay, in order, for the next time, so a write that keeps failing (a job whose row the
    /// store cannot write) holds up none behind it. A store still failing costs one call per
    /// kept write (only jobs the runner ended while the store failed their write are kept).
    /// A write leaves the list only once made: settles at the same time (a worker's after a
    /// stored target, a submit's before its admit) each make every write on the list (a
    /// terminal status written twice is written once: nothing overwrites it), so a submit's
    /// admit never comes before a kept write that another task has begun and not finished. If
    /// this future is dropped midway, the writes not yet made stay too.
    async fn settle(&self) {
        if !self.unsettled_any.load(Ordering::SeqCst) {
            return;
        }
        let due = lock(&self.unsettled).writes.clone();
        for (n, w) in &due {
            if let Err(e) = self.write_status(&w.id, w.status, &w.error).await {
                debug!(job = %w.id, status = %w.status, error = %e, "status write failed again");
            } else {
                debug!(job = %w.id, status = %w.status, "status written again");
                let mut u = lock(&self.unsettled);
                u.writes.retain(|(m, _)| m != n);
                if u.writes.is_empty() {
                    self.unsettled_any.store(false, Ordering::SeqCst);
                }
            }
        }
    }

    fn report_terminal(&self, t: &Terminal) {
        let outcome = match t.status {
            JobStatus::Done => JobOutcome::Done,
            JobStatus::Partial => JobOutcome::Partial,
            JobStatus::Cancelled => JobOutcome::Cancelled,
            JobStatus::Failed | JobStatus::Queued | JobStatus::Running => JobOutcome::Failed,
        };
        info!(job = %t.id, status = %t.status, "job finished");
        self.hook(|h| {
            h.job(outcome);
            h.job_seconds(t.elapsed);
        });
    }

    /// Starts, fetches and stores one dispatched target, then reports it. Returns what the
    /// worker is to do next, asked of the machine as the target is handed back (one lock, one
    /// clock read for both).
    async fn run_target(&self, worker: usize, w: Work, cancel: &CancellationToken) -> Next {
        let Work { d, caller, at } = w;
        let fetched = self.fetch_one(&d, caller, cancel).await;

        let (completion, elapsed) = {
            let mut st = self.lock();
            let now = self.mono();
            let c = st
                .machine
                .handle_outcome(d.key, d.idx, fetched.outcome, now);
            self.drain(&mut st);
            (c, now.saturating_sub(at))
        };
        let Completion { store, terminal } = match completion {
            Ok(c) => c,
            Err(e) => {
                warn!(job = %d.id, idx = d.idx, error = %e, "machine refused an outcome");
                return self.next_work(cancel);
            }
        };
        let write = match store {
            Store::Done | Store::Failed | Store::GiveUp => fetched.write,
            Store::Pending { .. } => TargetWrite::Pending,
        };
        // A job one of whose outcomes the store did not take ends `failed` (below), not as the
        // machine would have it: the last target's write must not end it.
        let lost_before = terminal.is_some() && self.lock().lost.contains(&d.key);
        let finish = terminal
            .as_ref()
            .filter(|t| t.error.is_empty() && !lost_before)
            .map(|t| t.status);
        let now = self.now_unix();
        let stored = match self
            .store()
            .finish_target(&d.id, d.idx, &write, now, finish)
            .await
        {
            Ok(true) => {
                debug!(job = %d.id, idx = d.idx, store = ?store, "target stored");
                true
            }
            Ok(false) => {
                warn!(job = %d.id, idx = d.idx, "store: target missing, outcome not stored");
                false
            }
            Err(e) => {
                warn!(job = %d.id, idx = d.idx, error = %e, "store: storing the target failed");
                false
            }
        };
        // A job an outcome of which the store did not take ends `failed` there, and so in the
        // hooks, rather than whole. It must still end in the store, or it stays live there
        // and holds its caps.
        let terminal = terminal.map(|t| {
            if t.error.is_empty() && (lost_before || !stored) {
                warn!(job = %t.id, status = %t.status, "job ended with an outcome not stored");
                Terminal {
                    status: JobStatus::Failed,
                    error: ERR_NOT_STORED,
                    ..t
                }
            } else {
                t
            }
        });
        match &terminal {
            Some(t) if !t.error.is_empty() => self.set_status(&t.id, t.status, t.error).await,
            Some(_) => {}
            // A busy answer's write (back to pending) lost is not an outcome lost: the target
            // is tried again, and its outcome written then.
            None => {
                if !stored && store.is_final() {
                    self.lock().lost.insert(d.key);
                }
            }
        }

        if store.is_final() {
            self.hook(|h| h.target(fetched.err.as_ref(), elapsed, fetched.result_bytes));
            self.evict(worker, &d).await;
        }
        if let Some(t) = &terminal {
            self.report_terminal(t);
        }
        self.settle().await;

        // Only now, the target's outcome stored and reported, is it out of flight, and the
        // next target dispatched, under the same lock: so a dispatched target always starts at
        // once. (Dispatched before this work, it would wait through hooks and store calls, in
        // which a cancel or a close could come and still not stop it.) With an evict or sweep
        // owed, which are store calls too, the next target is dispatched after them.
        let (closed, next, (evict, sweep)) = {
            let mut st = self.lock();
            let now = self.mono();
            let r = st.machine.handle_stored(d.key, now);
            if !st.machine.contains(d.key) {
                st.let_go(self, d.key);
            }
            let owed = st.owed();
            self.drain(&mut st);
            let next = (owed == (false, false)).then(|| self.dispatch(&mut st, now, cancel));
            (r, next, owed)
        };
        match closed {
            Ok(Some(t)) => {
                // Closed while the outcome was being stored: then `next` is to stop.
                self.set_status(&t.id, t.status, t.error).await;
                self.report_terminal(&t);
            }
            Ok(None) => {}
            Err(e) => {
                warn!(job = %d.id, idx = d.idx, error = %e, "machine refused a stored outcome");
            }
        }
        self.wake_idle();
        if evict {
            self.evict(worker, &d).await;
        }
        if sweep {
            self.sweep(self.now_unix(), None).await;
        }
        match next {
            Some(next) => next,
            None => self.next_work(cancel),
        }
    }

    /// Evicts terminal jobs down to the byte budget, by worker `worker` after target `d` was
    /// stored (SPEC §7); not while a cancelled job other than `d`'s has its target in flight:
    /// that job is terminal, so evictable, but its target "finishes and is stored" (SPEC §5),
    /// which it could not be in a job deleted meanwhile. The evict is then owed, and made once
    /// no such job is left, after the target that was the last one's is stored. Marked under
    /// way in [`Inner::housekeeping`] before its look, so that a cancel counting such a job
    /// meanwhile writes `cancelled` only once this evict is over.
    async fn evict(&self, worker: usize, d: &Dispatch) {
        self.evict_marked(self.housekeeping.evict(worker), Some(d.key), &d.id)
            .await;
    }

    /// An evict marked under way by `_busy`, after a write of job `job` (for the logs), which
    /// waits for the cancelled jobs with a target in flight but `except`'s (see
    /// [`evict`](Self::evict)).
    async fn evict_marked(&self, _busy: Busy<'_>, except: Option<JobKey>, job: &str) {
        if self.cancelled_in_flight.load(Ordering::SeqCst) > 0 {
            let mut st = self.lock();
            let others = st
                .cancelled_in_flight
                .iter()
                .filter(|k| Some(**k) != except)
                .count();
            if others > 0 {
                st.evict_owed = true;
                drop(st);
                debug!(job = %job, jobs = others, "evict waits for a cancelled job's target in flight");
                return;
            }
        }
        match self.store().evict(self.cfg.max_bytes).await {
            Ok(0) => {}
            Ok(n) => debug!(jobs = n, "evicted terminal jobs over the byte budget"),
            Err(e) => warn!(job = %job, error = %e, "store: evict failed"),
        }
    }

    /// Sweeps the jobs whose lease is older than the ttl, as of `now`, after job `created` was
    /// (SPEC §7), or as one put off; not while a cancelled job has its target in flight (its
    /// lease is that of the cancel): owed then, as an evict is (see [`evict`](Self::evict)).
    async fn sweep(&self, now: i64, created: Option<&str>) {
        let _busy = self.housekeeping.other();
        if self.cancelled_in_flight.load(Ordering::SeqCst) > 0 {
            let mut st = self.lock();
            let jobs = st.cancelled_in_flight.len();
            if jobs > 0 {
                st.sweep_owed = true;
                drop(st);
                debug!(jobs, "sweep waits for a cancelled job's target in flight");
                return;
            }
        }
        match self.store().sweep(now, self.cfg.sweep_ttl_secs()).await {
            Ok(0) => {}
            Ok(n) => debug!(jobs = n, "swept expired jobs"),
            Err(e) => match created {
                Some(id) => warn!(job = %id, error = %e, "store: sweep failed"),
                None => warn!(error = %e, "store: sweep put off failed"),
            },
        }
    }

    /// Marks the target running and fetches it, catching a panic; the fetch gets a clone of
    /// `cancel`, its worker's token.
    async fn fetch_one(
        &self,
        d: &Dispatch,
        caller: Option<Arc<Caller>>,
        cancel: &CancellationToken,
    ) -> Fetched {
        let now = self.now_unix();
        let row = match self.store().start_target(&d.id, d.idx, now).await {
            Ok(Some(row)) => row,
            Ok(None) => {
                warn!(job = %d.id, idx = d.idx, "store: target missing, not fetched");
                return Fetched::failed(FetchError::Other("target missing from the store".into()));
            }
            Err(e) => {
                warn!(job = %d.id, idx = d.idx, error = %e, "store: starting the target failed");
                return Fetched::failed(FetchError::Other(format!("store: {e}")));
            }
        };
        if d.first {
            debug!(job = %d.id, "job running");
        }
        let options = match Options::from_json(&row.options) {
            Ok(o) => o,
            Err(e) => {
                warn!(job = %d.id, idx = d.idx, "stored options could not be decoded");
                return Fetched::failed(FetchError::Other(format!("corrupt stored options: {e}")));
            }
        };
        let Some(caller) = caller else {
            warn!(job = %d.id, idx = d.idx, "no caller held for the job");
            return Fetched::failed(FetchError::Other(ERR_INTERNAL.into()));
        };
        let target = Target {
            url: row.url,
            options,
        };
        // A panic is caught both where the fetch makes its future (a `Fetch` written by hand
        // may do work there) and while it is polled.
        // (Through the `dyn Fetch` itself: `self.fetch.fetch` would pick `Arc`'s own impl.)
        let fut = catching(|| (*self.fetch).fetch(caller, target, cancel.clone()));
        let res = match fut {
            Ok(fut) => CatchUnwind::new(fut).await,
            Err(Panicked) => Err(Panicked),
        };
        let res = match res {
            Ok(r) => r,
            Err(Panicked) => {
                warn!(job = %d.id, idx = d.idx, "the fetch panicked");
                Err(FetchError::Other(ERR_INTERNAL.into()))
            }
        };
        match res {
            Ok(result) => match result.to_json() {
                Ok(json) => Fetched {
                    outcome: Outcome::Done,
                    result_bytes: json.len(),
                    write: TargetWrite::Done { result: json },
                    err: None,
                },
                Err(e) => {
                    warn!(job = %d.id, idx = d.idx, "the result could not be encoded");
                    Fetched::failed(FetchError::Other(format!("{ERR_INTERNAL}: {e}")))
                }
            },
            Err(err @ FetchError::RetryLater(_)) => Fetched {
                outcome: Outcome::Busy,
                ..Fetched::failed(err)
            },
            Err(err) => Fetched::failed(err),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic under this lock (in a hook) must not stop the runner: the state is still valid,
    // since every mutation under it completes before any hook runs.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The key of job `id` in [`State::registering`]: the first 16 of its 32 lowercase hex
/// digits, 64 random bits for an id of [`new_id`]'s (two jobs registering at once under one
/// key are counted apart); `None` for an id of any other shape, which is no runner's.
fn registering_key(id: &str) -> Option<u64> {
    if id.len() != 32
        || !id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    id.get(..16).and_then(|h| u64::from_str_radix(h, 16).ok())
}

/// Job `id` as a log line may show it: an id of a job's shape (32 lowercase hex digits) as it
/// is; any other string, which an embedding API may have passed on from its client and might be
/// a URL or a key, only as not being one.
fn shown_id(id: &str) -> &str {
    if registering_key(id).is_some() {
        id
    } else {
        "(not a job id)"
    }
}

/// A new job id: 16 random bytes, lowercase hex.
fn new_id() -> String {
    let mut b = [0u8; 16];
    rand::fill(&mut b);
    rota_core::hex(&b)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;
    use std::time::{Duration, Instant};

    use rota_core::{Caller, CallerClass, Options, Target, TargetResult};
    use rota_store_memory::MemoryStore;
    use tokio_util::sync::CancellationToken;

    use super::{Config, NEVER_AFTER, Runner, retry_deadline};
    use crate::FetchError;

    /// Waits (up to 30 s, then fails) until `cond` holds, looking every millisecond.
    async fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !cond() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "timed out waiting until {what}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A runtime of two threads, for the tests of which thread runs a woken worker.
    fn two_thread_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// A runner of one worker on a memory store, fetching with `fetch`.
    async fn one_worker(fetch: impl crate::Fetch) -> Runner {
        let config = Config {
            workers: 1,
            ..Config::default()
        };
        Runner::start(Arc::new(MemoryStore::new()), fetch, config)
            .await
            .unwrap()
    }

    /// An answer of the tests' fetches.
    fn ok() -> Result<TargetResult, FetchError> {
        Ok(TargetResult {
            content: "ok".into(),
            meta: Default::default(),
        })
    }

    /// A runner of one worker on a memory store whose fetch counts its calls in `fetched` and
    /// answers at once, returned once that worker idles (so that a submit wakes it; a fixed
    /// sleep would let a loaded machine's worker still be on its way there).
    async fn idle_counting_runner(fetched: Arc<AtomicUsize>) -> Runner {
        let runner = one_worker(move |_: Arc<Caller>, _: Target, _: CancellationToken| {
            fetched.fetch_add(1, Ordering::SeqCst);
            async { ok() }
        })
        .await;
        wait_until("the worker idles", || {
            runner.inner.idle.load(Ordering::SeqCst) == 1
        })
        .await;
        runner
    }

    /// Caller `a`'s job of one target.
    fn submit_one(
        runner: &Runner,
    ) -> impl Future<Output = Result<crate::Submitted, rota_core::SubmitError>> + '_ {
        submit_as(runner, "a")
    }

    /// Caller `name`'s job of one target, `https://{name}.test/1`.
    fn submit_as<'a>(
        runner: &'a Runner,
        name: &str,
    ) -> impl Future<Output = Result<crate::Submitted, rota_core::SubmitError>> + 'a {
        runner.submit(
            Caller {
                name: name.into(),
                workspace: name.into(),
                key_sha256: String::new(),
            },
            CallerClass::Fleet,
            vec![Target {
                url: format!("https://{name}.test/1"),
                options: Options::default(),
            }],
        )
    }

    /// A submit whose store answers in one poll ends in that poll, also from a task and waking
    /// an idle worker (handed to the runtime's other thread, not run after a yield of the
    /// caller): a caller that gives it up unfinished (a `select!`) has made no job. The test
    /// sees the woken worker fetch the target.
    #[test]
    fn a_submit_from_a_task_that_wakes_an_idle_worker_ends_in_one_poll() {
        let fetched = Arc::new(AtomicUsize::new(0));
        let first_poll = two_thread_runtime().block_on(async {
            let runner = idle_counting_runner(fetched.clone()).await;
            let submitter = runner.clone();
            let ready = tokio::spawn(async move {
                let mut submit = std::pin::pin!(submit_one(&submitter));
                std::future::poll_fn(|cx| Poll::Ready(submit.as_mut().poll(cx).is_ready())).await
            })
            .await
            .unwrap();
            wait_until("the woken worker fetches", || {
                fetched.load(Ordering::SeqCst) != 0
            })
            .await;
            runner.close().await;
            ready
        });
        assert!(first_poll, "the submit did not end in its first poll");
    }

    /// A worker a submit wakes runs on another thread while the submitting task goes on
    /// holding its own: the submit hands the woken worker on ([`super::hand_on_woken_workers`])
    /// rather than leave it in that thread's next-task slot, which no other thread may take.
    /// Here the submitting task blocks its thread (a caller doing synchronous work after its
    /// submit) until the target is fetched, for at most 30 s; a worker left in the slot would
    /// wait out those 30 s.
    #[test]
    fn a_worker_a_submit_wakes_runs_while_the_submitting_task_keeps_its_thread() {
        let fetched = Arc::new(AtomicUsize::new(0));
        let seen_while_held = two_thread_runtime().block_on(async {
            let runner = idle_counting_runner(fetched.clone()).await;
            let submitter = runner.clone();
            let watched = fetched.clone();
            let seen = tokio::spawn(async move {
                submit_one(&submitter).await.unwrap();
                // Hold this thread, without yielding, until the fetch is seen.
                let deadline = Instant::now() + Duration::from_secs(30);
                while watched.load(Ordering::SeqCst) == 0 {
                    if Instant::now() > deadline {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                true
            })
            .await
            .unwrap();
            runner.close().await;
            seen
        });
        assert!(
            seen_while_held,
            "the woken worker did not fetch while the submitting task held its thread"
        );
    }

    /// A close from inside a fetch that finds a close begun elsewhere returns only with the
    /// fetch token cancelled, even when that close has not cancelled it yet (it does so after
    /// it lets go of the state lock): the fetch, returning at once, then sees it cancelled. The
    /// close begun elsewhere is [`Inner::close_machine`], the first half of
    /// [`Inner::begin_close`] (the mark and the closed machine, not yet the token), made while
    /// the fetch waits; its second half and the rest of the close follow once the fetch's
    /// close has returned.
    #[test]
    fn a_close_inside_a_fetch_that_finds_a_close_begun_cancels_the_token_before_it_returns() {
        use std::sync::OnceLock;
        use std::sync::atomic::{AtomicBool, AtomicU8};

        use super::ToldClosed;

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let handle: Arc<OnceLock<Runner>> = Arc::new(OnceLock::new());
        let go = Arc::new(AtomicBool::new(false));
        let fetched = Arc::new(AtomicUsize::new(0));
        // 0: the fetch's close has not returned; 1: it returned with the token cancelled; 2: not.
        let seen = Arc::new(AtomicU8::new(0));
        let fetch = {
            let (handle, go, fetched, seen) =
                (handle.clone(), go.clone(), fetched.clone(), seen.clone());
            move |_: Arc<Caller>, _: Target, cancel: CancellationToken| {
                fetched.fetch_add(1, Ordering::SeqCst);
                let (handle, go, seen) = (handle.clone(), go.clone(), seen.clone());
                async move {
                    while !go.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    if let Some(runner) = handle.get() {
                        runner.close().await;
                    }
                    let cancelled = cancel.is_cancelled();
                    seen.store(if cancelled { 1 } else { 2 }, Ordering::SeqCst);
                    Ok::<_, FetchError>(TargetResult {
                        content: "ok".into(),
                        meta: Default::default(),
                    })
                }
            }
        };
        let (waiting_seen, waiting_fetched) = (seen.clone(), fetched.clone());
        rt.block_on(async move {
            let (seen, fetched) = (waiting_seen, waiting_fetched);
            let runner = Runner::start(Arc::new(MemoryStore::new()), fetch, Config::default())
                .await
                .unwrap();
            assert!(handle.set(runner.clone()).is_ok());
            let caller = Caller {
                name: "a".into(),
                workspace: "a".into(),
                key_sha256: String::new(),
            };
            let targets = (0..3)
                .map(|i| Target {
                    url: format!("https://a.test/{i}"),
                    options: Options::default(),
                })
                .collect();
            runner
                .submit(caller, CallerClass::Fleet, targets)
                .await
                .unwrap();
            wait_until("a fetch begins", || fetched.load(Ordering::SeqCst) != 0).await;
            // A close begun elsewhere, up to where it lets go of the state lock.
            let inner = runner.inner.clone();
            let ended = inner.close_machine().unwrap();
            assert!(!inner.cancel.is_cancelled());
            go.store(true, Ordering::SeqCst);
            wait_until("the fetch's close returns", || {
                seen.load(Ordering::SeqCst) != 0
            })
            .await;
            // The rest of that close.
            inner.cancel.cancel();
            inner.wake.notify_waiters();
            let told = ToldClosed(inner.closed.clone());
            tokio::spawn(inner.clone().close_now(ended, told))
                .await
                .unwrap();
            runner.close().await;
        });
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "close returned inside the fetch with the fetch token not cancelled"
        );
        assert_eq!(
            fetched.load(Ordering::SeqCst),
            1,
            "nothing starts after the close"
        );
    }

    /// A close called from a worker of another runner is not one from inside a fetch of its
    /// own: it waits, as any close from outside, until its runner's in-flight fetch has
    /// returned. (Each runner marks its worker tasks with its own address.) Runner B's fetch
    /// returns 200 ms after its token is cancelled; runner A's fetch closes B and looks
    /// whether B's fetch has returned.
    #[test]
    fn a_close_from_another_runners_worker_waits_for_the_fetches_in_flight() {
        use std::sync::atomic::{AtomicBool, AtomicU8};

        let b_started = Arc::new(AtomicUsize::new(0));
        let b_returned = Arc::new(AtomicBool::new(false));
        // 0: A's fetch has not looked yet; 1: B's fetch had not returned; 2: it had.
        let seen = Arc::new(AtomicU8::new(0));
        two_thread_runtime().block_on(async {
            let (started, returned) = (b_started.clone(), b_returned.clone());
            let fetch_b = move |_: Arc<Caller>, _: Target, token: CancellationToken| {
                started.fetch_add(1, Ordering::SeqCst);
                let returned = returned.clone();
                async move {
                    token.cancelled().await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    returned.store(true, Ordering::SeqCst);
                    ok()
                }
            };
            let b = one_worker(fetch_b).await;
            submit_one(&b).await.unwrap();
            wait_until("B's fetch starts", || b_started.load(Ordering::SeqCst) == 1).await;

            let (closes, returned, looked) = (b.clone(), b_returned.clone(), seen.clone());
            let fetch_a = move |_: Arc<Caller>, _: Target, _: CancellationToken| {
                let (b, returned, looked) = (closes.clone(), returned.clone(), looked.clone());
                async move {
                    b.close().await;
                    let v = if returned.load(Ordering::SeqCst) {
                        2
                    } else {
                        1
                    };
                    looked.store(v, Ordering::SeqCst);
                    ok()
                }
            };
            let a = one_worker(fetch_a).await;
            submit_one(&a).await.unwrap();
            wait_until("A's fetch looks", || seen.load(Ordering::SeqCst) != 0).await;
            a.close().await;
        });
        assert_eq!(
            seen.load(Ordering::SeqCst),
            2,
            "B's close, called from A's worker, returned before B's fetch had"
        );
    }

    /// A retry time a century or more away is never: no deadline, which tokio would round up
    /// past the largest `Instant`. One under a century away, decades or not, is kept.
    #[test]
    fn a_retry_time_decades_away_is_never() {
        let epoch = tokio::time::Instant::now();
        assert_eq!(
            retry_deadline(epoch, Duration::from_secs(5)),
            Some(epoch + Duration::from_secs(5))
        );
        let years_99 = Duration::from_secs(99 * 365 * 24 * 3600);
        assert_eq!(retry_deadline(epoch, years_99), Some(epoch + years_99));
        assert_eq!(retry_deadline(epoch, NEVER_AFTER), None);
        // Just representable, where tokio's rounding up of the deadline would overflow.
        let near_max = Duration::from_secs(i64::MAX as u64) - Duration::from_secs(3600 * 24 * 365);
        assert_eq!(retry_deadline(epoch, near_max), None);
        assert_eq!(retry_deadline(epoch, Duration::MAX), None);
    }

    /// A runner's `Debug` shows its settings.
    #[test]
    fn a_runners_debug_shows_its_config() {
        two_thread_runtime().block_on(async {
            let runner = idle_counting_runner(Arc::new(AtomicUsize::new(0))).await;
            let shown = format!("{runner:?}");
            assert!(shown.starts_with("Runner {"), "{shown}");
            assert!(shown.contains("workers: 1"), "{shown}");
            runner.close().await;
        });
    }

    /// A job cancelled while none of its targets is in flight lets its caller go at once (no
    /// stored outcome of it is to come, which would); one cancelled with a target in flight,
    /// once that target's outcome is stored. Job X's first target is held in flight (one
    /// worker), job Y waits behind it; Y is cancelled, then X.
    #[test]
    fn a_cancelled_jobs_caller_is_let_go_once_nothing_of_it_is_in_flight() {
        use tokio::sync::Semaphore;

        let gate = Arc::new(Semaphore::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        two_thread_runtime().block_on(async {
            let (held, counted) = (gate.clone(), started.clone());
            let fetch = move |_: Arc<Caller>, _: Target, _: CancellationToken| {
                counted.fetch_add(1, Ordering::SeqCst);
                let held = held.clone();
                async move {
                    drop(held.acquire().await);
                    ok()
                }
            };
            let runner = one_worker(fetch).await;
            let callers = || runner.inner.lock().callers.jobs();
            let x = submit_one(&runner).await.unwrap().id;
            wait_until("X's target is in flight", || {
                started.load(Ordering::SeqCst) == 1
            })
            .await;
            let y = submit_as(&runner, "b").await.unwrap().id;
            assert_eq!(callers(), 2);
            assert!(runner.cancel(&y).await);
            assert_eq!(callers(), 1, "Y's caller is still held after its cancel");
            assert!(runner.cancel(&x).await);
            assert_eq!(callers(), 1, "X's caller let go with its target in flight");
            gate.add_permits(1);
            wait_until("X's outcome is stored", || callers() == 0).await;
            runner.close().await;
        });
    }
}
