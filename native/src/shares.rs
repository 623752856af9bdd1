//! Deserved shares, compiled: `federation.scheduling.fairshare.hierarchical`.
//!
//! Every cycle shares the federation out again among tenants and their queues, because demand moves with every job
//! that arrives or ends: a water-fill per level and resource over a thousand queues, a few thousand Python calls of a
//! few arithmetic steps each (6 ms of a 95 ms steady cycle at 1,000,000 pending). This is the same arithmetic, step
//! for step and in the same order, so that every share is the same float: the Python function stays the oracle
//! (tests/test_native_shares.py) and answers whatever this declines (None: an amount that is not a whole number that
//! fits in 64 bits).

use std::collections::HashMap;
use std::rc::Rc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

const EPSILON: f64 = 1e-9;

/// Amounts by resource number: a few each, looked up by a scan.
type Amounts = Vec<(usize, i64)>;

fn get(amounts: &Amounts, resource: usize) -> Option<i64> {
    amounts.iter().find(|&&(r, _)| r == resource).map(|&(_, a)| a)
}

/// One member of a level, as `fairshare.Claim` has it.
#[derive(Clone)]
struct Claim {
    /// Its name's place in `Reader::names`.
    name: usize,
    key: String,
    weight: f64,
    guarantee: Amounts,
    limit: Option<Amounts>,
    demand: Amounts,
    lending_limit: Amounts,
}

/// Python's `min(a, b)`: `a` unless `b` is less.
fn py_min(a: f64, b: f64) -> f64 {
    if b < a { b } else { a }
}

/// Python's `max(a, b)`: `a` unless `b` is greater.
pub(crate) fn py_max(a: f64, b: f64) -> f64 {
    if b > a { b } else { a }
}

/// Python's `round(x)` of a float: to the nearest whole number, halves to the even one.
fn py_round(x: f64) -> Option<i64> {
    let r = x.round_ties_even();
    if r.is_finite() && r.abs() < 9.2e18 { Some(r as i64) } else { None }
}

struct Reader<'py> {
    py: Python<'py>,
    numbers: HashMap<String, usize>,
    /// The names of the claims read, as given.
    names: Vec<Bound<'py, PyString>>,
}

impl<'py> Reader<'py> {
    fn number(&mut self, name: &str) -> usize {
        if let Some(&n) = self.numbers.get(name) {
            return n;
        }
        let next = self.numbers.len();
        self.numbers.insert(name.to_owned(), next);
        next
    }

    /// A mapping of whole amounts, or None when one is not a whole number that fits in 64 bits.
    fn amounts(&mut self, mapping: &Bound<'py, PyAny>) -> PyResult<Option<Amounts>> {
        let dict = mapping.cast::<PyDict>()?;
        let mut out = Vec::with_capacity(dict.len());
        for (k, v) in dict.iter() {
            if v.is_instance_of::<pyo3::types::PyBool>() || !v.is_instance_of::<pyo3::types::PyInt>() {
                return Ok(None);
            }
            let Ok(amount) = v.extract::<i64>() else { return Ok(None) };
            out.push((self.number(k.cast::<PyString>()?.to_str()?), amount));
        }
        Ok(Some(out))
    }

    fn claim(&mut self, claim: &Bound<'py, PyAny>) -> PyResult<Option<Claim>> {
        let py = self.py;
        let name = claim.getattr(pyo3::intern!(py, "name"))?;
        let limit = claim.getattr(pyo3::intern!(py, "limit"))?;
        let Some(guarantee) = self.amounts(&claim.getattr(pyo3::intern!(py, "guarantee"))?)? else { return Ok(None) };
        let Some(demand) = self.amounts(&claim.getattr(pyo3::intern!(py, "demand"))?)? else { return Ok(None) };
        let Some(lending_limit) = self.amounts(&claim.getattr(pyo3::intern!(py, "lending_limit"))?)? else {
            return Ok(None);
        };
        let limit = if limit.is_none() {
            None
        } else {
            match self.amounts(&limit)? {
                Some(found) => Some(found),
                None => return Ok(None),
            }
        };
        self.names.push(name.clone().cast_into::<PyString>()?);
        Ok(Some(Claim {
            key: name.extract()?,
            name: self.names.len() - 1,
            weight: claim.getattr(pyo3::intern!(py, "weight"))?.extract()?,
            guarantee,
            limit,
            demand,
            lending_limit,
        }))
    }

