//! Types of the checked program: shapes with axis names, formats, and the resolved forms of
//! pattern operations (einops recipes and einsum specs) that later stages consume.

use crate::dtype::DType;
use std::fmt;

/// One axis of a shape: an optional name and a known extent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Axis {
    pub name: Option<String>,
    pub extent: u64,
}

impl Axis {
    pub fn named(name: impl Into<String>, extent: u64) -> Axis {
        Axis {
            name: Some(name.into()),
            extent,
        }
    }
    pub fn anon(extent: u64) -> Axis {
        Axis { name: None, extent }
    }
}

/// An ordered list of axes. Rank 0 is a scalar.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Axis>);

impl Shape {
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    pub fn extents(&self) -> Vec<u64> {
        self.0.iter().map(|a| a.extent).collect()
    }
    /// Number of elements, or `None` if it overflows u64.
    pub fn n_elems(&self) -> Option<u64> {
        self.0
            .iter()
            .try_fold(1u64, |acc, a| acc.checked_mul(a.extent))
    }
}

impl fmt::Display for Shape {
    /// `[batch=2, seq=8, 4]`: named axes show `name=extent`, anonymous ones the extent only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            match &a.name {
                Some(n) => write!(f, "{n}={}", a.extent)?,
                None => write!(f, "{}", a.extent)?,
            }
        }
        write!(f, "]")
    }
}

/// A tensor's storage scheme. Part of its type: the checker validates it, `cost` counts by it,
/// and later backends pick kernels by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Dense,
    Coo,
    Csr,
    Csc,
    /// Block sparse rows with `rows × cols` blocks over the last two axes.
    Bsr {
        rows: u64,
        cols: u64,
    },
    /// At most 2 nonzeros in every group of 4 along slot `slot`.
    TwoFour {
        slot: usize,
    },
}

impl Format {
    pub fn is_sparse(self) -> bool {
        self != Format::Dense
    }
}

/// A tensor type: dtype, shape and format.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
    pub format: Format,
}

/// Where an output elementary axis of a pattern operation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutElem {
    /// Input elementary axis number `i` (an index into [`Recipe::in_elems`]).
    In(usize),
    /// A new axis of this extent (repeat), along which the value is copied.
    New(u64),
}

/// The resolved meaning of a `rearrange`, `reduce` or `repeat` on one input shape: the input is
/// split into elementary axes, some are reduced away, new ones may be added, and the remaining
/// ones are grouped into the output slots. Every einops pattern operation is this one map.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Recipe {
    /// Extents of the input's elementary axes, in input order: input slot `s` is the row-major
    /// composition of `in_groups[s]`.
    pub in_elems: Vec<u64>,
    /// For each input slot, the elementary axes composing it (in order; empty for a unit slot
    /// such as `1` or `()`, whose extent must be 1).
    pub in_groups: Vec<Vec<usize>>,
    /// Input elementary axes that are reduced away (always empty for rearrange and repeat).
    pub reduced: Vec<usize>,
    /// For each output slot, the elementary axes composing it, row-major. An empty group is a
    /// unit axis of extent 1.
    pub out_groups: Vec<Vec<OutElem>>,
    /// Name of each output slot: the axis name for a single named elementary axis, `None`
    /// for compositions, units and anonymous axes.
    pub out_names: Vec<Option<String>>,
}

impl Recipe {
    /// Extent of each output slot.
    pub fn out_extents(&self) -> Vec<u64> {
        self.out_groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|e| match *e {
                        OutElem::In(i) => self.in_elems[i],
                        OutElem::New(n) => n,
                    })
                    .product()
            })
            .collect()
    }
}

/// One slot (axis) of an einsum operand: the row-major composition of some labels, or a
/// broadcast slot of extent 1 standing for a larger label (only under `...`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EinsumSlot {
    pub labels: Vec<usize>,
    /// True when this operand has extent 1 here and the label is larger: numpy broadcasting,
    /// allowed only for axes covered by `...`.
    pub broadcast: bool,
}

/// A resolved einsum: labels with extents, operands as slots of labels, and the output.
/// A label that appears twice in one operand is a diagonal; a label absent from the output is
/// summed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EinsumSpec {
    /// Label names (ellipsis axes are named `...0`, `...1`, …) and extents.
    pub labels: Vec<(String, u64)>,
    pub operands: Vec<Vec<EinsumSlot>>,
    /// Output slots; composition is allowed (`-> b (h d)`).
    pub output: Vec<Vec<usize>>,
}

impl EinsumSpec {
    /// Labels each operand touches, deduplicated, in first-appearance order.
    pub fn operand_labels(&self, op: usize) -> Vec<usize> {
        let mut out = Vec::new();
        for slot in &self.operands[op] {
            for &l in &slot.labels {
                if !out.contains(&l) {
                    out.push(l);
                }
            }
        }
        out
    }

    /// Labels of the output, in order.
    pub fn output_labels(&self) -> Vec<usize> {
        self.output.iter().flatten().copied().collect()
    }

    /// Output slot extents.
    pub fn out_extents(&self) -> Vec<u64> {
        self.output
            .iter()
            .map(|g| g.iter().map(|&l| self.labels[l].1).product())
            .collect()
    }
}
