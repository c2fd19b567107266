//! The walk over a mapped program's steps, one for the device ([`crate::device`]) and the host
//! emulation ([`crate::emulate`]), so that what the emulation checks is what the device runs:
//!
//! - launches in order; a launch over a run-time row list ([`Launch::rows`]) sized by the count
//!   the host put in its list, and not launched when the list is empty;
//! - index tables ([`Table`]) built on the host from the arrays they index, and cached by step
//!   with those arrays: a run over the same pattern reuses its tables, a changed pattern
//!   rebuilds them;
//! - host steps (`sparsify`) run on host copies of the buffers they read and write.
//!
//! A [`Machine`] holds the buffers and runs the launches.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tdsl_loop::backend::{BackendError, ErrorKind};
use tdsl_loop::{BufId, Data, LoopProgram};

use crate::map::{Bins, Launch, Step, Table};

/// Where a mapped program's steps run: every buffer of the program (scratch included), and the
/// launches.
pub(crate) trait Machine {
    /// The caller's buffer `b`, an input, as it was bound.
    fn input(&self, b: BufId) -> &Data;
    /// The contents of buffer `b` (from a device, copied back).
    fn read(&mut self, b: BufId) -> Result<Data, BackendError>;
    /// Writes `data` over the first elements of buffer `b`.
    fn write(&mut self, b: BufId, data: &Data) -> Result<(), BackendError>;
    /// Runs launch `l`, the program's step `step`, as `shape` (blocks, threads per block).
    fn launch(&mut self, step: usize, l: &Launch, shape: (u64, u64)) -> Result<(), BackendError>;
    /// Completes the launches so far: called before each step the host runs, and once after
    /// the last step.
    fn settle(&mut self) -> Result<(), BackendError>;
}

/// Index tables by step, each with the arrays it was built from.
#[derive(Default)]
pub(crate) struct Tables(Mutex<BTreeMap<usize, CachedTable>>);

type CachedTable = (Vec<Vec<i32>>, Arc<Vec<i32>>);

/// The host's share of a walk: per kernel, its host steps; and the index tables.
pub(crate) struct HostTime {
    pub steps: Vec<Duration>,
    pub tables: Duration,
}

fn run_error(message: impl Into<String>) -> BackendError {
    BackendError::new(ErrorKind::Run, message)
}

/// Runs `steps` of the mapped program `p` on `m`, with the tables of earlier runs in `tables`.
pub(crate) fn walk(
    p: &LoopProgram,
    steps: &[Step],
    tables: &Tables,
    m: &mut impl Machine,
) -> Result<HostTime, BackendError> {
    let mut time = HostTime {
        steps: vec![Duration::ZERO; p.kernels.len()],
        tables: Duration::ZERO,
    };
    // The counts of each row list the host filled (long rows, short rows), by list.
    let mut listed = BTreeMap::new();
    for (si, step) in steps.iter().enumerate() {
        match step {
            Step::Launch(l) => {
                let shape = match l.rows {
                    Some(rows) => {
                        let (long, short) = listed.get(&rows.list).copied().unwrap_or((0, 0));
                        let count: u64 = if rows.long { long } else { short };
                        l.shape_listed(count.saturating_mul(rows.inner))
                    }
                    None => l.shape(),
                };
                // An empty list: nothing to launch.
                if shape.0 > 0 {
                    m.launch(si, l, shape)?;
                }
            }
            Step::Table { kernel, table } => {
                m.settle()?;
                let t = Instant::now();
                let filled =
                    table_for(p, si, table, tables, m).map_err(|e| e.in_kernel(*kernel))?;
                if let Table::Rows(_) = table {
                    listed.insert(table.buf(), Bins::counts(&filled));
                }
                m.write(table.buf(), &Data::I32(filled.to_vec()))?;
                time.tables += t.elapsed();
            }
            Step::Host { kernel, call } => {
                m.settle()?;
                let t = Instant::now();
                let mut host: Vec<Data> = p.buffers.iter().map(|b| Data::zeros(b.ty, 0)).collect();
                for id in call.reads() {
                    host[id.0 as usize] = m.read(id)?;
                }
                for id in call.writes() {
                    let b = p.buffer(id);
                    host[id.0 as usize] = Data::zeros(b.ty, b.elems as usize);
                }
                crate::host_call(call, &mut host)
                    .map_err(|msg| run_error(msg).in_kernel(*kernel))?;
                for id in call.writes() {
                    m.write(id, &host[id.0 as usize])?;
                }
                time.steps[*kernel] += t.elapsed();
            }
        }
    }
    m.settle()?;
    Ok(time)
}

/// The table of step `si`: the cached one when the arrays it indexes are those it was built
/// from, else built now (and cached). An input's arrays are the caller's; others (a host
/// step's result) are read back.
fn table_for(
    p: &LoopProgram,
    si: usize,
    table: &Table,
    tables: &Tables,
    m: &mut impl Machine,
) -> Result<Arc<Vec<i32>>, BackendError> {
    let mut copied = Vec::new();
    for b in table.reads() {
        if !p.buffer(b).role.is_input() {
            copied.push((b, m.read(b)?));
        }
    }
    let mut data = Vec::new();
    for b in table.reads() {
        let d = match copied.iter().find(|c| c.0 == b) {
            Some((_, d)) => d,
            None => m.input(b),
        };
        let Data::I32(v) = d else {
            return Err(run_error("index arrays that are not i32"));
        };
        data.push(v.as_slice());
    }
    let cached = tables
        .0
        .lock()
        .ok()
        .and_then(|c| c.get(&si).filter(|e| e.0 == data).map(|e| e.1.clone()));
    if let Some(filled) = cached {
        return Ok(filled);
    }
    let filled = Arc::new(
        table
            .fill(&data, p.buffer(table.buf()).elems)
            .map_err(run_error)?,
    );
    if let Ok(mut c) = tables.0.lock() {
        let arrays = data.iter().map(|a| a.to_vec()).collect();
        c.insert(si, (arrays, filled.clone()));
    }
    Ok(filled)
}
