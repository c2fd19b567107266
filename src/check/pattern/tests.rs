//! The pattern engine against einops' and numpy's rules, case by case.

use super::*;
use crate::check::types::Axis;
use PatternOp::{Rearrange, Reduce, Repeat};

/// Where the test patterns sit in an imaginary script, so spans are not pattern offsets.
const BASE: usize = 7;

fn span_of(p: &str) -> Span {
    Span::new(BASE, BASE + p.len())
}

fn shape(ext: &[u64]) -> Shape {
    Shape(ext.iter().map(|&e| Axis::anon(e)).collect())
}

/// Keyword arguments with made-up spans after the pattern.
fn kwargs(kw: &[(&str, u64)]) -> Vec<(String, u64, Span)> {
    kw.iter()
        .enumerate()
        .map(|(i, &(n, v))| {
            let lo = 1000 + 20 * i;
            (n.to_string(), v, Span::new(lo, lo + n.len() + 2))
        })
        .collect()
}

fn run(op: PatternOp, p: &str, ext: &[u64], kw: &[(&str, u64)]) -> Result<Recipe, Diagnostic> {
    resolve_pattern(op, p, span_of(p), &shape(ext), &kwargs(kw))
}

fn ok(op: PatternOp, p: &str, ext: &[u64], kw: &[(&str, u64)]) -> Recipe {
    let r = run(op, p, ext, kw).unwrap_or_else(|d| panic!("{p:?} on {ext:?}: {d:?}"));
    check_recipe(op, &r, &shape(ext));
    r
}

/// The pattern text a diagnostic's primary label underlines.
fn underlined<'a>(p: &'a str, d: &Diagnostic) -> &'a str {
    let s = d.span().expect("diagnostic has a span");
    &p[s.start as usize - BASE..s.end as usize - BASE]
}

/// Asserts the code and the underlined range, given as a caret line under the pattern.
fn assert_diag(p: &str, d: &Diagnostic, code: Code, carets: &str) {
    assert_eq!(d.code, code, "{p:?}: {d:?}");
    let lo = carets.find('^').expect("carets");
    let hi = carets.rfind('^').expect("carets") + 1;
    let s = d.span().expect("span");
    assert_eq!(
        (s.start as usize, s.end as usize),
        (BASE + lo, BASE + hi),
        "{p:?}: underlined {:?}, expected {:?}; {d:?}",
        underlined(p, d),
        &p[lo..hi]
    );
    assert!(!d.message.is_empty());
    assert!(d.labels.iter().all(|l| !l.text.is_empty()));
}

fn bad(
    op: PatternOp,
    p: &str,
    ext: &[u64],
    kw: &[(&str, u64)],
    code: Code,
    carets: &str,
) -> Diagnostic {
    let d = run(op, p, ext, kw).expect_err(p);
    assert_diag(p, &d, code, carets);
    d
}

/// An error that underlines keyword argument `i` instead of the pattern.
fn bad_kwarg(
    op: PatternOp,
    p: &str,
    ext: &[u64],
    kw: &[(&str, u64)],
    code: Code,
    i: usize,
) -> Diagnostic {
    let d = run(op, p, ext, kw).expect_err(p);
    assert_eq!(d.code, code, "{p:?}: {d:?}");
    assert_eq!(d.span(), Some(kwargs(kw)[i].2), "{d:?}");
    d
}

fn names(r: &Recipe) -> Vec<Option<&str>> {
    r.out_names.iter().map(|n| n.as_deref()).collect()
}

