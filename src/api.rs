//! The public Rust API: compile a script once, run it many times on the CPU JIT.
//!
//! - [`Program::compile`] parses and checks a script. Axis extents may be left to the data:
//!   a script whose input extents are unknown until tensors are bound still compiles (see
//!   [`Program`] for what is checked when).
//! - [`Program::run`] (or the [`Program::bind`] builder) binds tensors to inputs by name and runs
//!   the script with the JIT (`runtime`). The checked program, its plan and the compiled kernels
//!   are cached inside the [`Program`] per *input signature* (names, dtypes and shapes of the
//!   bound tensors), so a second run with the same shapes does no checking, planning or
//!   compiling.
//! - [`Outputs`] holds the results by name and in `output` order, with their types (axis names,
//!   dtype, format).
//! - [`Tensor`] (from `crate::tensor`) gains constructors and accessors over `&[T]` here;
//!   [`TensorView`] borrows caller memory. [`Element`] is the set of element types (`f32`,
//!   `f64`, [`f16`](struct@f16), [`bf16`](struct@bf16)).
//!
//! The macros (`tdsl::einsum!` and friends, crate `tdsl-macros`) expand to calls into the
//! hidden `__private` module at the bottom of this file: each call site keeps a cache of
//! one-statement programs keyed by its operands' dtypes and shapes.
//!
//! Data movement: kernels run on buffers that own their elements (`tdsl_loop::Data`), so a
//! tensor passed *by value* ([`TensorArg::Owned`]) is moved into its buffer without copying,
//! and a borrowed one (`&Tensor`, [`TensorView`], the macros' operands) is copied once.

use crate::bind::{bind_inputs, Provided};
use crate::check::{self, Binding};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::dtype::DType;
use crate::session::{Engine, MemoryUse, Options, Pipeline};
use crate::tensor::{Storage, Tensor};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tdsl_syntax::ast::{self, StmtKind};
use tdsl_syntax::pattern as syntax_pattern;
use tdsl_syntax::Span;

pub use crate::check::{Axis, Format, Shape, TensorType};
pub use half::{bf16, f16};

// ---------------------------------------------------------------------------------------------
// Elements, tensors and views
// ---------------------------------------------------------------------------------------------

mod sealed {
    pub trait Sealed {}
}

/// Borrowed elements of one dtype: what a [`TensorView`] points at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Slice<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl Slice<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            Slice::F32(_) => DType::F32,
            Slice::F64(_) => DType::F64,
            Slice::F16(_) => DType::F16,
            Slice::BF16(_) => DType::BF16,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Slice::F32(s) => s.len(),
            Slice::F64(s) => s.len(),
            Slice::F16(s) => s.len(),
            Slice::BF16(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn to_storage(self) -> Storage {
        match self {
            Slice::F32(s) => Storage::F32(s.to_vec()),
            Slice::F64(s) => Storage::F64(s.to_vec()),
            Slice::F16(s) => Storage::F16(s.to_vec()),
            Slice::BF16(s) => Storage::BF16(s.to_vec()),
        }
    }
}

