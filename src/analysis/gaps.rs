//! Grammar gaps: constructs NVRTC compiles that tree-sitter-cuda misparses, blanked before
//! parsing so that valid code carries no syntax penalty and its tree has the right shape.
//!
//! tree-sitter-cuda parses `#pragma` as a statement, so a pragma as the body of a brace-less
//! `for`/`if`/`while` (`for (...) \n #pragma unroll \n for (...)`) leaves the outer loop
//! without a body (a `MISSING ";"`) and the inner loop outside it; `_Pragma("unroll")`
//! likewise; and `__align__(16)` in a declaration is an `ERROR`. These are replaced by
//! spaces, byte for byte (newlines kept), so every byte offset, line and column of the rest
//! stays what it was; what a blanked `#pragma unroll` said is kept in a side table
//! ([`Neutralised::unrolls`]) for the loop features and the warp probe. Comments and string literals are
//! left alone. Gaps that cannot be blanked this way (a macro invocation standing for a
//! statement without its `;`, `#if`/`#else` branches that each open a brace) are judged by
//! NVRTC's verdict instead (`pipeline::syntax`).

/// A source with its grammar gaps blanked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Neutralised {
    /// The blanked text, or `None` when nothing was blanked (parse the source itself).
    pub text: Option<String>,
    /// Each blanked `#pragma unroll` / `_Pragma("unroll")` (with a count or not; `nounroll`
    /// excluded), ascending: a loop that starts after one with only whitespace between is
    /// unrolled.
    pub unrolls: Vec<UnrollPragma>,
}

/// A blanked `#pragma unroll`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnrollPragma {
    /// Byte offset just past it.
    pub end: usize,
    /// Its count (`#pragma unroll 4`); `None` without one, or when it is not a literal
    /// (`#pragma unroll UNROLL`). `Some(1)` keeps the loop rolled.
    pub count: Option<u32>,
}

/// Whether `arg` (a pragma's text after `pragma`) asks for unrolling: `Some(count)` then.
fn unroll_count(arg: &str) -> Option<Option<u32>> {
    let rest = arg.trim_start().strip_prefix("unroll")?;
    if rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let rest = rest.trim_start().trim_start_matches('(');
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let after = rest[digits..].trim_start();
    let literal = digits > 0 && (after.is_empty() || after.starts_with([')', '"']));
    Some(rest[..digits].parse().ok().filter(|_| literal))
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The end (exclusive) of the string or character literal starting at `i` (its quote).
fn literal_end(b: &[u8], i: usize) -> usize {
    let q = b[i];
    let mut j = i + 1;
    while j < b.len() && b[j] != q && b[j] != b'\n' {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    (j + 1).min(b.len())
}

/// The end (exclusive) of the balanced `( ... )` starting at `i`, skipping literals; `None`
/// when it is not closed.
fn parens_end(b: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' => {
                j = literal_end(b, j);
                continue;
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
}

/// The end (exclusive, at its newline) of the directive whose `#` is at `i`, following
/// backslash-newline splices; a block comment that runs past the line ends it early, so the
/// comment stays whole.
fn directive_end(b: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'\n' if j > 0 && b[j - 1] == b'\\' => {}
            b'\r' if b.get(j + 1) == Some(&b'\n') && j > 0 && b[j - 1] == b'\\' => {}
            b'\n' => return j,
            b'/' if b.get(j + 1) == Some(&b'*') => {
                let close = b[j + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map(|p| j + 2 + p + 2);
                match close {
                    Some(c) if !b[j..c].contains(&b'\n') => {
                        j = c;
                        continue;
                    }
                    _ => return j,
                }
            }
            b'"' | b'\'' => {
                j = literal_end(b, j);
                continue;
            }
            _ => {}
        }
        j += 1;
    }
    b.len()
}

/// The byte ranges to blank and the ends of the `#pragma unroll`s among them.
#[derive(Default)]
struct Gaps {
    blank: Vec<(usize, usize)>,
    unrolls: Vec<UnrollPragma>,
}

impl Gaps {
    /// A directive at `i` (a `#` starting a line): a `#pragma` is blanked. Returns its end.
    fn directive(&mut self, b: &[u8], i: usize) -> usize {
        let end = directive_end(b, i);
        // Splices are removed before directives are read (translation phase 2).
        let body = String::from_utf8_lossy(&b[i + 1..end])
            .replace("\\\r\n", "")
            .replace("\\\n", "");
        let body = body.trim_start();
        if let Some(arg) = body.strip_prefix("pragma") {
            if arg.is_empty() || arg.starts_with(|c: char| c.is_whitespace()) {
                self.blank.push((i, end));
                if let Some(count) = unroll_count(arg) {
                    self.unrolls.push(UnrollPragma { end, count });
                }
            }
        }
        end
    }

    /// An identifier at `start`: `_Pragma(...)` and `__align__(...)` are blanked. Returns
    /// where scanning goes on.
    fn identifier(&mut self, src: &str, start: usize) -> usize {
        let b = src.as_bytes();
        let mut i = start;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        let word = &src[start..i];
        if word != "_Pragma" && word != "__align__" {
            return i;
        }
        let mut open = i;
        while open < b.len() && b[open].is_ascii_whitespace() {
            open += 1;
        }
        if b.get(open) != Some(&b'(') {
            return i;
        }
        let Some(end) = parens_end(b, open) else {
            return i;
        };
        self.blank.push((start, end));
        if word == "_Pragma" {
            let inner = String::from_utf8_lossy(&b[open + 1..end - 1]);
            if let Some(count) = unroll_count(inner.trim().trim_start_matches('"')) {
                self.unrolls.push(UnrollPragma { end, count });
            }
        }
        end
    }

    /// `src` with the ranges replaced by spaces (line breaks kept); nothing when there are
    /// none.
    fn apply(self, src: &str) -> Neutralised {
        if self.blank.is_empty() {
            return Neutralised::default();
        }
        let mut out = src.as_bytes().to_vec();
        for (s, e) in self.blank {
            for byte in &mut out[s..e] {
                if *byte != b'\n' && *byte != b'\r' {
                    *byte = b' ';
                }
            }
        }
        // Whole characters were replaced by ASCII spaces, so this cannot fail; if it did,
        // the source is parsed as it is.
        match String::from_utf8(out) {
            Ok(text) => Neutralised {
                text: Some(text),
                unrolls: self.unrolls,
            },
            Err(_) => Neutralised::default(),
        }
    }
}

/// Blanks the grammar gaps of `src` (see the module docs).
pub(crate) fn neutralise(src: &str) -> Neutralised {
    let b = src.as_bytes();
    let mut gaps = Gaps::default();
    let mut line_start = true;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line_start = true;
                i += 1;
            }
            b' ' | b'\t' | b'\r' | b'\x0c' | b'\x0b' => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = b[i + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(b.len(), |p| i + 2 + p + 2);
            }
            b'"' | b'\'' => {
                line_start = false;
                i = literal_end(b, i);
            }
            b'#' if line_start => {
                line_start = false;
                i = gaps.directive(b, i);
            }
            c if is_ident_start(c) => {
                line_start = false;
                i = gaps.identifier(src, i);
            }
            _ => {
                line_start = false;
                i += 1;
            }
        }
    }
    gaps.apply(src)
}

