//! Cluster choice's scores and reservations, compiled: `federation.scheduling.choice.ClusterTable`.
//!
//! At 1,000 clusters a steady cycle scored gang shapes over the clusters that took work about 1,300 times and
//! reserved room about 2,300 times, each a dozen numpy operations on small arrays: a third of the cycle, most of it
//! numpy's cost per call, not the arithmetic. These are the same rules as one pass over the table's own arrays
//! (read and written in place through the buffer protocol, nothing copied); the numpy code in `choice.py` stays
//! the oracle (tests/test_native_table.py).

use std::cell::Cell;

use pyo3::buffer::{Element, PyBuffer, ReadOnlyCell};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The "fit tier" of a cluster where no HyperNode covers the gang (`choice.NO_TIER`).
const NO_TIER: f64 = (1u64 << 20) as f64;
/// What a cluster where the gang fits only on degraded hardware adds to its score (`choice.UNHEALTHY`).
const UNHEALTHY: f64 = 4.0 * NO_TIER;

fn read<'a, T: Element>(py: Python<'a>, buffer: &'a PyBuffer<T>, len: usize, what: &str)
                        -> PyResult<&'a [ReadOnlyCell<T>]> {
    match buffer.as_slice(py) {
        Some(cells) if cells.len() == len => Ok(cells),
        Some(cells) => Err(PyValueError::new_err(format!("{what}: {} items, {len} expected", cells.len()))),
        None => Err(PyValueError::new_err(format!("{what}: not a C-contiguous array"))),
    }
}

fn write<'a, T: Element>(py: Python<'a>, buffer: &'a PyBuffer<T>, len: usize, what: &str)
                         -> PyResult<&'a [Cell<T>]> {
    match buffer.as_mut_slice(py) {
        Some(cells) if cells.len() == len => Ok(cells),
        Some(cells) => Err(PyValueError::new_err(format!("{what}: {} items, {len} expected", cells.len()))),
        None => Err(PyValueError::new_err(format!("{what}: not a writable C-contiguous array"))),
    }
}

/// Whether every amount of `row` is at least the one beside it in `need`.
#[inline]
fn covers(row: &[ReadOnlyCell<i64>], need: &[i64]) -> bool {
    row.iter().zip(need).all(|(have, &want)| have.get() >= want)
}

/// The tables' shapes, checked against each other: (clusters, tiers per cluster, resources).
fn dimensions(clusters: usize, tiers: usize, resources: usize) -> PyResult<usize> {
    if resources == 0 || clusters == 0 || tiers % (clusters * resources) != 0 || tiers == 0 {
        return Err(PyValueError::new_err("table_scores: the tier table is not clusters x tiers x resources"));
    }
    Ok(tiers / (clusters * resources))
}

/// `ClusterTable._scores` written into `out` at the clusters `rows` (every cluster when None): per cluster, twice
/// the lowest HyperNode tier that covers the gang (`NO_TIER` when none does) plus the largest share of a resource the
/// gang asks for that would be left over, plus `UNHEALTHY` where it fits only on degraded hardware; infinite where
/// it does not fit (not selected, not enough free, its largest pod on no node, too few nodes for its pods, no tier
/// within a hard limit).
#[pyfunction]
#[pyo3(signature = (out, rows, free, tiers, healthy, selects, rooms, pods, request, largest, columns, amounts,
                    weights, hard_limit, healthy_limit))]
