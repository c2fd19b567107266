//! The elementwise functions: one vocabulary for the whole workspace. The checker's calls
//! (`exp(x)`, `a < b`), the reference interpreter, the loop IR and every backend name the same
//! operation with the same [`UnOp`] or [`BinOp`]; each gives it meaning in its own code (the
//! loop IR's f64 definitions are `tdsl_loop::scalar`, spec/loop-ir.md §2).

/// Elementwise functions of one argument (gelu is the tanh approximation, relu keeps NaN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Abs,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    Sin,
    Cos,
    Square,
    /// The error function.
    Erf,
    /// The exact gelu, `0.5·x·(1 + erf(x/√2))`: `gelu_erf(x)` or `gelu(x, approximate="none")`.
    GeluErf,
    /// `x·sigmoid(x)`.
    Silu,
    /// `log(1 + e^x)`, computed as `max(x, 0) + log1p(e^(−|x|))`.
    Softplus,
    Log1p,
    Expm1,
    Floor,
    Ceil,
    /// To nearest, ties to even (numpy's `round`).
    Round,
    /// −1, 0 or 1; NaN stays NaN and ±0 stays ±0.
    Sign,
}

impl UnOp {
    pub const ALL: [UnOp; 23] = [
        UnOp::Neg,
        UnOp::Exp,
        UnOp::Log,
        UnOp::Sqrt,
        UnOp::Rsqrt,
        UnOp::Abs,
        UnOp::Tanh,
        UnOp::Sigmoid,
        UnOp::Relu,
        UnOp::Gelu,
        UnOp::Sin,
        UnOp::Cos,
        UnOp::Square,
        UnOp::Erf,
        UnOp::GeluErf,
        UnOp::Silu,
        UnOp::Softplus,
        UnOp::Log1p,
        UnOp::Expm1,
        UnOp::Floor,
        UnOp::Ceil,
        UnOp::Round,
        UnOp::Sign,
    ];

    /// The name scripts call it by, and the loop IR's text prints.
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Exp => "exp",
            UnOp::Log => "log",
            UnOp::Sqrt => "sqrt",
            UnOp::Rsqrt => "rsqrt",
            UnOp::Abs => "abs",
            UnOp::Tanh => "tanh",
            UnOp::Sigmoid => "sigmoid",
            UnOp::Relu => "relu",
            UnOp::Gelu => "gelu",
            UnOp::Sin => "sin",
            UnOp::Cos => "cos",
            UnOp::Square => "square",
            UnOp::Erf => "erf",
            UnOp::GeluErf => "gelu_erf",
            UnOp::Silu => "silu",
            UnOp::Softplus => "softplus",
            UnOp::Log1p => "log1p",
            UnOp::Expm1 => "expm1",
            UnOp::Floor => "floor",
            UnOp::Ceil => "ceil",
            UnOp::Round => "round",
            UnOp::Sign => "sign",
        }
    }

    /// The operation called `name`.
    pub fn from_name(name: &str) -> Option<UnOp> {
        UnOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether it costs more than a few arithmetic instructions (a transcendental function, a
    /// root): the planner avoids evaluating such a function more often than needed.
    pub fn is_costly(self) -> bool {
        !matches!(
            self,
            UnOp::Neg
                | UnOp::Abs
                | UnOp::Relu
                | UnOp::Square
                | UnOp::Floor
                | UnOp::Ceil
                | UnOp::Round
                | UnOp::Sign
        )
    }
}

/// Elementwise functions of two arguments (operators and `max`, `min`, `pow`). `Max`/`Min`
/// propagate NaN. The comparisons give 1 where true and 0 where false; a NaN operand makes every
/// comparison false except `Ne`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl BinOp {
    /// How scripts and diagnostics name it: `add`, `sub`, `mul`, `div`, `max`, `min`, `pow`, and
    /// comparisons by their operator (`<`, `<=`, `>`, `>=`, `==`, `!=`).
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Max => "max",
            BinOp::Min => "min",
            BinOp::Pow => "pow",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_read_back() {
        for op in UnOp::ALL {
            assert_eq!(UnOp::from_name(op.name()), Some(op));
        }
    }
}
