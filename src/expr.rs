//! Size expressions: `ceil_div(n, 256)`, `rows*cols`, `min(n, 1024)`.
//!
//! Task files and launch plans use small integer expressions over a configuration's named
//! sizes. They are parsed once with [`evalexpr`] (no hand-written parser) and evaluated in a
//! closed context: only the config's sizes and the functions `min`, `max` and `ceil_div` are
//! visible, and evalexpr's other built-ins (string, regex, random) are disabled.

use std::collections::BTreeMap;
use std::fmt;

use evalexpr::{Context, EvalexprError, EvalexprResult, Node, Value};

/// Named integer sizes of one input configuration (`n = 1000003`).
pub type Sizes = BTreeMap<String, i64>;

/// Why an expression could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExprError {
    /// The text is not a valid expression.
    #[error("cannot parse expression `{expr}`: {reason}")]
    Parse {
        /// The expression text.
        expr: String,
        /// The parser's message.
        reason: String,
    },
    /// The expression names a size the configuration does not define.
    #[error("expression `{expr}` uses `{name}`, which is not a size of this configuration (known: {known})")]
    UnknownName {
        /// The expression text.
        expr: String,
        /// The unknown identifier.
        name: String,
        /// The sizes that exist, comma-separated.
        known: String,
    },
    /// Evaluation failed (division by zero, overflow, wrong type, unknown function).
    #[error("cannot evaluate `{expr}`: {reason}")]
    Eval {
        /// The expression text.
        expr: String,
        /// What went wrong.
        reason: String,
    },
}

/// A parsed expression over configuration sizes.
#[derive(Clone)]
pub struct Expr {
    text: String,
    node: Node,
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({:?})", self.text)
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// Longest accepted expression; launch lines come from untrusted completions.
const MAX_EXPR_LEN: usize = 512;

impl Expr {
    /// Parses `text`.
    ///
    /// ```
    /// use cudaperf::expr::{Expr, Sizes};
    /// let e = Expr::parse("ceil_div(n, 256)").unwrap();
    /// let sizes = Sizes::from([("n".to_string(), 1000)]);
    /// assert_eq!(e.eval_int(&sizes).unwrap(), 4);
    /// ```
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let text = text.trim();
        let parse_err = |reason: String| ExprError::Parse {
            expr: text.to_string(),
            reason,
        };
        if text.is_empty() {
            return Err(parse_err("empty expression".into()));
        }
        if text.len() > MAX_EXPR_LEN {
            return Err(parse_err(format!("longer than {MAX_EXPR_LEN} characters")));
        }
        // Assignment, chaining and strings make no sense for sizes; reject them up front so
        // errors say so instead of failing obscurely at evaluation time.
        if let Some(c) = text
            .chars()
            .find(|c| matches!(c, '=' | ';' | '"' | '^' | '&' | '|' | '!'))
        {
            return Err(parse_err(format!(
                "character `{c}` is not allowed in a size expression"
            )));
        }
        let node = evalexpr::build_operator_tree(text).map_err(|e| parse_err(e.to_string()))?;
        Ok(Expr {
            text: text.to_string(),
            node,
        })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The identifiers the expression reads.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.node.iter_variable_identifiers()
    }

    /// Checks that every identifier is one of `known`.
    pub fn check_names<'a>(
        &self,
        known: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<(), ExprError> {
        for v in self.variables() {
            if !known.clone().into_iter().any(|k| k == v) {
                return Err(ExprError::UnknownName {
                    expr: self.text.clone(),
                    name: v.to_string(),
                    known: known.into_iter().collect::<Vec<_>>().join(", "),
                });
            }
        }
        Ok(())
    }

    /// Evaluates to an integer.
    pub fn eval_int(&self, sizes: &Sizes) -> Result<i64, ExprError> {
        self.check_names(sizes.keys().map(String::as_str))?;
        let ctx = SizeContext::new(sizes);
        self.node
            .eval_int_with_context(&ctx)
            .map_err(|e| self.eval_err(e))
    }

    /// Evaluates to a float (integers are converted).
    pub fn eval_f64(&self, sizes: &Sizes) -> Result<f64, ExprError> {
        self.check_names(sizes.keys().map(String::as_str))?;
        let ctx = SizeContext::new(sizes);
        self.node
            .eval_number_with_context(&ctx)
            .map_err(|e| self.eval_err(e))
    }