fn some(v: &[&'static str]) -> Vec<Option<&'static str>> {
    v.iter()
        .map(|&s| if s == "-" { None } else { Some(s) })
        .collect()
}

use OutElem::{In, New};

/// Structural invariants of every recipe.
fn check_recipe(op: PatternOp, r: &Recipe, input: &Shape) {
    assert_eq!(r.in_groups.len(), input.rank());
    let mut seen = vec![0usize; r.in_elems.len()];
    for (g, a) in r.in_groups.iter().zip(&input.0) {
        let mut prod = 1u64;
        for &i in g {
            seen[i] += 1;
            prod = prod
                .checked_mul(r.in_elems[i])
                .expect("input group product");
        }
        assert_eq!(prod, a.extent);
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "every elementary axis in one group"
    );
    let mut used = vec![0usize; r.in_elems.len()];
    for g in &r.out_groups {
        for e in g {
            match *e {
                In(i) => used[i] += 1,
                New(n) => {
                    assert!(n >= 1);
                    assert_eq!(op, Repeat, "only repeat adds axes");
                }
            }
        }
    }
    for (i, &n) in used.iter().enumerate() {
        let reduced = r.reduced.contains(&i);
        assert_eq!(
            n,
            usize::from(!reduced),
            "axis {i} used once unless reduced"
        );
    }
    assert!(r.reduced.windows(2).all(|w| w[0] < w[1]));
    if op != Reduce {
        assert!(r.reduced.is_empty());
    }
    assert_eq!(r.out_names.len(), r.out_groups.len());
    let _ = r.out_extents();
}

// ----- rearrange -------------------------------------------------------------------------

#[test]
fn rearrange_transpose() {
    let r = ok(Rearrange, "b h w c -> b c h w", &[2, 3, 4, 5], &[]);
    assert_eq!(r.in_elems, vec![2, 3, 4, 5]);
    assert_eq!(r.in_groups, vec![vec![0], vec![1], vec![2], vec![3]]);
    assert!(r.reduced.is_empty());
    assert_eq!(
        r.out_groups,
        vec![vec![In(0)], vec![In(3)], vec![In(1)], vec![In(2)]]
    );
    assert_eq!(names(&r), some(&["b", "c", "h", "w"]));
    assert_eq!(r.out_extents(), vec![2, 5, 3, 4]);
}

#[test]
fn rearrange_compose_and_flatten() {
    let r = ok(Rearrange, "b h w c -> (b h) w c", &[2, 3, 4, 5], &[]);
    assert_eq!(r.out_groups[0], vec![In(0), In(1)]);
    assert_eq!(names(&r), some(&["-", "w", "c"]));
    assert_eq!(r.out_extents(), vec![6, 4, 5]);
    let r = ok(Rearrange, "b h w c -> b (c h w)", &[2, 3, 4, 5], &[]);
    assert_eq!(r.out_groups[1], vec![In(3), In(1), In(2)]);
    assert_eq!(r.out_extents(), vec![2, 60]);
}

#[test]
fn rearrange_split_with_kwargs() {
    let r = ok(
        Rearrange,
        "b (h1 h) (w1 w) c -> (b h1 w1) h w c",
        &[2, 4, 6, 3],
        &[("h1", 2), ("w1", 2)],
    );
    assert_eq!(r.in_elems, vec![2, 2, 2, 2, 3, 3]);
    assert_eq!(r.in_groups, vec![vec![0], vec![1, 2], vec![3, 4], vec![5]]);
    assert_eq!(r.out_groups[0], vec![In(0), In(1), In(3)]);
    assert_eq!(r.out_extents(), vec![8, 2, 3, 3]);
    assert_eq!(names(&r), some(&["-", "h", "w", "c"]));
}

#[test]
fn rearrange_infers_one_unknown_by_division() {
    let r = ok(Rearrange, "(a b) -> a b", &[6], &[("a", 2)]);
    assert_eq!(r.in_elems, vec![2, 3]);
    let r = ok(Rearrange, "(a b) -> a b", &[6], &[("b", 2)]);
    assert_eq!(r.in_elems, vec![3, 2]);
    // Fully known groups are checked rather than inferred.
    let r = ok(
        Rearrange,
        "b (h w) -> b h w",
        &[2, 6],
        &[("h", 2), ("w", 3)],
    );
    assert_eq!(r.out_extents(), vec![2, 2, 3]);
    // A known single axis is a check.
    let r = ok(Rearrange, "a b -> b a", &[2, 3], &[("a", 2)]);
    assert_eq!(r.out_extents(), vec![3, 2]);
    // Zero extents divide fine.
    let r = ok(Rearrange, "(a b) c -> a b c", &[0, 3], &[("b", 2)]);
    assert_eq!(r.out_extents(), vec![0, 2, 3]);
}

#[test]
fn rearrange_unit_axes() {
    let r = ok(Rearrange, "1 h w -> h w", &[1, 3, 4], &[]);
    assert_eq!(r.in_groups, vec![vec![], vec![0], vec![1]]);
    assert_eq!(r.in_elems, vec![3, 4]);
    let r = ok(Rearrange, "() h w -> h w", &[1, 3, 4], &[]);
    assert_eq!(r.in_groups, vec![vec![], vec![0], vec![1]]);
    let r = ok(Rearrange, "h w -> w () h 1", &[3, 4], &[]);
    assert_eq!(r.out_groups, vec![vec![In(1)], vec![], vec![In(0)], vec![]]);
    assert_eq!(names(&r), some(&["w", "-", "h", "-"]));
    assert_eq!(r.out_extents(), vec![4, 1, 3, 1]);
    // `1` inside a group is nothing; `01` is a unit too.
    let r = ok(Rearrange, "(h 1) w -> h (1 w)", &[3, 4], &[]);
    assert_eq!(r.in_groups, vec![vec![0], vec![1]]);
    assert_eq!(names(&r), some(&["h", "w"]));
    let r = ok(Rearrange, "01 h -> h", &[1, 3], &[]);
    assert_eq!(r.in_groups, vec![vec![], vec![0]]);
    let r = ok(Rearrange, "(1 1) h -> h (1)", &[1, 3], &[]);
    assert_eq!(r.out_extents(), vec![3, 1]);
}

#[test]
fn rearrange_ellipsis() {
    let r = ok(Rearrange, "b ... -> ... b", &[2, 3, 4], &[]);
    assert_eq!(r.in_elems, vec![2, 3, 4]);
    assert_eq!(r.in_groups, vec![vec![0], vec![1], vec![2]]);
    assert_eq!(r.out_groups, vec![vec![In(1)], vec![In(2)], vec![In(0)]]);
    assert_eq!(names(&r), some(&["-", "-", "b"]));
    let r = ok(Rearrange, "b ... c -> b (...) c", &[2, 3, 4, 5], &[]);
    assert_eq!(r.out_groups[1], vec![In(1), In(2)]);
    assert_eq!(r.out_extents(), vec![2, 12, 5]);
    let r = ok(Rearrange, "b ... -> (... b)", &[2, 3, 4], &[]);
    assert_eq!(r.out_groups, vec![vec![In(1), In(2), In(0)]]);
    let r = ok(Rearrange, "... h w -> ... (h w)", &[3, 4], &[]);
    assert_eq!(r.out_extents(), vec![12]);
}

#[test]
fn rearrange_empty_ellipsis_and_scalars() {
    let r = ok(Rearrange, "b ... -> b (...)", &[2], &[]);
    assert_eq!(r.out_groups, vec![vec![In(0)], vec![]]);
    assert_eq!(r.out_extents(), vec![2, 1]);
    let r = ok(Rearrange, "... -> ...", &[], &[]);
    assert!(r.in_elems.is_empty() && r.out_groups.is_empty());
    let r = ok(Rearrange, "->", &[], &[]);
    assert!(r.in_groups.is_empty() && r.out_groups.is_empty());
    let r = ok(Rearrange, "-> 1 ()", &[], &[]);
    assert_eq!(r.out_extents(), vec![1, 1]);
}

#[test]
fn rearrange_spacing_and_names() {
    let r = ok(Rearrange, "  b   h  ->  h b ", &[2, 3], &[]);
    assert_eq!(r.out_extents(), vec![3, 2]);
    let r = ok(Rearrange, "b(h w)->b h w", &[2, 6], &[("h", 3)]);
    assert_eq!(r.out_extents(), vec![2, 3, 2]);
    let r = ok(Rearrange, "batch a_b c1 -> c1 a_b batch", &[2, 3, 4], &[]);
    assert_eq!(names(&r), some(&["c1", "a_b", "batch"]));
    let r = ok(Rearrange, "h -> (h)", &[3], &[]);
    assert_eq!(names(&r), some(&["h"]));
}

#[test]
fn rearrange_axis_on_one_side() {
    let d = bad(
        Rearrange,
        "b h w -> b h",
        &[2, 3, 4],
        &[],
        Code::PatternAxisOneSide,
        "    ^",
    );
    assert!(d.message.contains("`w`"));
    assert!(d.help.is_some());
    bad(
        Rearrange,
        "b h -> b h w",
        &[2, 3],
        &[],
        Code::PatternAxisOneSide,
        "           ^",
    );
    bad(
        Rearrange,
        "b (h w) -> b h",
        &[2, 6],
        &[("w", 2)],
        Code::PatternAxisOneSide,
        "     ^",
    );
}

#[test]
fn rank_mismatch() {
    let d = bad(
        Rearrange,
        "b h w -> b h w",
        &[2, 3],
        &[],
        Code::PatternRank,
        "^^^^^",
    );
    assert!(d.message.contains('3') && d.message.contains("rank 2"));
    assert!(d.message.contains("[2, 3]"), "{}", d.message);
    let d = bad(
        Reduce,
        "b h -> b h",
        &[2, 3, 4],
        &[],
        Code::PatternRank,
        "^^^",
    );
    assert!(d.help.as_deref().unwrap_or("").contains("..."));
    let d = bad(
        Rearrange,
        "... a b -> ... b a",
        &[2],
        &[],
        Code::PatternRank,
        "^^^^^^^",
    );
    assert!(d.message.contains("at least 2"));
    bad(Repeat, "-> a", &[3], &[("a", 2)], Code::PatternRank, "^^");
}

#[test]
fn named_input_shape_in_messages() {
    let input = Shape(vec![Axis::named("batch", 2), Axis::named("seq", 6)]);
    let p = "b (h w) -> b h w";
    let d = resolve_pattern(Rearrange, p, span_of(p), &input, &kwargs(&[("h", 4)]))
        .expect_err("indivisible");
    assert_eq!(d.code, Code::PatternIndivisible);
    assert!(d.message.contains("`seq`"), "{}", d.message);
    assert!(d.help.as_deref().unwrap_or("").contains("[batch=2, seq=6]"));
}

#[test]
fn duplicate_axes() {
    bad(
        Rearrange,
        "b h -> b h h",
        &[2, 3],
        &[],
        Code::PatternDuplicateAxis,
        "           ^",
    );
    let d = bad(
        Rearrange,
        "b b -> b",
        &[2, 2],
        &[],
        Code::PatternDuplicateAxis,
        "  ^",
    );
    assert_eq!(d.labels.len(), 2);
    bad(
        Reduce,
        "b (h b) -> b",
        &[2, 6],
        &[],
        Code::PatternDuplicateAxis,
        "     ^",
    );
    bad(
        Repeat,
        "h -> h c c",
        &[3],
        &[("c", 2)],
        Code::PatternDuplicateAxis,
        "         ^",
    );
    // Numeric axes are anonymous: never duplicates.
    ok(Reduce, "(h 2) (w 2) -> h w", &[4, 6], &[]);
}

#[test]
fn group_resolution_errors() {
    let d = bad(
        Rearrange,
        "b (h w) -> b h w",
        &[2, 6],
        &[],
        Code::PatternTwoUnknowns,
        "  ^^^^^",
    );
    assert!(d.message.contains("`h`") && d.message.contains("`w`"));
    let d = bad(
        Rearrange,
        "(h w) -> h w",
        &[6],
        &[("h", 4)],
        Code::PatternIndivisible,
        "^^^^^",
    );
    assert!(
        d.message.contains('6') && d.message.contains('4'),
        "{}",
        d.message
    );
    let d = bad(
        Rearrange,
        "(h w) -> h w",
        &[6],
        &[("h", 2), ("w", 4)],
        Code::ExtentMismatch,
        "^^^^^",
    );
    assert!(
        d.message.contains('8') && d.message.contains('6'),
        "{}",
        d.message
    );
    bad(
        Rearrange,
        "h w -> w h",
        &[4, 5],
        &[("h", 3)],
        Code::ExtentMismatch,
        "^",
    );
    bad(
        Rearrange,
        "1 h -> h",
        &[2, 3],
        &[],
        Code::ExtentMismatch,
        "^",
    );
    bad(
        Rearrange,
        "h () -> h",
        &[2, 3],
        &[],
        Code::ExtentMismatch,
        "  ^^",
    );
    bad(
        Reduce,
        "b (h 3) -> b h",
        &[2, 4],
        &[],
        Code::PatternIndivisible,
        "  ^^^^^",
    );
    bad(
        Reduce,
        "(h 2 3) -> h",
        &[10],
        &[],
        Code::PatternIndivisible,
        "^^^^^^^",
    );
    bad(
        Repeat,
        "h -> h c",
        &[3],
        &[("h", 2), ("c", 2)],
        Code::ExtentMismatch,
        "^",
    );
}

#[test]
fn anonymous_axes() {
    bad(
        Rearrange,
        "b (h 2) -> b h",
        &[2, 6],
        &[],
        Code::PatternAnonymous,
        "     ^",
    );
    bad(
        Rearrange,
        "b h -> b h 2",
        &[2, 3],
        &[],
        Code::PatternAnonymous,
        "           ^",
    );
    bad(
        Reduce,
        "b h -> b 2",
        &[2, 3],
        &[],
        Code::PatternAnonymous,
        "         ^",
    );
    bad(
        Repeat,
        "h (w 2) -> h w",
        &[2, 6],
        &[],
        Code::PatternAnonymous,
        "     ^",
    );
    let d = bad(
        Rearrange,
        "h -> h 0",
        &[2],
        &[],
        Code::ZeroExtent,
        "       ^",
    );
    assert!(d.message.contains("`0`"));
    bad(
        Reduce,
        "b (h 00) -> b",
        &[2, 3],
        &[],
        Code::ZeroExtent,
        "     ^^",
    );
    bad(
        Reduce,
        "b (h 99999999999999999999999) -> b",
        &[2, 3],
        &[],
        Code::SizeOverflow,
        "     ^^^^^^^^^^^^^^^^^^^^^^^",
    );
}

#[test]
fn syntax_errors() {
    bad(
        Rearrange,
        "b ((h w)) -> b h w",
        &[2, 6],
        &[],
        Code::PatternSyntax,
        "   ^",
    );
    bad(
        Rearrange,
        "b (h w -> b h w",
        &[2, 6],
        &[],
        Code::PatternSyntax,
        "  ^",
    );
    bad(
        Rearrange,
        "b h) -> b h",
        &[2, 6],
        &[],
        Code::PatternSyntax,
        "   ^",
    );
    bad(
        Rearrange,
        "b h -> (b h",
        &[2, 6],
        &[],
        Code::PatternSyntax,
        "       ^",
    );
    bad(
        Rearrange,
        "_b h -> h _b",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        "^^",
    );
    bad(
        Rearrange,
        "b_ h -> h b_",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        "^^",
    );
    bad(
        Rearrange,
        "2b h -> h 2b",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        "^^",
    );
    bad(
        Rearrange,
        "b\th -> h\tb",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        " ^",
    );
    bad(
        Rearrange,
        "b-h -> b",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        " ^",
    );
    bad(
        Rearrange,
        "b, h -> b h",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        " ^",
    );
    // A non-ASCII character is underlined whole (two bytes).
    let p = "\u{e9} h -> h \u{e9}";
    let d = run(Rearrange, p, &[2, 3], &[]).expect_err("non-ascii");
    assert_eq!(d.code, Code::PatternSyntax);
    assert_eq!(underlined(p, &d), "\u{e9}");
    let d = bad(
        Rearrange,
        "b -> h -> b",
        &[2],
        &[],
        Code::PatternSyntax,
        "       ^^",
    );
    assert_eq!(d.labels.len(), 2);
}

#[test]
fn missing_arrow() {
    let d = bad(
        Rearrange,
        "b h",
        &[2, 3],
        &[],
        Code::PatternMissingArrow,
        "^^^",
    );
    assert!(d.help.as_deref().unwrap_or("").contains("\"b h -> b h\""));
    bad(
        Reduce,
        "b h - > b",
        &[2, 3],
        &[],
        Code::PatternMissingArrow,
        "^^^^^^^^^",
    );
}

#[test]
fn ellipsis_rules() {
    bad(
        Rearrange,
        "b .. -> b",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        "  ^",
    );
    let d = bad(
        Rearrange,
        "b ... ... -> b",
        &[2, 3],
        &[],
        Code::PatternEllipsis,
        "      ^^^",
    );
    assert_eq!(d.labels.len(), 2);
    bad(
        Rearrange,
        "b .... -> b ....",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        "     ^",
    );
    bad(
        Rearrange,
        "b a... -> b a...",
        &[2, 3],
        &[],
        Code::PatternSyntax,
        "  ^^^^",
    );
    bad(
        Rearrange,
        "b (...) -> b ...",
        &[2, 3],
        &[],
        Code::PatternEllipsis,
        "   ^^^",
    );
    bad(
        Rearrange,
        "b h -> b ... h",
        &[2, 3],
        &[],
        Code::PatternEllipsis,
        "         ^^^",
    );
    bad(
        Rearrange,
        "... h -> h",
        &[2, 3],
        &[],
        Code::PatternEllipsis,
        "^^^",
    );
    bad(
        Repeat,
        "... h -> h c",
        &[2, 3],
        &[("c", 2)],
        Code::PatternEllipsis,
        "^^^",
    );
    bad(
        Reduce,
        "b h -> b ...",
        &[2, 3],
        &[],
        Code::PatternEllipsis,
        "         ^^^",
    );
    // The right side's `...` may be grouped.
    ok(Rearrange, "b ... -> b (...)", &[2, 3, 4], &[]);
}

#[test]
fn kwarg_checks() {
    let d = bad_kwarg(
        Rearrange,
        "b h -> b h",
        &[2, 3],
        &[("c", 3)],
        Code::PatternUnusedKwarg,
        0,
    );
    assert!(d.message.contains("c=3"));
    assert!(d.help.as_deref().unwrap_or("").contains("`b`"));
    bad_kwarg(
        Repeat,
        "h -> h c",
        &[3],
        &[("c", 2), ("d", 2)],
        Code::PatternUnusedKwarg,
        1,
    );
    bad_kwarg(
        Rearrange,
        "(h w) -> h w",
        &[6],
        &[("h", 0)],
        Code::PatternBadKwarg,
        0,
    );
    bad_kwarg(
        Repeat,
        "h w -> h w c",
        &[2, 3],
        &[("c", 0)],
        Code::PatternBadKwarg,
        0,
    );
    bad_kwarg(
        Rearrange,
        "h w -> w h",
        &[4, 5],
        &[("_", 3)],
        Code::PatternBadKwarg,
        0,
    );
    bad_kwarg(
        Rearrange,
        "h w -> w h",
        &[4, 5],
        &[("h_", 4)],
        Code::PatternBadKwarg,
        0,
    );
    bad_kwarg(
        Rearrange,
        "(h w) -> w h",
        &[6],
        &[("h", 2), ("h", 2)],
        Code::PatternBadKwarg,
        1,
    );
    // A kwarg for a reduced axis is fine.
    let r = ok(Reduce, "b h -> h", &[2, 3], &[("b", 2)]);
    assert_eq!(r.reduced, vec![0]);
}

// ----- reduce ----------------------------------------------------------------------------

#[test]
fn reduce_basic() {
    let r = ok(Reduce, "t b c -> b c", &[2, 3, 4], &[]);
    assert_eq!(r.reduced, vec![0]);
    assert_eq!(r.out_groups, vec![vec![In(1)], vec![In(2)]]);
    assert_eq!(names(&r), some(&["b", "c"]));
    let r = ok(Reduce, "b h w ->", &[2, 3, 4], &[]);
    assert_eq!(r.reduced, vec![0, 1, 2]);
    assert!(r.out_groups.is_empty());
    let r = ok(Reduce, "b c h w -> b c 1 1", &[2, 3, 4, 5], &[]);
    assert_eq!(r.out_groups, vec![vec![In(0)], vec![In(1)], vec![], vec![]]);
    assert_eq!(r.reduced, vec![2, 3]);
    assert_eq!(names(&r), some(&["b", "c", "-", "-"]));
    let r = ok(Reduce, "b c h w -> b c () ()", &[2, 3, 4, 5], &[]);
    assert_eq!(r.out_extents(), vec![2, 3, 1, 1]);
    let r = ok(Reduce, "b h -> h b", &[2, 3], &[]);
    assert!(r.reduced.is_empty());
}

#[test]
fn reduce_pooling_with_anonymous_axes() {
    let r = ok(Reduce, "b c (h1 2) (w1 2) -> b c h1 w1", &[2, 3, 4, 6], &[]);
    assert_eq!(r.in_elems, vec![2, 3, 2, 2, 3, 2]);
    assert_eq!(r.in_groups, vec![vec![0], vec![1], vec![2, 3], vec![4, 5]]);
    assert_eq!(r.reduced, vec![3, 5]);
    assert_eq!(r.out_extents(), vec![2, 3, 2, 3]);
    assert_eq!(names(&r), some(&["b", "c", "h1", "w1"]));
    let r = ok(
        Reduce,
        "b c (h1 h2) (w1 w2) -> b c h1 w1",
        &[2, 3, 6, 8],
        &[("h1", 3), ("w1", 4)],
    );
    assert_eq!(r.in_elems, vec![2, 3, 3, 2, 4, 2]);
    assert_eq!(r.reduced, vec![3, 5]);
    let r = ok(Reduce, "b (2 h) -> b h", &[2, 6], &[]);
    assert_eq!(r.in_elems, vec![2, 2, 3]);
    assert_eq!(r.reduced, vec![1]);
    let r = ok(Reduce, "b (h 2 3) -> h b", &[2, 12], &[]);
    assert_eq!(r.in_elems, vec![2, 2, 2, 3]);
    assert_eq!(r.reduced, vec![2, 3]);
    assert_eq!(r.out_extents(), vec![2, 2]);
}

#[test]
fn reduce_ellipsis() {
    let r = ok(Reduce, "b ... -> b", &[2, 3, 4], &[]);
    assert_eq!(r.reduced, vec![1, 2]);
    let r = ok(Reduce, "... c -> c", &[2, 3, 4], &[]);
    assert_eq!(r.reduced, vec![0, 1]);
    let r = ok(Reduce, "b ... -> b ...", &[2, 3, 4], &[]);
    assert!(r.reduced.is_empty());
    assert_eq!(r.out_extents(), vec![2, 3, 4]);
    let r = ok(Reduce, "b ... h -> (... b)", &[2, 3, 4, 5], &[]);
    assert_eq!(r.reduced, vec![3]);
    assert_eq!(r.out_groups, vec![vec![In(1), In(2), In(0)]]);
}

#[test]
fn reduce_errors() {
    bad(
        Reduce,
        "b h -> b w",
        &[2, 3],
        &[],
        Code::PatternAxisOneSide,
        "         ^",
    );
    bad(
        Reduce,
        "b (h w) -> b",
        &[2, 6],
        &[],
        Code::PatternTwoUnknowns,
        "  ^^^^^",
    );
    bad_kwarg(
        Reduce,
        "b h w -> b",
        &[2, 3, 4],
        &[("c", 2)],
        Code::PatternUnusedKwarg,
        0,
    );
}

// ----- repeat ----------------------------------------------------------------------------

#[test]
fn repeat_new_axes() {
    let r = ok(Repeat, "h w -> h w c", &[2, 3], &[("c", 3)]);
    assert_eq!(r.out_groups, vec![vec![In(0)], vec![In(1)], vec![New(3)]]);
    assert_eq!(names(&r), some(&["h", "w", "c"]));
    let r = ok(Repeat, "h w -> (repeat h) w", &[2, 3], &[("repeat", 2)]);
    assert_eq!(r.out_groups[0], vec![New(2), In(0)]);
    assert_eq!(r.out_extents(), vec![4, 3]);
    assert_eq!(names(&r), some(&["-", "w"]));
    let r = ok(Repeat, "h w -> h (w 2)", &[2, 3], &[]);
    assert_eq!(r.out_groups[1], vec![In(1), New(2)]);
    let r = ok(Repeat, "h -> 2 h 3", &[3], &[]);
    assert_eq!(r.out_groups, vec![vec![New(2)], vec![In(0)], vec![New(3)]]);
    assert_eq!(names(&r), some(&["-", "h", "-"]));
    let r = ok(Repeat, "h w -> (h 2) (w 2)", &[2, 3], &[]);
    assert_eq!(r.out_extents(), vec![4, 6]);
    let r = ok(Repeat, "h -> h c", &[3], &[("c", 1)]);
    assert_eq!(r.out_extents(), vec![3, 1]);
    let r = ok(Repeat, "h -> (c h)", &[3], &[("c", 2), ("h", 3)]);
    assert_eq!(r.out_extents(), vec![6]);
}

#[test]
fn repeat_units_ellipsis_scalars() {
    let r = ok(Repeat, "1 h -> c h", &[1, 4], &[("c", 3)]);
    assert_eq!(r.in_groups, vec![vec![], vec![0]]);
    assert_eq!(r.out_groups, vec![vec![New(3)], vec![In(0)]]);
    let r = ok(Repeat, "() h -> c h", &[1, 4], &[("c", 3)]);
    assert_eq!(r.out_extents(), vec![3, 4]);
    let r = ok(Repeat, "... -> ... c", &[2, 3], &[("c", 2)]);
    assert_eq!(r.out_extents(), vec![2, 3, 2]);
    let r = ok(Repeat, "b ... -> b (... c)", &[2, 3, 4], &[("c", 2)]);
    assert_eq!(r.out_groups[1], vec![In(1), In(2), New(2)]);
    assert_eq!(r.out_extents(), vec![2, 24]);
    let r = ok(Repeat, "-> a b", &[], &[("a", 2), ("b", 3)]);
    assert_eq!(r.out_groups, vec![vec![New(2)], vec![New(3)]]);
    assert_eq!(names(&r), some(&["a", "b"]));
}

#[test]
fn repeat_errors() {
    bad(
        Repeat,
        "h w -> h c",
        &[2, 3],
        &[("c", 2)],
        Code::PatternAxisOneSide,
        "  ^",
    );
    let d = bad(
        Repeat,
        "h w -> h w c",
        &[2, 3],
        &[],
        Code::UnknownExtent,
        "           ^",
    );
    assert!(d.help.as_deref().unwrap_or("").contains("c=2"));
    bad(
        Repeat,
        "h -> (h c)",
        &[3],
        &[],
        Code::UnknownExtent,
        "        ^",
    );
    bad(
        Repeat,
        "(h w) -> h w c",
        &[6],
        &[("c", 2)],
        Code::PatternTwoUnknowns,
        "^^^^^",
    );
}

#[test]
fn size_overflow() {
    let big = 1u64 << 40;
    bad(
        Repeat,
        "h -> h (c d)",
        &[1],
        &[("c", big), ("d", big)],
        Code::SizeOverflow,
        "       ^^^^^",
    );
    bad(
        Repeat,
        "h -> h c d",
        &[1],
        &[("c", big), ("d", big)],
        Code::SizeOverflow,
        "     ^^^^^",
    );
    bad(
        Rearrange,
        "(a b c) -> a b c",
        &[6],
        &[("a", big), ("b", big)],
        Code::SizeOverflow,
        "^^^^^^^",
    );
    // Huge but representable extents are fine.
    let r = ok(Rearrange, "a b -> b a", &[u64::MAX, 1], &[]);
    assert_eq!(r.out_extents(), vec![1, u64::MAX]);
    // A zero anywhere makes the element count 0, not an overflow.
    ok(Repeat, "h -> h c d", &[0], &[("c", big), ("d", big)]);
}

// ----- einops reference table ------------------------------------------------------------

type EinopsCase = (
    &'static str,
    &'static str,
    &'static [u64],
    &'static [(&'static str, u64)],
    Option<&'static [u64]>,
);

