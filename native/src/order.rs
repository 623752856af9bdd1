//! One level of a queue head's fair-share key, compiled: `federation.scheduling.ordering._level`.
//!
//! Every queue head is keyed when the cycle starts, and again whenever a sibling's service moves its tenant: about
//! 2,000 keys a steady cycle at 100 clusters, 8,000 at 1,000, each one or two levels of a few dictionary reads and
//! divisions. Under the profile the keys were about a fifth of a steady cycle, nearly all of it the interpreter's
//! cost per step. This is the same arithmetic in the same order; the Python function stays the oracle
//! (tests/test_native_order.py) and answers whatever this declines (None): an amount that is neither an int nor a
//! float, or a whole number (or a sum or difference of two) too large for a float to hold exactly, where Python's
//! exact integer arithmetic could round differently.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyTuple};
use rustc_hash::FxHashMap as HashMap;

use crate::shares::py_max;

const EPSILON: f64 = 1e-9;
/// Whole numbers below this in size are exact as floats: Python's int and float arithmetic agree on them.
const EXACT: i64 = 1 << 53;

/// An amount as Python holds it: an int (exact) or a float.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn read(value: &Bound<'_, PyAny>) -> Option<Num> {
        if value.is_instance_of::<PyInt>() {
            let v: i64 = value.extract().ok()?;
            (v.abs() < EXACT).then_some(Num::Int(v))
        } else if value.is_instance_of::<PyFloat>() {
            Some(Num::Float(value.extract().ok()?))
        } else {
            None
        }
    }

    fn float(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::Float(v) => v,
        }
    }

    /// `a + b` as Python gives it: exact for two ints, else in floats (the int converted first).
    fn add(self, other: Num) -> Option<Num> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => {
                let sum = a + b;
                (sum.abs() < EXACT).then_some(Num::Int(sum))
            }
            (a, b) => Some(Num::Float(a.float() + b.float())),
        }
    }

    fn sub(self, other: Num) -> Option<Num> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => {
                let difference = a - b;
                (difference.abs() < EXACT).then_some(Num::Int(difference))
            }
            (a, b) => Some(Num::Float(a.float() - b.float())),
        }
    }

    /// `self / other`: Python's true division, correctly rounded; on exact operands the same as the floats'.
    fn div(self, other: Num) -> f64 {
        self.float() / other.float()
    }
}

/// `mapping.get(key, default)`, read as a number (None: declined).
fn get(mapping: &Bound<'_, PyDict>, key: &Bound<'_, PyAny>, default: Num) -> PyResult<Option<Num>> {
    Ok(match mapping.get_item(key)? {
        Some(value) => Num::read(&value),
        None => Some(default),
    })
}

/// `fairshare._summed(usage, extra)`: (resource, usage + extra) over both, `extra`'s first; None: declined.
fn summed<'py>(usage: &Bound<'py, PyDict>, extra: Option<&Bound<'py, PyDict>>)
               -> PyResult<Option<Vec<(Bound<'py, PyAny>, Num)>>> {
    let extra = extra.filter(|extra| !extra.is_empty());
    let mut out = Vec::with_capacity(usage.len() + extra.map_or(0, |extra| extra.len()));
    if let Some(extra) = extra {
        for (resource, amount) in extra.iter() {
            let (Some(amount), Some(used)) = (Num::read(&amount), get(usage, &resource, Num::Int(0))?) else {
                return Ok(None);
            };
            let Some(total) = amount.add(used) else { return Ok(None) };
            out.push((resource, total));
        }
    }
    for (resource, used) in usage.iter() {
        if let Some(extra) = extra {
            if extra.contains(&resource)? {
                continue;
            }
        }
        let Some(used) = Num::read(&used) else { return Ok(None) };
        out.push((resource, used));
    }
    Ok(Some(out))
}

/// `fairshare.excess(usage, share, level, wanted)`: the largest over resources of (usage + wanted - share) / level.
fn excess(usage: &Bound<'_, PyDict>, share: &Bound<'_, PyDict>, level: &Bound<'_, PyDict>,
          wanted: &Bound<'_, PyDict>) -> PyResult<Option<f64>> {
    let Some(summed) = summed(usage, Some(wanted))? else { return Ok(None) };
    let mut worst = f64::NEG_INFINITY;
    for (resource, used) in summed {
        if used.float() <= 0.0 {
            continue;
        }
        let (Some(deserved), Some(total)) = (get(share, &resource, Num::Float(0.0))?,
                                             get(level, &resource, Num::Float(0.0))?) else { return Ok(None) };
        let Some(over) = used.sub(deserved) else { return Ok(None) };
        let measure = if total.float() > EPSILON {
            over.div(total)
        } else if over.float() > EPSILON {
            f64::INFINITY
        } else {
            0.0
        };
        worst = py_max(worst, measure);
    }
    Ok(Some(worst))
}