    fn claims(&mut self, list: Option<Bound<'py, PyAny>>) -> PyResult<Option<Vec<Claim>>> {
        let Some(list) = list else { return Ok(Some(Vec::new())) };
        let mut out = Vec::new();
        for item in list.try_iter()? {
            match self.claim(&item?)? {
                Some(claim) => out.push(claim),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }
}

/// `fairshare._cap`: the smaller of a member's demand and its limit.
fn cap(claim: &Claim, resource: usize) -> f64 {
    let demand = get(&claim.demand, resource).unwrap_or(0) as f64;
    match claim.limit.as_ref().and_then(|limit| get(limit, resource)) {
        Some(limit) => py_min(demand, limit as f64),
        None => demand,
    }
}

/// `fairshare.water_fill`.
fn water_fill(total: f64, claims: &[(f64, f64, f64)]) -> Vec<f64> {
    let mut shares: Vec<f64> = claims.iter().map(|&(_, g, c)| py_min(g, c)).collect();
    let floor = shares.iter().fold(0.0, |sum, s| sum + s);
    if floor > total + EPSILON {
        return shares.iter().map(|s| s * total / floor).collect();
    }
    let mut left = total - floor;
    let mut hungry: Vec<usize> = (0..claims.len()).filter(|&i| shares[i] < claims[i].2 - EPSILON).collect();
    while left > EPSILON && !hungry.is_empty() {
        let weights = hungry.iter().fold(0.0, |sum, &i| sum + claims[i].0);
        if weights <= 0.0 {
            break;
        }
        let mut given = 0.0;
        for &i in &hungry {
            let offer = left * claims[i].0 / weights;
            let take = py_min(offer, claims[i].2 - shares[i]);
            shares[i] += take;
            given += take;
        }
        left -= given;
        hungry.retain(|&i| shares[i] < claims[i].2 - EPSILON);
        if given <= EPSILON {
            break;
        }
    }
    shares
}

/// `fairshare.deserved`: each claim's share of every resource of `total`, in `total`'s order.
fn deserved(total: &[(usize, i64)], claims: &[&Claim]) -> Vec<Vec<(usize, f64)>> {
    let kept: Vec<Amounts> = claims.iter().map(|c| {
        c.lending_limit.iter().filter_map(|&(r, lent)| {
            let g = get(&c.guarantee, r).unwrap_or(0);
            if g > lent { Some((r, g - lent)) } else { None }
        }).collect()
    }).collect();
    let mut out: Vec<Vec<(usize, f64)>> = vec![Vec::with_capacity(total.len()); claims.len()];
    for &(resource, amount) in total {
        let idle = claims.iter().zip(&kept).fold(0.0, |sum, (c, k)| {
            sum + py_max(0.0, get(k, resource).unwrap_or(0) as f64 - cap(c, resource))
        });
        let members: Vec<(f64, f64, f64)> = claims.iter()
            .map(|c| (c.weight, get(&c.guarantee, resource).unwrap_or(0) as f64, cap(c, resource)))
            .collect();
        for (i, share) in water_fill(py_max(0.0, amount as f64 - idle), &members).into_iter().enumerate() {
            out[i].push((resource, share));
        }
    }
    out
}

/// `fairshare._ShareOut`.
struct ShareOut<'a> {
    children_of: &'a HashMap<String, Vec<Claim>>,
    settled: HashMap<String, Rc<Claim>>,
    /// Each queue's share, in the order the Python version's dict has them.
    queue_shares: Vec<(usize, Vec<(usize, f64)>)>,
}

impl<'a> ShareOut<'a> {
    fn children(&self, name: &str) -> &'a [Claim] {
        self.children_of.get(name).map_or(&[], |c| c.as_slice())
    }

    fn with_demand(&mut self, claim: &Claim, children: &[Claim]) -> Option<Rc<Claim>> {
        if children.is_empty() {
            return Some(Rc::new(claim.clone()));
        }
        let mut demand = Amounts::new();
        for child in children {
            let child = self.queue_claim(child)?;
            for &(r, _) in &child.demand {
                let add = py_round(cap(&child, r))?;
                match demand.iter_mut().find(|(have, _)| *have == r) {
                    Some((_, sum)) => *sum += add,
                    None => demand.push((r, add)),
                }
            }
        }
        Some(Rc::new(Claim { demand, ..claim.clone() }))
    }

    fn queue_claim(&mut self, claim: &Claim) -> Option<Rc<Claim>> {
        if let Some(found) = self.settled.get(&claim.key) {
            return Some(found.clone());
        }
        let settled = self.with_demand(claim, self.children(&claim.key))?;
        self.settled.insert(claim.key.clone(), settled.clone());
        Some(settled)
    }