fn op_named(op: &str) -> PatternOp {
    match op {
        "rearrange" => Rearrange,
        "reduce" => Reduce,
        "repeat" => Repeat,
        _ => panic!("unknown op {op}"),
    }
}

#[test]
fn einops_reference_table() {
    assert!(EINOPS_CASES.len() >= 40);
    for &(op, p, ext, kw, expected) in EINOPS_CASES {
        let got = run(op_named(op), p, ext, kw);
        match (&got, expected) {
            (Ok(r), Some(want)) => {
                assert_eq!(r.out_extents(), want, "{op} {p:?} on {ext:?} {kw:?}");
                check_recipe(op_named(op), r, &shape(ext));
            }
            (Err(_), None) => {}
            _ => {
                panic!("{op} {p:?} on {ext:?} {kw:?}: einops gives {expected:?}, tdsl {got:?}")
            }
        }
    }
}

#[test]
fn einops_deviations_are_rejected() {
    for &(op, p, ext, kw, einops) in EINOPS_DEVIATIONS {
        assert!(einops.is_some(), "einops accepts {p:?}");
        assert!(run(op_named(op), p, ext, kw).is_err(), "{p:?}");
    }
}

// ----- einsum ----------------------------------------------------------------------------

fn esum(p: &str, shapes: &[&[u64]]) -> Result<EinsumSpec, Diagnostic> {
    let ops: Vec<Shape> = shapes.iter().map(|s| shape(s)).collect();
    resolve_einsum(p, span_of(p), &ops, &[])
}

