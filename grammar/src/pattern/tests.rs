use super::*;
use PatternCode as C;
use PatternOp::{Rearrange, Reduce, Repeat};

/// The shape-free einops checks alone.
fn einops(op: PatternOp, p: &str, kw: &[Keyword<'_>]) -> Result<(), PatternError> {
    parse_einops(op, p, kw).map(|_| ())
}

fn kw<'a>(names: &[&'a str]) -> Vec<Keyword<'a>> {
    names
        .iter()
        .map(|&name| Keyword {
            name,
            value: Some(2),
        })
        .collect()
}

/// Asserts the code and the underlined text of an error in `p`.
fn bad(r: Result<impl std::fmt::Debug, PatternError>, p: &str, code: PatternCode, under: &str) {
    let e = r.expect_err(p);
    assert_eq!(e.code, code, "{p:?}: {e:?}");
    match e.at {
        At::Pattern(s) => assert_eq!(&p[s.range()], under, "{p:?}: {e:?}"),
        At::Keyword(i) => assert_eq!(format!("#{i}"), under, "{p:?}: {e:?}"),
    }
    assert!(!e.message.is_empty() && !e.label.is_empty());
}

#[test]
fn valid_einops_patterns_pass() {
    for (op, p, k) in [
        (Rearrange, "b h w c -> b c h w", &[][..]),
        (Rearrange, "b (h d) -> b h d", &["h"][..]),
        (Rearrange, "b ... c -> c b ...", &[][..]),
        (Rearrange, "b h w c -> b 1 h w c ()", &[][..]),
        (Reduce, "b (h 2) (w 3) c -> b h w c", &[][..]),
        (Reduce, "b ... c -> b c", &[][..]),
        (Reduce, "b h w c -> b () () c", &[][..]),
        (Repeat, "b c -> b c k", &["k"][..]),
        (Repeat, "b h w c -> b (h 2) (w 2) c", &[][..]),
        (Repeat, "b c -> 3 b c", &[][..]),
    ] {
        assert_eq!(einops(op, p, &kw(k)), Ok(()), "{p}");
    }
}

#[test]
fn einops_errors_name_the_axis() {
    let p = "a b -> b a c";
    bad(einops(Rearrange, p, &[]), p, C::AxisOneSide, "c");
    let p = "b f -> f o";
    bad(einops(Repeat, p, &kw(&["o"])), p, C::AxisOneSide, "b");
    let p = "a b a -> a b";
    bad(einops(Rearrange, p, &[]), p, C::DuplicateAxis, "a");
    let p = "a (b (c)) -> a b c";
    bad(einops(Rearrange, p, &[]), p, C::Syntax, "(");
    let p = "a b) -> a b";
    bad(einops(Rearrange, p, &[]), p, C::Syntax, ")");
    let p = "a b";
    bad(einops(Rearrange, p, &[]), p, C::MissingArrow, "a b");
    let p = "a -> a -> a";
    bad(einops(Rearrange, p, &[]), p, C::Syntax, "->");
    let p = "(a b) -> a b";
    bad(einops(Rearrange, p, &[]), p, C::TwoUnknowns, "(a b)");
    let p = "a -> a c";
    bad(einops(Repeat, p, &[]), p, C::UnknownExtent, "c");
    let p = "a -> a";
    bad(einops(Repeat, p, &kw(&["z"])), p, C::UnusedKwarg, "#0");
    bad(einops(Repeat, p, &kw(&["a", "a"])), p, C::BadKwarg, "#1");
    let p = "a b -> a 2";
    bad(einops(Reduce, p, &[]), p, C::Anonymous, "2");
    let p = "a ... -> a";
    bad(einops(Rearrange, p, &[]), p, C::Ellipsis, "...");
    let p = "a b\t-> a b";
    bad(einops(Rearrange, p, &[]), p, C::Syntax, "\t");
    let p = "a 0 -> a";
    bad(einops(Reduce, p, &[]), p, C::ZeroExtent, "0");
}

#[test]
fn einsum_checks() {
    assert_eq!(check_einsum("b i k, b k j -> b i j", Some(2), &[]), Ok(2));
    assert_eq!(check_einsum("i i -> ", None, &[]), Ok(1));
    assert_eq!(
        check_einsum("b s (h d), b h t d -> b h s t", Some(2), &[]),
        Ok(2)
    );
    let p = "i j, j k -> i k";
    bad(check_einsum(p, Some(3), &[]), p, C::Operands, "i j, j k");
    let p = "i j, j k -> i z";
    bad(check_einsum(p, None, &[]), p, C::AxisOneSide, "z");
    let p = "i j, j k";
    bad(check_einsum(p, None, &[]), p, C::MissingArrow, "i j, j k");
    let p = "i, -> i";
    bad(check_einsum(p, None, &[]), p, C::Syntax, " ");
    let p = "(h d) -> h";
    bad(check_einsum(p, None, &[]), p, C::TwoUnknowns, "(h d)");
    let p = "i 2 -> i";
    bad(check_einsum(p, None, &[]), p, C::Anonymous, "2");
    let p = "i j -> i i";
    bad(check_einsum(p, None, &[]), p, C::DuplicateAxis, "i");
}

#[test]
fn reduce_ops_suggest_the_closest() {
    assert!(check_reduce_op("mean").is_ok());
    let e = check_reduce_op("maen").expect_err("maen");
    assert_eq!(e.code, C::UnknownReduceOp);
    assert!(e.help.unwrap_or_default().contains("\"mean\""));
}

#[test]
fn script_calls_are_checked_with_script_spans() {
    let src = "input x: f32[a, b]\n\
               y = reduce(rearrange(x, \"a b -> b a c\"), \"b a -> b c\", \"maen\")\n\
               z = einsum(x, x, \"i j -> i\")\n\
               w = repeat(x, \"a b -> a b c\", d=2)\n";
    let script = crate::parse_script(src).expect("parses");
    let errs = check_script_patterns(&script);
    let found: Vec<(PatternCode, &str)> = errs
        .iter()
        .map(|e| (e.error.code, &src[e.span.range()]))
        .collect();
    assert_eq!(
        found,
        [
            (C::AxisOneSide, "c"),
            (C::UnknownReduceOp, "\"maen\""),
            (C::Operands, "i j"),
            (C::UnknownExtent, "c"),
        ]
    );
}