/// The blanked `#pragma unroll` a loop starting at byte `start` of `text` (the blanked
/// text) follows with only whitespace between, if any.
pub(crate) fn unroll_at(
    unrolls: &[UnrollPragma],
    text: &str,
    start: usize,
) -> Option<UnrollPragma> {
    let k = unrolls.partition_point(|u| u.end <= start);
    let u = *unrolls.get(k.checked_sub(1)?)?;
    text.get(u.end..start)
        .is_some_and(|between| between.trim().is_empty())
        .then_some(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blanked(src: &str) -> String {
        neutralise(src).text.unwrap_or_else(|| src.to_string())
    }

    #[test]
    fn pragmas_and_align_become_spaces_keeping_offsets() {
        let src =
            "for (;;)\n  #pragma unroll 4\n  for (;;) x;\n__shared__ __align__(16) float s[4];\n";
        let n = neutralise(src);
        let t = n.text.expect("blanked");
        assert_eq!(t.len(), src.len());
        assert_eq!(t.lines().count(), src.lines().count());
        assert_eq!(
            t,
            "for (;;)\n                  \n  for (;;) x;\n__shared__               float s[4];\n"
        );
        let end = src.find("4\n").unwrap() + 1;
        assert_eq!(
            n.unrolls,
            [UnrollPragma {
                end,
                count: Some(4)
            }]
        );
        let inner = src.find("for (;;) x").unwrap();
        assert!(unroll_at(&n.unrolls, &t, inner).is_some());
        assert!(unroll_at(&n.unrolls, &t, 0).is_none());
    }

    #[test]
    fn pragma_operator_and_spliced_directives() {
        let src = "_Pragma(\"unroll\") for (;;) {}\n#pragma \\\n  unroll\nfor (;;) {}\n#pragma nounroll\nfor (;;) {}\n";
        let n = neutralise(src);
        let t = n.text.unwrap();
        assert!(!t.contains("Pragma") && !t.contains("pragma"), "{t}");
        assert_eq!(t.len(), src.len());
        let loops: Vec<usize> = src.match_indices("for").map(|(i, _)| i).collect();
        let unrolled: Vec<bool> = loops
            .iter()
            .map(|&l| unroll_at(&n.unrolls, &t, l).is_some())
            .collect();
        assert_eq!(unrolled, [true, true, false]);
    }

    #[test]
    fn unroll_counts_are_read_when_literal() {
        let src = "#pragma unroll 1\nfor (;;) {}\n#pragma unroll (8)\nfor (;;) {}\n\
                   #pragma unroll\nfor (;;) {}\n#pragma unroll UNROLL\nfor (;;) {}\n\
                   #pragma unroll 4 + 1\nfor (;;) {}\n_Pragma(\"unroll 2\") for (;;) {}\n";
        let counts: Vec<Option<u32>> = neutralise(src).unrolls.iter().map(|u| u.count).collect();
        assert_eq!(counts, [Some(1), Some(8), None, None, None, Some(2)]);
    }

    #[test]
    fn comments_strings_and_lookalikes_are_left_alone() {
        for src in [
            "// #pragma unroll\nint x;\n",
            "/* #pragma unroll */ int x;\n",
            "const char* s = \"#pragma unroll _Pragma(x) __align__(4)\";\n",
            "int a = b # pragma;\n",
            "#pragmatic\n",
            "int __align__x = 1;\n",
            "#define A 1\n",
        ] {
            assert_eq!(neutralise(src), Neutralised::default(), "{src:?}");
        }
        // A block comment that starts on a pragma's line and runs on stays whole.
        assert_eq!(
            blanked("#pragma unroll /* a\n b */ int x;\n"),
            "               /* a\n b */ int x;\n"
        );
    }

    #[test]
    fn unbalanced_or_odd_input_never_panics() {
        for src in [
            "_Pragma(",
            "__align__(16",
            "#",
            "#pragma",
            "\"",
            "'\\",
            "/*",
            "é#pragma x\né",
        ] {
            let n = neutralise(src);
            if let Some(t) = n.text {
                assert_eq!(t.len(), src.len());
            }
        }
        assert_eq!(blanked("x;\n#pragma unroll"), "x;\n              ");
    }
}
