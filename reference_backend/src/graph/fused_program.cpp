// From a region in the graph IR to a register program: the op table, the
// checks that decide accept or decline, register allocation, and the loop
// layout (dimension order and merging) shared by every operand.
#include "fused_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>

#include "../errors.h"
#include "../kernels/support/dtype.h"
#include "../kernels/support/launch.h"

namespace flemu::graph {
namespace {

struct Declined {
  Decline what;
};

[[noreturn]] void decline(int64_t node, std::string reason) { throw Declined{Decline{std::move(reason), node}}; }

bool fusable_dtype(int32_t dtype) {
  return dtype == TFL_DTYPE_FLOAT32 || dtype == TFL_DTYPE_FLOAT16 || dtype == TFL_DTYPE_BFLOAT16 ||
         dtype == TFL_DTYPE_FLOAT64 || dtype == TFL_DTYPE_BOOL;
}

// The arguments of one node, read with the checks every op needs.
class Args {
 public:
  Args(const TFL_Graph& g, const TFL_GraphNode& n, size_t index) : g_(g), n_(n), index_(index) {}

  const char* op() const { return n_.op; }
  int64_t index() const { return static_cast<int64_t>(index_); }
  size_t size() const { return n_.num_args; }

  bool present(size_t i) const { return i < n_.num_args && n_.args[i].tag != TFL_VALUE_NONE; }
  bool is_ref(size_t i) const { return i < n_.num_args && n_.args[i].tag == TFL_VALUE_GRAPH_REF; }

  // A tensor argument: a value of the region.
  int32_t ref(size_t i, const char* what) const {
    if (i >= n_.num_args) decline(index(), cat(op(), ": missing tensor argument ", what));
    const TFL_Value& v = n_.args[i];
    if (v.tag != TFL_VALUE_GRAPH_REF)
      decline(index(), cat(op(), ": argument ", what, " is not a tensor of the region"));
    if (v.v.i < 0 || static_cast<size_t>(v.v.i) >= g_.num_values)
      invalid_argument("node ", index_, " (", op(), ") argument ", i, " refers to value ", v.v.i, " of ",
                       g_.num_values);
    return static_cast<int32_t>(v.v.i);
  }

  // A Scalar/int/float/bool argument as double; `fallback` when absent.
  double scalar(size_t i, double fallback, const char* what) const {
    if (!present(i)) return fallback;
    const TFL_Value& v = n_.args[i];
    switch (v.tag) {
      case TFL_VALUE_INT:
      case TFL_VALUE_BOOL: return static_cast<double>(v.v.i);
      case TFL_VALUE_DOUBLE: return v.v.d;
      case TFL_VALUE_GRAPH_REF: decline(index(), cat(op(), ": ", what, " as a tensor is not fused"));
      default: decline(index(), cat(op(), ": ", what, " must be a number"));
    }
  }

  std::string_view str(size_t i, std::string_view fallback) const {
    if (!present(i)) return fallback;
    const TFL_Value& v = n_.args[i];
    if (v.tag != TFL_VALUE_STRING) decline(index(), cat(op(), ": argument ", i, " must be a string"));
    return std::string_view(v.v.str.data, v.v.str.size);
  }

  // Requires arguments from `from` on to be absent.
  void none_from(size_t from, const char* why) const {
    for (size_t i = from; i < n_.num_args; ++i)
      if (n_.args[i].tag != TFL_VALUE_NONE) decline(index(), cat(op(), ": ", why));
  }

  const TFL_Value& raw(size_t i) const { return n_.args[i]; }
  int32_t dtype_of(int32_t value) const { return g_.values[value]->dtype; }