/// `ordering._level`: (over its share with the whole job, how far, its share with the whole job), or None where the
/// Python function must answer.
/// Mappings that are not dicts are declined too.
#[pyfunction]
pub fn order_level(usage: &Bound<'_, PyAny>, share: &Bound<'_, PyAny>, level: &Bound<'_, PyAny>,
                   wanted: &Bound<'_, PyAny>, half: &Bound<'_, PyAny>) -> PyResult<Option<(bool, f64, f64)>> {
    let (Ok(usage), Ok(share), Ok(level), Ok(wanted), Ok(half)) = (
        usage.cast::<PyDict>(), share.cast::<PyDict>(), level.cast::<PyDict>(), wanted.cast::<PyDict>(),
        half.cast::<PyDict>()) else { return Ok(None) };
    level_of(usage, share, level, wanted, half)
}

fn level_of(usage: &Bound<'_, PyDict>, share: &Bound<'_, PyDict>, level: &Bound<'_, PyDict>,
            wanted: &Bound<'_, PyDict>, half: &Bound<'_, PyDict>) -> PyResult<Option<(bool, f64, f64)>> {
    let (mut after, mut with_half) = (0.0f64, 0.0f64);
    for (resource, amount) in wanted.iter() {
        let Some(amount) = Num::read(&amount) else { return Ok(None) };
        let Some(halved) = half.get_item(&resource)?.and_then(|h| Num::read(&h)) else { return Ok(None) };
        let Some(used) = get(usage, &resource, Num::Int(0))? else { return Ok(None) };
        let (Some(whole), Some(part)) = (used.add(amount), used.add(halved)) else { return Ok(None) };
        if whole.float() <= 0.0 && part.float() <= 0.0 {
            continue;
        }
        let Some(have) = get(share, &resource, Num::Float(0.0))? else { return Ok(None) };
        if have.float() <= EPSILON {
            if whole.float() > 0.0 {
                after = f64::INFINITY;
            }
            if part.float() > 0.0 {
                with_half = f64::INFINITY;
            }
            continue;
        }
        if whole.div(have) > after {
            after = whole.div(have);
        }
        if part.div(have) > with_half {
            with_half = part.div(have);
        }
    }
    for (resource, used) in usage.iter() {
        let Some(used) = Num::read(&used) else { return Ok(None) };
        if used.float() <= 0.0 || wanted.contains(&resource)? {
            continue;
        }
        let Some(have) = get(share, &resource, Num::Float(0.0))? else { return Ok(None) };
        if have.float() <= EPSILON {
            after = f64::INFINITY;
            with_half = f64::INFINITY;
            break;
        }
        if used.div(have) > after {
            after = used.div(have);
        }
        if used.div(have) > with_half {
            with_half = used.div(have);
        }
    }
    let over = after > 1.0 + EPSILON;
    let measure = if over {
        match excess(usage, share, level, wanted)? {
            Some(found) => found,
            None => return Ok(None),
        }
    } else {
        with_half
    };
    Ok(Some((over, measure, after)))
}