fn esum_ok(p: &str, shapes: &[&[u64]]) -> EinsumSpec {
    let s = esum(p, shapes).unwrap_or_else(|d| panic!("{p:?} on {shapes:?}: {d:?}"));
    let ops: Vec<Shape> = shapes.iter().map(|s| shape(s)).collect();
    check_spec(&s, &ops);
    s
}

fn esum_bad(p: &str, shapes: &[&[u64]], code: Code, carets: &str) -> Diagnostic {
    let d = esum(p, shapes).expect_err(p);
    assert_diag(p, &d, code, carets);
    d
}

fn slot(labels: &[usize]) -> EinsumSlot {
    EinsumSlot {
        labels: labels.to_vec(),
        broadcast: false,
    }
}

fn label_names(s: &EinsumSpec) -> Vec<(&str, u64)> {
    s.labels.iter().map(|(n, e)| (n.as_str(), *e)).collect()
}

/// Structural invariants of every einsum spec.
fn check_spec(s: &EinsumSpec, ops: &[Shape]) {
    assert_eq!(s.operands.len(), ops.len());
    for (slots, shape) in s.operands.iter().zip(ops) {
        assert_eq!(slots.len(), shape.rank());
        for (sl, ax) in slots.iter().zip(&shape.0) {
            let prod = sl
                .labels
                .iter()
                .try_fold(1u64, |a, &l| a.checked_mul(s.labels[l].1))
                .expect("slot product");
            if sl.broadcast {
                assert_eq!(ax.extent, 1);
                assert_eq!(sl.labels.len(), 1);
                assert!(s.labels[sl.labels[0]].0.starts_with("..."));
            } else {
                assert_eq!(prod, ax.extent);
            }
        }
    }
    let out = s.output_labels();
    for (i, l) in out.iter().enumerate() {
        assert!(*l < s.labels.len());
        assert!(!out[..i].contains(l), "duplicate output label");
    }
    let _ = s.out_extents();
    for k in 0..ops.len() {
        let _ = s.operand_labels(k);
    }
}

#[test]
fn einsum_attention_scores() {
    let s = esum_ok(
        "b h i d, b h j d -> b h i j",
        &[&[2, 3, 4, 5], &[2, 3, 6, 5]],
    );
    assert_eq!(
        label_names(&s),
        vec![("b", 2), ("h", 3), ("i", 4), ("d", 5), ("j", 6)]
    );
    assert_eq!(
        s.operands[0],
        vec![slot(&[0]), slot(&[1]), slot(&[2]), slot(&[3])]
    );
    assert_eq!(
        s.operands[1],
        vec![slot(&[0]), slot(&[1]), slot(&[4]), slot(&[3])]
    );
    assert_eq!(s.output, vec![vec![0], vec![1], vec![2], vec![4]]);
    assert_eq!(s.out_extents(), vec![2, 3, 4, 6]);
}

