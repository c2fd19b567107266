//! Elements, tensors, views, inputs and outputs of the Rust API.

use super::*;

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
    pub(super) shape: Vec<usize>,
    pub(super) data: Slice<'a>,
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

    pub(super) fn into_tensor(self) -> Tensor {
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
    pub(super) names: Vec<String>,
    pub(super) types: Vec<TensorType>,
    pub(super) tensors: Vec<Tensor>,
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