/// An element type tdsl computes on: `f32`, `f64`, [`f16`](struct@f16) or [`bf16`](struct@bf16)
/// (sealed: the set is tdsl's dtypes).
pub trait Element: sealed::Sealed + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The tdsl dtype of this Rust type.
    const DTYPE: DType;
    #[doc(hidden)]
    fn into_storage(v: Vec<Self>) -> Storage;
    #[doc(hidden)]
    fn from_storage(s: Storage) -> Result<Vec<Self>, Storage>;
    #[doc(hidden)]
    fn storage_slice(s: &Storage) -> Option<&[Self]>;
    #[doc(hidden)]
    fn storage_slice_mut(s: &mut Storage) -> Option<&mut [Self]>;
    #[doc(hidden)]
    fn to_view(s: &[Self]) -> Slice<'_>;
    #[doc(hidden)]
    fn from_view(s: Slice<'_>) -> Option<&[Self]>;
}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn into_storage(v: Vec<Self>) -> Storage {
                Storage::$variant(v)
            }
            fn from_storage(s: Storage) -> Result<Vec<Self>, Storage> {
                match s {
                    Storage::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
            fn storage_slice(s: &Storage) -> Option<&[Self]> {
                match s {
                    Storage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn storage_slice_mut(s: &mut Storage) -> Option<&mut [Self]> {
                match s {
                    Storage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn to_view(s: &[Self]) -> Slice<'_> {
                Slice::$variant(s)
            }
            fn from_view(s: Slice<'_>) -> Option<&[Self]> {
                match s {
                    Slice::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

element!(f32, F32);
element!(f64, F64);
element!(f16, F16);
element!(bf16, BF16);

/// `n` default values, or `None` where the allocation fails (no abort).
fn zeroed<T: Clone + Default>(n: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, T::default());
    Some(v)
}

fn check_len(shape: &[usize], n: usize) -> Result<(), Diagnostic> {
    let want = shape.iter().try_fold(1usize, |a, &e| a.checked_mul(e));
    if want == Some(n) {
        return Ok(());
    }
    let want = want.map_or("more than usize::MAX".to_string(), |w| w.to_string());
    Err(Diagnostic::new(
        Code::ShapeMismatch,
        format!("shape {shape:?} has {want} elements, but {n} values were given"),
    )
    .help("the values are read in row-major (C) order; their number must be the product of the extents"))
}

/// Constructors and typed access for users of the API. A [`Tensor`] is dense and row-major; its
/// axis names and format, when it comes out of a program, are in [`Outputs::ty`].
impl Tensor {
    /// A tensor that takes ownership of `data` (no copy), read in row-major order.
    ///
    /// ```
    /// let t = tdsl::Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    /// assert_eq!(t.shape(), [2, 3]);
    /// assert_eq!(t.dtype(), tdsl::DType::F32);
    /// assert!(tdsl::Tensor::from_vec(vec![1.0f32; 5], &[2, 3]).is_err());
    /// ```
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor, Diagnostic> {
        check_len(shape, data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            data: T::into_storage(data),
        })
    }

    /// A tensor holding a copy of `data`, read in row-major order. To avoid the copy, use
    /// [`Tensor::from_vec`] or borrow the slice with [`TensorView::new`].
    ///
    /// ```
    /// let t = tdsl::Tensor::from_slice(&[1.0f64, 2.0], &[2]).unwrap();
    /// assert_eq!(t.as_slice::<f64>(), Some(&[1.0, 2.0][..]));
    /// ```
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor, Diagnostic> {
        check_len(shape, data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            data: T::into_storage(data.to_vec()),
        })
    }

    /// A tensor of zeros. Its memory is reserved fallibly: a shape whose element count
    /// overflows, or that this machine cannot allocate, is `tdsl::io::too_large`, never an
    /// abort.
    ///
    /// ```
    /// let t = tdsl::Tensor::zeros(tdsl::DType::F16, &[2, 3]).unwrap();
    /// assert_eq!(t.shape(), [2, 3]);
    /// let err = tdsl::Tensor::zeros(tdsl::DType::F32, &[1_000_000; 3]).unwrap_err();
    /// assert_eq!(err.code, tdsl::Code::TooLarge);
    /// ```
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor, Diagnostic> {
        let too_large = |why: &str| {
            Diagnostic::new(
                Code::TooLarge,
                format!("a {dtype} tensor of shape {shape:?} {why}"),
            )
            .help("reduce the extents")
        };
        let n = shape
            .iter()
            .try_fold(1usize, |a, &e| a.checked_mul(e))
            .ok_or_else(|| too_large("has more elements than usize can count"))?;
        let no_memory = || too_large("does not fit in this machine's memory");
        let data = match dtype {
            DType::F32 => Storage::F32(zeroed(n).ok_or_else(no_memory)?),
            DType::F64 => Storage::F64(zeroed(n).ok_or_else(no_memory)?),
            DType::F16 => Storage::F16(zeroed(n).ok_or_else(no_memory)?),
            DType::BF16 => Storage::BF16(zeroed(n).ok_or_else(no_memory)?),
        };
        Ok(Tensor {
            shape: shape.to_vec(),
            data,
        })
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor {
            shape: Vec::new(),
            data: T::into_storage(vec![value]),
        }
    }

    /// The elements in row-major order, without copying; `None` if `T` is not the dtype.
    ///
    /// ```
    /// let t = tdsl::Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    /// assert_eq!(t.as_slice::<f32>(), Some(&[1.0, 2.0][..]));
    /// assert_eq!(t.as_slice::<f64>(), None);
    /// ```
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::storage_slice(&self.data)
    }

    /// The elements, mutably; `None` if `T` is not the dtype.
    pub fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        T::storage_slice_mut(&mut self.data)
    }

    /// The element vector, without copying; the tensor back if `T` is not the dtype.
    pub fn into_vec<T: Element>(self) -> Result<Vec<T>, Tensor> {
        let shape = self.shape;
        T::from_storage(self.data).map_err(|data| Tensor { shape, data })
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// A borrowed view of this tensor.
    pub fn view(&self) -> TensorView<'_> {
        let data = match &self.data {
            Storage::F32(v) => Slice::F32(v),
            Storage::F64(v) => Slice::F64(v),
            Storage::F16(v) => Slice::F16(v),
            Storage::BF16(v) => Slice::BF16(v),
        };
        TensorView {
            shape: self.shape.clone(),
            data,
        }
    }
}

/// A dense, row-major tensor borrowed from caller memory: a shape over `&[T]`.
///
/// Binding a view to a program input copies its elements once into the kernel's buffer (the
/// buffers own their memory); the view itself never copies.
///
/// ```
/// let data = vec![0.5f32; 6];
/// let v = tdsl::TensorView::new(&data, &[3, 2]).unwrap();
/// assert_eq!(v.shape(), [3, 2]);
/// assert_eq!(v.as_slice::<f32>().map(|s| s.as_ptr()), Some(data.as_ptr()));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TensorView<'a> {
    shape: Vec<usize>,
    data: Slice<'a>,
}

impl<'a> TensorView<'a> {
    /// A view of `data` with `shape` (row-major); an error if the lengths disagree.
    pub fn new<T: Element>(data: &'a [T], shape: &[usize]) -> Result<TensorView<'a>, Diagnostic> {
        check_len(shape, data.len())?;
        Ok(TensorView {
            shape: shape.to_vec(),
            data: T::to_view(data),
        })
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The borrowed elements.
    pub fn data(&self) -> Slice<'a> {
        self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements; `None` if `T` is not the dtype.
    pub fn as_slice<T: Element>(&self) -> Option<&'a [T]> {
        T::from_view(self.data)
    }

    /// An owned copy.
    pub fn to_tensor(&self) -> Tensor {
        Tensor {
            shape: self.shape.clone(),
            data: self.data.to_storage(),
        }
    }
}

/// A tensor given to a program input: owned (moved into the kernel's buffer, no copy) or
/// borrowed (copied once).
#[derive(Debug, Clone, PartialEq)]
pub enum TensorArg<'a> {
    Owned(Tensor),
    View(TensorView<'a>),
}

impl TensorArg<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            TensorArg::Owned(t) => t.dtype(),
            TensorArg::View(v) => v.dtype(),
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            TensorArg::Owned(t) => &t.shape,
            TensorArg::View(v) => v.shape(),
        }
    }

    fn into_tensor(self) -> Tensor {
        match self {
            TensorArg::Owned(t) => t,
            TensorArg::View(v) => v.to_tensor(),
        }
    }
}

impl From<Tensor> for TensorArg<'_> {
    fn from(t: Tensor) -> Self {
        TensorArg::Owned(t)
    }
}

impl<'a> From<&'a Tensor> for TensorArg<'a> {
    fn from(t: &'a Tensor) -> Self {
        TensorArg::View(t.view())
    }
}

impl<'a> From<TensorView<'a>> for TensorArg<'a> {
    fn from(v: TensorView<'a>) -> Self {
        TensorArg::View(v)
    }
}