    fn eval_err(&self, e: EvalexprError) -> ExprError {
        ExprError::Eval {
            expr: self.text.clone(),
            reason: e.to_string(),
        }
    }
}

struct SizeContext {
    values: BTreeMap<String, Value>,
}

impl SizeContext {
    fn new(sizes: &Sizes) -> Self {
        SizeContext {
            values: sizes
                .iter()
                .map(|(k, v)| (k.clone(), Value::Int(*v)))
                .collect(),
        }
    }
}

fn two_ints(argument: &Value, name: &str) -> EvalexprResult<(i64, i64)> {
    let t = argument
        .as_fixed_len_tuple(2)
        .map_err(|_| EvalexprError::CustomMessage(format!("{name} takes two integer arguments")))?;
    Ok((t[0].as_int()?, t[1].as_int()?))
}

impl Context for SizeContext {
    fn get_value(&self, identifier: &str) -> Option<&Value> {
        self.values.get(identifier)
    }

    fn call_function(&self, identifier: &str, argument: &Value) -> EvalexprResult<Value> {
        match identifier {
            "min" => two_ints(argument, "min").map(|(a, b)| Value::Int(a.min(b))),
            "max" => two_ints(argument, "max").map(|(a, b)| Value::Int(a.max(b))),
            "ceil_div" => {
                let (a, b) = two_ints(argument, "ceil_div")?;
                if b <= 0 {
                    return Err(EvalexprError::CustomMessage(format!(
                        "ceil_div({a}, {b}): the divisor must be positive"
                    )));
                }
                let q = a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0);
                Ok(Value::Int(q))
            }
            other => Err(EvalexprError::CustomMessage(format!(
                "unknown function `{other}` (allowed: min, max, ceil_div)"
            ))),
        }
    }

    fn are_builtin_functions_disabled(&self) -> bool {
        true
    }

    fn set_builtin_functions_disabled(&mut self, _disabled: bool) -> EvalexprResult<()> {
        Err(EvalexprError::ContextNotMutable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(pairs: &[(&str, i64)]) -> Sizes {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn arithmetic_and_functions() {
        let s = sizes(&[("n", 1000), ("rows", 7), ("cols", 9)]);
        let cases = [
            ("ceil_div(n, 256)", 4),
            ("ceil_div(1024, 256)", 4),
            ("rows*cols", 63),
            ("min(n, 64) + max(rows, cols)", 73),
            ("(n + 255) / 256", 4),
            ("n % 7", 6),
            ("256*4", 1024),
        ];
        for (text, want) in cases {
            assert_eq!(
                Expr::parse(text).unwrap().eval_int(&s).unwrap(),
                want,
                "{text}"
            );
        }
    }

    #[test]
    fn unknown_names_and_functions_are_errors() {
        let s = sizes(&[("n", 10)]);
        let e = Expr::parse("m * 2").unwrap().eval_int(&s).unwrap_err();
        assert!(
            matches!(e, ExprError::UnknownName { ref name, .. } if name == "m"),
            "{e}"
        );
        let e = Expr::parse("str::to_lowercase(n)")
            .unwrap()
            .eval_int(&s)
            .unwrap_err();
        assert!(e.to_string().contains("unknown function"), "{e}");
        let e = Expr::parse("ceil_div(n, 0)")
            .unwrap()
            .eval_int(&s)
            .unwrap_err();
        assert!(e.to_string().contains("divisor must be positive"), "{e}");
    }

    #[test]
    fn rejects_assignment_and_garbage() {
        for text in ["n = 3", "", "a; b", "\"x\"", "(((", "n +"] {
            assert!(
                Expr::parse(text)
                    .and_then(|e| e.eval_int(&sizes(&[("n", 1)])))
                    .is_err(),
                "{text}"
            );
        }
        assert!(Expr::parse(&"1+".repeat(400)).is_err());
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let s = sizes(&[("n", i64::MAX)]);
        assert!(Expr::parse("n * n").unwrap().eval_int(&s).is_err());
        assert!(Expr::parse("n + 1").unwrap().eval_int(&s).is_err());
    }

    #[test]
    fn floats() {
        let s = sizes(&[("d", 64)]);
        assert_eq!(Expr::parse("0.5").unwrap().eval_f64(&s).unwrap(), 0.5);
        assert_eq!(Expr::parse("d").unwrap().eval_f64(&s).unwrap(), 64.0);
    }
}
