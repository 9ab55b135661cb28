// The op list: every op of the stitch IR, declared once. The OpCode enum, the op table that
// OpCodeName, ClassOf and Arity read, the wire-format checks and the HLO importer's op map are
// all expanded from it, so an op is added here and nowhere else is its name or number
// repeated.
//
// Define STITCH_OP before including this file; the file expands one STITCH_OP per op, in
// wire-value order, and then undefines it. It is meant to be included several times, so it
// has no include guard.
//
// STITCH_OP(Enum, wire, Proto, name, hlo, Class, arity, Operands, Result, Cost)
//   Enum      the enumerator OpCode::k<Enum>
//   wire      its numeric value. The values are part of the canonical key and of the wire
//             format: never renumber, only append.
//   Proto     the stitch.v1.OpCode value with that number (graph.proto)
//   name      the spelling in stitch's own dumps (what OpCodeName returns)
//   hlo       the HLO opcode that lowers to this op, or "" when no HLO op does directly
//   Class     the family, OpClass::k<Class>
//   arity     the number of operands, or -1 when variadic
//   Operands  the operand element types an elementwise op accepts, OperandDTypes::k<Operands>:
//             Any, Float (floating point only) or Integer (integers and pred only)
//   Result    where the result element type comes from, ResultDType::k<Result>: Operand
//             (the value operands'), Pred, or Declared (the node's own shape says it)
//   Cost      OpCost::k<Cost>: Costly when recomputing the op in every consumer costs real
//             time (transcendentals, division, random numbers), so a planner computes it
//             once and reuses it; Cheap otherwise
#ifndef STITCH_OP
#error "define STITCH_OP(Enum, wire, Proto, name, hlo, Class, arity, Operands, Result, Cost) first"
#endif

// Leaves.
STITCH_OP(Parameter, 1, PARAMETER, "parameter", "parameter", Leaf, 0, Any, Declared, Cheap)
STITCH_OP(Constant, 2, CONSTANT, "constant", "constant", Leaf, 0, Any, Declared, Cheap)
STITCH_OP(Iota, 3, IOTA, "iota", "iota", Leaf, 0, Any, Declared, Cheap)

// Elementwise unary.
STITCH_OP(Neg, 10, NEG, "negate", "negate", Elementwise, 1, Any, Operand, Cheap)
STITCH_OP(Abs, 11, ABS, "abs", "abs", Elementwise, 1, Any, Operand, Cheap)
STITCH_OP(Exp, 12, EXP, "exponential", "exponential", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Log, 13, LOG, "log", "log", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Log1p, 14, LOG1P, "log-plus-one", "log-plus-one", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Expm1, 15, EXPM1, "exponential-minus-one", "exponential-minus-one", Elementwise, 1, Float,
          Operand, Costly)
STITCH_OP(Tanh, 16, TANH, "tanh", "tanh", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Logistic, 17, LOGISTIC, "logistic", "logistic", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Sqrt, 18, SQRT, "sqrt", "sqrt", Elementwise, 1, Float, Operand, Cheap)
STITCH_OP(Rsqrt, 19, RSQRT, "rsqrt", "rsqrt", Elementwise, 1, Float, Operand, Cheap)
STITCH_OP(Erf, 20, ERF, "erf", "erf", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Sin, 21, SIN, "sine", "sine", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Cos, 22, COS, "cosine", "cosine", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Floor, 23, FLOOR, "floor", "floor", Elementwise, 1, Float, Operand, Cheap)
STITCH_OP(Ceil, 24, CEIL, "ceil", "ceil", Elementwise, 1, Float, Operand, Cheap)
// Half away from zero.
STITCH_OP(Round, 25, ROUND, "round-nearest-afz", "round-nearest-afz", Elementwise, 1, Float,
          Operand, Cheap)
STITCH_OP(RoundNearestEven, 26, ROUND_NEAREST_EVEN, "round-nearest-even", "round-nearest-even",
          Elementwise, 1, Float, Operand, Cheap)
STITCH_OP(Sign, 27, SIGN, "sign", "sign", Elementwise, 1, Any, Operand, Cheap)
STITCH_OP(Not, 28, NOT, "not", "not", Elementwise, 1, Integer, Operand, Cheap)
STITCH_OP(Convert, 29, CONVERT, "convert", "convert", Elementwise, 1, Any, Declared, Cheap)
// Reinterprets the bits; both element types have the same width.
STITCH_OP(BitcastConvert, 30, BITCAST_CONVERT, "bitcast-convert", "bitcast-convert", Elementwise, 1,
          Any, Declared, Cheap)
