//! Reclaim's victim search, compiled.
//!
//! The profile of a steady cycle at 1,000 clusters put 88 % of it in one loop: for each queue head that does not
//! fit, walk every cluster that could make room, taking its preemptible gangs in victim order until the head fits,
//! each gang checked against its queue's and tenant's deserved share. That is millions of dictionary operations a
//! cycle in Python. This is the same walk over arrays built once per cycle (from the gangs a `GangStore` keeps across
//! cycles, or from a snapshot's lists with a `GangMemo`); `federation/scheduling/preemption.py`
//! keeps the Python version, which the differential tests hold this one equal to, decision for decision.
//!
//! Amounts are kept as short sparse lists of (resource index, amount), as the Python keeps dictionaries: a gang asks
//! for two or three resources, and the share checks read only the resources the usage holds, exactly as there.

use std::cmp::Ordering;
use std::ops::Range;
use rustc_hash::FxHashMap as HashMap;

mod shares;
mod sums;
mod order;
mod table;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

const EPSILON: f64 = 1e-9;
const KEPT_WORK: u8 = 1;
const KEPT_SHARE: u8 = 2;
const NO_TENANT: usize = usize::MAX;

type Amounts = Vec<(usize, i64)>;
type Share = Vec<(usize, f64)>;

/// What the walk over a cluster's gangs reads of every gang it passes, apart from the rest (`Victim`): most gangs are
/// passed over, and a walk reading only these from one array in victim order stays in the cache. The walk over
/// 96-byte victims in scattered order waited on memory for a third of its time at 1,000 clusters.
#[derive(Clone, Copy)]
struct Hot {
    priority: i64,
    queue: u32,
    /// Where what it counts against is in the amounts: read for every gang whose share is checked.
    held: u32,
    preempted: bool,
    worth: bool,
}

/// A running gang in the pool, for the gangs a walk chooses.
#[derive(Clone, Copy)]
struct Victim {
    at_risk: f64,
    seq: i64,
    /// The RunningJob object's address: how `preempted` names it (its id string is read only to break a tie in victim
    /// order; touching 145,000 ids' allocations each build was a third of the build at 1,000 clusters).
    gang: usize,
    cluster: usize,
    gpus: i64,
    request: usize,
}

/// A share check's subject: a queue (its index) or a tenant (the number of queues plus its index).
type Key = usize;

struct Usage {
    version: i64,
    amounts: Amounts,
}

/// Resource names, numbered in the order first met.
#[derive(Default)]
struct Numbering {
    numbers: HashMap<String, usize>,
    names: Vec<String>,
}

impl Numbering {
    fn number(&mut self, resource: &str) -> usize {
        if let Some(&n) = self.numbers.get(resource) {
            return n;
        }
        self.numbers.insert(resource.to_owned(), self.names.len());
        self.names.push(resource.to_owned());
        self.names.len() - 1
    }

    /// A dictionary of amounts by resource name, by number.
    fn amounts(&mut self, dict: &Bound<'_, PyDict>) -> PyResult<Amounts> {
        let mut out = Vec::with_capacity(dict.len());
        for (k, v) in dict.iter() {
            let name: String = k.extract()?;
            out.push((self.number(&name), v.extract::<i64>()?));
        }
        Ok(out)
    }
}

/// One running gang as read from its RunningJob object: what it says of itself, not what that costs at a given time.
struct Read {
    /// Held, so that its address stays its own while it is here.
    _gang: Py<PyAny>,
    id: Box<str>,
    queue: Py<PyAny>,
    /// Its request (a dict the gang holds), and that request in the memo's resource numbers.
    request_ptr: usize,
    request: Amounts,
    priority: i64,
    seq: i64,
    started: Option<f64>,
    checkpoint: Option<f64>,
    expected: Option<f64>,
    protected_run: f64,
    preempted_before: bool,
    /// The last build given it.
    seen: u64,
}

/// The running gangs earlier builds read, by object. A RunningJob is immutable and the scheduler keeps each one from
/// cycle to cycle while its job does not change, so a build reads attribute by attribute only the gangs new since
/// the last: reading every gang each cycle was a tenth of a cycle at 1,000 clusters. Gangs not given to a build are
/// let go at its end.
#[pyclass(module = "federation_native")]
#[derive(Default)]
struct GangMemo {
    resources: Numbering,
    gangs: HashMap<usize, Read>,
    build: u64,
}

impl Read {
    /// What `gang` says of itself, its request in `resources`' numbers.
    fn of(gang: &Bound<'_, PyAny>, resources: &mut Numbering) -> PyResult<Read> {
        let py = gang.py();
        let request = gang.getattr(pyo3::intern!(py, "request"))?;
        let amounts = resources.amounts(request.cast::<PyDict>()?)?;
        Ok(Read {
            _gang: gang.clone().unbind(),
            id: gang.getattr(pyo3::intern!(py, "id"))?.extract::<String>()?.into_boxed_str(),
            queue: gang.getattr(pyo3::intern!(py, "queue"))?.unbind(),
            request_ptr: request.as_ptr() as usize,
            request: amounts,
            priority: gang.getattr(pyo3::intern!(py, "priority"))?.extract()?,
            seq: gang.getattr(pyo3::intern!(py, "seq"))?.extract()?,
            started: gang.getattr(pyo3::intern!(py, "started"))?.extract()?,
            checkpoint: gang.getattr(pyo3::intern!(py, "checkpoint"))?.extract()?,
            expected: gang.getattr(pyo3::intern!(py, "expected"))?.extract()?,
            protected_run: gang.getattr(pyo3::intern!(py, "protected_run"))?.extract()?,
            preempted_before: gang.getattr(pyo3::intern!(py, "preempted_before"))?.extract()?,
            seen: 0,
        })
    }
}