 private:
  const TFL_Graph& g_;
  const TFL_GraphNode& n_;
  size_t index_;
};

// Instructions over value indices; registers are assigned afterwards.
struct Emitter {
  std::vector<Instr> code;
  void emit(OpCode op, int32_t dst, int32_t a, int32_t b = -1, int32_t c = -1, double i0 = 0, double i1 = 0,
            double i2 = 0) {
    Instr in;
    in.op = op;
    in.dst = static_cast<int16_t>(dst);
    in.a = static_cast<int16_t>(a);
    in.b = static_cast<int16_t>(b);
    in.c = static_cast<int16_t>(c);
    in.imm[0] = i0;
    in.imm[1] = i1;
    in.imm[2] = i2;
    code.push_back(in);
  }
};

using Handler = std::function<void(const Args&, int32_t out, Emitter&)>;
using OpTable = std::unordered_map<std::string, Handler>;

Handler unary(OpCode op) {
  return [op](const Args& a, int32_t out, Emitter& e) { e.emit(op, out, a.ref(0, "self")); };
}
Handler binary(OpCode op) {
  return [op](const Args& a, int32_t out, Emitter& e) { e.emit(op, out, a.ref(0, "self"), a.ref(1, "other")); };
}
// reg_op(self, other), or const_op(self, imm0 = other) when other is a number.
Handler binary_or_const(OpCode reg_op, OpCode const_op) {
  return [reg_op, const_op](const Args& a, int32_t out, Emitter& e) {
    if (a.is_ref(1)) e.emit(reg_op, out, a.ref(0, "self"), a.ref(1, "other"));
    else e.emit(const_op, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "other"));
  };
}
Handler compare_const(OpCode op) {
  return [op](const Args& a, int32_t out, Emitter& e) {
    e.emit(op, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "other"));
  };
}