impl<'a> From<&TensorView<'a>> for TensorArg<'a> {
    fn from(v: &TensorView<'a>) -> Self {
        TensorArg::View(v.clone())
    }
}

/// Anything the macros accept as an operand: [`Tensor`], [`TensorView`], references to them,
/// and (feature `ndarray`) ndarray arrays. Operands are borrowed, never consumed.
pub trait AsInput {
    fn as_input(&self) -> TensorArg<'_>;
}

impl AsInput for Tensor {
    fn as_input(&self) -> TensorArg<'_> {
        TensorArg::View(self.view())
    }
}

impl AsInput for TensorView<'_> {
    fn as_input(&self) -> TensorArg<'_> {
        TensorArg::View(self.clone())
    }
}

impl<T: AsInput + ?Sized> AsInput for &T {
    fn as_input(&self) -> TensorArg<'_> {
        (**self).as_input()
    }
}

// ---------------------------------------------------------------------------------------------
// Outputs
// ---------------------------------------------------------------------------------------------

/// The results of a run: tensors by name and in `output` order, with their checked types.
///
/// ```
/// let p = tdsl::Program::compile(
///     "input x: f32[n=3] = arange\ny = x * 2\nz = reduce(x, \"n -> \", \"sum\")\noutput y, z",
/// )
/// .unwrap();
/// let out = p.runner().run().unwrap();
/// assert_eq!(out.names().collect::<Vec<_>>(), ["y", "z"]);
/// assert_eq!(out["y"].as_slice::<f32>(), Some(&[0.0, 2.0, 4.0][..]));
/// assert_eq!(out[1].as_slice::<f32>(), Some(&[3.0][..]));
/// assert_eq!(out.ty("y").unwrap().shape.to_string(), "[n=3]");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    names: Vec<String>,
    types: Vec<TensorType>,
    tensors: Vec<Tensor>,
}

impl Outputs {
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The output called `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.position(name).map(|i| &self.tensors[i])
    }

    /// The checked type of output `name`: dtype, shape with axis names, format.
    pub fn ty(&self, name: &str) -> Option<&TensorType> {
        self.position(name).map(|i| &self.types[i])
    }

    /// Output names in `output` order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// `(name, tensor)` in `output` order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.names.iter().map(String::as_str).zip(&self.tensors)
    }

    /// Takes output `name` out (the others keep their order).
    pub fn remove(&mut self, name: &str) -> Option<Tensor> {
        let i = self.position(name)?;
        self.names.remove(i);
        self.types.remove(i);
        Some(self.tensors.remove(i))
    }

    /// The tensors in `output` order.
    pub fn into_vec(self) -> Vec<Tensor> {
        self.tensors
    }
}

impl std::ops::Index<usize> for Outputs {
    type Output = Tensor;
    /// Panics if `i` is not below [`Outputs::len`] (Rust's `Index` convention; use
    /// [`Outputs::iter`] or `into_vec` to avoid it).
    fn index(&self, i: usize) -> &Tensor {
        &self.tensors[i]
    }
}

impl std::ops::Index<&str> for Outputs {
    type Output = Tensor;
    /// Panics if there is no output `name` (use [`Outputs::get`] to ask).
    fn index(&self, name: &str) -> &Tensor {
        match self.get(name) {
            Some(t) => t,
            None => panic!("no output named `{name}`; outputs are {:?}", self.names),
        }
    }
}

impl IntoIterator for Outputs {
    type Item = (String, Tensor);
    type IntoIter = std::iter::Zip<std::vec::IntoIter<String>, std::vec::IntoIter<Tensor>>;
    fn into_iter(self) -> Self::IntoIter {
        self.names.into_iter().zip(self.tensors)
    }
}

// ---------------------------------------------------------------------------------------------
// Programs
// ---------------------------------------------------------------------------------------------

/// Work counters: how many runs, plans and kernel compilations happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Runs started.
    pub runs: usize,
    /// Input signatures checked and planned (cache misses).
    pub plans: usize,
    /// Kernels the JIT compiled (the per-thread kernel cache can make this smaller than the
    /// number of kernels planned).
    pub kernels_compiled: usize,
}

thread_local! {
    static THREAD_STATS: Cell<JitStats> = const {
        Cell::new(JitStats { runs: 0, plans: 0, kernels_compiled: 0 })
    };
}

/// The counters of API work done on the calling thread, over every [`Program`] and macro call
/// site: a loop of `einsum!` calls with one shape adds one plan.
///
/// ```
/// let before = tdsl::jit_stats();
/// let p = tdsl::Program::compile("input x: f32[n=2] = ones\ny = x + 1\noutput y").unwrap();
/// for _ in 0..3 {
///     p.runner().run().unwrap();
/// }
/// let after = tdsl::jit_stats();
/// assert_eq!(after.runs - before.runs, 3);
/// assert_eq!(after.plans - before.plans, 1);
/// ```
pub fn jit_stats() -> JitStats {
    THREAD_STATS.with(Cell::get)
}

fn count(f: impl FnOnce(&mut JitStats)) {
    THREAD_STATS.with(|c| {
        let mut s = c.get();
        f(&mut s);
        c.set(s);
    });
}

/// How much a program's types are known before data is bound.
#[derive(Debug)]
enum State {
    /// Every extent is known from the script: the checked program.
    Checked(Box<check::Program>),
    /// Some input extents come from the data; checked again when tensors are bound.
    Deferred,
    /// Only from `program!`, whose script passed the syntax checks at compile time: errors
    /// the checker found, returned by every run.
    Invalid(Diagnostics),
}

/// The input signature a cached plan is valid for: bound names (sorted), dtypes and shapes.
type Signature = Vec<(String, DType, Vec<usize>)>;

/// A signature's cache entry: built once (successfully or not).
type CacheCell = std::sync::OnceLock<Result<Arc<Compiled>, Diagnostics>>;

/// Everything a run with one signature needs, built once by the pipeline.
struct Compiled {
    compiled: crate::session::Compiled,
    /// Initialiser data of the inputs that the signature leaves unbound.
    defaults: Vec<Option<Tensor>>,
}

struct Inner {
    source: String,
    script: ast::Script,
    state: State,
    /// The pipeline every signature is checked, planned and compiled by.
    pipe: Pipeline,
    /// One cell per signature: the first run with it builds the entry, and runs on other threads
    /// that arrive meanwhile wait for that build instead of compiling the same kernels again.
    cache: Mutex<HashMap<Signature, Arc<CacheCell>>>,
    runs: AtomicUsize,
    plans: AtomicUsize,
    kernels: AtomicUsize,
}

/// A compiled tdsl script, ready to run on the CPU JIT. Cloning is cheap and shares the cache.
///
/// **When things are checked.** [`Program::compile`] parses the script and checks it with no
/// data. If every input extent is written in the script (`f32[b=2, 64]`, `let`), that check is
/// complete and every error is reported there. If some input extents are left to the data
/// (`input x: f32[batch, d]`), the errors that say so are set aside, the patterns are checked as
/// far as no shape is needed (as the macros do at compile time), and the full check runs again
/// when tensors are bound, with their shapes: errors that depend on them (an extent mismatch, a
/// pattern that does not fit the rank) come from [`Program::run`].
///
/// **Caching.** Each run computes the input signature (bound names, dtypes, shapes). The first
/// run with a signature checks, plans and JIT-compiles the script and stores the result in the
/// program; later runs with the same signature go straight to the kernels. Inputs that are not
/// bound use their initialisers (`= randn(seed=0)`), generated once per signature.
///
/// ```
/// use tdsl::{Program, Tensor};
/// let p = Program::compile(
///     "input x: f32[rows, cols]\ninput w: f32[cols, k]\ny = einsum(x, w, \"r c, c k -> r k\")\noutput y",
/// )?;
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0], &[2, 2])?;
/// let out = p.run([("x", &x), ("w", &w)])?;
/// assert_eq!(out["y"].as_slice::<f32>(), Some(&[1.0, 2.0, 3.0, 4.0][..]));
/// // The same shapes again: no checking, planning or compiling.
/// let out = p.bind("x", &x).bind("w", &w).run()?;
/// assert_eq!(p.stats().plans, 1);
/// assert_eq!(out.ty("y").unwrap().to_string(), "f32[r=2, k=2]");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Program {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("source", &self.inner.source)
            .field("deferred", &matches!(self.inner.state, State::Deferred))
            .field("stats", &self.stats())
            .finish()
    }
}