#[test]
fn einsum_matmul_chain_trace_diagonal() {
    let s = esum_ok("a b, b c, c d -> a d", &[&[2, 3], &[3, 4], &[4, 5]]);
    assert_eq!(s.out_extents(), vec![2, 5]);
    assert_eq!(s.operand_labels(1), vec![1, 2]);
    let s = esum_ok("i i ->", &[&[3, 3]]);
    assert_eq!(s.operands[0], vec![slot(&[0]), slot(&[0])]);
    assert!(s.output.is_empty());
    let s = esum_ok("i i -> i", &[&[3, 3]]);
    assert_eq!(s.output, vec![vec![0]]);
    let s = esum_ok("batch seq, seq feat -> batch feat", &[&[2, 3], &[3, 4]]);
    assert_eq!(label_names(&s), vec![("batch", 2), ("seq", 3), ("feat", 4)]);
}

#[test]
fn einsum_composition() {
    let s = esum_ok("b (h d), h d o -> b o", &[&[2, 12], &[3, 4, 5]]);
    assert_eq!(
        label_names(&s),
        vec![("b", 2), ("h", 3), ("d", 4), ("o", 5)]
    );
    assert_eq!(s.operands[0], vec![slot(&[0]), slot(&[1, 2])]);
    let s = esum_ok("b h d -> b (h d)", &[&[2, 3, 4]]);
    assert_eq!(s.output, vec![vec![0], vec![1, 2]]);
    assert_eq!(s.out_extents(), vec![2, 12]);
    // One unknown per group, iterated to a fixed point across operands.
    let s = esum_ok("(a b), (b c), c -> a", &[&[6], &[12], &[4]]);
    assert_eq!(label_names(&s), vec![("a", 2), ("b", 3), ("c", 4)]);
    // A group's single label is a plain slot.
    let s = esum_ok("(i) j -> j i", &[&[2, 3]]);
    assert_eq!(s.out_extents(), vec![3, 2]);
    // Unit slots.
    let s = esum_ok("i (), i -> i ()", &[&[2, 1], &[2]]);
    assert_eq!(s.operands[0], vec![slot(&[0]), slot(&[])]);
    assert_eq!(s.out_extents(), vec![2, 1]);
}

#[test]
fn einsum_ellipsis_broadcast() {
    let s = esum_ok("... i j, ... j k -> ... i k", &[&[5, 1, 2, 3], &[4, 3, 4]]);
    assert_eq!(
        label_names(&s),
        vec![("...0", 5), ("...1", 4), ("i", 2), ("j", 3), ("k", 4)]
    );
    assert_eq!(
        s.operands[0],
        vec![
            slot(&[0]),
            EinsumSlot {
                labels: vec![1],
                broadcast: true
            },
            slot(&[2]),
            slot(&[3]),
        ]
    );
    assert_eq!(s.operands[1], vec![slot(&[1]), slot(&[3]), slot(&[4])]);
    assert_eq!(s.out_extents(), vec![5, 4, 2, 4]);
    // Output `...` may be grouped.
    let s = esum_ok("b ... -> b (...)", &[&[2, 3, 4]]);
    assert_eq!(s.output, vec![vec![0], vec![1, 2]]);
    // All-ones broadcast axes stay 1.
    let s = esum_ok("... i -> ...", &[&[4, 1, 3]]);
    assert_eq!(s.out_extents(), vec![4, 1]);
    // `...` covering nothing needs no `...` in the output (numpy agrees).
    let s = esum_ok("... i -> i", &[&[3]]);
    assert_eq!(s.out_extents(), vec![3]);
    // Output `...` without input `...` is empty.
    let s = esum_ok("i j -> ... i j", &[&[2, 3]]);
    assert_eq!(s.out_extents(), vec![2, 3]);
}

#[test]
fn einsum_missing_arrow_spells_out_implicit_output() {
    let d = esum_bad(
        "i j, j k",
        &[&[2, 3], &[3, 4]],
        Code::PatternMissingArrow,
        "^^^^^^^^",
    );
    assert_eq!(
        d.help.as_deref(),
        Some("write it with an explicit output: \"i j, j k -> i k\"")
    );
    let d = esum_bad("i i", &[&[3, 3]], Code::PatternMissingArrow, "^^^");
    assert!(d.help.as_deref().unwrap_or("").ends_with("\"i i ->\""));
    let d = esum_bad(
        "... j i, ... b",
        &[&[2, 3], &[3]],
        Code::PatternMissingArrow,
        "^^^^^^^^^^^^^^",
    );
    assert!(d
        .help
        .as_deref()
        .unwrap_or("")
        .ends_with("\"... j i, ... b -> ... b i j\""));
    let d = esum_bad(
        "seq batch, seq feat",
        &[&[3, 2], &[3, 4]],
        Code::PatternMissingArrow,
        "^^^^^^^^^^^^^^^^^^^",
    );
    assert!(d.help.as_deref().unwrap_or("").ends_with("-> batch feat\""));
}

#[test]
fn einsum_structural_errors() {
    let d = esum_bad(
        "i j, j k -> i k",
        &[&[2, 3], &[3, 4], &[4]],
        Code::PatternOperands,
        "^^^^^^^^",
    );
    assert!(d.message.contains("2 operands") && d.message.contains("3 were"));
    esum_bad(
        "i j -> i k",
        &[&[2, 3]],
        Code::PatternAxisOneSide,
        "         ^",
    );
    esum_bad(
        "i j -> i i",
        &[&[2, 3]],
        Code::PatternDuplicateAxis,
        "         ^",
    );
    esum_bad("(h h) -> h", &[&[4]], Code::PatternDuplicateAxis, "   ^");
    esum_bad("i j -> i", &[&[2]], Code::PatternRank, "^^^");
    esum_bad(
        "a, i j ... k -> i",
        &[&[2], &[2, 3]],
        Code::PatternRank,
        "   ^^^^^^^^^",
    );
    esum_bad("i 2 -> i", &[&[2, 2]], Code::PatternAnonymous, "  ^");
    esum_bad("i,,j -> i", &[&[2], &[], &[2]], Code::PatternSyntax, "  ^");
    esum_bad(
        "i, , j -> i",
        &[&[2], &[], &[2]],
        Code::PatternSyntax,
        "  ^",
    );
    esum_bad("-> ", &[&[]], Code::PatternSyntax, "^^");
    esum_bad("(...) i -> i", &[&[2, 3]], Code::PatternEllipsis, " ^^^");
    esum_bad(
        "... ... i -> i",
        &[&[2, 3]],
        Code::PatternEllipsis,
        "    ^^^",
    );
    esum_bad("i -> i -> i", &[&[2]], Code::PatternSyntax, "       ^^");
    esum_bad("i -> i, i", &[&[2]], Code::PatternSyntax, "      ^");
}

#[test]
fn einsum_extent_errors() {
    let d = esum_bad(
        "i j, j k -> i k",
        &[&[2, 3], &[4, 5]],
        Code::ExtentMismatch,
        "     ^",
    );
    assert!(d.message.contains("operand 1") && d.message.contains("operand 2"));
    assert!(d.message.contains('3') && d.message.contains('4'));
    let d = esum_bad("i i -> i", &[&[2, 3]], Code::ExtentMismatch, "  ^");
    assert!(d.message.contains("diagonal"));
    let d = esum_bad(
        "i j, j k -> i k",
        &[&[2, 1], &[3, 4]],
        Code::PatternBroadcast,
        "  ^",
    );
    assert!(d.message.contains("extent 1") && d.message.contains('3'));
    esum_bad(
        "i j, j k -> i k",
        &[&[2, 3], &[1, 4]],
        Code::PatternBroadcast,
        "     ^",
    );
    let d = esum_bad(
        "... i, ... i -> ... i",
        &[&[2, 3], &[4, 3]],
        Code::BroadcastMismatch,
        "       ^^^",
    );
    assert_eq!(d.labels.len(), 2);
    esum_bad(
        "... i -> i",
        &[&[2, 3]],
        Code::PatternEllipsis,
        "         ^",
    );
    esum_bad("... i ->", &[&[2, 3]], Code::PatternEllipsis, "      ^^");
    // A group used whole in every slot needs no split.
    esum("b (h d), (h d) o -> b o", &[&[2, 12], &[12, 5]]).expect("used whole");
    esum_bad(
        "b (h d), (h d) o -> b h o",
        &[&[2, 12], &[12, 5]],
        Code::PatternTwoUnknowns,
        "  ^^^^^",
    );
    esum_bad(
        "b (h d), (d h) o -> b o",
        &[&[2, 12], &[12, 5]],
        Code::PatternTwoUnknowns,
        "  ^^^^^",
    );
    esum_bad(
        "(h d), d -> h",
        &[&[10], &[3]],
        Code::PatternIndivisible,
        "^^^^^",
    );
    esum_bad(
        "(h d), h, d -> h d",
        &[&[10], &[2], &[4]],
        Code::ExtentMismatch,
        "^^^^^",
    );
    esum_bad("(), i -> i", &[&[2], &[2]], Code::ExtentMismatch, "^^");
    esum_bad("(h d), d -> h", &[&[0], &[0]], Code::ZeroExtent, "^^^^^");
    let big = 1u64 << 40;
    esum_bad(
        "i, j -> (i j)",
        &[&[big], &[big]],
        Code::SizeOverflow,
        "        ^^^^^",
    );
    esum_bad(
        "i, j -> i j",
        &[&[big], &[big]],
        Code::SizeOverflow,
        "        ^^^",
    );
    esum_bad(
        "(i j), i, j -> i",
        &[&[4], &[big], &[big]],
        Code::SizeOverflow,
        "^^^^^",
    );
}