    fn share_out(&mut self, have: &[(usize, f64)], children: &[Claim]) -> Option<()> {
        if children.is_empty() {
            return Some(());
        }
        let claims: Vec<Rc<Claim>> = children.iter().map(|c| self.queue_claim(c)).collect::<Option<_>>()?;
        let total: Vec<(usize, i64)> = have.iter().map(|&(r, a)| py_round(a).map(|a| (r, a))).collect::<Option<_>>()?;
        let shares = deserved(&total, &claims.iter().map(|c| c.as_ref()).collect::<Vec<_>>());
        for (claim, share) in claims.iter().zip(&shares) {
            self.queue_shares.push((claim.name, share.clone()));
        }
        for (claim, share) in claims.iter().zip(&shares) {
            self.share_out(share, self.children(&claim.key))?;
        }
        Some(())
    }
}

fn shares_dict<'py>(py: Python<'py>, resources: &[String], share: &[(usize, f64)]) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for &(r, a) in share {
        out.set_item(&resources[r], a)?;
    }
    Ok(out)
}

/// `fairshare.hierarchical` of plain claims: (tenants' shares, queues' shares), each name -> resource -> share, or None
/// for the Python version to answer. Names are unique at every level, as the admin API keeps them.
#[pyfunction]
#[pyo3(signature = (total, tenants, queues_of, children_of=None))]
pub fn hierarchical<'py>(py: Python<'py>, total: &Bound<'py, PyDict>, tenants: &Bound<'py, PyList>,
                         queues_of: &Bound<'py, PyDict>, children_of: Option<&Bound<'py, PyDict>>)
                         -> PyResult<Option<(Bound<'py, PyDict>, Bound<'py, PyDict>)>> {
    let mut reader = Reader { py, numbers: HashMap::new(), names: Vec::new() };
    let mut root: Vec<(usize, i64)> = Vec::with_capacity(total.len());
    for (k, v) in total.iter() {
        if v.is_instance_of::<pyo3::types::PyBool>() || !v.is_instance_of::<pyo3::types::PyInt>() {
            return Ok(None);
        }
        let Ok(amount) = v.extract::<i64>() else { return Ok(None) };
        let name: String = k.extract()?;
        root.push((reader.number(&name), amount));
    }
    let Some(tenant_claims) = reader.claims(Some(tenants.clone().into_any()))? else { return Ok(None) };
    let mut levels: HashMap<String, Vec<Claim>> = HashMap::new();
    for (k, v) in queues_of.iter() {
        let Some(claims) = reader.claims(Some(v))? else { return Ok(None) };
        levels.insert(k.extract()?, claims);
    }
    let mut below: HashMap<String, Vec<Claim>> = HashMap::new();
    if let Some(children_of) = children_of {
        for (k, v) in children_of.iter() {
            let Some(claims) = reader.claims(Some(v))? else { return Ok(None) };
            below.insert(k.extract()?, claims);
        }
    }
    let mut resources = vec![String::new(); reader.numbers.len()];
    for (name, &n) in &reader.numbers {
        resources[n] = name.clone();
    }
    let mut out = ShareOut { children_of: &below, settled: HashMap::new(), queue_shares: Vec::new() };
    let none: Vec<Claim> = Vec::new();
    let mut claims = Vec::with_capacity(tenant_claims.len());
    for t in &tenant_claims {
        match out.with_demand(t, levels.get(&t.key).unwrap_or(&none)) {
            Some(claim) => claims.push(claim),
            None => return Ok(None),
        }
    }
    let tenant_shares = deserved(&root, &claims.iter().map(|c| c.as_ref()).collect::<Vec<_>>());
    for (t, share) in claims.iter().zip(&tenant_shares) {
        if out.share_out(share, levels.get(&t.key).unwrap_or(&none)).is_none() {
            return Ok(None);
        }
    }
    let tenants_out = PyDict::new(py);
    for (t, share) in claims.iter().zip(&tenant_shares) {
        tenants_out.set_item(&reader.names[t.name], shares_dict(py, &resources, share)?)?;
    }
    let queues_out = PyDict::new(py);
    for (name, share) in &out.queue_shares {
        queues_out.set_item(&reader.names[*name], shares_dict(py, &resources, share)?)?;
    }
    Ok(Some((tenants_out, queues_out)))
}
