//! SVG plots (being written).

use crate::check::Program;
use crate::machine::Machine;
use crate::plan::cost::ProgramCost;
use std::path::Path;

/// Writes a roofline of `cost`'s statements against `machine` to `path`. `measured` gives a
/// measured time in seconds per statement where one is known.
pub fn roofline(
    path: &Path,
    program: &Program,
    cost: &ProgramCost,
    machine: &Machine,
    measured: &[Option<f64>],
) -> Result<(), crate::Diagnostic> {
    let _ = (path, program, cost, machine, measured);
    Ok(())
}