impl std::fmt::Display for TensorType {
    /// `f32[b=2, 64] @ csr`, as `tdsl check` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&check::type_summary(self))
    }
}

/// Whether every diagnostic says an input axis has no extent yet (data can supply it).
fn extents_from_data(script: &ast::Script, diags: &Diagnostics) -> bool {
    let input_spans: Vec<Span> = script
        .stmts
        .iter()
        .filter(|s| matches!(s.kind, StmtKind::Input(_)))
        .map(|s| s.span)
        .collect();
    !diags.is_empty()
        && diags.iter().all(|d| {
            d.code == Code::UnknownExtent
                && d.span().is_some_and(|sp| {
                    input_spans
                        .iter()
                        .any(|s| s.start <= sp.start && sp.end <= s.end)
                })
        })
}

fn code_of(text: &str) -> Code {
    Code::ALL
        .iter()
        .copied()
        .find(|c| c.as_str() == text)
        .unwrap_or(Code::PatternSyntax)
}

/// The shape-free pattern checks of `tdsl_syntax::pattern` over every pattern call of a script.
fn pattern_diagnostics(script: &ast::Script) -> Diagnostics {
    let mut out = Diagnostics::default();
    for e in syntax_pattern::check_script_patterns(script) {
        let mut d = Diagnostic::new(code_of(e.error.code), e.error.message.clone())
            .label(e.span, e.error.label);
        for (s, text) in &e.others {
            d = d.label(*s, text.clone());
        }
        if let Some(h) = &e.error.help {
            d = d.help(h.clone());
        }
        out.push(d);
    }
    out
}

impl Program {
    /// Parses and checks a script (see [`Program`] for what is checked here and what when it
    /// runs).
    ///
    /// ```
    /// let err = tdsl::Program::compile("input x: f32[n=2]\ny = rearrange(x, \"a -> a b\")\noutput y")
    ///     .unwrap_err();
    /// assert_eq!(err.0[0].code, tdsl::Code::PatternAxisOneSide);
    /// ```
    pub fn compile(source: &str) -> Result<Program, Diagnostics> {
        Program::compile_with(source, Options::default())
    }

    /// [`Program::compile`] with pipeline options: the engine [`Program::run`] uses (the JIT by
    /// default; [`Engine::Eval`] runs the loop-IR evaluator) and the machine `auto` formats are
    /// chosen for (this machine's measured ceilings by default, as `tdsl run` does).
    ///
    /// ```
    /// use tdsl::session::{Engine, MachineModel, Options};
    /// let opts = Options { engine: Engine::Eval, machine: MachineModel::Nominal, ..Options::default() };
    /// let p = tdsl::Program::compile_with("input x: f32[n=2] = ones\ny = x + 1\noutput y", opts)?;
    /// assert_eq!(p.runner().run()?["y"].as_slice::<f32>(), Some(&[2.0, 2.0][..]));
    /// # Ok::<(), tdsl::Diagnostics>(())
    /// ```
    pub fn compile_with(source: &str, opts: Options) -> Result<Program, Diagnostics> {
        Program::compile_inner(source, opts).map_err(|d| d.with_source("<program>", source))
    }

    fn compile_inner(source: &str, opts: Options) -> Result<Program, Diagnostics> {
        let pipe = Pipeline::new(opts);
        let script = pipe.parse(source)?;
        // Nothing is bound yet: the plain checker (no binding root causes), API help lines.
        let state = match check::check_script_for(&script, &BTreeMap::new(), check::Entry::Api) {
            Ok(p) => State::Checked(Box::new(p)),
            Err(d) if extents_from_data(&script, &d) => {
                let patterns = pattern_diagnostics(&script);
                if !patterns.is_empty() {
                    return Err(patterns);
                }
                State::Deferred
            }
            Err(d) => return Err(d),
        };
        Ok(Program::with_state(source, script, state, pipe))
    }