#[pymethods]
impl GangMemo {
    #[new]
    fn new() -> Self {
        GangMemo::default()
    }

    /// How many gangs it holds: those given to the last build.
    fn __len__(&self) -> usize {
        self.gangs.len()
    }
}

/// The preemptible gangs of each cluster, read once when they start and dropped when they end, kept across cycles
/// beside the scheduler's running gangs (`running.Running`): a build reads each cluster's gangs from one array here
/// instead of looking every gang up by object (the memo), which at 1,000 clusters was most of the build.
#[pyclass(module = "federation_native")]
#[derive(Default)]
struct GangStore {
    resources: Numbering,
    clusters: HashMap<String, Vec<Read>>,
}

#[pymethods]
impl GangStore {
    #[new]
    fn new() -> Self {
        GangStore::default()
    }

    /// A preemptible gang started in `cluster` (a RunningJob object; one of the same id is discarded first).
    fn add(&mut self, gang: &Bound<'_, PyAny>, cluster: &str) -> PyResult<()> {
        let read = Read::of(gang, &mut self.resources)?;
        self.discard(&read.id, cluster);
        self.clusters.entry(cluster.to_owned()).or_default().push(read);
        Ok(())
    }

    /// The gang of this id left `cluster`; nothing when it is not there.
    fn discard(&mut self, id: &str, cluster: &str) {
        if let Some(gangs) = self.clusters.get_mut(cluster) {
            if let Some(at) = gangs.iter().position(|read| &*read.id == id) {
                gangs.remove(at);
                if gangs.is_empty() {
                    self.clusters.remove(cluster);
                }
            }
        }
    }

    /// How many gangs it holds.
    fn __len__(&self) -> usize {
        self.clusters.values().map(Vec::len).sum()
    }
}

/// One cycle's preemptible gangs per cluster, in victim order, and what reclaim reads about their queues.
#[pyclass(module = "federation_native")]
struct ReclaimPool {
    resources: Numbering,
    table_columns: usize,
    gpu: usize,
    /// Every gang, a cluster's one after the other in victim order; `hot` beside it, one for one.
    victims: Vec<Victim>,
    hot: Vec<Hot>,
    /// Per cluster, where its gangs are in `victims`.
    clusters: Vec<Range<usize>>,
    /// Every gang's request and holds, one after the other in the order read (the searches read them in about that
    /// order): the i-th from `amount_at[i]` to `amount_at[i + 1]`.
    amount_data: Vec<(usize, i64)>,
    amount_at: Vec<usize>,
    /// Gang object address -> where it is in `victims`: made when a cycle first evicts (most cycles evict few).
    by_gang: Option<HashMap<usize, usize>>,
    queue_index: HashMap<String, usize>,
    queue_names: Vec<String>,
    queue_priority: Vec<i64>,
    queue_tenant: Vec<usize>,
    chains: Vec<Vec<usize>>,
    tenant_names: Vec<String>,
    shares: Vec<Option<Share>>,
    usage: Vec<Option<Usage>>,
    /// The cycle's own queues (the first of `queue_names`; gangs of others are never victims).
    known_queues: usize,
    /// [queue][cluster][table column]: what the preemptible gangs not yet evicted hold (`PreemptiblePool`).
    pooled: Vec<i64>,
    /// The last sum over queues asked for, kept up to date: the heads of a cycle ask about nearly the same queues.
    last: Option<(Vec<bool>, Vec<i64>)>,
}

/// An index kept in 32 bits (a pool holds far fewer gangs and queues).
fn small(index: usize) -> PyResult<u32> {
    u32::try_from(index).map_err(|_| PyValueError::new_err("more than 2^32 gangs or queues in one pool"))
}

fn py_max(a: f64, b: f64) -> f64 {
    // Python's max(a, b): the first unless the second is greater.
    if b > a { b } else { a }
}

/// A float as an integer of the same order, with -0.0 and 0.0 equal (as Python's < has them). Work at risk is never
/// NaN (run times and GPU counts are finite); were it, it would sort last.
fn ordered(x: f64) -> u64 {
    if x.is_nan() {
        return u64::MAX;
    }
    let bits = (x + 0.0).to_bits(); // -0.0 + 0.0 is 0.0
    if bits >> 63 == 1 { !bits } else { bits | (1 << 63) }
}

fn py_mod(a: f64, b: f64) -> f64 {
    // Python's float %, whose result takes the divisor's sign.
    let r = a % b;
    if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
        r + b
    } else {
        r
    }
}