/// `fairshare.dominant_share(usage, deserved, extra)`: the largest over resources of (usage + extra) / deserved, using
/// what one does not deserve infinite; None where the Python function must answer (as `order_level`). Asked when a
/// queue is used and for every head a cycle considers, a few thousand times a cycle.
#[pyfunction]
#[pyo3(signature = (usage, deserved, extra=None))]
pub fn dominant_share(usage: &Bound<'_, PyAny>, deserved: &Bound<'_, PyAny>, extra: Option<&Bound<'_, PyAny>>)
                      -> PyResult<Option<f64>> {
    let (Ok(usage), Ok(deserved)) = (usage.cast::<PyDict>(), deserved.cast::<PyDict>()) else { return Ok(None) };
    let extra = match extra {
        Some(extra) if !extra.is_none() => match extra.cast::<PyDict>() {
            Ok(extra) => Some(extra.clone()),
            Err(_) => return Ok(None),
        },
        _ => None,
    };
    let Some(summed) = summed(usage, extra.as_ref())? else { return Ok(None) };
    let mut share = 0.0f64;
    for (resource, used) in summed {
        if used.float() <= 0.0 {
            continue;
        }
        let Some(have) = get(deserved, &resource, Num::Float(0.0))? else { return Ok(None) };
        if have.float() <= EPSILON {
            return Ok(Some(f64::INFINITY));
        }
        if used.div(have) > share {
            share = used.div(have);
        }
    }
    Ok(Some(share))
}

/// What a key reads of one queue that a cycle never changes.
struct Fact {
    tenant: Py<PyAny>,
    /// Its priority negated, as the key holds it (the Python int itself).
    priority: Py<PyAny>,
    /// The queue, then its parents, as the ledger's chain has them.
    chain: Vec<Py<PyAny>>,
}

/// A queue's levels kept for its head while no queue of its chain is used.
struct Levels {
    versions: Vec<i64>,
    job: Py<PyAny>,
    levels: Vec<(bool, f64)>,
    afters: Vec<f64>,
    over: bool,
}

/// `ordering.HeadOrder.key`, compiled: a queue head's whole key, with the same two answers kept as there (a tenant
/// level per tenant and ask while the tenant's usage version stands; a queue's levels per head while its chain's
/// versions stand). At 1,000 queues a steady cycle keys about 8,000 heads, half of them again after a sibling was
/// served, and the Python key was a sixth of the cycle. `key` declines (None) what `order_level` declines, and any
/// head whose tenant or queues count past usage (the Python key answers those).
#[pyclass(module = "federation_native")]
pub struct HeadKeys {
    facts: HashMap<String, Fact>,
    depth: usize,
    tenant_shares: Py<PyDict>,
    queue_shares: Py<PyDict>,
    capacity: Py<PyDict>,
    tenant_usage: Py<PyDict>,
    queue_usage: Py<PyDict>,
    tenant_version: Py<PyDict>,
    queue_version: Py<PyDict>,
    past_tenants: Py<PyDict>,
    past_queues: Py<PyDict>,
    empty: Py<PyDict>,
    /// Address of an ask -> (the ask, half of it).
    halves: HashMap<usize, (Py<PyAny>, Py<PyDict>)>,
    /// (tenant's address, ask's address) -> (the tenant's usage version, the ask, its tenant level).
    tenant_levels: HashMap<(usize, usize), (i64, Py<PyAny>, (bool, f64, f64))>,
    levels: HashMap<String, Levels>,
}

fn version_in(versions: &Bound<'_, PyDict>, name: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    Ok(match versions.get_item(name)? {
        Some(v) => v.extract().ok(),
        None => Some(0),
    })
}

/// `_with_past`'s test: whether the member counts past usage (a mapping that is not empty).
fn has_past(past: &Bound<'_, PyDict>, name: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(match past.get_item(name)? {
        Some(found) => found.is_truthy()?,
        None => false,
    })
}

impl HeadKeys {
    fn half<'py>(&mut self, py: Python<'py>, wanted: &Bound<'py, PyDict>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let at = wanted.as_ptr() as usize;
        if let Some((ask, half)) = self.halves.get(&at) {
            if ask.as_ptr() == wanted.as_ptr() {
                return Ok(Some(half.bind(py).clone()));
            }
        }
        let half = PyDict::new(py);
        for (resource, amount) in wanted.iter() {
            // Python's a // 2: floor division, for ints only here (anything else is the Python key's).
            let Ok(amount) = amount.cast::<PyInt>() else { return Ok(None) };
            half.set_item(resource, amount.call_method1("__floordiv__", (2,))?)?;
        }
        self.halves.insert(at, (wanted.clone().into_any().unbind(), half.clone().unbind()));
        Ok(Some(half))
    }

    fn member<'py>(mapping: &Bound<'py, PyDict>, name: &Bound<'py, PyAny>, or: &Bound<'py, PyDict>)
                   -> PyResult<Bound<'py, PyDict>> {
        Ok(match mapping.get_item(name)? {
            Some(found) => match found.cast_into::<PyDict>() {
                Ok(found) => found,
                Err(_) => or.clone(),
            },
            None => or.clone(),
        })
    }
}