    fn with_state(source: &str, script: ast::Script, state: State, pipe: Pipeline) -> Program {
        Program {
            inner: Arc::new(Inner {
                source: source.to_string(),
                script,
                state,
                pipe,
                cache: Mutex::new(HashMap::new()),
                runs: AtomicUsize::new(0),
                plans: AtomicUsize::new(0),
                kernels: AtomicUsize::new(0),
            }),
        }
    }

    /// What `program!` expands to (once per call site): the script passed the syntax and
    /// pattern checks at compile time; checker errors are kept and returned by every run.
    #[doc(hidden)]
    pub fn __from_macro(source: &str) -> Program {
        match Program::compile(source) {
            Ok(p) => p,
            Err(d) => {
                let script = crate::parse(source).unwrap_or_default();
                Program::with_state(source, script, State::Invalid(d), Pipeline::default())
            }
        }
    }

    /// The script text.
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// The checked program, when every extent is known from the script alone (`None` when
    /// extents come from the data).
    pub fn checked(&self) -> Option<&check::Program> {
        match &self.inner.state {
            State::Checked(p) => Some(p),
            _ => None,
        }
    }

    /// `Err` with the checker's diagnostics for a `program!` script that does not check.
    pub fn check(&self) -> Result<(), Diagnostics> {
        match &self.inner.state {
            State::Invalid(d) => Err(d.clone()),
            _ => Ok(()),
        }
    }