STITCH_OP(Cbrt, 31, CBRT, "cbrt", "cbrt", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(Tan, 32, TAN, "tan", "tan", Elementwise, 1, Float, Operand, Costly)
STITCH_OP(IsFinite, 33, IS_FINITE, "is-finite", "is-finite", Elementwise, 1, Float, Pred, Cheap)
STITCH_OP(Popcnt, 34, POPCNT, "popcnt", "popcnt", Elementwise, 1, Integer, Operand, Cheap)

// Elementwise binary.
STITCH_OP(Add, 40, ADD, "add", "add", Elementwise, 2, Any, Operand, Cheap)
STITCH_OP(Sub, 41, SUB, "subtract", "subtract", Elementwise, 2, Any, Operand, Cheap)
STITCH_OP(Mul, 42, MUL, "multiply", "multiply", Elementwise, 2, Any, Operand, Cheap)
STITCH_OP(Div, 43, DIV, "divide", "divide", Elementwise, 2, Any, Operand, Costly)
STITCH_OP(Pow, 44, POW, "power", "power", Elementwise, 2, Float, Operand, Costly)
STITCH_OP(Max, 45, MAX, "maximum", "maximum", Elementwise, 2, Any, Operand, Cheap)
STITCH_OP(Min, 46, MIN, "minimum", "minimum", Elementwise, 2, Any, Operand, Cheap)
STITCH_OP(Rem, 47, REM, "remainder", "remainder", Elementwise, 2, Any, Operand, Costly)
STITCH_OP(And, 48, AND, "and", "and", Elementwise, 2, Integer, Operand, Cheap)
STITCH_OP(Or, 49, OR, "or", "or", Elementwise, 2, Integer, Operand, Cheap)
STITCH_OP(Xor, 50, XOR, "xor", "xor", Elementwise, 2, Integer, Operand, Cheap)
STITCH_OP(ShiftLeft, 51, SHIFT_LEFT, "shift-left", "shift-left", Elementwise, 2, Integer, Operand,
          Cheap)
STITCH_OP(ShiftRightLogical, 52, SHIFT_RIGHT_LOGICAL, "shift-right-logical", "shift-right-logical",
          Elementwise, 2, Integer, Operand, Cheap)
STITCH_OP(ShiftRightArithmetic, 53, SHIFT_RIGHT_ARITHMETIC, "shift-right-arithmetic",
          "shift-right-arithmetic", Elementwise, 2, Integer, Operand, Cheap)
STITCH_OP(Compare, 54, COMPARE, "compare", "compare", Elementwise, 2, Any, Pred, Cheap)
STITCH_OP(Atan2, 55, ATAN2, "atan2", "atan2", Elementwise, 2, Float, Operand, Costly)

// Elementwise ternary.
STITCH_OP(Select, 60, SELECT, "select", "select", Elementwise, 3, Any, Operand, Cheap)
// clamp(min, x, max), as in HLO.
STITCH_OP(Clamp, 61, CLAMP, "clamp", "clamp", Elementwise, 3, Any, Operand, Cheap)

// Data movement.
STITCH_OP(Broadcast, 70, BROADCAST, "broadcast", "broadcast", DataMovement, 1, Any, Operand, Cheap)
// HLO bitcasts become reshapes too, with transposes around them for non-default layouts.
STITCH_OP(Reshape, 71, RESHAPE, "reshape", "reshape", DataMovement, 1, Any, Operand, Cheap)
STITCH_OP(Transpose, 72, TRANSPOSE, "transpose", "transpose", DataMovement, 1, Any, Operand, Cheap)
STITCH_OP(Slice, 73, SLICE, "slice", "slice", DataMovement, 1, Any, Operand, Cheap)
STITCH_OP(Concatenate, 74, CONCATENATE, "concatenate", "concatenate", DataMovement, -1, Any,
          Operand, Cheap)
STITCH_OP(Pad, 75, PAD, "pad", "pad", DataMovement, 2, Any, Operand, Cheap)
STITCH_OP(Reverse, 76, REVERSE, "reverse", "reverse", DataMovement, 1, Any, Operand, Cheap)

// Reductions.
STITCH_OP(Reduce, 80, REDUCE, "reduce", "reduce", Reduce, 2, Any, Operand, Cheap)

// Random numbers: counter-based (Philox 4x32-10) uniform in [0,1); see the rng attributes of
// Node. HLO's rng ops have other semantics, so none lowers to it.
STITCH_OP(RngUniform, 90, RNG_UNIFORM, "rng-uniform", "", Rng, 1, Any, Declared, Costly)

#undef STITCH_OP