const OpTable& op_table() {
  static const OpTable table = [] {
    OpTable t;
    // The .Tensor overloads also arrive with a number for `other`.
    t["aten::add.Tensor"] = [](const Args& a, int32_t out, Emitter& e) {
      const double alpha = a.scalar(2, 1, "alpha");
      if (a.is_ref(1)) e.emit(OpCode::Add, out, a.ref(0, "self"), a.ref(1, "other"), -1, alpha);
      else e.emit(OpCode::AddConst, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "other") * alpha);
    };
    t["aten::sub.Tensor"] = [](const Args& a, int32_t out, Emitter& e) {
      const double alpha = a.scalar(2, 1, "alpha");
      if (a.is_ref(1)) e.emit(OpCode::Sub, out, a.ref(0, "self"), a.ref(1, "other"), -1, alpha);
      else e.emit(OpCode::AddConst, out, a.ref(0, "self"), -1, -1, -a.scalar(1, 0, "other") * alpha);
    };
    t["aten::rsub.Tensor"] = [](const Args& a, int32_t out, Emitter& e) {
      const double alpha = a.scalar(2, 1, "alpha");
      if (a.is_ref(1)) e.emit(OpCode::Sub, out, a.ref(1, "other"), a.ref(0, "self"), -1, alpha);
      else e.emit(OpCode::RSubConst, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "other"), alpha);
    };
    t["aten::mul.Tensor"] = binary_or_const(OpCode::Mul, OpCode::MulConst);
    t["aten::div.Tensor"] = binary_or_const(OpCode::Div, OpCode::DivConst);
    t["aten::div.Tensor_mode"] = [](const Args& a, int32_t out, Emitter& e) {
      if (a.present(2)) decline(a.index(), "aten::div.Tensor_mode: rounding modes are not fused");
      e.emit(OpCode::Div, out, a.ref(0, "self"), a.ref(1, "other"));
    };
    t["aten::add.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::AddConst, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "other") * a.scalar(2, 1, "alpha"));
    };
    t["aten::sub.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::AddConst, out, a.ref(0, "self"), -1, -1, -a.scalar(1, 0, "other") * a.scalar(2, 1, "alpha"));
    };
    t["aten::rsub.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::RSubConst, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "other"), a.scalar(2, 1, "alpha"));
    };
    t["aten::mul.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::MulConst, out, a.ref(0, "self"), -1, -1, a.scalar(1, 1, "other"));
    };
    t["aten::div.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::DivConst, out, a.ref(0, "self"), -1, -1, a.scalar(1, 1, "other"));
    };
    t["aten::neg"] = unary(OpCode::Neg);
    t["aten::relu"] = unary(OpCode::Relu);
    t["aten::abs"] = unary(OpCode::Abs);
    t["aten::exp"] = unary(OpCode::Exp);
    t["aten::exp2"] = unary(OpCode::Exp2);
    t["aten::log"] = unary(OpCode::Log);
    t["aten::log2"] = unary(OpCode::Log2);
    t["aten::log1p"] = unary(OpCode::Log1p);
    t["aten::expm1"] = unary(OpCode::Expm1);
    t["aten::sqrt"] = unary(OpCode::Sqrt);
    t["aten::rsqrt"] = unary(OpCode::Rsqrt);
    t["aten::reciprocal"] = unary(OpCode::Reciprocal);
    t["aten::sigmoid"] = unary(OpCode::Sigmoid);
    t["aten::tanh"] = unary(OpCode::Tanh);
    t["aten::sin"] = unary(OpCode::Sin);
    t["aten::cos"] = unary(OpCode::Cos);
    t["aten::erf"] = unary(OpCode::Erf);
    t["aten::floor"] = unary(OpCode::Floor);
    t["aten::ceil"] = unary(OpCode::Ceil);
    t["aten::trunc"] = unary(OpCode::Trunc);
    t["aten::round"] = unary(OpCode::Round);
    t["aten::sign"] = unary(OpCode::Sign);
    t["aten::silu"] = unary(OpCode::Silu);
    t["aten::logical_not"] = unary(OpCode::LogicalNot);
    t["aten::logical_and"] = binary(OpCode::LogicalAnd);
    t["aten::logical_or"] = binary(OpCode::LogicalOr);
    t["aten::pow.Tensor_Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::PowConst, out, a.ref(0, "self"), -1, -1, a.scalar(1, 1, "exponent"));
    };
    t["aten::pow.Tensor_Tensor"] = binary_or_const(OpCode::Pow, OpCode::PowConst);
    t["aten::pow.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::RPowConst, out, a.ref(1, "exponent"), -1, -1, a.scalar(0, 1, "self"));
    };
    t["aten::maximum"] = binary(OpCode::Maximum);
    t["aten::minimum"] = binary(OpCode::Minimum);
    t["aten::clamp"] = [](const Args& a, int32_t out, Emitter& e) {
      const bool lo = a.present(1), hi = a.present(2);
      e.emit(OpCode::Clamp, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "min"), a.scalar(2, 0, "max"),
             (lo ? 1 : 0) | (hi ? 2 : 0));
    };
    t["aten::clamp_min"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Clamp, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "min"), 0, 1);
    };
    t["aten::clamp_max"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Clamp, out, a.ref(0, "self"), -1, -1, 0, a.scalar(1, 0, "max"), 2);
    };
    t["aten::hardtanh"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Clamp, out, a.ref(0, "self"), -1, -1, a.scalar(1, -1, "min_val"), a.scalar(2, 1, "max_val"), 3);
    };
    t["aten::leaky_relu"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::LeakyRelu, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0.01, "negative_slope"));
    };
    auto gelu_mode = [](const Args& a, size_t i) {
      const std::string_view mode = a.str(i, "none");
      if (mode == "none") return 0.0;
      if (mode == "tanh") return 1.0;
      decline(a.index(), cat(a.op(), ": unknown approximation '", mode, "'"));
    };
    t["aten::gelu"] = [gelu_mode](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Gelu, out, a.ref(0, "self"), -1, -1, gelu_mode(a, 1));
    };
    t["aten::gelu_backward"] = [gelu_mode](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::GeluBackward, out, a.ref(0, "grad_output"), a.ref(1, "self"), -1, gelu_mode(a, 2));
    };
    t["aten::silu_backward"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::SiluBackward, out, a.ref(0, "grad_output"), a.ref(1, "self"));
    };
    t["aten::sigmoid_backward"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::SigmoidBackward, out, a.ref(0, "grad_output"), a.ref(1, "output"));
    };
    t["aten::tanh_backward"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::TanhBackward, out, a.ref(0, "grad_output"), a.ref(1, "output"));
    };
    t["aten::threshold_backward"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::ThresholdBackward, out, a.ref(0, "grad_output"), a.ref(1, "self"), -1,
             a.scalar(2, 0, "threshold"));
    };
    t["aten::threshold"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Threshold, out, a.ref(0, "self"), -1, -1, a.scalar(1, 0, "threshold"), a.scalar(2, 0, "value"));
    };
    t["aten::where.self"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Where, out, a.ref(0, "condition"), a.ref(1, "self"), a.ref(2, "other"));
    };
    t["aten::masked_fill.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::MaskedFill, out, a.ref(0, "self"), a.ref(1, "mask"), -1, a.scalar(2, 0, "value"));
    };
    const std::pair<const char*, OpCode> compares[] = {{"gt", OpCode::Gt}, {"ge", OpCode::Ge}, {"lt", OpCode::Lt},
                                                       {"le", OpCode::Le}, {"eq", OpCode::Eq}, {"ne", OpCode::Ne}};
    for (const auto& [name, op] : compares) {
      const OpCode cop = static_cast<OpCode>(static_cast<int>(OpCode::GtConst) +
                                             (static_cast<int>(op) - static_cast<int>(OpCode::Gt)));
      t[cat("aten::", name, ".Tensor")] = binary_or_const(op, cop);
      t[cat("aten::", name, ".Scalar")] = compare_const(cop);
    }
    t["aten::addcmul"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Addcmul, out, a.ref(0, "self"), a.ref(1, "tensor1"), a.ref(2, "tensor2"), a.scalar(3, 1, "value"));
    };
    t["aten::addcdiv"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Addcdiv, out, a.ref(0, "self"), a.ref(1, "tensor1"), a.ref(2, "tensor2"), a.scalar(3, 1, "value"));
    };
    t["aten::lerp.Scalar"] = [](const Args& a, int32_t out, Emitter& e) {
      e.emit(OpCode::Lerp, out, a.ref(0, "self"), a.ref(1, "end"), -1, a.scalar(2, 0, "weight"));
    };
    t["aten::clone"] = [](const Args& a, int32_t out, Emitter& e) { e.emit(OpCode::Copy, out, a.ref(0, "self")); };
    t["aten::alias"] = t["aten::clone"];
    // (self, *, dtype, layout, device, pin_memory, non_blocking, memory_format)
    t["aten::_to_copy"] = [](const Args& a, int32_t out, Emitter& e) {
      if (a.present(2) && a.raw(2).v.i != 0) decline(a.index(), "aten::_to_copy: only strided layouts are fused");
      if (a.present(4) && a.raw(4).v.i != 0) decline(a.index(), "aten::_to_copy: pinned memory is not fused");
      // The output dtype is the value's dtype; RoundTo gives the rounding a
      // store to that dtype would (intermediates stay in registers).
      e.emit(OpCode::RoundTo, out, a.ref(0, "self"), -1, -1, a.dtype_of(out));
    };
    return t;
  }();
  return table;
}

