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
use pyo3::types::{PyDict, PyFloat, PyInt};

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
