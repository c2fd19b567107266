//! numpy's einsum subscripts (`"ij,jk->ik"`): one letter per label, read as tdsl's
//! space-separated labels, with a map back to the written bytes for diagnostics.

/// numpy's subscripts (`"ij,jk->ik"`, `"...ij,...jk"`): one letter per label, no spaces needed.
/// A pattern is read that way when no term holds a space or parentheses and some operand's
/// term, read as tdsl's space-separated labels, cannot match its rank while one letter per
/// axis can. Returns the pattern with spaces between the letters, and for each of its bytes
/// the offset of the byte it came from (so diagnostics point at what was written).
pub(super) fn numpy_subscripts(pattern: &str, ranks: &[usize]) -> Option<(String, Vec<usize>)> {
    if pattern.contains('(')
        || !pattern.is_ascii()
        || !pattern.bytes().any(|b| b.is_ascii_alphabetic())
    {
        return None;
    }
    let (lhs, rhs) = match pattern.find("->") {
        Some(a) => (&pattern[..a], Some(&pattern[a + 2..])),
        None => (pattern, None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    let spaced = |t: &str| {
        let t = t.trim();
        t.contains(' ')
            || !t
                .replace("...", "")
                .bytes()
                .all(|b| b.is_ascii_alphabetic())
    };
    if terms.iter().any(|t| spaced(t)) || rhs.is_some_and(spaced) {
        return None;
    }
    // Without `->` only numpy's reading exists (tdsl requires the arrow): its errors are the
    // rank and operand-count errors of that reading.
    let arrowless = rhs.is_none();
    if terms.len() != ranks.len() && !arrowless {
        return None;
    }
    let letters = |t: &str| t.trim().replace("...", "").len();
    let ell = |t: &str| t.contains("...");
    // One letter per axis fits every operand, and tdsl's reading (one label per term) does not.
    let numpy_fits = terms.iter().zip(ranks).all(|(t, &r)| {
        if ell(t) {
            letters(t) <= r
        } else {
            letters(t) == r
        }
    });
    let tdsl_fits = terms.iter().zip(ranks).all(|(t, &r)| {
        let n = usize::from(!t.trim().replace("...", "").is_empty());
        if ell(t) {
            n <= r
        } else {
            n == r
        }
    });
    if !arrowless && (!numpy_fits || tdsl_fits) {
        return None;
    }
    let mut text = String::with_capacity(pattern.len() * 2);
    let mut map = Vec::with_capacity(pattern.len() * 2 + 1);
    let bytes = pattern.as_bytes();
    let mut i = 0;
    let mut prev_label = false;
    while i < bytes.len() {
        if pattern[i..].starts_with("...") {
            if prev_label {
                text.push(' ');
                map.push(i);
            }
            text.push_str("...");
            map.extend([i, i + 1, i + 2]);
            i += 3;
            prev_label = true;
            continue;
        }
        let c = bytes[i];
        if c.is_ascii_alphabetic() {
            if prev_label {
                text.push(' ');
                map.push(i);
            }
            prev_label = true;
        } else {
            prev_label = false;
        }
        text.push(c as char);
        map.push(i);
        i += 1;
    }
    if rhs.is_none() {
        // numpy's implicit output: `...` first, then the labels used once, sorted.
        let mut once: Vec<u8> = Vec::new();
        let all: Vec<u8> = lhs
            .replace("...", "")
            .bytes()
            .filter(u8::is_ascii_alphabetic)
            .collect();
        for &c in &all {
            if all.iter().filter(|&&d| d == c).count() == 1 {
                once.push(c);
            }
        }
        once.sort_unstable();
        let mut out: Vec<String> = Vec::new();
        if terms.iter().any(|t| ell(t)) {
            out.push("...".into());
        }
        out.extend(once.iter().map(|&c| (c as char).to_string()));
        let tail = format!(" -> {}", out.join(" "));
        map.extend(std::iter::repeat_n(pattern.len(), tail.len()));
        text.push_str(&tail);
    }
    map.push(pattern.len());
    Some((text, map))
}