type EinsumCase = (
    &'static str,
    &'static [&'static [u64]],
    Option<&'static [u64]>,
);

#[test]
fn numpy_einsum_reference_table() {
    for &(p, shapes, expected) in EINSUM_CASES {
        let got = esum(p, shapes);
        match (&got, expected) {
            (Ok(s), Some(want)) => assert_eq!(s.out_extents(), want, "{p:?} on {shapes:?}"),
            (Err(_), None) => {}
            _ => panic!("{p:?} on {shapes:?}: numpy gives {expected:?}, tdsl {got:?}"),
        }
    }
    for &(p, shapes, numpy) in EINSUM_DEVIATIONS {
        assert!(numpy.is_some());
        let d = esum(p, shapes).expect_err(p);
        assert_eq!(d.code, Code::PatternBroadcast);
    }
}

// ----- robustness ------------------------------------------------------------------------

/// xorshift64*: a small deterministic generator for the fuzz loops.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const TOKENS: &[&str] = &[
    "a",
    "b",
    "c",
    "h",
    "w",
    "d",
    "1",
    "2",
    "3",
    "0",
    "01",
    "()",
    "(",
    ")",
    "...",
    ".",
    "->",
    "->",
    "->",
    " ",
    " ",
    " ",
    ",",
    ",",
    "_x",
    "x_",
    "\u{e9}",
    "\t",
    "-",
    ">",
    "(h w)",
    "(h 2)",
    "(...)",
    "99999999999999999999999",
    "ab",
    "a1",
];
const EXTENTS: &[u64] = &[0, 1, 1, 2, 2, 3, 4, 6, 12, 1 << 33, u64::MAX];
const KW_NAMES: &[&str] = &["a", "b", "c", "h", "w", "d", "_x", "z"];
const KW_VALUES: &[u64] = &[0, 1, 2, 3, 4, 1 << 40, u64::MAX];

fn random_shape(rng: &mut Rng) -> Shape {
    let rank = rng.below(6);
    shape(&(0..rank).map(|_| *rng.pick(EXTENTS)).collect::<Vec<_>>())
}

fn exercise(pattern: &str, rng: &mut Rng) {
    let ps = span_of(pattern);
    for op in [Rearrange, Reduce, Repeat] {
        let input = random_shape(rng);
        let kw: Vec<(String, u64, Span)> = (0..rng.below(4))
            .map(|i| {
                (
                    rng.pick(KW_NAMES).to_string(),
                    *rng.pick(KW_VALUES),
                    Span::new(i, i + 1),
                )
            })
            .collect();
        match resolve_pattern(op, pattern, ps, &input, &kw) {
            Ok(r) => check_recipe(op, &r, &input),
            Err(d) => assert_span_inside(pattern, &d, &kw),
        }
    }
    let ops: Vec<Shape> = (0..1 + rng.below(3)).map(|_| random_shape(rng)).collect();
    match resolve_einsum(pattern, ps, &ops, &[]) {
        Ok(s) => check_spec(&s, &ops),
        Err(d) => assert_span_inside(pattern, &d, &[]),
    }
}

fn assert_span_inside(pattern: &str, d: &Diagnostic, kw: &[(String, u64, Span)]) {
    let s = d.span().expect("every diagnostic has a span");
    if kw.iter().any(|k| k.2 == s) {
        return;
    }
    let (lo, hi) = (s.start as usize, s.end as usize);
    assert!(
        lo >= BASE && hi <= BASE + pattern.len() && lo <= hi,
        "{pattern:?} {d:?}"
    );
    if !pattern.is_empty() {
        assert!(lo < hi, "empty span for {pattern:?}: {d:?}");
    }
    assert!(
        pattern.is_char_boundary(lo - BASE) && pattern.is_char_boundary(hi - BASE),
        "{pattern:?} {d:?}"
    );
}

#[test]
fn fuzz_token_soup_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let n = rng.below(12);
        let mut p = String::new();
        for _ in 0..n {
            let t: &str = TOKENS[rng.below(TOKENS.len())];
            p.push_str(t);
            if rng.below(2) == 0 {
                p.push(' ');
            }
        }
        exercise(&p, &mut rng);
    }
}

#[test]
fn fuzz_random_bytes_never_panic() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for _ in 0..5_000 {
        let n = rng.below(24);
        let bytes: Vec<u8> = (0..n)
            .map(|_| match rng.below(4) {
                0 => *rng.pick(b"()., ->_1ah"),
                _ => (rng.next() & 0xff) as u8,
            })
            .collect();
        let p = String::from_utf8_lossy(&bytes).into_owned();
        exercise(&p, &mut rng);
    }
}

type Axes<'a> = Vec<(&'a str, u64)>;

/// Splits `axes` into consecutive groups of 1 to 3.
fn group_up<'a>(rng: &mut Rng, axes: &[(&'a str, u64)]) -> Vec<Axes<'a>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < axes.len() {
        let len = (1 + rng.below(3)).min(axes.len() - i);
        groups.push(axes[i..i + len].to_vec());
        i += len;
    }
    groups
}

