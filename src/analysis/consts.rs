//! Compile-time integer constants: `#define N 32`, `const int T = N + 1;`,
//! `constexpr`, and array sizes such as `[TILE][TILE + 1]`.
//!
//! `#define` bodies are raw text to tree-sitter, so constants are evaluated
//! from text by a tiny recursive-descent parser (integers, identifiers bound to
//! earlier constants, `sizeof(primitive)`, and `+ - * / % << >> & | ^ ~`).

use std::collections::HashMap;

use super::memory_ops::type_bytes;

/// Known integer constants by name.
pub(crate) type Consts = HashMap<String, i64>;

/// Nesting limit for parentheses, so hostile input cannot overflow the stack.
const MAX_DEPTH: usize = 64;

/// Evaluates `text` as an integer constant expression, `None` if it is not one.
pub(crate) fn eval_text(text: &str, consts: &Consts) -> Option<i64> {
    let toks = tokenize(text)?;
    let mut p = ExprParser {
        toks: &toks,
        pos: 0,
        consts,
        depth: 0,
    };
    let v = p.bit_or()?;
    (p.pos == toks.len()).then_some(v)
}

/// Parses an integer literal (`32`, `0x20`, `32u`, `1024UL`); floats are `None`.
pub(crate) fn parse_int(text: &str) -> Option<i64> {
    let t = text
        .trim_end_matches(['u', 'U', 'l', 'L'])
        .replace('\'', "");
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return i64::from_str_radix(h, 16).ok();
    }
    if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        return i64::from_str_radix(b, 2).ok();
    }
    t.parse().ok()
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i64),
    Ident(String),
    Op(&'static str),
}

fn tokenize(text: &str) -> Option<Vec<Tok>> {
    const OPS: [&str; 15] = [
        "<<", ">>", "+", "-", "*", "/", "%", "(", ")", "&", "|", "^", "~", "{", "}",
    ];
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() || c == b'\\' {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'\'') {
                i += 1;
            }
            if i < b.len() && b[i] == b'.' {
                return None; // floating-point literal
            }
            out.push(Tok::Num(parse_int(text.get(start..i)?)?));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            out.push(Tok::Ident(text.get(start..i)?.to_string()));
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            break; // trailing line comment in a #define
        } else {
            let op = OPS.iter().find(|op| b[i..].starts_with(op.as_bytes()))?;
            out.push(Tok::Op(op));
            i += op.len();
        }
    }
    Some(out)
}

struct ExprParser<'a> {
    toks: &'a [Tok],
    pos: usize,
    consts: &'a Consts,
    depth: usize,
}

impl ExprParser<'_> {
    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.toks.get(self.pos), Some(Tok::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn binary(
        &mut self,
        ops: &[&'static str],
        next: fn(&mut Self) -> Option<i64>,
        apply: fn(&str, i64, i64) -> Option<i64>,
    ) -> Option<i64> {
        let mut v = next(self)?;
        'outer: loop {
            for op in ops {
                if self.eat(op) {
                    let r = next(self)?;
                    v = apply(op, v, r)?;
                    continue 'outer;
                }
            }
            return Some(v);
        }
    }

    fn bit_or(&mut self) -> Option<i64> {
        self.binary(&["|"], Self::bit_xor, |_, a, b| Some(a | b))
    }
    fn bit_xor(&mut self) -> Option<i64> {
        self.binary(&["^"], Self::bit_and, |_, a, b| Some(a ^ b))
    }
    fn bit_and(&mut self) -> Option<i64> {
        self.binary(&["&"], Self::shift, |_, a, b| Some(a & b))
    }
    fn shift(&mut self) -> Option<i64> {
        self.binary(&["<<", ">>"], Self::additive, |op, a, b| {
            let s = u32::try_from(b).ok().filter(|s| *s < 63)?;
            if op == "<<" {
                a.checked_shl(s)
            } else {
                a.checked_shr(s)
            }
        })
    }
    fn additive(&mut self) -> Option<i64> {
        self.binary(&["+", "-"], Self::multiplicative, |op, a, b| {
            if op == "+" {
                a.checked_add(b)
            } else {
                a.checked_sub(b)
            }
        })
    }
    fn multiplicative(&mut self) -> Option<i64> {
        self.binary(&["*", "/", "%"], Self::unary, |op, a, b| match op {
            "*" => a.checked_mul(b),
            "/" => a.checked_div(b),
            _ => a.checked_rem(b),
        })
    }

    fn unary(&mut self) -> Option<i64> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let v = if self.eat("-") {
            self.unary()?.checked_neg()
        } else if self.eat("+") {
            self.unary()
        } else if self.eat("~") {
            self.unary().map(|v| !v)
        } else if self.eat("(") || self.eat("{") {
            let v = self.bit_or()?;
            (self.eat(")") || self.eat("}")).then_some(v)
        } else {
            match self.toks.get(self.pos)?.clone() {
                Tok::Num(n) => {
                    self.pos += 1;
                    Some(n)
                }
                Tok::Ident(name) if name == "sizeof" => {
                    self.pos += 1;
                    self.sizeof()
                }
                Tok::Ident(name) => {
                    self.pos += 1;
                    self.consts.get(&name).copied()
                }
                Tok::Op(_) => None,
            }
        };
        self.depth -= 1;
        v
    }

    /// `sizeof(float)` and friends; anything else is not a constant we know.
    fn sizeof(&mut self) -> Option<i64> {
        if !self.eat("(") {
            return None;
        }
        let mut name = String::new();
        while let Some(Tok::Ident(w)) = self.toks.get(self.pos) {
            if !name.is_empty() {
                name.push(' ');
            }
            name.push_str(w);
            self.pos += 1;
        }
        if !self.eat(")") {
            return None;
        }
        type_bytes(&name).map(i64::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_defines_and_sizes() {
        let mut c = Consts::new();
        c.insert("TILE".into(), 32);
        assert_eq!(eval_text("TILE + 1", &c), Some(33));
        assert_eq!(eval_text("(TILE * TILE) * sizeof(float)", &c), Some(4096));
        assert_eq!(eval_text("1 << 10", &c), Some(1024));
        assert_eq!(eval_text("0x20u", &c), Some(32));
        assert_eq!(eval_text("1.5f", &c), None);
        assert_eq!(eval_text("N", &c), None);
        assert_eq!(eval_text("32 // tile", &c), Some(32));
        assert_eq!(eval_text(&"(".repeat(10_000), &c), None);
    }
}