/// The `i`-th amounts of `data`, laid one after the other from the starts `at`.
fn span<'a>(data: &'a [(usize, i64)], at: &[usize], i: usize) -> &'a [(usize, i64)] {
    &data[at[i]..at[i + 1]]
}

fn amount(of: &[(usize, i64)], r: usize) -> i64 {
    of.iter().find(|(k, _)| *k == r).map_or(0, |(_, a)| *a)
}

fn share_of(of: &[(usize, f64)], r: usize) -> f64 {
    of.iter().find(|(k, _)| *k == r).map_or(0.0, |(_, a)| *a)
}

/// Whether `usage` less `taken` stays at or above the deserved share: `fairshare.keeps_share`.
fn keeps_share(usage: &[(usize, i64)], share: &[(usize, f64)], taken: &[(usize, i64)]) -> bool {
    for &(r, used) in usage {
        let used = used - amount(taken, r);
        if used <= 0 {
            continue;
        }
        let have = share_of(share, r);
        if have <= EPSILON || used as f64 / have >= 1.0 - EPSILON {
            return true;
        }
    }
    false
}

fn less_than(into: &mut Amounts, taken: &[(usize, i64)]) {
    for &(r, a) in taken {
        match into.iter_mut().find(|(k, _)| *k == r) {
            Some(entry) => entry.1 -= a,
            None => into.push((r, -a)),
        }
    }
}

fn covers(freed: &[i64], request: &[(usize, i64)]) -> bool {
    request.iter().all(|&(r, a)| freed[r] >= a)
}

/// (highest queue priority, work lost, GPUs evicted, gangs): the order choices are compared in, as Python's tuples.
fn compare(a: (i64, f64, i64, usize), b: (i64, f64, i64, usize)) -> Ordering {
    a.0.cmp(&b.0)
        .then(a.1.partial_cmp(&b.1).unwrap_or(Ordering::Equal))
        .then(a.2.cmp(&b.2))
        .then(a.3.cmp(&b.3))
}

impl ReclaimPool {
    fn read_share(&mut self, dict: Option<Bound<'_, PyAny>>) -> PyResult<Share> {
        let mut out = Vec::new();
        if let Some(dict) = dict {
            for (k, v) in dict.cast::<PyDict>()?.iter() {
                let name: String = k.extract()?;
                out.push((self.resources.number(&name), v.extract::<f64>()?));
            }
        }
        Ok(out)
    }

    /// The queue's index, a new one for a queue the cycle does not know: its gangs are never victims, but kept in
    /// their place.
    fn queue_of_name(&mut self, name: &str) -> usize {
        if let Some(&q) = self.queue_index.get(name) {
            return q;
        }
        let q = self.queue_names.len();
        self.queue_index.insert(name.to_owned(), q);
        self.queue_names.push(name.to_owned());
        self.queue_priority.push(0);
        self.queue_tenant.push(NO_TENANT);
        self.chains.push(Vec::new());
        q
    }

    fn name_of(&self, key: Key) -> &str {
        if key < self.queue_names.len() {
            &self.queue_names[key]
        } else {
            &self.tenant_names[key - self.queue_names.len()]
        }
    }
}

/// What one build keeps while it reads gangs: amounts converted once per object, resource and queue numbers mapped.
struct Build<'a, 'py> {
    py: Python<'py>,
    holds: Option<&'a Bound<'py, PyDict>>,
    grace: f64,
    now: f64,
    /// Gangs of one shape share one amounts object: converted once.
    converted: HashMap<usize, usize>,
    /// The reader's resource numbers (the memo's or the store's) -> this pool's.
    remap: Vec<usize>,
    /// A queue's name is most often one string object shared by its gangs: looked up by name once per object.
    queue_of: HashMap<usize, usize>,
}

impl<'a, 'py> Build<'a, 'py> {
    fn new(py: Python<'py>, holds: Option<&'a Bound<'py, PyDict>>, grace: f64, now: f64, total: usize) -> Self {
        let mut converted = HashMap::default();
        converted.reserve(total);
        Build { py, holds, grace, now, converted, remap: Vec::new(), queue_of: HashMap::default() }
    }
}

/// A gang read into a pool, with its id for the last tie of victim order (the reader's, alive for the build).
type Entry = (Victim, Hot, *const str);

/// A search's answer: the cluster's index (-1: none), the gangs to evict there, and why gangs were passed over.
type Found = (i64, Vec<Py<PyAny>>, u8);

impl ReclaimPool {
    fn empty(resources: &[String], gpu: &str, queues: &[(String, i64, String, Vec<String>)]) -> Self {
        let mut pool = ReclaimPool {
            resources: Numbering::default(), table_columns: resources.len(), gpu: 0, victims: Vec::new(),
            hot: Vec::new(), clusters: Vec::new(), amount_data: Vec::new(),
            amount_at: vec![0], by_gang: None, queue_index: HashMap::default(), queue_names: Vec::new(),
            queue_priority: Vec::new(),
            queue_tenant: Vec::new(), chains: Vec::new(), tenant_names: Vec::new(), shares: Vec::new(),
            usage: Vec::new(), known_queues: queues.len(), pooled: Vec::new(), last: None,
        };
        for r in resources {
            pool.resources.number(r);
        }
        pool.gpu = pool.resources.number(gpu);
        let mut tenants: HashMap<String, usize> = HashMap::default();
        for (name, priority, tenant, _) in queues {
            pool.queue_index.insert(name.clone(), pool.queue_names.len());
            pool.queue_names.push(name.clone());
            pool.queue_priority.push(*priority);
            let next = tenants.len();
            let t = *tenants.entry(tenant.clone()).or_insert(next);
            if t == pool.tenant_names.len() {
                pool.tenant_names.push(tenant.clone());
            }
            pool.queue_tenant.push(t);
        }
        for (_, _, _, chain) in queues {
            let chain = chain.iter().filter_map(|q| pool.queue_index.get(q).copied()).collect();
            pool.chains.push(chain);
        }
        pool
    }