#[pymethods]
impl HeadKeys {
    /// `facts`: queue -> (its tenant, its priority negated, its chain); the rest the ledger's own dictionaries (read
    /// as they change, never copied) and the snapshot's past usage.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(facts: &Bound<'_, PyDict>, depth: usize, tenant_shares: Py<PyDict>, queue_shares: Py<PyDict>,
           capacity: Py<PyDict>, tenant_usage: Py<PyDict>, queue_usage: Py<PyDict>, tenant_version: Py<PyDict>,
           queue_version: Py<PyDict>, past_tenants: Py<PyDict>, past_queues: Py<PyDict>) -> PyResult<Self> {
        let mut kept = HashMap::default();
        for (queue, fact) in facts.iter() {
            let (tenant, priority, chain): (Py<PyAny>, Py<PyAny>, Vec<Py<PyAny>>) = fact.extract()?;
            kept.insert(queue.extract::<String>()?, Fact { tenant, priority, chain });
        }
        Ok(HeadKeys {
            facts: kept, depth, tenant_shares, queue_shares, capacity, tenant_usage, queue_usage, tenant_version,
            queue_version, past_tenants, past_queues, empty: PyDict::new(facts.py()).unbind(),
            halves: HashMap::default(), tenant_levels: HashMap::default(), levels: HashMap::default(),
        })
    }

    /// The head `job`'s key in `queue`, `wanted` what it asks (as shares count it); None where the Python key must
    /// answer.
    fn key<'py>(&mut self, py: Python<'py>, queue: &str, job: &Bound<'py, PyAny>, wanted: &Bound<'py, PyAny>)
                -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Ok(wanted) = wanted.cast::<PyDict>() else { return Ok(None) };
        let Some(fact) = self.facts.get(queue) else { return Ok(None) };
        let tenant = fact.tenant.bind(py).clone();
        let priority = fact.priority.clone_ref(py);
        let chain: Vec<Bound<'py, PyAny>> = fact.chain.iter().map(|q| q.bind(py).clone()).collect();
        let empty = self.empty.bind(py).clone();
        let share = Self::member(self.tenant_shares.bind(py), &tenant, &empty)?;
        let Some(version) = version_in(self.tenant_version.bind(py), &tenant)? else { return Ok(None) };
        let tenant_at = (tenant.as_ptr() as usize, wanted.as_ptr() as usize);
        let known = match self.tenant_levels.get(&tenant_at) {
            Some((v, ask, level)) if *v == version && ask.as_ptr() == wanted.as_ptr() => *level,
            _ => {
                if has_past(self.past_tenants.bind(py), &tenant)? {
                    return Ok(None);
                }
                let Some(usage) = self.tenant_usage.bind(py).get_item(&tenant)? else { return Ok(None) };
                let Ok(usage) = usage.cast_into::<PyDict>() else { return Ok(None) };
                let Some(half) = self.half(py, wanted)? else { return Ok(None) };
                let Some(level) = level_of(&usage, &share, self.capacity.bind(py), wanted, &half)? else {
                    return Ok(None);
                };
                self.tenant_levels.insert(tenant_at, (version, wanted.clone().into_any().unbind(), level));
                level
            }
        };
        let (over, measure, after) = known;
        let queue_version = self.queue_version.bind(py);
        let mut versions = Vec::with_capacity(chain.len());
        for q in &chain {
            let Some(v) = version_in(queue_version, q)? else { return Ok(None) };
            versions.push(v);
        }
        let current = matches!(self.levels.get(queue),
                               Some(kept) if kept.versions == versions && kept.job.as_ptr() == job.as_ptr());
        if !current {
            let Some(half) = self.half(py, wanted)? else { return Ok(None) };
            let (mut levels, mut afters) = (Vec::with_capacity(self.depth), Vec::with_capacity(chain.len()));
            let mut level = share.clone();
            for q in chain.iter().rev() {
                if has_past(self.past_queues.bind(py), q)? {
                    return Ok(None);
                }
                let q_share = Self::member(self.queue_shares.bind(py), q, &empty)?;
                let Some(usage) = self.queue_usage.bind(py).get_item(q)? else { return Ok(None) };
                let Ok(usage) = usage.cast_into::<PyDict>() else { return Ok(None) };
                let Some((q_over, q_measure, q_after)) = level_of(&usage, &q_share, &level, wanted, &half)? else {
                    return Ok(None);
                };
                levels.push((q_over, q_measure));
                afters.push(q_after);
                level = q_share;
            }
            // Leaves of different depths: level by level (as the Python key pads them).
            while levels.len() + 1 < self.depth {
                levels.push((false, 0.0));
            }
            let over = levels.iter().any(|(o, _)| *o);
            self.levels.insert(queue.to_owned(), Levels { versions, job: job.clone().unbind(), levels, afters, over });
        }
        let kept = self.levels.get(queue).expect("kept above");
        let mut items: Vec<Bound<'py, PyAny>> = Vec::with_capacity(5 + 2 * kept.levels.len() + kept.afters.len());
        items.push(PyBool::new(py, over || kept.over).to_owned().into_any());
        items.push(priority.into_bound(py));
        items.push(PyBool::new(py, over).to_owned().into_any());
        items.push(PyFloat::new(py, measure).into_any());
        for &(o, m) in &kept.levels {
            items.push(PyBool::new(py, o).to_owned().into_any());
            items.push(PyFloat::new(py, m).into_any());
        }
        items.push(PyFloat::new(py, after).into_any());
        for &a in &kept.afters {
            items.push(PyFloat::new(py, a).into_any());
        }
        Ok(Some(PyTuple::new(py, items)?))
    }
}