/// Random valid rearrangements: split the input into groups of named axes, permute and
/// regroup them, and check the resolved output extents against a direct computation.
#[test]
fn random_valid_rearranges_resolve_correctly() {
    let mut rng = Rng(42);
    let pool = ["a", "b", "c", "d", "e", "f"];
    for _ in 0..3_000 {
        let k = rng.below(pool.len() + 1);
        let mut axes: Vec<(&str, u64)> = pool[..k]
            .iter()
            .map(|&n| (n, 1 + rng.below(4) as u64))
            .collect();
        let render = |groups: &[Axes]| {
            groups
                .iter()
                .map(|g| {
                    let names: Vec<&str> = g.iter().map(|a| a.0).collect();
                    if g.len() == 1 {
                        names[0].to_string()
                    } else {
                        format!("({})", names.join(" "))
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let left = group_up(&mut rng, &axes);
        let ext: Vec<u64> = left
            .iter()
            .map(|g| g.iter().map(|a| a.1).product())
            .collect();
        let mut kw: Vec<(&str, u64)> = Vec::new();
        for g in &left {
            let skip = rng.below(g.len());
            kw.extend(
                g.iter()
                    .enumerate()
                    .filter(|&(i, _)| i != skip)
                    .map(|(_, &a)| a),
            );
        }
        for i in (1..axes.len()).rev() {
            axes.swap(i, rng.below(i + 1));
        }
        let right = group_up(&mut rng, &axes);
        let p = format!("{} -> {}", render(&left), render(&right));
        let r = ok(Rearrange, &p, &ext, &kw);
        let want: Vec<u64> = right
            .iter()
            .map(|g| g.iter().map(|a| a.1).product())
            .collect();
        assert_eq!(r.out_extents(), want, "{p}");
        for (g, name) in right.iter().zip(&r.out_names) {
            let expect = (g.len() == 1).then(|| g[0].0.to_string());
            assert_eq!(name, &expect, "{p}");
        }
        // The same pattern as a reduce over a dropped axis, and a repeat adding one.
        if let Some(drop) = right.first().and_then(|g| g.first()) {
            let rest: Vec<Axes> = right
                .iter()
                .map(|g| g.iter().filter(|a| a.0 != drop.0).copied().collect())
                .filter(|g: &Axes| !g.is_empty())
                .collect();
            let p = format!("{} -> {}", render(&left), render(&rest));
            let r = ok(Reduce, &p, &ext, &kw);
            assert_eq!(r.reduced.len(), 1, "{p}");
        }
        let p = format!("{} -> z {}", render(&left), render(&right));
        let mut kw2 = kw.clone();
        kw2.push(("z", 2));
        let r = ok(Repeat, &p, &ext, &kw2);
        assert_eq!(r.out_groups[0], vec![New(2)]);
    }
}

// ----- generated by tests/python/gen_pattern_cases.py ------------------------------------
// Regenerate: `pip install einops numpy && python3 tests/python/gen_pattern_cases.py` and
// paste its output between the BEGIN/END markers.
// BEGIN GENERATED
// einops 0.8.2, numpy 2.4.6
#[rustfmt::skip]
const EINOPS_CASES: &[EinopsCase] = &[
    ("rearrange", "b h w c -> b c h w", &[2, 3, 4, 5], &[], Some(&[2, 5, 3, 4])),
    ("rearrange", "b h w c -> (b h) w c", &[2, 3, 4, 5], &[], Some(&[6, 4, 5])),
    ("rearrange", "b h w c -> b (c h w)", &[2, 3, 4, 5], &[], Some(&[2, 60])),
    ("rearrange", "b (h1 h) (w1 w) c -> (b h1 w1) h w c", &[2, 4, 6, 3], &[("h1", 2), ("w1", 2)], Some(&[8, 2, 3, 3])),
    ("rearrange", "b (h h1) (w w1) c -> b h w (c h1 w1)", &[2, 4, 6, 3], &[("h1", 2), ("w1", 2)], Some(&[2, 2, 3, 12])),
    ("rearrange", "(a b) -> a b", &[6], &[("a", 2)], Some(&[2, 3])),
    ("rearrange", "b (h w) -> b h w", &[2, 6], &[("h", 2), ("w", 3)], Some(&[2, 2, 3])),
    ("rearrange", "a b -> b a", &[2, 3], &[("a", 2)], Some(&[3, 2])),
    ("rearrange", "... -> ...", &[2, 3], &[], Some(&[2, 3])),
    ("rearrange", "b ... -> ... b", &[2, 3, 4], &[], Some(&[3, 4, 2])),
    ("rearrange", "b ... c -> b (...) c", &[2, 3, 4, 5], &[], Some(&[2, 12, 5])),
    ("rearrange", "b ... -> b (...)", &[2], &[], Some(&[2, 1])),
    ("rearrange", "... h w -> ... (h w)", &[2, 3, 4], &[], Some(&[2, 12])),
    ("rearrange", "... h w -> ... (h w)", &[3, 4], &[], Some(&[12])),
    ("rearrange", "b ... -> (... b)", &[2, 3, 4], &[], Some(&[24])),
    ("rearrange", "h w -> w h 1", &[3, 4], &[], Some(&[4, 3, 1])),
    ("rearrange", "h w -> w () h", &[3, 4], &[], Some(&[4, 1, 3])),
    ("rearrange", "1 h w -> h w", &[1, 3, 4], &[], Some(&[3, 4])),
    ("rearrange", "() h w -> h w", &[1, 3, 4], &[], Some(&[3, 4])),
    ("rearrange", "(h 1) w -> h (1 w)", &[3, 4], &[], Some(&[3, 4])),
    ("rearrange", "01 h -> h", &[1, 3], &[], Some(&[3])),
    ("rearrange", "h w -> (w h)", &[3, 4], &[], Some(&[12])),
    ("rearrange", "->", &[], &[], Some(&[])),
    ("rearrange", "h -> h 1 1", &[5], &[], Some(&[5, 1, 1])),
    ("rearrange", "a_b c1 -> c1 a_b", &[2, 3], &[], Some(&[3, 2])),
    ("rearrange", "batch seq -> seq batch", &[2, 3], &[], Some(&[3, 2])),
    ("rearrange", "(a b) c -> a b c", &[0, 3], &[("b", 2)], Some(&[0, 2, 3])),
    ("rearrange", "  b   h  ->  h b ", &[2, 3], &[], Some(&[3, 2])),
    ("rearrange", "b(h w)->b h w", &[2, 6], &[("h", 3)], Some(&[2, 3, 2])),
    ("rearrange", "b h w -> b h", &[2, 3, 4], &[], None),  // EinopsError: Identifiers only on one side of expression (should be on both): {'w'}
    ("rearrange", "b h -> b h w", &[2, 3], &[], None),  // EinopsError: Identifiers only on one side of expression (should be on both): {'w'}
    ("rearrange", "b h w -> b h w", &[2, 3], &[], None),  // EinopsError: Wrong shape: expected 3 dims. Received 2-dim tensor.
    ("rearrange", "b h -> b h h", &[2, 3], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "h"
    ("rearrange", "b b -> b", &[2, 2], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "b"
    ("rearrange", "(h w) -> h w", &[6], &[], None),  // EinopsError: Could not infer sizes for {'h', 'w'}
    ("rearrange", "(h w) -> h w", &[6], &[("h", 4)], None),  // EinopsError: Shape mismatch, can't divide axis of length 6 in chunks of 4
    ("rearrange", "(h w) -> h w", &[6], &[("h", 2), ("w", 4)], None),  // EinopsError: Shape mismatch, 6 != 8
    ("rearrange", "(h w) -> h w", &[6], &[("h", 0)], None),  // ZeroDivisionError: integer modulo by zero
    ("rearrange", "b (h 2) -> b h", &[2, 6], &[], None),  // EinopsError: Non-unitary anonymous axes are not supported in rearrange (exception is lengt
    ("rearrange", "b h -> b h 2", &[2, 3], &[], None),  // EinopsError: Non-unitary anonymous axes are not supported in rearrange (exception is lengt
    ("rearrange", "b ((h w)) -> b h w", &[2, 6], &[], None),  // EinopsError: Axis composition is one-level (brackets inside brackets not allowed)
    ("rearrange", "b (h w -> b h w", &[2, 6], &[], None),  // EinopsError: Imbalanced parentheses in expression: "b (h w "
    ("rearrange", "b h) -> b h", &[2, 6], &[], None),  // EinopsError: Brackets are not balanced
    ("rearrange", "b h -> b h", &[2, 3], &[("c", 3)], None),  // EinopsError: Axis c is not used in transform
    ("rearrange", "b .. -> b", &[2, 3], &[], None),  // EinopsError: Expression may contain dots only inside ellipsis (...)
    ("rearrange", "b ... ... -> b", &[2, 3], &[], None),  // EinopsError: Expression may contain dots only inside ellipsis (...); only one ellipsis for
    ("rearrange", "b .... -> b ....", &[2, 3], &[], None),  // EinopsError: Expression may contain dots only inside ellipsis (...); only one ellipsis for
    ("rearrange", "b a...  -> b a...", &[2, 3], &[], None),  // EinopsError: not a valid python identifier
    ("rearrange", "b (...) -> b ...", &[2, 3], &[], None),  // EinopsError: Ellipsis inside parenthesis in the left side is not allowed: b (...) -> b ...
    ("rearrange", "b h -> b ... h", &[2, 3], &[], None),  // EinopsError: Ellipsis found in right side, but not left side of a pattern b h -> b ... h
    ("rearrange", "... h -> h", &[2, 3], &[], None),  // EinopsError: Identifiers only on one side of expression (should be on both): {'?'}
    ("rearrange", "b h", &[2, 3], &[], None),  // ValueError: not enough values to unpack (expected 2, got 1)
    ("rearrange", "b -> h -> b", &[2], &[], None),  // ValueError: too many values to unpack (expected 2)
    ("rearrange", "_b h -> h _b", &[2, 3], &[], None),  // EinopsError: axis name should should not start or end with underscore
    ("rearrange", "b_ h -> h b_", &[2, 3], &[], None),  // EinopsError: axis name should should not start or end with underscore
    ("rearrange", "2b h -> h 2b", &[2, 3], &[], None),  // EinopsError: not a valid python identifier
    ("rearrange", "b\th -> h\tb", &[2, 3], &[], None),  // EinopsError: Unknown character '?'
    ("rearrange", "b-h -> b", &[2, 3], &[], None),  // EinopsError: Unknown character '-'
    ("rearrange", "1 h -> h", &[2, 3], &[], None),  // EinopsError: Shape mismatch, 2 != 1
    ("rearrange", "h -> h 0", &[2], &[], None),  // EinopsError: Anonymous axis should have positive length, not 0
    ("rearrange", "... a b -> ... b a", &[2], &[], None),  // EinopsError: Wrong shape: expected >=2 dims. Received 1-dim tensor.
    ("rearrange", "h w -> w h", &[4, 5], &[("h", 3)], None),  // EinopsError: Shape mismatch, 4 != 3
    ("rearrange", "h w -> w h", &[4, 5], &[("_", 3)], None),  // EinopsError: ('Invalid name for an axis', '_')
    ("rearrange", "h w -> w h", &[4, 5], &[("h_", 4)], None),  // EinopsError: ('Invalid name for an axis', 'h_')
    ("reduce", "t b c -> b c", &[2, 3, 4], &[], Some(&[3, 4])),
    ("reduce", "b c (h1 h2) (w1 w2) -> b c h1 w1", &[2, 3, 4, 6], &[("h2", 2), ("w2", 2)], Some(&[2, 3, 2, 3])),
    ("reduce", "b c (h1 2) (w1 2) -> b c h1 w1", &[2, 3, 4, 6], &[], Some(&[2, 3, 2, 3])),
    ("reduce", "b c (h1 h2) (w1 w2) -> b c h1 w1", &[2, 3, 6, 8], &[("h1", 3), ("w1", 4)], Some(&[2, 3, 3, 4])),
    ("reduce", "b c h w -> b c", &[2, 3, 4, 5], &[], Some(&[2, 3])),
    ("reduce", "b c h w -> 1 c 1 1", &[2, 3, 4, 5], &[], Some(&[1, 3, 1, 1])),
    ("reduce", "b c h w -> b c () ()", &[2, 3, 4, 5], &[], Some(&[2, 3, 1, 1])),
    ("reduce", "b ... -> b", &[2, 3, 4], &[], Some(&[2])),
    ("reduce", "... c -> c", &[2, 3, 4], &[], Some(&[4])),
    ("reduce", "b h w ->", &[2, 3, 4], &[], Some(&[])),
    ("reduce", "b (h 2) -> b", &[2, 6], &[], Some(&[2])),
    ("reduce", "b (2 h) -> b h", &[2, 6], &[], Some(&[2, 3])),
    ("reduce", "b (h 2) (w 2) -> b (h w)", &[2, 4, 6], &[], Some(&[2, 6])),
    ("reduce", "b (h 2) (w 2) -> b (w h)", &[2, 4, 6], &[], Some(&[2, 6])),
    ("reduce", "b h -> b h", &[2, 3], &[], Some(&[2, 3])),
    ("reduce", "b ... -> b ...", &[2, 3, 4], &[], Some(&[2, 3, 4])),
    ("reduce", "(b 1) h -> b", &[2, 3], &[], Some(&[2])),
    ("reduce", "b h -> h", &[2, 3], &[("b", 2)], Some(&[3])),
    ("reduce", "b (h 2 3) -> h b", &[2, 12], &[], Some(&[2, 2])),
    ("reduce", "b h -> b w", &[2, 3], &[], None),  // EinopsError: Unexpected identifiers on the right side of reduce sum: {'w'}
    ("reduce", "b h -> b 2", &[2, 3], &[], None),  // EinopsError: Unexpected identifiers on the right side of reduce sum: {2-axis}
    ("reduce", "b (h 3) -> b h", &[2, 4], &[], None),  // EinopsError: Shape mismatch, can't divide axis of length 4 in chunks of 3
    ("reduce", "b h -> b h", &[2, 3, 4], &[], None),  // EinopsError: Wrong shape: expected 2 dims. Received 3-dim tensor.
    ("reduce", "b h -> b ...", &[2, 3], &[], None),  // EinopsError: Ellipsis found in right side, but not left side of a pattern b h -> b ...
    ("reduce", "b (h 0) -> b", &[2, 3], &[], None),  // EinopsError: Anonymous axis should have positive length, not 0
    ("reduce", "b h w -> b", &[2, 3, 4], &[("c", 2)], None),  // EinopsError: Axis c is not used in transform
    ("reduce", "b (h w) -> b", &[2, 6], &[], None),  // EinopsError: Could not infer sizes for {'h', 'w'}
    ("reduce", "b h -> b b", &[2, 3], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "b"
    ("repeat", "h w -> h w c", &[2, 3], &[("c", 3)], Some(&[2, 3, 3])),
    ("repeat", "h w -> (repeat h) w", &[2, 3], &[("repeat", 2)], Some(&[4, 3])),
    ("repeat", "h w -> h (w 2)", &[2, 3], &[], Some(&[2, 6])),
    ("repeat", "h w -> h w 3", &[2, 3], &[], Some(&[2, 3, 3])),
    ("repeat", "... -> ... c", &[2, 3], &[("c", 2)], Some(&[2, 3, 2])),
    ("repeat", "b ... -> b c ...", &[2, 3, 4], &[("c", 2)], Some(&[2, 2, 3, 4])),
    ("repeat", "h w -> h w 1", &[2, 3], &[], Some(&[2, 3, 1])),
    ("repeat", "() h -> c h", &[1, 4], &[("c", 3)], Some(&[3, 4])),
    ("repeat", "1 h -> c h", &[1, 4], &[("c", 3)], Some(&[3, 4])),
    ("repeat", "h -> h", &[3], &[], Some(&[3])),
    ("repeat", "h w -> (h 2) (w 2)", &[2, 3], &[], Some(&[4, 6])),
    ("repeat", "h -> h c", &[3], &[("c", 1)], Some(&[3, 1])),
    ("repeat", "h -> (c h)", &[3], &[("c", 2), ("h", 3)], Some(&[6])),
    ("repeat", "b ... -> b (... c)", &[2, 3, 4], &[("c", 2)], Some(&[2, 24])),
    ("repeat", "h -> 2 h 3", &[3], &[], Some(&[2, 3, 3])),
    ("repeat", "-> a b", &[], &[("a", 2), ("b", 3)], Some(&[2, 3])),
    ("repeat", "h w -> h c", &[2, 3], &[("c", 2)], None),  // EinopsError: Unexpected identifiers on the left side of repeat: {'w'}
    ("repeat", "h w -> h w c", &[2, 3], &[], None),  // EinopsError: Specify sizes for new axes in repeat: {'c'}
    ("repeat", "h (w 2) -> h w", &[2, 6], &[], None),  // EinopsError: Unexpected identifiers on the left side of repeat: {2-axis}
    ("repeat", "h -> h c", &[3], &[("c", 2), ("d", 2)], None),  // EinopsError: Axis d is not used in transform
    ("repeat", "... h -> h c", &[2, 3], &[("c", 2)], None),  // EinopsError: Unexpected identifiers on the left side of repeat: {'?'}
    ("repeat", "h -> h h", &[3], &[], None),  // EinopsError: Indexing expression contains duplicate dimension "h"
    ("repeat", "h -> h c c", &[3], &[("c", 2)], None),  // EinopsError: Indexing expression contains duplicate dimension "c"
    ("repeat", "h -> h c", &[3], &[("h", 2), ("c", 2)], None),  // EinopsError: Shape mismatch, 3 != 2
    ("repeat", "h -> (h c)", &[3], &[], None),  // EinopsError: Specify sizes for new axes in repeat: {'c'}
    ("repeat", "(h w) -> h w c", &[6], &[("c", 2)], None),  // EinopsError: Could not infer sizes for {'h', 'w'}
];
#[rustfmt::skip]
const EINOPS_DEVIATIONS: &[EinopsCase] = &[
    ("repeat", "h w -> h w c", &[2, 3], &[("c", 0)], Some(&[2, 3, 0])),
    ("rearrange", "\u{e9} h -> h \u{e9}", &[2, 3], &[], Some(&[3, 2])),
];
#[rustfmt::skip]
const EINSUM_CASES: &[EinsumCase] = &[
    ("i j, j k -> i k", &[&[2, 3], &[3, 4]], Some(&[2, 4])),
    ("b h i d, b h j d -> b h i j", &[&[2, 3, 4, 5], &[2, 3, 6, 5]], Some(&[2, 3, 4, 6])),
    ("i i ->", &[&[3, 3]], Some(&[])),
    ("i i -> i", &[&[3, 3]], Some(&[3])),
    ("i j -> j i", &[&[2, 3]], Some(&[3, 2])),
    ("i j ->", &[&[2, 3]], Some(&[])),
    ("a b, b c, c d -> a d", &[&[2, 3], &[3, 4], &[4, 5]], Some(&[2, 5])),
    ("i, i ->", &[&[3], &[3]], Some(&[])),
    ("i, j -> i j", &[&[2], &[3]], Some(&[2, 3])),
    ("... i j, ... j k -> ... i k", &[&[5, 1, 2, 3], &[4, 3, 4]], Some(&[5, 4, 2, 4])),
    ("... i j, ... j k -> ... i k", &[&[5, 2, 2, 3], &[4, 3, 4]], None),  // ValueError: operands could not be broadcast together with remapped shapes [original->remap
    ("... i, ... i -> ... i", &[&[2, 3], &[4, 3]], None),  // ValueError: operands could not be broadcast together with remapped shapes [original->remap
    ("... i, ... i -> ... i", &[&[2, 1, 3], &[4, 3]], Some(&[2, 4, 3])),
    ("... i -> i", &[&[2, 3]], None),  // ValueError: output has more dimensions than subscripts given in einstein sum, but no '...'
    ("... i -> i", &[&[3]], Some(&[3])),
    ("... i -> ...", &[&[4, 1, 3]], Some(&[4, 1])),
    ("i j -> ... i j", &[&[2, 3]], Some(&[2, 3])),
    ("i ... -> ... i", &[&[2, 3, 4]], Some(&[3, 4, 2])),
    ("i i i -> i", &[&[2, 2, 2]], Some(&[2])),
    ("i i -> i", &[&[2, 3]], None),  // ValueError: dimensions in single operand for collapsing index 'i' don't match (2 != 3)
    ("i j, j k -> i k", &[&[2, 3], &[4, 5]], None),  // ValueError: operands could not be broadcast together with remapped shapes [original->remap
    ("i j -> i k", &[&[2, 3]], None),  // ValueError: einstein sum subscripts string included output subscript 'k' which never appea
    ("i j -> i i", &[&[2, 3]], None),  // ValueError: einstein sum subscripts string includes output subscript 'i' multiple times
    ("i j -> i", &[&[2]], None),  // ValueError: einstein sum subscripts string contains too many subscripts for operand 0
    ("i j, j k -> i k", &[&[2, 3]], None),  // ValueError: more operands provided to einstein sum function than specified in the subscrip
    ("i j k -> k j i", &[&[2, 3, 4]], Some(&[4, 3, 2])),
    ("b i j, b j -> b i", &[&[2, 3, 4], &[2, 4]], Some(&[2, 3])),
];
#[rustfmt::skip]
const EINSUM_DEVIATIONS: &[EinsumCase] = &[
    ("i j, j k -> i k", &[&[2, 1], &[3, 4]], Some(&[2, 4])),
    ("i, i -> i", &[&[1], &[3]], Some(&[3])),
];
// END GENERATED