int64_t checked_size(const TFL_GraphValue& v, int32_t d) { return v.sizes[d]; }

}  // namespace

namespace {

// Whether an operand is laid out densely on the program's loop (element i
// of the loop at i from its base) in the compute type: a full tile of it can
// then be read or written where it is.
bool dense_in_compute_type(const Program& p, const Operand& op) {
  if (op.dtype != (p.double_compute ? TFL_DTYPE_FLOAT64 : TFL_DTYPE_FLOAT32)) return false;
  int64_t expected = 1;
  for (int32_t d = p.ndim - 1; d >= 0; --d) {
    if (p.sizes[d] != 1 && op.strides[d] != expected) return false;
    expected *= p.sizes[d];
  }
  return true;
}

// The executor's plan (Program::run_code and what follows it).
void plan_direct_operands(Program& p) {
  p.run_code = p.code;
  p.run_regs = p.num_regs;
  p.in_reg.clear();
  p.direct_in.assign(p.inputs.size(), 0);
  p.may_direct_out.assign(p.outputs.size(), 0);
  // An output the code never writes is an input passed through: it is
  // stored from the input's register, which must then hold the input.
  std::vector<char> written(static_cast<size_t>(p.num_regs), 0);
  for (const Instr& in : p.code) written[in.dst] = 1;
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    const int16_t r = static_cast<int16_t>(p.inputs[k].reg);
    p.in_reg.push_back(r);
    bool passed_through = false;
    for (const Operand& out : p.outputs) passed_through = passed_through || (out.reg == r && !written[r]);
    if (passed_through || !dense_in_compute_type(p, p.inputs[k])) continue;
    const int16_t own = static_cast<int16_t>(p.run_regs++);
    for (Instr& in : p.run_code) {
      for (int16_t* s : {&in.a, &in.b, &in.c})
        if (*s == r) *s = own;
      if (in.dst == r) break;
    }
    p.in_reg[k] = own;
    p.direct_in[k] = 1;
  }
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const Operand& op = p.outputs[k];
    bool ok = dense_in_compute_type(p, op);
    for (size_t j = 0; ok && j < p.outputs.size(); ++j) ok = j == k || p.outputs[j].reg != op.reg;
    for (size_t j = 0; ok && j < p.inputs.size(); ++j) ok = p.in_reg[j] != op.reg;
    p.may_direct_out[k] = ok;
  }
}

}  // namespace