    fn reserve(&mut self, total: usize) {
        self.victims.reserve(total);
        self.hot.reserve(total);
        self.amount_at.reserve(total);
        self.amount_data.reserve(2 * total);
    }

    /// One gang as the pool keeps it, at the build's clock; `named`: the numbers its request was read in.
    fn victim(&mut self, build: &mut Build, read: &Read, ptr: usize, named: &Numbering) -> PyResult<Entry> {
        let queue_name = read.queue.bind(build.py);
        let queue = match build.queue_of.get(&(queue_name.as_ptr() as usize)).copied() {
            Some(q) => q,
            None => {
                let q = self.queue_of_name(queue_name.cast::<pyo3::types::PyString>()?.to_str()?);
                build.queue_of.insert(queue_name.as_ptr() as usize, q);
                q
            }
        };
        let request_at = match build.converted.get(&read.request_ptr) {
            Some(&at) => at,
            None => {
                for &(r, a) in &read.request {
                    while build.remap.len() <= r {
                        build.remap.push(self.resources.number(&named.names[build.remap.len()]));
                    }
                    self.amount_data.push((build.remap[r], a));
                }
                self.amount_at.push(self.amount_data.len());
                build.converted.insert(read.request_ptr, self.amount_at.len() - 2);
                self.amount_at.len() - 2
            }
        };
        let held_at = match build.holds {
            Some(holds) => {
                let held = holds.get_item(&*read.id)?
                    .ok_or_else(|| PyValueError::new_err(format!("no holds for {}", read.id)))?;
                let at = held.as_ptr() as usize;
                match build.converted.get(&at) {
                    Some(&found) => found,
                    None => {
                        let amounts = self.resources.amounts(held.cast::<PyDict>()?)?;
                        self.amount_data.extend(amounts);
                        self.amount_at.push(self.amount_data.len());
                        build.converted.insert(at, self.amount_at.len() - 2);
                        self.amount_at.len() - 2
                    }
                }
            }
            None => request_at,
        };
        let gpus = amount(span(&self.amount_data, &self.amount_at, request_at), self.gpu);
        // RunningJob.ran_for, since_checkpoint, at_risk, protected and pays_to_reclaim (forecast.remaining), at this
        // build's clock: what a reader keeps is only what the gang says of itself.
        let now = build.now;
        let ran_for = match read.started {
            Some(s) => py_max(now - s, 0.0),
            None => 0.0,
        };
        let since = match read.checkpoint {
            Some(c) if c != 0.0 => py_mod(ran_for, c),
            _ => ran_for,
        };
        let protected = ran_for < read.protected_run || (read.preempted_before && ran_for < build.grace);
        let pays = match read.expected {
            None => true,
            Some(e) => since < if ran_for < e { e - ran_for } else { ran_for / 2.0 },
        };
        Ok((
            Victim { at_risk: since * gpus as f64, seq: read.seq, gang: ptr, cluster: self.clusters.len(), gpus,
                     request: request_at },
            Hot { priority: read.priority, queue: small(queue)?, held: small(held_at)?, preempted: false,
                  worth: !protected && pays },
            &*read.id as *const str,
        ))
    }

    /// The next cluster's gangs, put in victim order (`Preemptor.victim_order`): of the lowest-priority queue, then
    /// lowest priority, then least work lost, then youngest, then by id. Sorted here: in Python it was a tenth of a
    /// cycle's setup.
    fn push_block(&mut self, block: Vec<Entry>) {
        let queue_priority = &self.queue_priority;
        // Sorted by a key of plain integers beside each gang's place: a comparison reading two priorities through
        // the queue table and moving 90-byte entries was a third of the build at 1,000 clusters. A tie in all four
        // (rare) is broken by id.
        let mut keyed: Vec<(i64, i64, u64, i64, u32)> = block.iter().enumerate().map(|(at, (v, h, _))| {
            (queue_priority[h.queue as usize], h.priority, ordered(v.at_risk), !v.seq, at as u32)
        }).collect();
        keyed.sort_unstable_by(|x, y| {
            (x.0, x.1, x.2, x.3).cmp(&(y.0, y.1, y.2, y.3))
                // SAFETY: each id is a reader's (the memo's or the store's), neither changed while the build runs.
                .then_with(|| unsafe { (*block[x.4 as usize].2).cmp(&*block[y.4 as usize].2) })
        });
        let start = self.victims.len();
        for k in &keyed {
            let (victim, hot, _) = &block[k.4 as usize];
            self.victims.push(*victim);
            self.hot.push(*hot);
        }
        self.clusters.push(start..self.victims.len());
    }

