// The schema guard (kernel.h, TFL_KernelDesc.schema): how the schema a plugin
// kernel was written for relates to the running PyTorch's schema of its
// operator, decided once at registration.
//   Equal    - register as usual;
//   Adapted  - PyTorch only added arguments with defaults: the kernel gets the
//              arguments of its own schema, and a call that passes another
//              value for an added argument falls back (HiddenArgs);
//   Refused  - any other difference: the kernel is not registered.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch_fl::bridge {

struct SchemaMatch {
  enum class Kind { Equal, Adapted, Refused };
  Kind kind = Kind::Equal;
  std::vector<std::string> added; // Adapted: names of the arguments the kernel does not know
  std::string reason;             // Refused: the first difference, in words
};

SchemaMatch match_schema(const std::string& declared, const c10::FunctionSchema& running);

// The arguments of one registered overload that its kernel does not receive,
// with the defaults they must hold for the kernel to serve a call.
struct HiddenArgs {
  std::vector<size_t> positions; // ascending schema positions
  std::vector<c10::IValue> defaults;
  std::vector<std::string> names;

  bool empty() const { return positions.empty(); }
  // `names` of `match` located in `schema` (an overload derived from the
  // kernel's operator has the same argument names, plus its out= tensors).
  static HiddenArgs locate(const std::vector<std::string>& names, const c10::FunctionSchema& schema);
  // The first hidden argument of this call that does not hold its default,
  // or nullptr when the kernel can serve it.
  const std::string* first_non_default(c10::ArrayRef<c10::IValue> args) const;
};

} // namespace torch_fl::bridge