bool compile_program(const TFL_Graph& g, Program* program, Decline* out_decline) {
  if (g.num_values > 0 && g.values == nullptr) invalid_argument("graph.values is NULL");
  if (g.num_nodes > 0 && g.nodes == nullptr) invalid_argument("graph.nodes is NULL");
  if (g.num_inputs > 0 && g.inputs == nullptr) invalid_argument("graph.inputs is NULL");
  if (g.num_outputs > 0 && g.outputs == nullptr) invalid_argument("graph.outputs is NULL");
  for (size_t i = 0; i < g.num_values; ++i) {
    const TFL_GraphValue* v = g.values[i];
    if (v == nullptr) invalid_argument("graph.values[", i, "] is NULL");
    if (v->struct_size < TFL_GraphValue_STRUCT_SIZE)
      invalid_argument("graph.values[", i, "].struct_size is ", v->struct_size, ", expected at least ",
                       TFL_GraphValue_STRUCT_SIZE);
    if (v->ndim < 0 || v->ndim > 64) invalid_argument("graph.values[", i, "] has ndim ", v->ndim);
    if (v->ndim > 0 && v->sizes == nullptr) invalid_argument("graph.values[", i, "] has NULL sizes");
    for (int32_t d = 0; d < v->ndim; ++d)
      if (v->sizes[d] < 0) invalid_argument("graph.values[", i, "] has size ", v->sizes[d], " in dim ", d);
  }
  auto check_index = [&](int32_t idx, const char* what) {
    if (idx < 0 || static_cast<size_t>(idx) >= g.num_values)
      invalid_argument(what, " refers to value ", idx, " of ", g.num_values);
  };
  for (size_t i = 0; i < g.num_inputs; ++i) check_index(g.inputs[i], "graph.inputs");
  for (size_t i = 0; i < g.num_outputs; ++i) check_index(g.outputs[i], "graph.outputs");
  for (size_t i = 0; i < g.num_nodes; ++i) {
    const TFL_GraphNode* n = g.nodes[i];
    if (n == nullptr) invalid_argument("graph.nodes[", i, "] is NULL");
    if (n->struct_size < TFL_GraphNode_STRUCT_SIZE)
      invalid_argument("graph.nodes[", i, "].struct_size is ", n->struct_size, ", expected at least ",
                       TFL_GraphNode_STRUCT_SIZE);
    if (n->op == nullptr) invalid_argument("graph.nodes[", i, "].op is NULL");
    if (n->num_args > 0 && n->args == nullptr) invalid_argument("graph.nodes[", i, "].args is NULL");
    if (n->num_outputs > 0 && n->outputs == nullptr) invalid_argument("graph.nodes[", i, "].outputs is NULL");
    for (size_t k = 0; k < n->num_outputs; ++k) check_index(n->outputs[k], "a node output");
  }

  try {
    Program& p = *program;
    p.device = g.device;
    p.num_nodes = g.num_nodes;
    if (g.num_nodes == 0) decline(-1, "the region has no nodes");
    if (g.num_outputs == 0) decline(-1, "the region has no outputs");
    const uint64_t enabled = kernel_settings().enabled_dtypes;

    // Producer of every value (-1 = region input) and the region's shape.
    std::vector<int64_t> producer(g.num_values, -2);
    for (size_t i = 0; i < g.num_inputs; ++i) producer[g.inputs[i]] = -1;
    const TFL_GraphValue& shape_of = *g.values[g.outputs[0]];
    const int32_t rank = shape_of.ndim;
    auto same_shape = [&](const TFL_GraphValue& v) {
      if (v.ndim != rank) return false;
      for (int32_t d = 0; d < rank; ++d)
        if (v.sizes[d] != shape_of.sizes[d]) return false;
      return true;
    };
    auto broadcastable = [&](const TFL_GraphValue& v) {
      if (v.ndim > rank) return false;
      for (int32_t d = 0; d < v.ndim; ++d) {
        const int64_t s = checked_size(v, v.ndim - 1 - d);
        if (s != 1 && s != shape_of.sizes[rank - 1 - d]) return false;
      }
      return true;
    };
    auto check_dtype = [&](int32_t value, int64_t node) {
      const int32_t dt = g.values[value]->dtype;
      if (!fusable_dtype(dt))
        decline(node, cat("dtype ", dtype_name(dt), " is not fused (flemu fuses float16, bfloat16, float32, "
                          "float64 and bool values)"));
      if (!(enabled & TFL_DTYPE_BIT(dt))) decline(node, cat("dtype ", dtype_name(dt), " is disabled on this device"));
    };

    Emitter em;
    const auto& table = op_table();
    for (size_t i = 0; i < g.num_nodes; ++i) {
      const TFL_GraphNode& n = *g.nodes[i];
      const int64_t node = static_cast<int64_t>(i);
      auto it = table.find(std::string(n.op));
      if (it == table.end()) decline(node, cat(n.op, " is not an elementwise op flemu fuses"));
      if (n.num_outputs != 1) decline(node, cat(n.op, " has ", n.num_outputs, " outputs; fused ops have one"));
      const int32_t out = n.outputs[0];
      if (producer[out] != -2) invalid_argument("value ", out, " is produced twice (node ", i, ")");
      const TFL_GraphValue& ov = *g.values[out];
      if (ov.kind == TFL_GRAPH_INPUT || ov.kind == TFL_GRAPH_INPUT_OUTPUT)
        decline(node, "a region input that the region writes is not fused");
      check_dtype(out, node);
      if (!same_shape(ov)) decline(node, cat(n.op, ": its output shape differs from the region's"));
      for (size_t k = 0; k < n.num_args; ++k) {
        if (n.args[k].tag != TFL_VALUE_GRAPH_REF) continue;
        const int64_t ref = n.args[k].v.i;
        if (ref < 0 || static_cast<size_t>(ref) >= g.num_values)
          invalid_argument("node ", i, " (", n.op, ") argument ", k, " refers to value ", ref, " of ", g.num_values);
        if (producer[ref] == -2)
          invalid_argument("node ", i, " (", n.op, ") reads value ", ref, " before anything produces it");
        check_dtype(static_cast<int32_t>(ref), node);
        if (!broadcastable(*g.values[ref]))
          decline(node, cat(n.op, ": an operand does not broadcast to the region's shape"));
      }
      const size_t before = em.code.size();
      it->second(Args(g, n, i), out, em);
      if (em.code.size() == before) invalid_argument("internal: no instruction for ", n.op);
      producer[out] = node;
    }
    for (size_t i = 0; i < g.num_outputs; ++i) {
      const int32_t v = g.outputs[i];
      if (producer[v] < 0) decline(-1, "a region output that no node produces is not fused");
      for (size_t k = 0; k < i; ++k)
        if (g.outputs[k] == v) decline(-1, "a value listed twice among the outputs is not fused");
      if (g.values[v]->strides == nullptr && rank > 0) invalid_argument("output value ", v, " has NULL strides");
    }
    for (size_t i = 0; i < g.num_inputs; ++i) {
      const TFL_GraphValue& v = *g.values[g.inputs[i]];
      if (v.strides == nullptr && v.ndim > 0) invalid_argument("input value ", g.inputs[i], " has NULL strides");
      check_dtype(g.inputs[i], -1);
      if (!broadcastable(v)) decline(-1, "a region input does not broadcast to the region's shape");
    }
    for (size_t v = 0; v < g.num_values; ++v)
      if (g.values[v]->dtype == TFL_DTYPE_FLOAT64 && producer[v] != -2) p.double_compute = true;

    // Register allocation over the instruction list: inputs are loaded at
    // the start of each tile, outputs stored at the end.
    const size_t nv = g.num_values;
    std::vector<int64_t> last_use(nv, -1);
    std::vector<char> is_output(nv, 0);
    for (size_t i = 0; i < g.num_outputs; ++i) is_output[g.outputs[i]] = 1;
    const int64_t end = static_cast<int64_t>(em.code.size());
    std::vector<int32_t> uses(nv, 0);
    for (int64_t k = 0; k < end; ++k)
      for (int16_t r : {em.code[k].a, em.code[k].b, em.code[k].c})
        if (r >= 0) {
          last_use[r] = k;
          ++uses[r];
        }
    for (size_t v = 0; v < nv; ++v)
      if (is_output[v]) last_use[v] = end;
    // Chains: an instruction whose value is used once, as the next
    // instruction's a, hands it over without a store.
    for (int64_t k = 0; k + 1 < end; ++k) {
      const int32_t dv = em.code[k].dst;
      em.code[k].chained = !is_output[dv] && uses[dv] == 1 && em.code[k + 1].a == dv;
    }
    std::vector<int32_t> reg_of(nv, -1);
    std::vector<int32_t> free_regs;
    int32_t num_regs = 0;
    auto take = [&]() {
      if (!free_regs.empty()) {
        const int32_t r = free_regs.back();
        free_regs.pop_back();
        return r;
      }
      return num_regs++;
    };
    for (size_t i = 0; i < g.num_inputs; ++i) {
      const int32_t v = g.inputs[i];
      if (reg_of[v] < 0) reg_of[v] = take();
    }
    for (int64_t k = 0; k < end; ++k) {
      Instr& in = em.code[k];
      int16_t* srcs[] = {&in.a, &in.b, &in.c};
      for (int16_t* s : srcs) {
        if (*s < 0) continue;
        const int32_t v = *s;
        *s = static_cast<int16_t>(reg_of[v]);
      }
      // An operand whose last use is this instruction frees its register
      // first: every op reads element i before writing element i.
      for (int16_t r : {in.a, in.b, in.c}) {
        if (r < 0) continue;
        for (size_t v = 0; v < nv; ++v)
          if (reg_of[v] == r && last_use[v] == k) {
            if (std::find(free_regs.begin(), free_regs.end(), r) == free_regs.end()) free_regs.push_back(r);
          }
      }
      const int32_t dv = in.dst;
      reg_of[dv] = take();
      in.dst = static_cast<int16_t>(reg_of[dv]);
      if (last_use[dv] < 0 && !is_output[dv]) free_regs.push_back(reg_of[dv]);  // dead value
      if (num_regs > 4096) decline(-1, "the region needs too many registers");
    }
    p.num_regs = std::max<int32_t>(num_regs, 1);
    p.code = std::move(em.code);

    // The loop: the region's dims ordered like output 0 in memory (outer to
    // inner), size-1 dims dropped, then neighbours merged where every
    // operand lets them.
    std::vector<int32_t> order;
    const TFL_GraphValue& first = *g.values[g.outputs[0]];
    for (int32_t d = 0; d < rank; ++d)
      if (shape_of.sizes[d] != 1) order.push_back(d);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t x, int32_t y) { return first.strides[x] > first.strides[y]; });
    auto make_operand = [&](int32_t value) {
      const TFL_GraphValue& v = *g.values[value];
      Operand op;
      op.value = value;
      op.dtype = v.dtype;
      op.itemsize = dtype_size(v.dtype);
      op.reg = reg_of[value];
      op.sizes.assign(v.sizes, v.sizes + v.ndim);
      op.declared_strides.assign(v.strides, v.strides + v.ndim);
      return op;
    };
    for (size_t i = 0; i < g.num_inputs; ++i) p.inputs.push_back(make_operand(g.inputs[i]));
    for (size_t i = 0; i < g.num_outputs; ++i) p.outputs.push_back(make_operand(g.outputs[i]));
    // Per operand, the element stride of each region dim (0 where broadcast).
    auto full_stride = [&](const Operand& op, int32_t d) -> int64_t {
      const int32_t off = rank - static_cast<int32_t>(op.sizes.size());
      if (d < off) return 0;
      const int32_t od = d - off;
      return op.sizes[od] == 1 ? 0 : op.declared_strides[od];
    };
    std::vector<int64_t> sizes;
    std::vector<std::vector<int64_t>> strides(p.inputs.size() + p.outputs.size());
    auto operand_at = [&](size_t k) -> Operand& {
      return k < p.inputs.size() ? p.inputs[k] : p.outputs[k - p.inputs.size()];
    };
    for (int32_t d : order) {
      sizes.push_back(shape_of.sizes[d]);
      for (size_t k = 0; k < strides.size(); ++k) strides[k].push_back(full_stride(operand_at(k), d));
    }
    // Merge dim j into j-1 (outer) when stride[j-1] == stride[j] * size[j] for all operands.
    for (size_t j = sizes.size(); j-- > 1;) {
      bool ok = true;
      for (auto& s : strides)
        if (s[j - 1] != s[j] * sizes[j]) ok = false;
      if (!ok) continue;
      sizes[j - 1] *= sizes[j];
      for (auto& s : strides) {
        s[j - 1] = s[j];
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(j));
      }
      sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(j));
    }
    if (sizes.empty()) {
      sizes.push_back(1);
      for (auto& s : strides) s.push_back(0);
    }
    if (sizes.size() > static_cast<size_t>(kMaxFusedDims))
      decline(-1, cat("the region's layout needs more than ", kMaxFusedDims, " loop dims"));
    p.ndim = static_cast<int32_t>(sizes.size());
    p.numel = 1;
    for (size_t d = 0; d < sizes.size(); ++d) {
      p.sizes[d] = sizes[d];
      p.numel *= sizes[d];
    }
    for (int32_t d = 0; d < rank; ++d)
      if (shape_of.sizes[d] == 0) p.numel = 0;
    for (size_t k = 0; k < strides.size(); ++k)
      for (size_t d = 0; d < sizes.size(); ++d) operand_at(k).strides[d] = strides[k][d];
    plan_direct_operands(p);
    return true;
  } catch (Declined& d) {
    *out_decline = std::move(d.what);
    return false;
  }
}

}  // namespace flemu::graph