    /// Once every cluster's gangs are in: the sums per queue and cluster, and the share checks' slots.
    fn finish(&mut self) {
        let (n, k) = (self.clusters.len(), self.table_columns);
        self.pooled = vec![0; self.known_queues * n * k];
        for vi in 0..self.victims.len() {
            self.pool_add(vi, 1);
        }
        // Sized once every queue is known, those of gangs the cycle does not know included: a tenant's key comes
        // after every queue's.
        let keys = self.queue_names.len() + self.tenant_names.len();
        self.shares = (0..keys).map(|_| None).collect();
        self.usage = (0..keys).map(|_| None).collect();
    }
}

/// What one search reads of the cycle as it stands: usage and its versions (which change as the cycle dispatches
/// and evicts) and deserved shares (fixed for the cycle once worked out).
struct State<'a, 'py> {
    queue_usage: &'a Bound<'py, PyDict>,
    tenant_usage: &'a Bound<'py, PyDict>,
    queue_version: &'a Bound<'py, PyDict>,
    usage_version: &'a Bound<'py, PyDict>,
    queue_shares: &'a Bound<'py, PyDict>,
    tenant_shares: &'a Bound<'py, PyDict>,
    seen: Vec<bool>,
}

impl ReclaimPool {
    /// The key's usage as the cycle has it now: re-read only when its version moved (once per search at most).
    fn usage_now(&mut self, key: Key, state: &mut State) -> PyResult<()> {
        if state.seen[key] {
            return Ok(());
        }
        state.seen[key] = true;
        let queues = self.queue_names.len();
        let name = self.name_of(key).to_owned();
        let (versions, usages) = if key < queues {
            (state.queue_version, state.queue_usage)
        } else {
            (state.usage_version, state.tenant_usage)
        };
        let version: i64 = match versions.get_item(&name)? {
            Some(v) => v.extract()?,
            None => 0,
        };
        if matches!(&self.usage[key], Some(u) if u.version == version) {
            return Ok(());
        }
        let amounts = match usages.get_item(&name)? {
            Some(d) => self.resources.amounts(d.cast::<PyDict>()?)?,
            None => Vec::new(),
        };
        self.usage[key] = Some(Usage { version, amounts });
        if self.shares[key].is_none() {
            let shares = if key < queues { state.queue_shares } else { state.tenant_shares };
            let share = self.read_share(shares.get_item(&name)?)?;
            self.shares[key] = Some(share);
        }
        Ok(())
    }

    /// `Preemption._may_reclaim`: whether taking the victim back keeps its queues (those not the job's queue's too)
    /// and, from another tenant, that tenant at or above their deserved shares; counts it taken when it may be.
    fn may_reclaim(&mut self, vi: usize, job_queue: usize, tenant: usize, borrowed: &mut Vec<(Key, Amounts)>,
                   state: &mut State) -> PyResult<bool> {
        let victim_queue = self.hot[vi].queue as usize;
        let held = self.hot[vi].held as usize;
        let theirs = self.queue_tenant[victim_queue];
        let mut keys: Vec<Key> = self.chains[victim_queue].iter().copied()
            .filter(|q| !self.chains[job_queue].contains(q)).collect();
        if theirs != tenant {
            keys.push(self.queue_names.len() + theirs);
        }
        for &key in &keys {
            let keeps = match borrowed.iter().find(|(k, _)| *k == key) {
                Some((_, usage)) => keeps_share(usage, self.shares[key].as_deref().unwrap_or(&[]),
                                                span(&self.amount_data, &self.amount_at, held)),
                None => {
                    self.usage_now(key, state)?;
                    keeps_share(&self.usage[key].as_ref().expect("read").amounts,
                                self.shares[key].as_deref().unwrap_or(&[]),
                                span(&self.amount_data, &self.amount_at, held))
                }
            };
            if !keeps {
                return Ok(false);
            }
        }
        for &key in &keys {
            let at = match borrowed.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    borrowed.push((key, self.usage[key].as_ref().expect("read").amounts.clone()));
                    borrowed.len() - 1
                }
            };
            less_than(&mut borrowed[at].1, span(&self.amount_data, &self.amount_at, held));
        }
        Ok(true)
    }
}

