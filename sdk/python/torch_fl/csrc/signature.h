// Schema analysis for the op path, done once per registered operator
// overload: what each argument is (so a call can be scanned and marshalled
// without looking at the schema again), which arguments the operator writes,
// which argument each return aliases, and which variant (functional,
// in-place, out=) the overload is.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace torch_fl::bridge {

enum class ArgKind : uint8_t {
  Tensor,
  TensorList,
  OptionalTensorList,
  Int,
  Float,
  Bool,
  Scalar,
  IntList,
  FloatList,
  BoolList,
  ScalarList,
  ScalarType,
  Layout,
  Device,
  MemoryFormat,
  String,
  Generator,
  Unsupported,
};

struct ArgInfo {
  ArgKind kind = ArgKind::Unsupported;
  bool out = false;   // an out= argument
  bool write = false; // written by the operator (annotated, or an op_rules mutation)
  bool host = false;  // its tensors may be on the CPU (op_rules: moved to the device)
  bool hidden = false; // not passed to the kernel: its schema predates the argument (schema_guard.h)
};

struct Signature {
  std::string name; // "aten::add.Tensor"
  std::vector<ArgInfo> args;
  size_t num_returns = 0;
  std::vector<int> return_args; // per return: the argument it aliases, or -1
  // Per return: an int (SymInt) the meta function computes, not a tensor the
  // kernel writes (max_q of _scaled_dot_product_fused_attention_overrideable).
  std::vector<bool> int_returns;
  size_t num_int_returns = 0;
  bool returns_list = false;    // a single Tensor[] return
  int32_t variant = 0;          // TFL_KernelVariant
  bool has_tensor_input = false;
  bool has_tensor_list = false;  // a Tensor[] or Tensor?[] argument
  int generator_arg = -1;
  std::string unsupported; // why a kernel cannot serve this schema, if it cannot
};

Signature analyze(const c10::FunctionSchema& schema);

// "aten::add.Tensor" -> {"aten::add", "Tensor"}; "aten::mm" -> {"aten::mm", ""}.
c10::OperatorName operator_name_of(const std::string& schema_name);

// The inverse: {"aten::add", "Tensor"} -> "aten::add.Tensor" (c10::toString's
// text, without its stream).
std::string schema_name_of(const c10::OperatorName& name);

// The registered overloads of the base names asked for (namespace::name),
// with their in-place names (base + "_"), as derived_variants needs them.
// The dispatcher only hands out a copy of every operator name at once; the
// index points into its own copy, so it is neither copied nor moved.
class OpNameIndex {
 public:
  explicit OpNameIndex(const std::vector<std::string>& bases);
  OpNameIndex(const OpNameIndex&) = delete;
  OpNameIndex& operator=(const OpNameIndex&) = delete;
  // The overloads of `base`, which must be a base (or in-place name) asked for.
  const std::vector<const c10::OperatorName*>& named(const std::string& base) const;

 private:
  std::vector<std::string> wanted_;
  std::vector<c10::OperatorName> all_;
  std::unordered_map<std::string_view, std::vector<const c10::OperatorName*>> by_name_;
};

// The in-place and out= overloads that share a functional overload's
// arguments, so one kernel can serve them. `ops` must have been built with
// the functional's base name.
std::vector<c10::OperatorHandle> derived_variants(const c10::OperatorHandle& functional,
                                                  const OpNameIndex& ops);

// The functional overload whose kernel would also serve `variant` (itself
// when it is functional); nullopt when no functional overload derives it.
std::optional<c10::OperatorHandle> functional_of(const c10::OperatorHandle& variant);

} // namespace torch_fl::bridge
