#include "signature.h"

#include "op_rules.h"

#include <torch_fl/kernel.h>

#include <algorithm>

namespace torch_fl::bridge {

namespace {

ArgKind classify_list(const c10::TypePtr& elem) {
  switch (elem->kind()) {
    case c10::TypeKind::TensorType:
      return ArgKind::TensorList;
    case c10::TypeKind::OptionalType:
      return elem->castRaw<c10::OptionalType>()->getElementType()->kind() ==
              c10::TypeKind::TensorType
          ? ArgKind::OptionalTensorList
          : ArgKind::Unsupported;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return ArgKind::IntList;
    case c10::TypeKind::FloatType:
      return ArgKind::FloatList;
    case c10::TypeKind::BoolType:
      return ArgKind::BoolList;
    case c10::TypeKind::NumberType:
      return ArgKind::ScalarList;
    default:
      return ArgKind::Unsupported;
  }
}

ArgKind classify(const c10::Argument& arg) {
  c10::TypePtr type = arg.real_type();
  if (auto opt = type->cast<c10::OptionalType>()) {
    type = opt->getElementType();
  }
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return ArgKind::Tensor;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return ArgKind::Int;
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType:
      return ArgKind::Float;
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType:
      return ArgKind::Bool;
    case c10::TypeKind::NumberType:
      return ArgKind::Scalar;
    case c10::TypeKind::ScalarTypeType:
      return ArgKind::ScalarType;
    case c10::TypeKind::LayoutType:
      return ArgKind::Layout;
    case c10::TypeKind::DeviceObjType:
      return ArgKind::Device;
    case c10::TypeKind::MemoryFormatType:
      return ArgKind::MemoryFormat;
    case c10::TypeKind::StringType:
      return ArgKind::String;
    case c10::TypeKind::GeneratorType:
      return ArgKind::Generator;
    case c10::TypeKind::ListType:
      return classify_list(type->castRaw<c10::ListType>()->getElementType());
    default:
      return ArgKind::Unsupported;
  }
}

bool is_tensor_type(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::TensorType;
}

bool is_tensor_list_type(const c10::TypePtr& type) {
  auto list = type->cast<c10::ListType>();
  return list && is_tensor_type(list->getElementType());
}

bool is_tensor_input(const ArgInfo& info) {
  return !info.out &&
      (info.kind == ArgKind::Tensor || info.kind == ArgKind::TensorList ||
       info.kind == ArgKind::OptionalTensorList);
}

// The argument a written return aliases (same alias set), or -1.
int aliased_argument(const c10::FunctionSchema& schema, const c10::AliasInfo& alias) {
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* a = schema.arguments()[i].alias_info();
    if (a != nullptr && a->isWrite() && a->beforeSets() == alias.beforeSets()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

void note_unsupported(Signature& sig, std::string why) {
  if (sig.unsupported.empty()) {
    sig.unsupported = std::move(why);
  }
}

bool same_arguments(const c10::FunctionSchema& a, const c10::FunctionSchema& b, bool skip_out_in_b) {
  std::vector<const c10::Argument*> bargs;
  for (const auto& arg : b.arguments()) {
    if (!(skip_out_in_b && arg.is_out())) {
      bargs.push_back(&arg);
    }
  }
  if (a.arguments().size() != bargs.size()) {
    return false;
  }
  for (size_t i = 0; i < bargs.size(); ++i) {
    const c10::Argument& x = a.arguments()[i];
    const c10::Argument& y = *bargs[i];
    if (x.name() != y.name() || *x.type() != *y.type()) {
      return false;
    }
  }
  return true;
}

} // namespace

Signature analyze(const c10::FunctionSchema& schema) {
  Signature sig;
  sig.name = schema_name_of(schema.operator_name());
  const std::vector<int>& hidden_writes = unannotated_mutations(sig.name);
  const std::vector<int> host_args = host_operand_args(schema);
  bool has_out = false;
  bool mutates = false;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    ArgInfo info;
    info.kind = classify(arg);
    info.out = arg.is_out();
    info.write = (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) ||
        std::find(hidden_writes.begin(), hidden_writes.end(), static_cast<int>(i)) !=
            hidden_writes.end();
    info.host = std::find(host_args.begin(), host_args.end(), static_cast<int>(i)) != host_args.end();
    has_out = has_out || info.out;
    mutates = mutates || info.write;
    if (info.kind == ArgKind::Unsupported) {
      note_unsupported(
          sig, "argument '" + arg.name() + "' has type " + arg.type()->str() +
              ", which the kernel ABI cannot pass");
    }
    sig.has_tensor_input = sig.has_tensor_input || is_tensor_input(info);
    sig.has_tensor_list = sig.has_tensor_list || info.kind == ArgKind::TensorList ||
        info.kind == ArgKind::OptionalTensorList;
    if (info.kind == ArgKind::Generator) {
      sig.generator_arg = static_cast<int>(i);
    }
    sig.args.push_back(info);
  }

  const auto& returns = schema.returns();
  sig.num_returns = returns.size();
  sig.returns_list = returns.size() == 1 && is_tensor_list_type(returns[0].type());
  if (sig.returns_list && has_out) {
    note_unsupported(sig, "out= overloads returning Tensor[] are not supported");
  }
  bool returns_alias = false;
  for (const c10::Argument& ret : returns) {
    const c10::TypeKind kind = ret.real_type()->kind();
    const bool int_return = kind == c10::TypeKind::IntType || kind == c10::TypeKind::SymIntType;
    sig.int_returns.push_back(int_return);
    sig.num_int_returns += int_return ? 1 : 0;
    if (int_return) {
      sig.return_args.push_back(-1);
      continue;
    }
    if (!is_tensor_type(ret.type()) && !is_tensor_list_type(ret.type())) {
      note_unsupported(
          sig, "it returns " + ret.type()->str() + "; kernels can only produce tensors (and ints, from the meta function)");
    }
    const c10::AliasInfo* alias = ret.alias_info();
    if (alias != nullptr && !alias->isWrite()) {
      note_unsupported(sig, "it returns a view of an input; views are made by the bridge");
    }
    if (alias == nullptr || !alias->isWrite()) {
      sig.return_args.push_back(-1);
      continue;
    }
    returns_alias = true;
    const int found = aliased_argument(schema, *alias);
    if (found < 0) {
      note_unsupported(sig, "a return aliases no argument");
    }
    sig.return_args.push_back(found);
  }
  if (sig.num_int_returns > 0 && (has_out || returns_alias || mutates)) {
    note_unsupported(sig, "only functional overloads may return ints");
  }
  if (has_out) {
    sig.variant = TFL_VARIANT_OUT;
  } else if (returns_alias || (returns.empty() && mutates)) {
    sig.variant = TFL_VARIANT_INPLACE;
  } else if (returns_alias != (sig.num_returns > 0 && sig.return_args[0] >= 0)) {
    note_unsupported(sig, "it mixes fresh and aliased returns");
  }
  return sig;
}

c10::OperatorName operator_name_of(const std::string& schema_name) {
  // Namespaces and operator names hold no '.'.
  const size_t dot = schema_name.find('.');
  if (dot == std::string::npos) {
    return c10::OperatorName(schema_name, "");
  }
  return c10::OperatorName(schema_name.substr(0, dot), schema_name.substr(dot + 1));
}

std::string schema_name_of(const c10::OperatorName& name) {
  if (name.overload_name.empty()) {
    return name.name;
  }
  std::string text;
  text.reserve(name.name.size() + 1 + name.overload_name.size());
  text.append(name.name).append(1, '.').append(name.overload_name);
  return text;
}

OpNameIndex::OpNameIndex(const std::vector<std::string>& bases)
    : all_(c10::Dispatcher::singleton().getAllOpNames()) {
  wanted_.reserve(2 * bases.size());
  for (const std::string& base : bases) {
    wanted_.push_back(base);
    wanted_.push_back(base + "_");
  }
  // Keys point into wanted_, which no longer grows.
  by_name_.reserve(wanted_.size());
  for (const std::string& name : wanted_) {
    by_name_.try_emplace(name);
  }
  for (const c10::OperatorName& name : all_) {
    const auto it = by_name_.find(name.name);
    if (it != by_name_.end()) {
      it->second.push_back(&name);
    }
  }
}

const std::vector<const c10::OperatorName*>& OpNameIndex::named(const std::string& base) const {
  const auto it = by_name_.find(base);
  TORCH_INTERNAL_ASSERT(it != by_name_.end(), "the operator index was not built for ", base);
  return it->second;
}

std::vector<c10::OperatorHandle> derived_variants(const c10::OperatorHandle& functional,
                                                  const OpNameIndex& ops) {
  std::vector<c10::OperatorHandle> variants;
  const c10::FunctionSchema& fs = functional.schema();
  const std::string& base = fs.name();
  for (const std::string& candidate : {base, base + "_"}) {
    const bool inplace = candidate.size() != base.size();
    for (const c10::OperatorName* entry : ops.named(candidate)) {
      const c10::OperatorName& name = *entry;
      auto handle = c10::Dispatcher::singleton().findOp(name);
      if (!handle.has_value() || !handle->hasSchema()) {
        continue;
      }
      const c10::FunctionSchema& vs = handle->schema();
      if (inplace) {
        // In-place: same overload, same arguments, writes and returns self.
        if (name.overload_name == fs.overload_name() && same_arguments(fs, vs, false) &&
            !vs.arguments().empty() && vs.arguments()[0].alias_info() &&
            vs.arguments()[0].alias_info()->isWrite()) {
          variants.push_back(*handle);
        }
      } else if (name.overload_name != fs.overload_name() && vs.is_mutable() &&
                 same_arguments(fs, vs, true)) {
        bool has_out = false;
        for (const auto& arg : vs.arguments()) {
          has_out = has_out || arg.is_out();
        }
        if (has_out && vs.returns().size() == fs.returns().size()) {
          variants.push_back(*handle);
        }
      }
    }
  }
  return variants;
}

std::optional<c10::OperatorHandle> functional_of(const c10::OperatorHandle& variant) {
  const Signature sig = analyze(variant.schema());
  if (sig.variant == TFL_VARIANT_FUNCTIONAL) {
    return variant;
  }
  std::string base = variant.schema().name();
  if (sig.variant == TFL_VARIANT_INPLACE && !base.empty() && base.back() == '_') {
    base.pop_back();
  }
  const c10::OperatorName wanted = variant.operator_name();
  const OpNameIndex ops({base});
  for (const c10::OperatorName* name : ops.named(base)) {
    auto handle = c10::Dispatcher::singleton().findOp(*name);
    if (!handle.has_value() || !handle->hasSchema() ||
        analyze(handle->schema()).variant != TFL_VARIANT_FUNCTIONAL) {
      continue;
    }
    for (const c10::OperatorHandle& v : derived_variants(*handle, ops)) {
      if (v.operator_name() == wanted) {
        return handle;
      }
    }
  }
  return std::nullopt;
}

} // namespace torch_fl::bridge
