//! einsum! needs its pattern as a string literal, first.

fn main() {
    let a = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 3]).unwrap();
    let pattern = "i j -> j i";
    let _ = tdsl::einsum!(pattern, a);
    let _ = tdsl::einsum!(a, "i j -> j i");
}
