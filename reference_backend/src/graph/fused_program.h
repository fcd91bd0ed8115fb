// flemu's graph compiler: a region of elementwise ops becomes one program
// over registers that runs in a single pass over memory. Each tile of
// elements is loaded once, every instruction runs over the tile while it
// sits in cache, and the outputs are stored once.
#ifndef FLEMU_GRAPH_FUSED_PROGRAM_H_
#define FLEMU_GRAPH_FUSED_PROGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "torch_fl/graph.h"

namespace flemu::graph {

constexpr int kMaxFusedDims = 16;

enum class OpCode : uint8_t {
  Copy,
  Add,       // a + imm0 * b
  Sub,       // a - imm0 * b
  Mul,
  Div,
  AddConst,  // a + imm0
  MulConst,  // a * imm0
  DivConst,  // a / imm0
  RSubConst, // imm0 - imm1 * a
  Neg,
  Relu,
  Abs,
  Exp,
  Exp2,
  Log,
  Log2,
  Log1p,
  Expm1,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Sigmoid,
  Tanh,
  Sin,
  Cos,
  Erf,
  Floor,
  Ceil,
  Trunc,
  Round,
  Sign,
  Silu,
  PowConst,   // a ^ imm0
  Pow,        // a ^ b
  RPowConst,  // imm0 ^ a
  Maximum,
  Minimum,
  Clamp,      // imm2 bit 0: has min (imm0), bit 1: has max (imm1)
  LeakyRelu,  // imm0: slope
  Gelu,       // imm0: 1 = tanh approximation
  GeluBackward,
  SiluBackward,
  SigmoidBackward,
  TanhBackward,
  ThresholdBackward,  // a <= imm0 ? 0 : grad  (a = grad, b = self)
  Threshold,          // a <= imm0 ? imm1 : a
  Where,              // a ? b : c
  MaskedFill,         // b ? imm0 : a
  Gt, Ge, Lt, Le, Eq, Ne,                                  // a op b -> 0/1
  GtConst, GeConst, LtConst, LeConst, EqConst, NeConst,    // a op imm0 -> 0/1
  LogicalNot,
  LogicalAnd,
  LogicalOr,
  Addcmul,  // a + imm0 * b * c
  Addcdiv,  // a + imm0 * b / c
  Lerp,     // a + imm0 * (b - a)
  RoundTo,  // round to the precision of dtype imm0 (float16, bfloat16, float32, bool)
};

struct Instr {
  OpCode op = OpCode::Copy;
  int16_t dst = 0, a = -1, b = -1, c = -1;
  double imm[3] = {0.0, 0.0, 0.0};
  // dst's only use is the next instruction's a, and it is no output: the
  // executor hands it over in vector registers and never stores it.
  bool chained = false;
};

// One input or output tensor of the region, laid out on the program's loop.
struct Operand {
  int32_t value = 0;  // index into TFL_Graph.values
  int32_t dtype = 0;
  int32_t reg = 0;
  int64_t itemsize = 0;
  int64_t strides[kMaxFusedDims] = {};  // elements, per loop dim (0 = broadcast)
  // What the host must pass at execution, as declared in the region.
  std::vector<int64_t> sizes, declared_strides;
};

struct Program {
  int32_t device = 0;
  bool double_compute = false;  // float64 anywhere: compute in double
  int32_t num_regs = 0;
  std::vector<Instr> code;
  std::vector<Operand> inputs, outputs;  // execution-argument order
  int32_t ndim = 0;                      // loop dims after reordering and merging
  int64_t sizes[kMaxFusedDims] = {};
  int64_t numel = 0;
  size_t num_nodes = 0;
  // The executor's plan, static per program (compile_program fills it).
  // Full tiles of a direct operand are not copied: the register the code
  // reads it from, or writes it to, is the operand's own memory. Inputs
  // dense in the compute type are direct: each gets a register of its own
  // (in_reg), which run_code reads until its first write to the input's
  // register in `code` (the allocator reuses an input's register once its
  // value is dead), so nothing is ever written to an input. An output may be
  // direct (may_direct_out) when dense in the compute type, its register is
  // no other output's and holds no input the code still reads from it; the
  // executor makes it direct when its memory also overlaps no input's (an
  // in-place output would overwrite an input that a later instruction of
  // the tile still reads).
  std::vector<Instr> run_code;  // code, direct inputs read from their own registers
  int32_t run_regs = 0;         // num_regs and those registers
  std::vector<int32_t> in_reg;  // per input
  std::vector<char> direct_in, may_direct_out;
};

// Why a region was declined: a reason and the node it is about (-1 = none).
struct Decline {
  std::string reason;
  int64_t node = -1;
};

// Builds the program, or returns false with *decline filled. Throws
// flemu::Error (TFL_ERR_INVALID_ARGUMENT) for a malformed graph.
bool compile_program(const TFL_Graph& graph, Program* program, Decline* decline);

// Runs the whole program over the given element pointers (flemu's aliases),
// splitting it across the thread pool when large.
void run_program(const Program& program, char* const* inputs, char* const* outputs);

}  // namespace flemu::graph

#endif  // FLEMU_GRAPH_FUSED_PROGRAM_H_