    /// Declared input names, in order.
    pub fn input_names(&self) -> Vec<&str> {
        self.inner
            .script
            .stmts
            .iter()
            .filter_map(|s| match &s.kind {
                StmtKind::Input(d) => Some(d.name.name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Output names, in `output` order.
    pub fn output_names(&self) -> Vec<&str> {
        self.inner
            .script
            .stmts
            .iter()
            .flat_map(|s| match &s.kind {
                StmtKind::Output { names } => names.iter().map(|n| n.name.as_str()).collect(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// This program's counters (runs, signatures planned, kernels compiled).
    pub fn stats(&self) -> JitStats {
        JitStats {
            runs: self.inner.runs.load(Ordering::Relaxed),
            plans: self.inner.plans.load(Ordering::Relaxed),
            kernels_compiled: self.inner.kernels.load(Ordering::Relaxed),
        }
    }

    /// Runs the program with the JIT. `inputs` are `(name, tensor)` pairs; a tensor may be
    /// owned (moved into the kernel's buffer), `&Tensor` or a [`TensorView`] (copied once).
    /// Inputs left out use their initialisers.
    pub fn run<'a, I, N, T>(&self, inputs: I) -> Result<Outputs, Diagnostics>
    where
        I: IntoIterator<Item = (N, T)>,
        N: AsRef<str>,
        T: Into<TensorArg<'a>>,
    {
        let args = inputs
            .into_iter()
            .map(|(n, t)| (n.as_ref().to_string(), t.into()))
            .collect();
        self.run_args(args, self.inner.pipe.engine())
    }

    /// Starts a run that binds inputs one by one: `p.bind("x", &x).bind("w", w).run()`.
    pub fn bind<'p, 'a>(&'p self, name: &str, tensor: impl Into<TensorArg<'a>>) -> Run<'p, 'a> {
        self.runner().bind(name, tensor)
    }

    /// A run with nothing bound yet: `p.runner().run()` runs on the initialisers alone.
    pub fn runner<'a>(&self) -> Run<'_, 'a> {
        Run {
            program: self,
            args: Vec::new(),
        }
    }

    /// Runs with `args` on `engine`; errors carry the program's source for rendering.
    fn run_args(
        &self,
        args: Vec<(String, TensorArg<'_>)>,
        engine: Engine,
    ) -> Result<Outputs, Diagnostics> {
        self.run_inner(args, engine)
            .map_err(|d| d.with_source("<program>", &self.inner.source))
    }

    fn run_inner(
        &self,
        args: Vec<(String, TensorArg<'_>)>,
        engine: Engine,
    ) -> Result<Outputs, Diagnostics> {
        if let State::Invalid(d) = &self.inner.state {
            return Err(d.clone());
        }
        self.inner.runs.fetch_add(1, Ordering::Relaxed);
        count(|s| s.runs += 1);
        let mut sig: Signature = Vec::with_capacity(args.len());
        for (name, t) in &args {
            if sig.iter().any(|(n, _, _)| n == name) {
                return Err(Diagnostic::new(
                    Code::BadArgument,
                    format!("input `{name}` is bound twice"),
                )
                .help("bind each input once")
                .into());
            }
            sig.push((name.clone(), t.dtype(), t.shape().to_vec()));
        }
        sig.sort();
        let compiled = self.compiled(sig)?;
        let c = &*compiled;

        let mut provided: BTreeMap<String, Provided> = args
            .into_iter()
            .map(|(name, t)| {
                let source = format!("the tensor bound to `{name}`");
                (
                    name,
                    Provided {
                        tensor: t.into_tensor().into(),
                        source,
                    },
                )
            })
            .collect();
        let program = c.compiled.program();
        for (input, default) in program.inputs.iter().zip(&c.defaults) {
            if let (false, Some(t)) = (provided.contains_key(&input.name), default) {
                provided.insert(
                    input.name.clone(),
                    Provided {
                        tensor: t.clone().into(),
                        source: "its initialiser".to_string(),
                    },
                );
            }
        }
        let outputs = if engine == Engine::Interp {
            crate::interp::run(program, &bind_inputs(program, provided)?)
        } else {
            let values = crate::bind::bind_values(program, provided)?;
            c.compiled.run(values, &Default::default())?.0
        };
        Ok(Outputs {
            names: program.outputs.iter().map(|o| o.name.clone()).collect(),
            types: program
                .outputs
                .iter()
                .map(|o| program.tensor_type(o.tensor).clone())
                .collect(),
            tensors: outputs,
        })
    }

    /// The cached check, plan and kernels for `sig`, built on a miss.
    fn compiled(&self, sig: Signature) -> Result<Arc<Compiled>, Diagnostics> {
        let cell = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(sig.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| self.build(&sig)).clone()
    }

    /// Checks, plans and compiles the program for `sig` (once per signature: see `compiled`).
    fn build(&self, sig: &Signature) -> Result<Arc<Compiled>, Diagnostics> {
        let bound: BTreeMap<String, Binding> = sig
            .iter()
            .map(|(name, dtype, shape)| {
                (
                    name.clone(),
                    Binding {
                        dtype: *dtype,
                        shape: shape.clone(),
                        source: format!("the tensor bound to `{name}`"),
                    },
                )
            })
            .collect();
        let pipe = &self.inner.pipe;
        let mut program = pipe.check_all_bound(&self.inner.script, &bound)?;
        pipe.check_memory(&program, MemoryUse::Run)?;
        // `auto` formats are chosen as `tdsl run` chooses them: the same pipeline, machine
        // and stored-entry counts (no data is bound yet, so counts come from the types).
        let stored: Vec<_> = program
            .inputs
            .iter()
            .map(|i| crate::plan::cost::stored(&i.ty, None))
            .collect();
        pipe.resolve_auto(&mut program, &stored, &[]);
        let mut diags = Diagnostics::default();
        if program.outputs.is_empty() {
            diags.push(
                Diagnostic::new(Code::NoOutput, "the script has no `output` statement")
                    .help("add `output NAME` naming the tensors to produce"),
            );
        }
        let mut defaults = Vec::with_capacity(program.inputs.len());
        for input in &program.inputs {
            if bound.contains_key(&input.name) {
                defaults.push(None);
                continue;
            }
            match &input.init {
                Some(init) => defaults.push(Some(crate::init::generate(init, &input.ty))),
                None => {
                    defaults.push(None);
                    diags.push(
                        Diagnostic::new(
                            Code::MissingInput,
                            format!("input `{}` has no data and no initialiser", input.name),
                        )
                        .label(input.span, "no data bound")
                        .help(format!(
                            "bind it: `program.bind(\"{}\", &tensor)`, or give it an initialiser such as `= randn(seed=0)`",
                            input.name
                        )),
                    );
                }
            }
        }
        if !diags.is_empty() {
            return Err(diags);
        }
        let compiled = pipe.compile(program)?;
        let n_compiled = compiled.n_compiled();
        self.inner.plans.fetch_add(1, Ordering::Relaxed);
        self.inner.kernels.fetch_add(n_compiled, Ordering::Relaxed);
        count(|s| {
            s.plans += 1;
            s.kernels_compiled += n_compiled;
        });
        Ok(Arc::new(Compiled { compiled, defaults }))
    }
}

/// A run being put together with [`Program::bind`].
#[must_use = "call .run() to run the program"]
pub struct Run<'p, 'a> {
    program: &'p Program,
    args: Vec<(String, TensorArg<'a>)>,
}

impl<'a> Run<'_, 'a> {
    /// Binds one more input.
    pub fn bind(mut self, name: &str, tensor: impl Into<TensorArg<'a>>) -> Self {
        self.args.push((name.to_string(), tensor.into()));
        self
    }

    /// Runs with the program's engine (the JIT unless [`Program::compile_with`] chose another).
    pub fn run(self) -> Result<Outputs, Diagnostics> {
        let engine = self.program.inner.pipe.engine();
        self.program.run_args(self.args, engine)
    }

    /// Runs with the reference interpreter (`crate::interp`: f64 accumulation, naive loops),
    /// the oracle the JIT is tested against. Same checks, same [`Outputs`].
    pub fn run_reference(self) -> Result<Outputs, Diagnostics> {
        self.program.run_args(self.args, Engine::Interp)
    }
}

// ---------------------------------------------------------------------------------------------
// ndarray
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "ndarray")]
mod ndarray_impls {
    //! Conversions between [`Tensor`] / [`TensorView`] and ndarray arrays (feature `ndarray`).

    use super::{AsInput, Element, TensorArg, TensorView};
    use crate::diag::{Code, Diagnostic};
    use crate::tensor::Tensor;
    use ndarray::{Array, ArrayBase, ArrayD, ArrayView, Dimension, IxDyn};

    /// Takes the array's buffer without copying when it is in standard (row-major, contiguous)
    /// layout; otherwise copies the elements in row-major order. Any rank: `Array2`, `ArrayD`, …
    impl<T: Element, D: Dimension> From<Array<T, D>> for Tensor {
        fn from(a: Array<T, D>) -> Tensor {
            let shape = a.shape().to_vec();
            let n = a.len();
            let data = if a.is_standard_layout() {
                let (v, offset) = a.into_raw_vec_and_offset();
                let offset = offset.unwrap_or(0);
                if offset == 0 && v.len() == n {
                    v
                } else {
                    v[offset..offset + n].to_vec()
                }
            } else {
                a.iter().copied().collect()
            };
            Tensor {
                shape,
                data: T::into_storage(data),
            }
        }
    }

    /// Borrows a view of any rank without copying; fails unless it is in standard (row-major,
    /// contiguous) layout (use `.as_standard_layout()` first, or pass `&array` to
    /// `Program::run`, which copies only what is not row-major).
    impl<'a, T: Element, D: Dimension> TryFrom<ArrayView<'a, T, D>> for TensorView<'a> {
        type Error = Diagnostic;
        fn try_from(v: ArrayView<'a, T, D>) -> Result<TensorView<'a>, Diagnostic> {
            let shape = v.shape().to_vec();
            match v.to_slice() {
                Some(s) => TensorView::new(s, &shape),
                None => Err(Diagnostic::new(
                    Code::BadArgument,
                    format!("the array view of shape {shape:?} is not in standard (row-major, contiguous) layout"),
                )
                .help("call `.as_standard_layout()` on it, or convert an owned array with `Tensor::from`")),
            }
        }
    }

    impl<S, D, T> AsInput for ArrayBase<S, D>
    where
        S: ndarray::Data<Elem = T>,
        D: Dimension,
        T: Element,
    {
        /// Borrowed when in standard layout, otherwise copied in row-major order.
        fn as_input(&self) -> TensorArg<'_> {
            match self.as_slice() {
                Some(s) => TensorArg::View(TensorView {
                    shape: self.shape().to_vec(),
                    data: T::to_view(s),
                }),
                None => TensorArg::Owned(Tensor {
                    shape: self.shape().to_vec(),
                    data: T::into_storage(self.iter().copied().collect()),
                }),
            }
        }
    }

    /// `&array` as a program input: borrowed when row-major and contiguous, else copied once in
    /// row-major order. (Kernels read inputs row-major, so a strided view is packed.)
    impl<'a, S, D, T> From<&'a ArrayBase<S, D>> for TensorArg<'a>
    where
        S: ndarray::Data<Elem = T>,
        D: Dimension,
        T: Element,
    {
        fn from(a: &'a ArrayBase<S, D>) -> TensorArg<'a> {
            a.as_input()
        }
    }

    /// An owned array as a program input: moved into the kernel's buffer when row-major.
    impl<'a, T: Element, D: Dimension> From<Array<T, D>> for TensorArg<'a> {
        fn from(a: Array<T, D>) -> TensorArg<'a> {
            TensorArg::Owned(Tensor::from(a))
        }
    }

    impl Tensor {
        /// A copy as an ndarray array of a static rank (`Ix2`, …, or `IxDyn`); `None` if `T`
        /// is not the dtype or the rank is not `D`'s.
        ///
        /// ```
        /// use ndarray::{array, Ix2};
        /// let p = tdsl::Program::compile("input a: f32[i, j]\ny = a * 2\noutput y")?;
        /// let a = array![[1.0f32, 2.0], [3.0, 4.0]];
        /// let out = p.run([("a", &a)])?;                 // arrays bind as they are
        /// let y = out["y"].to_array::<f32, Ix2>().unwrap();
        /// assert_eq!(y, array![[2.0f32, 4.0], [6.0, 8.0]]);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn to_array<T: Element, D: Dimension>(&self) -> Option<Array<T, D>> {
            self.to_ndarray::<T>()?.into_dimensionality::<D>().ok()
        }

        /// The tensor as an array of static rank `D`, without copying; the tensor back if `T`
        /// is not the dtype or the rank is not `D`'s.
        pub fn into_array<T: Element, D: Dimension>(self) -> Result<Array<T, D>, Tensor> {
            if D::NDIM.is_some_and(|n| n != self.rank()) {
                return Err(self);
            }
            let a = self.into_ndarray::<T>()?;
            // The rank was checked above.
            a.into_dimensionality::<D>().map_err(|_| Tensor {
                shape: Vec::new(),
                data: T::into_storage(Vec::new()),
            })
        }

        /// A copy as an ndarray array; `None` if `T` is not the dtype.
        ///
        /// ```
        /// use ndarray::{ArrayD, IxDyn};
        /// let a = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
        /// // Arrays are operands of the macros as they are (borrowed when row-major).
        /// let sums = tdsl::reduce!(a, "i j -> i", sum)?;
        /// let sums = sums.to_ndarray::<f32>().ok_or("not f32")?;
        /// assert_eq!(sums.as_slice(), Some(&[6.0, 15.0][..]));
        /// // An owned array becomes a tensor: moved when row-major, else copied in row-major order.
        /// let t = tdsl::Tensor::from(a.t().to_owned());
        /// assert_eq!(t.shape(), [3, 2]);
        /// assert_eq!(t.as_slice::<f32>(), Some(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0][..]));
        /// let v = tdsl::TensorView::try_from(a.view())?;
        /// assert_eq!(v.as_slice::<f32>().map(|s| s.as_ptr()), Some(a.as_ptr()));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn to_ndarray<T: Element>(&self) -> Option<ArrayD<T>> {
            let s = self.as_slice::<T>()?;
            ArrayD::from_shape_vec(IxDyn(&self.shape), s.to_vec()).ok()
        }

        /// The tensor as an ndarray array, without copying; the tensor back if `T` is not the
        /// dtype.
        pub fn into_ndarray<T: Element>(self) -> Result<ArrayD<T>, Tensor> {
            let shape = self.shape.clone();
            let v = self.into_vec::<T>()?;
            // Tensors always hold the product of their extents, so the shape fits.
            ArrayD::from_shape_vec(IxDyn(&shape), v).map_err(|_| Tensor {
                shape: Vec::new(),
                data: T::into_storage(Vec::new()),
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn round_trips_without_copying() {
            let a =
                ArrayD::from_shape_vec(IxDyn(&[2, 3]), (0..6).map(|i| i as f32).collect()).unwrap();
            let ptr = a.as_ptr();
            let t = Tensor::from(a);
            assert_eq!(t.shape(), [2, 3]);
            assert_eq!(t.as_slice::<f32>().map(|s| s.as_ptr()), Some(ptr));
            let back = t.into_ndarray::<f32>().unwrap();
            assert_eq!(back.as_ptr(), ptr);
            let transposed = back.t().to_owned();
            let t = Tensor::from(transposed);
            assert_eq!(
                t.as_slice::<f32>(),
                Some(&[0.0, 3.0, 1.0, 4.0, 2.0, 5.0][..])
            );
            let view = back.view();
            let v = TensorView::try_from(view).unwrap();
            assert_eq!(v.as_slice::<f32>().map(|s| s.as_ptr()), Some(ptr));
            assert!(TensorView::try_from(back.t()).is_err());
            assert_eq!(Tensor::from(back.clone()).to_ndarray::<f32>(), Some(back));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the macros expand to
// ---------------------------------------------------------------------------------------------

#[doc(hidden)]
pub mod __private {
    //! Support for the `tdsl-macros` expansions; not a stable API.

    pub use super::AsInput;
    use super::{Program, TensorArg};
    use crate::diag::{Code, Diagnostic, Diagnostics};
    use crate::dtype::DType;
    use crate::tensor::Tensor;
    use std::collections::HashMap;
    use std::fmt::Write;
    use std::sync::{Mutex, OnceLock, PoisonError};

    /// Which operation a macro call site runs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Op {
        Einsum,
        Rearrange,
        Reduce(&'static str),
        Repeat,
    }

    /// An axis length given to a macro: any integer; negative ones are reported at run time.
    pub trait AxisLen {
        fn axis_len(self) -> Option<u64>;
    }

    macro_rules! axis_len {
        ($($t:ty),*) => {$(
            impl AxisLen for $t {
                fn axis_len(self) -> Option<u64> {
                    u64::try_from(self).ok()
                }
            }
        )*};
    }
    axis_len!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

    pub fn axis_len<T: AxisLen>(v: T) -> Option<u64> {
        v.axis_len()
    }

    type Key = (Vec<(DType, Vec<usize>)>, Vec<u64>);

    /// One macro call site: its pattern, and a program per operand signature.
    pub struct CallSite {
        op: Op,
        pattern: &'static str,
        macro_name: &'static str,
        location: (&'static str, u32, u32),
        programs: OnceLock<Mutex<HashMap<Key, (Program, usize)>>>,
    }

    impl CallSite {
        pub const fn new(
            op: Op,
            pattern: &'static str,
            macro_name: &'static str,
            file: &'static str,
            line: u32,
            column: u32,
        ) -> CallSite {
            CallSite {
                op,
                pattern,
                macro_name,
                location: (file, line, column),
                programs: OnceLock::new(),
            }
        }

        /// Runs the call: the program for these operand shapes is built (and its kernels
        /// compiled) on the first call with them and reused afterwards.
        pub fn call(
            &self,
            operands: Vec<TensorArg<'_>>,
            lengths: &[(&'static str, Option<u64>)],
        ) -> Result<Tensor, Diagnostics> {
            let mut values = Vec::with_capacity(lengths.len());
            for &(name, v) in lengths {
                match v {
                    Some(v) => values.push(v),
                    None => {
                        return Err(self
                            .locate(
                                Diagnostic::new(
                                    Code::PatternBadKwarg,
                                    format!("axis length `{name}` is negative or too large"),
                                )
                                .help("axis lengths are positive integers"),
                                None,
                            )
                            .into())
                    }
                }
            }
            let key: Key = (
                operands
                    .iter()
                    .map(|t| (t.dtype(), t.shape().to_vec()))
                    .collect(),
                values,
            );
            let programs = self.programs.get_or_init(|| Mutex::new(HashMap::new()));
            let cached = programs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
                .cloned();
            let (program, pattern_at) = match cached {
                Some(p) => p,
                None => {
                    let (script, at) = self.script(&key, lengths);
                    let p = Program::compile(&script).map_err(|d| self.remap(d, at))?;
                    programs
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(key)
                        .or_insert((p, at))
                        .clone()
                }
            };
            let names = self.operand_names(operands.len());
            let args = names.into_iter().zip(operands).collect::<Vec<_>>();
            let mut out = program
                .run_args(args, super::Engine::Jit)
                .map_err(|d| self.remap(d, pattern_at))?;
            out.remove("y").ok_or_else(|| {
                self.remap(
                    Diagnostic::new(Code::Internal, "the macro's program has no output `y`").into(),
                    pattern_at,
                )
            })
        }

        fn operand_names(&self, n: usize) -> Vec<String> {
            match self.op {
                Op::Einsum => (1..=n).map(|i| format!("x{i}")).collect(),
                _ => vec!["x".to_string()],
            }
        }

        /// The one-statement script for these operands, and where the pattern starts in it.
        fn script(&self, key: &Key, lengths: &[(&'static str, Option<u64>)]) -> (String, usize) {
            let names = self.operand_names(key.0.len());
            let mut s = String::new();
            for (name, (dtype, shape)) in names.iter().zip(&key.0) {
                let extents: Vec<String> = shape.iter().map(|e| e.to_string()).collect();
                let _ = writeln!(s, "input {name}: {dtype}[{}]", extents.join(", "));
            }
            let func = match self.op {
                Op::Einsum => "einsum",
                Op::Rearrange => "rearrange",
                Op::Reduce(_) => "reduce",
                Op::Repeat => "repeat",
            };
            let _ = write!(s, "y = {func}(");
            let at;
            if self.op == Op::Einsum {
                for name in &names {
                    let _ = write!(s, "{name}, ");
                }
                s.push('"');
                at = s.len();
                let _ = write!(s, "{}\"", self.pattern);
            } else {
                s.push_str("x, \"");
                at = s.len();
                let _ = write!(s, "{}\"", self.pattern);
                if let Op::Reduce(op) = self.op {
                    let _ = write!(s, ", \"{op}\"");
                }
                for (&(name, _), v) in lengths.iter().zip(&key.1) {
                    let _ = write!(s, ", {name}={v}");
                }
            }
            s.push_str(")\noutput y\n");
            (s, at)
        }

        /// Diagnostics of the generated script, pointed at the pattern and the call site:
        /// labels inside the pattern become byte ranges of the pattern string; others go.
        fn remap(&self, d: Diagnostics, pattern_at: usize) -> Diagnostics {
            Diagnostics(
                d.0.into_iter()
                    .map(|d| self.locate(d, Some(pattern_at)))
                    .collect(),
                None,
            )
            .with_source(&format!("{} pattern", self.macro_name), self.pattern)
        }

        fn locate(&self, mut d: Diagnostic, pattern_at: Option<usize>) -> Diagnostic {
            let (lo, hi) = match pattern_at {
                Some(at) => (at as u32, (at + self.pattern.len()) as u32),
                None => (1, 0),
            };
            d.labels.retain(|l| lo <= l.span.start && l.span.end <= hi);
            for l in &mut d.labels {
                l.span.start -= lo;
                l.span.end -= lo;
            }
            let (file, line, column) = self.location;
            d.message = format!(
                "{} (in `{}` at {file}:{line}:{column}, pattern \"{}\")",
                d.message, self.macro_name, self.pattern
            );
            d
        }
    }
}
