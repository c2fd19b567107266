//! A tensor's fields are private: its element count always matches its shape.

fn main() {
    let t = tdsl::Tensor::from_vec(vec![1.0f32; 6], &[2, 3]).unwrap();
    let _ = t.shape;
    let _ = tdsl::Tensor { shape: vec![4], data: t.storage().clone() };
}
