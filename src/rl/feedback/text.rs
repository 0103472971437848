//! Text helpers of the feedback: lines of the source, lengths in characters, numbers as
//! a reader wants them.

use std::fmt::Write;

use super::FeedbackItem;

pub(super) fn render_item_into(s: &mut String, item: &FeedbackItem) {
    s.push_str("- ");
    if let Some(l) = item.line {
        let _ = write!(s, "line {l}: ");
    }
    s.push_str(&item.message);
    if let Some(q) = &item.quote {
        s.push_str("\n    ");
        s.push_str(q);
    }
}

/// The lines of a source, split only as far as the furthest line asked for (most findings
/// sit in the kernel body; the rest of the file need not be scanned).
pub(super) struct LineIndex<'a> {
    /// Lines found so far, and the text not yet split.
    state: std::cell::RefCell<(Vec<&'a str>, &'a str)>,
}

impl<'a> LineIndex<'a> {
    pub(super) fn new(source: &'a str) -> LineIndex<'a> {
        LineIndex {
            state: std::cell::RefCell::new((Vec::new(), source)),
        }
    }

    /// Line `n` (1-based), without its line ending.
    pub(super) fn line(&self, n: u32) -> Option<&'a str> {
        let want = (n as usize).checked_sub(1)?;
        let mut st = self.state.borrow_mut();
        let (lines, rest) = &mut *st;
        while lines.len() <= want && !rest.is_empty() {
            let (line, tail) = match memchr::memchr(b'\n', rest.as_bytes()) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (*rest, ""),
            };
            lines.push(line.strip_suffix('\r').unwrap_or(line));
            *rest = tail;
        }
        lines.get(want).copied()
    }
}

/// Characters in `s` (bytes when ASCII, the common case: no decoding).
pub(super) fn char_len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

pub(super) fn truncate_chars(s: &str, max: usize) -> String {
    // A string of at most `max` bytes has at most `max` characters.
    if s.len() <= max || char_len(s) <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

pub(super) fn fmt_ratio(x: f64) -> String {
    if !x.is_finite() {
        "?".into()
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

pub(super) fn fmt_us(x: f64) -> String {
    if !x.is_finite() {
        "? µs".into()
    } else if x >= 1000.0 {
        format!("{:.2} ms", x / 1000.0)
    } else {
        format!("{x:.1} µs")
    }
}

pub(super) fn fmt_value(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if x == 0.0 || (1e-3..1e6).contains(&x.abs()) {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format!("{x:.4e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_splits_as_far_as_asked() {
        let idx = LineIndex::new("a\r\nbb\n\nlast");
        assert_eq!(idx.line(2), Some("bb"));
        assert_eq!(idx.state.borrow().0.len(), 2, "line 3 and on not split yet");
        assert_eq!(idx.line(1), Some("a"));
        assert_eq!(idx.line(3), Some(""));
        assert_eq!(idx.line(4), Some("last"));
        assert_eq!(idx.line(5), None);
        assert_eq!(idx.line(0), None);
        assert_eq!(LineIndex::new("").line(1), None);
    }

    #[test]
    fn numbers_are_readable() {
        assert_eq!(fmt_value(0.5320000001), "0.532");
        assert_eq!(fmt_value(1e-9), "1.0000e-9");
        assert_eq!(fmt_value(f64::NAN), "NaN");
        assert_eq!(fmt_ratio(8.73618), "8.736");
        assert_eq!(fmt_ratio(12.11), "12.1");
        assert_eq!(fmt_us(4652.96), "4.65 ms");
    }
}
