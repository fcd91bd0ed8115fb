#include "cpp_meta.h"

#include "cpp_meta_table.h" // generated at build time (CMakeLists.txt)

#include <ATen/MetaFunctions.h>
#include <ATen/Operators.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace torch_fl::bridge {
namespace {

using Table = std::unordered_map<c10::OperatorName, c10::KernelFunction>;

// `fn` must have the operator's own unboxed signature: a table line whose
// at::meta overload does not match its at::_ops schema does not compile.
template <class Op>
void add(Table& table, typename Op::schema* fn) {
  table.emplace(c10::OperatorName(Op::name, Op::overload_name),
                c10::KernelFunction::makeFromUnboxedRuntimeFunction(fn));
}

const Table& table() {
  static const Table* t = [] {
    auto* built = new Table();
#define TFL_CPP_META_ENTRY(op, fn) add<at::_ops::op>(*built, &at::meta::fn);
    TFL_CPP_META_OPS(TFL_CPP_META_ENTRY)
#undef TFL_CPP_META_ENTRY
    return built;
  }();
  return *t;
}

} // namespace

std::vector<std::string> cpp_meta_ops() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : table()) {
    names.push_back(c10::toString(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

const c10::KernelFunction* cpp_meta_function(const c10::OperatorName& name) {
  const Table& t = table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : &it->second;
}

} // namespace torch_fl::bridge
