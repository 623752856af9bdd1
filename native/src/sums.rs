//! Amounts added up per key, compiled: `federation.scheduling.model.summed_by`.
//!
//! A cycle adds up what every running gang holds, per queue, before it decides anything: 145,000 gangs at 1,000
//! clusters, then the largest single piece of a steady cycle's Python (a dictionary look-up and an addition per
//! resource per gang). The Python function stays the oracle (tests/test_native_sums.py).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A key's sum so far: (resource column, amount), in the order the resources were first met for it.
type Sum = Vec<(usize, i64)>;

/// Per key, the sum of the amounts beside it, as the Python `summed_by` gives it: keys in the order first met, and in
/// each sum the resources in the order first met for that key, a resource named at 0 included. None when an amount
/// is not a dict of whole numbers that fit in 64 bits, for the Python version to answer.
#[pyfunction]
pub fn summed_by<'py>(py: Python<'py>, keys: &Bound<'py, PyList>, amounts: &Bound<'py, PyList>)
                      -> PyResult<Option<Bound<'py, PyDict>>> {
    if keys.len() != amounts.len() {
        return Err(PyValueError::new_err("summed_by: as many amounts as keys are needed"));
    }
    // Keys and resources numbered by Python's own hashing and equality, as the dicts of the Python version key them.
    let slots = PyDict::new(py);
    let columns = PyDict::new(py);
    let mut names: Vec<Bound<'py, PyAny>> = Vec::new();
    let mut order: Vec<Bound<'py, PyAny>> = Vec::new();
    let mut sums: Vec<Sum> = Vec::new();
    for (key, amount) in keys.iter().zip(amounts.iter()) {
        let Ok(amount) = amount.cast::<PyDict>() else { return Ok(None) };
        let slot = match slots.get_item(&key)? {
            Some(found) => found.extract::<usize>()?,
            None => {
                slots.set_item(&key, sums.len())?;
                order.push(key);
                sums.push(Vec::with_capacity(amount.len()));
                sums.len() - 1
            }
        };
        let sum = &mut sums[slot];
        for (resource, a) in amount.iter() {
            let Ok(a) = a.extract::<i64>() else { return Ok(None) };
            let column = match columns.get_item(&resource)? {
                Some(found) => found.extract::<usize>()?,
                None => {
                    columns.set_item(&resource, names.len())?;
                    names.push(resource);
                    names.len() - 1
                }
            };
            match sum.iter_mut().find(|(c, _)| *c == column) {
                Some((_, total)) => match total.checked_add(a) {
                    Some(added) => *total = added,
                    None => return Ok(None),
                },
                None => sum.push((column, a)),
            }
        }
    }
    let out = PyDict::new(py);
    for (key, sum) in order.iter().zip(sums) {
        let into = PyDict::new(py);
        for (column, total) in sum {
            into.set_item(&names[column], total)?;
        }
        out.set_item(key, into)?;
    }
    Ok(Some(out))
}
