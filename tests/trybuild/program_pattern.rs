//! program! whose script has a pattern error: checked at compile time too.

fn main() {
    let _ = tdsl::program!(
        r#"
input x: f32[b, s, d]
y = reduce(x, "b s d -> b e", "mean")
output y
"#
    );
}