#[pymethods]
impl ReclaimPool {
    /// `clusters`: per cluster in the table's order, its preemptible gangs in any order (RunningJob objects: put in
    /// victim order here);
    /// `holds`: gang id -> what it counts against (None: its request, as without flavors); `queues`: (name, priority,
    /// tenant, chain of names);
    /// `resources`: the table's resource columns, in order; `grace`: REPREEMPT_GRACE; `now`: the snapshot's clock
    /// (seconds since the epoch), which each gang's run time is counted to; `memo`: the gangs read by earlier builds.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(resources: Vec<String>, gpu: String, clusters: &Bound<'_, PyList>, holds: Option<&Bound<'_, PyDict>>,
           queues: Vec<(String, i64, String, Vec<String>)>, grace: f64, now: f64,
           memo: Option<&Bound<'_, GangMemo>>) -> PyResult<Self> {
        let mut pool = ReclaimPool::empty(&resources, &gpu, &queues);
        let total: usize = clusters.iter().map(|gangs| gangs.len().unwrap_or(0)).sum();
        let mut build = Build::new(clusters.py(), holds, grace, now, total);
        pool.reserve(total);
        // The gangs earlier builds read, when given a memo that is not in use elsewhere; else read them all here.
        let mut local = GangMemo::default();
        let mut guard = match memo {
            Some(memo) => memo.try_borrow_mut().ok(),
            None => None,
        };
        let memo: &mut GangMemo = match guard.as_mut() {
            Some(kept) => kept,
            None => &mut local,
        };
        memo.build += 1;
        let seen = memo.build;
        for gangs in clusters.iter() {
            let gangs = gangs.cast::<PyList>()?;
            let mut block = Vec::with_capacity(gangs.len());
            for gang in gangs.iter() {
                let ptr = gang.as_ptr() as usize;
                if !memo.gangs.contains_key(&ptr) {
                    let read = Read::of(&gang, &mut memo.resources)?;
                    memo.gangs.insert(ptr, read);
                }
                let GangMemo { gangs: kept, resources: named, .. } = &mut *memo;
                let read = kept.get_mut(&ptr).expect("read above");
                read.seen = seen;
                block.push(pool.victim(&mut build, read, ptr, named)?);
            }
            pool.push_block(block);
        }
        memo.gangs.retain(|_, read| read.seen == seen); // gangs gone since: their objects are let go
        pool.finish();
        Ok(pool)
    }

    /// The same pool from the preemptible gangs `store` keeps across cycles, `names` the table's clusters in order
    /// (the rest as for a pool built from lists).
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn from_store(resources: Vec<String>, gpu: String, names: Vec<String>, store: &Bound<'_, GangStore>,
                  holds: Option<&Bound<'_, PyDict>>, queues: Vec<(String, i64, String, Vec<String>)>, grace: f64,
                  now: f64) -> PyResult<Self> {
        let mut pool = ReclaimPool::empty(&resources, &gpu, &queues);
        let store = store.try_borrow()?;
        let total: usize = names.iter().map(|name| store.clusters.get(name).map_or(0, Vec::len)).sum();
        let mut build = Build::new(store.py(), holds, grace, now, total);
        pool.reserve(total);
        for name in &names {
            let gangs = store.clusters.get(name).map_or(&[][..], Vec::as_slice);
            let mut block = Vec::with_capacity(gangs.len());
            for read in gangs {
                block.push(pool.victim(&mut build, read, read._gang.as_ptr() as usize, &store.resources)?);
            }
            pool.push_block(block);
        }
        pool.finish();
        Ok(pool)
    }

    /// Gangs the cycle evicted (RunningJob objects, as given): never chosen again, and their room no longer
    /// preemptible.
    fn preempted(&mut self, gangs: &Bound<'_, PyList>) {
        if gangs.is_empty() {
            return;
        }
        let victims = &self.victims;
        let by_gang = self.by_gang.get_or_insert_with(|| {
            victims.iter().enumerate().map(|(at, v)| (v.gang, at)).collect()
        });
        let found: Vec<usize> = gangs.iter().filter_map(|gang| by_gang.get(&(gang.as_ptr() as usize)).copied())
            .collect();
        for at in found {
            if !self.hot[at].preempted {
                self.hot[at].preempted = true;
                self.pool_add(at, -1);
            }
        }
    }

    /// `PreemptiblePool.could_make_room`: per cluster (one byte each), whether its free resources plus every
    /// preemptible gang not yet evicted of `queues` would cover `request`. `free`: the table's free amounts, row-major
    /// int64 bytes.
    fn could_make_room<'py>(&mut self, py: Python<'py>, request: &Bound<'_, PyDict>, queues: Vec<String>,
                            free: &Bound<'_, PyBytes>) -> PyResult<Bound<'py, PyBytes>> {
        let (n, k) = (self.clusters.len(), self.table_columns);
        let free = free.as_bytes();
        if free.len() != n * k * 8 {
            return Err(PyValueError::new_err("the free table must be one row per cluster"));
        }
        let mut need = vec![0i64; k];
        for (name, a) in request.iter() {
            let (name, a): (String, i64) = (name.extract()?, a.extract()?);
            match self.resources.numbers.get(&name) {
                Some(&r) if r < k => need[r] = a,
                _ if a > 0 => return Ok(PyBytes::new(py, &vec![0u8; n])),
                _ => {}
            }
        }
        let mut rows = vec![false; self.known_queues];
        let mut count = 0;
        for q in &queues {
            if let Some(&at) = self.queue_index.get(q) {
                if at < self.known_queues && !rows[at] {
                    rows[at] = true;
                    count += 1;
                }
            }
        }
        if count == 0 {
            return Ok(PyBytes::new(py, &vec![0u8; n]));
        }
        let block = n * k;
        let total = match self.last.take() {
            // As `PreemptiblePool._summed`: the last sum adjusted when fewer queues differ than are asked for.
            Some((had, mut total)) if {
                let differ = (0..self.known_queues).filter(|&q| had[q] != rows[q]).count();
                differ < count
            } => {
                for q in 0..self.known_queues {
                    if had[q] != rows[q] {
                        let sign = if rows[q] { 1 } else { -1 };
                        let from = &self.pooled[q * block..(q + 1) * block];
                        total.iter_mut().zip(from).for_each(|(t, a)| *t += sign * a);
                    }
                }
                total
            }
            _ => {
                let mut total = vec![0i64; block];
                for q in (0..self.known_queues).filter(|&q| rows[q]) {
                    let from = &self.pooled[q * block..(q + 1) * block];
                    total.iter_mut().zip(from).for_each(|(t, a)| *t += a);
                }
                total
            }
        };
        let out: Vec<u8> = (0..n).map(|c| {
            (0..k).all(|r| {
                let at = (c * k + r) * 8;
                i64::from_ne_bytes(free[at..at + 8].try_into().expect("8 bytes")) + total[c * k + r] >= need[r]
            }) as u8
        }).collect();
        self.last = Some((rows, total));
        Ok(PyBytes::new(py, &out))
    }

    /// `Preemption.victims`' search: the cluster (its index) and the gangs (RunningJob objects) to evict, in victim order, or -1 and none; and why eligible-looking gangs were passed over (1: work, 2: share). None when the
    /// request names a resource no gang or cluster has (the Python search answers those).
    ///
    /// `free`: the table's free amounts, row-major int64 bytes; `candidates` and `selected`: one byte per cluster;
    /// `over`: the queues the job may take back from.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (job_queue, job_priority, request, over, lowest, free, candidates, selected, refused,
                        queue_usage, tenant_usage, queue_version, usage_version, queue_shares, tenant_shares))]
    fn victims(&mut self, py: Python<'_>, job_queue: &str, job_priority: i64, request: &Bound<'_, PyDict>, over: Vec<String>,
               lowest: i64, free: &Bound<'_, PyBytes>, candidates: &Bound<'_, PyBytes>,
               selected: &Bound<'_, PyBytes>, refused: Vec<usize>, queue_usage: &Bound<'_, PyDict>,
               tenant_usage: &Bound<'_, PyDict>, queue_version: &Bound<'_, PyDict>,
               usage_version: &Bound<'_, PyDict>, queue_shares: &Bound<'_, PyDict>,
               tenant_shares: &Bound<'_, PyDict>) -> PyResult<Option<Found>> {
        let mut wanted = Vec::with_capacity(request.len());
        for (k, v) in request.iter() {
            let name: String = k.extract()?;
            match self.resources.numbers.get(&name) {
                Some(&r) => wanted.push((r, v.extract::<i64>()?)),
                None => return Ok(None),
            }
        }
        let Some(&jq) = self.queue_index.get(job_queue) else { return Ok(None) };
        let tenant = self.queue_tenant[jq];
        let mut over_mask = vec![false; self.queue_names.len()];
        for q in &over {
            match self.queue_index.get(q) {
                Some(&at) => over_mask[at] = true,
                None => return Ok(None),
            }
        }
        let own_only = over.is_empty();
        let free = free.as_bytes();
        let (candidates, selected) = (candidates.as_bytes(), selected.as_bytes());
        let n = self.clusters.len();
        let k = self.table_columns;
        if free.len() != n * k * 8 || candidates.len() != n || selected.len() != n {
            return Err(PyValueError::new_err("the free table, candidates and selection must be one row per cluster"));
        }
        let free_at = |c: usize, r: usize| -> i64 {
            let at = (c * k + r) * 8;
            i64::from_ne_bytes(free[at..at + 8].try_into().expect("8 bytes"))
        };
        let gpu_column = (self.gpu < k).then_some(self.gpu);
        let want_gpus = amount(&wanted, self.gpu);
        let mut order: Vec<(i64, usize)> = (0..n).filter(|&c| candidates[c] != 0)
            .map(|c| (want_gpus - gpu_column.map_or(0, |g| free_at(c, g)), c)).collect();
        order.sort_unstable();
        let mut state = State {
            queue_usage, tenant_usage, queue_version, usage_version, queue_shares, tenant_shares,
            seen: vec![false; self.queue_names.len() + self.tenant_names.len()],
        };
        let mut refused_mask = vec![false; n];
        for c in refused {
            if c < n {
                refused_mask[c] = true;
            }
        }
        let mut kept = 0u8;
        let mut best: Option<((i64, f64, i64, usize), usize, Vec<usize>)> = None;
        let mut freed = vec![0i64; self.resources.names.len()];
        for (short, c) in order {
            // The least key this cluster could give, the cluster last: past the best's, it cannot win.
            if let Some((b, bc, _)) = &best {
                if compare((lowest, 0.0, short.max(0), 1), *b).then(c.cmp(bc)) == Ordering::Greater {
                    continue;
                }
            }
            if refused_mask[c] || selected[c] == 0 {
                continue;
            }
            freed.iter_mut().for_each(|a| *a = 0);
            freed.resize(self.resources.names.len(), 0);
            for r in 0..k {
                freed[r] = free_at(c, r);
            }
            if covers(&freed, &wanted) {
                continue;
            }
            let bound = best.as_ref().map(|(b, bc, _)| (*b, *bc));
            let chosen = self.take(c, jq, job_priority, tenant, &over_mask, own_only, &wanted, &mut freed,
                                   &mut kept, bound, &mut state)?;
            if !chosen.is_empty() && covers(&freed, &wanted) {
                let highest = chosen.iter().map(|&vi| self.queue_priority[self.hot[vi].queue as usize]).max()
                    .expect("chosen");
                let lost = chosen.iter().fold(0.0, |s, &vi| s + self.victims[vi].at_risk);
                let evicted = chosen.iter().map(|&vi| self.victims[vi].gpus).sum();
                let key = (highest, lost, evicted, chosen.len());
                let better = match &best {
                    None => true,
                    Some((b, bc, _)) => compare(key, *b).then(c.cmp(bc)) == Ordering::Less,
                };
                if better {
                    best = Some((key, c, chosen));
                }
            }
        }
        Ok(Some(match best {
            Some((_, c, chosen)) => {
                // SAFETY: each gang is held by its reader (the memo or the store) and by the lists the cycle holds.
                let gangs = chosen.iter().map(|&vi| unsafe {
                    Bound::from_borrowed_ptr(py, self.victims[vi].gang as *mut pyo3::ffi::PyObject)
                }.unbind()).collect();
                (c as i64, gangs, kept)
            }
            None => (-1, Vec::new(), kept),
        }))
    }
}

