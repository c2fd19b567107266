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
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 3]), (0..6).map(|i| i as f32).collect()).unwrap();
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