#[allow(clippy::too_many_arguments)]
pub fn table_scores(py: Python<'_>, out: PyBuffer<f64>, rows: Option<Vec<usize>>, free: PyBuffer<i64>,
                    tiers: PyBuffer<i64>, healthy: Option<PyBuffer<i64>>, selects: PyBuffer<u8>,
                    rooms: Option<PyBuffer<i64>>, pods: i64, request: Vec<i64>, largest: Vec<i64>,
                    columns: Vec<usize>, amounts: Vec<i64>, weights: Vec<f64>, hard_limit: Option<usize>,
                    healthy_limit: usize) -> PyResult<()> {
    let k = request.len();
    let n = selects.item_count();
    if largest.len() != k || amounts.len() != columns.len() || weights.len() != columns.len()
        || columns.iter().any(|&c| c >= k) {
        return Err(PyValueError::new_err("table_scores: the gang's rows do not match the table's resources"));
    }
    let levels = dimensions(n, tiers.item_count(), k)?;
    let top = levels - 1;
    let out = write(py, &out, n, "out")?;
    let free = read(py, &free, n * k, "free")?;
    let tiers = read(py, &tiers, n * levels * k, "tiers")?;
    let healthy = match &healthy {
        Some(table) => Some(read(py, table, n * levels * k, "healthy")?),
        None => None,
    };
    let selects = read(py, &selects, n, "selects")?;
    let rooms = match &rooms {
        Some(rooms) => Some(read(py, rooms, n, "rooms")?),
        None => None,
    };
    let hard = hard_limit.map(|limit| limit.min(top));
    let healthy_limit = healthy_limit.min(top);
    let score = |i: usize| -> f64 {
        let free = &free[i * k..(i + 1) * k];
        let tiers = &tiers[i * levels * k..(i + 1) * levels * k];
        if selects[i].get() == 0 || !covers(free, &request) || !covers(&tiers[..k], &largest) {
            return f64::INFINITY;
        }
        if let Some(rooms) = rooms {
            if rooms[i].get() < pods {
                return f64::INFINITY;
            }
        }
        let first = (1..=top).find(|&t| covers(&tiers[t * k..(t + 1) * k], &request));
        if let Some(limit) = hard {
            if !first.is_some_and(|t| t <= limit) {
                return f64::INFINITY;
            }
        }
        let fit_tier = first.map_or(NO_TIER, |t| t as f64);
        let mut left = 0.0;
        for (j, (&c, (&a, &w))) in columns.iter().zip(amounts.iter().zip(&weights)).enumerate() {
            let l = (free[c].get() - a) as f64 * w;
            if j == 0 || l > left {
                left = l;
            }
        }
        let mut score = fit_tier * 2.0 + left;
        if let Some(healthy) = healthy {
            let healthy = &healthy[i * levels * k..(i + 1) * levels * k];
            let fits = covers(&healthy[..k], &largest)
                && (1..=healthy_limit).any(|t| covers(&healthy[t * k..(t + 1) * k], &request));
            score += if fits { 0.0 } else { UNHEALTHY };
        }
        score
    };
    match rows {
        Some(rows) => {
            if rows.iter().any(|&i| i >= n) {
                return Err(PyValueError::new_err("table_scores: a row past the table"));
            }
            for i in rows {
                out[i].set(score(i));
            }
        }
        None => {
            for (i, cell) in out.iter().enumerate() {
                cell.set(score(i));
            }
        }
    }
    Ok(())
}

/// `ClusterTable.reserve`'s arithmetic for cluster `row`: the gang's request off its free room, and no HyperNode
/// (healthy or not) left with more of a resource the gang asks for than the whole cluster now has free, nor below 0.
#[pyfunction]
#[pyo3(signature = (row, request, free, tiers, healthy))]
pub fn table_reserve(py: Python<'_>, row: usize, request: PyBuffer<i64>, free: PyBuffer<i64>, tiers: PyBuffer<i64>,
                     healthy: Option<PyBuffer<i64>>) -> PyResult<()> {
    let k = request.item_count();
    let request: Vec<i64> = read(py, &request, k, "request")?.iter().map(ReadOnlyCell::get).collect();
    if k == 0 || free.item_count() % k != 0 || row >= free.item_count() / k {
        return Err(PyValueError::new_err("table_reserve: the row or request does not match the table"));
    }
    let n = free.item_count() / k;
    let levels = dimensions(n, tiers.item_count(), k)?;
    let free = write(py, &free, n * k, "free")?;
    let free = &free[row * k..(row + 1) * k];
    for (cell, &a) in free.iter().zip(&request) {
        cell.set(cell.get() - a);
    }
    let capped = |table: &[Cell<i64>]| {
        let table = &table[row * levels * k..(row + 1) * levels * k];
        for (r, &a) in request.iter().enumerate() {
            if a > 0 {
                let most = free[r].get();
                for t in 0..levels {
                    let cell = &table[t * k + r];
                    cell.set(cell.get().min(most).max(0));
                }
            }
        }
    };
    capped(write(py, &tiers, n * levels * k, "tiers")?);
    if let Some(healthy) = &healthy {
        capped(write(py, healthy, n * levels * k, "healthy")?);
    }
    Ok(())
}