impl ReclaimPool {
    /// Add (sign 1) or take (-1) a gang's request in `pooled`, and in the last sum when its queue is in it.
    fn pool_add(&mut self, vi: usize, sign: i64) {
        let (queue, cluster) = (self.hot[vi].queue as usize, self.victims[vi].cluster);
        if queue >= self.known_queues {
            return;
        }
        let (n, k) = (self.clusters.len(), self.table_columns);
        let request = self.victims[vi].request;
        for &(r, a) in span(&self.amount_data, &self.amount_at, request) {
            if r < k {
                self.pooled[(queue * n + cluster) * k + r] += sign * a;
                if let Some((rows, total)) = &mut self.last {
                    if rows[queue] {
                        total[cluster * k + r] += sign * a;
                    }
                }
            }
        }
    }

    /// `Preemption._take` over one cluster's gangs: the gangs to evict (their places in `victims`), in victim order, until `freed`
    /// covers the request; none once the choice's key, then the cluster, passes `bound` (the best's, then its cluster).
    #[allow(clippy::too_many_arguments)]
    fn take(&mut self, cluster: usize, jq: usize, job_priority: i64, tenant: usize, over: &[bool], own_only: bool,
            wanted: &[(usize, i64)], freed: &mut [i64], kept: &mut u8,
            bound: Option<((i64, f64, i64, usize), usize)>, state: &mut State) -> PyResult<Vec<usize>> {
        let mut chosen = Vec::new();
        let (mut highest, mut lost, mut evicted) = (0i64, 0.0f64, 0i64);
        let mut borrowed: Vec<(Key, Amounts)> = Vec::new();
        for vi in self.clusters[cluster].clone() {
            let Hot { priority, queue, preempted, worth, .. } = self.hot[vi];
            let queue = queue as usize;
            if own_only {
                if queue != jq {
                    continue; // the Python walks the job's own queue's gangs alone here
                }
                if priority >= job_priority {
                    break;
                }
            }
            if preempted || !(over[queue] || (queue == jq && priority < job_priority)) {
                continue;
            }
            if queue != jq && !worth {
                *kept |= KEPT_WORK;
                continue;
            }
            if queue != jq && !self.may_reclaim(vi, jq, tenant, &mut borrowed, state)? {
                *kept |= KEPT_SHARE;
                continue;
            }
            chosen.push(vi);
            let request = self.victims[vi].request;
            for &(r, a) in span(&self.amount_data, &self.amount_at, request) {
                freed[r] += a;
            }
            if let Some((b, bc)) = bound {
                let mine = self.queue_priority[queue];
                highest = if chosen.len() > 1 { highest.max(mine) } else { mine };
                lost += self.victims[vi].at_risk;
                evicted += self.victims[vi].gpus;
                if compare((highest, lost, evicted, chosen.len()), b).then(cluster.cmp(&bc)) == Ordering::Greater {
                    return Ok(Vec::new());
                }
            }
            if covers(freed, wanted) {
                break;
            }
        }
        Ok(chosen)
    }
}

#[pymodule]
fn federation_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ReclaimPool>()?;
    m.add_class::<GangMemo>()?;
    m.add_class::<GangStore>()?;
    m.add_function(wrap_pyfunction!(sums::summed_by, m)?)?;
    m.add_function(wrap_pyfunction!(shares::hierarchical, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_scores, m)?)?;
    m.add_function(wrap_pyfunction!(table::table_reserve, m)?)?;
    m.add_function(wrap_pyfunction!(order::order_level, m)?)?;
    m.add_function(wrap_pyfunction!(order::dominant_share, m)?)?;
    m.add_class::<order::HeadKeys>()?;
    Ok(())
}
