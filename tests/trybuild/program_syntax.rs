//! program! with a syntax error on the third line of the script.

fn main() {
    let _ = tdsl::program!(
        r#"
input x: f32[n=4] = randn(seed=0)
y = x * * 2
output y
"#
    );
}
