#include "schema_guard.h"

#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <optional>
#include <sstream>

namespace torch_fl::bridge {

namespace {

std::string show(const c10::Argument& arg) {
  std::ostringstream s;
  s << arg;
  return s.str();
}

std::string show_returns(const std::vector<c10::Argument>& rets) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < rets.size(); ++i) {
    s << (i ? ", " : "") << rets[i];
  }
  s << ")";
  return s.str();
}

SchemaMatch refused(std::string reason) {
  SchemaMatch m;
  m.kind = SchemaMatch::Kind::Refused;
  m.reason = std::move(reason);
  return m;
}

// Equal values, with numbers compared by value: a default written `1` and a
// call passing 1.0 hold the same Scalar.
bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isNone() || b.isNone()) {
    return a.isNone() && b.isNone();
  }
  if ((a.isInt() || a.isDouble() || a.isBool()) && (b.isInt() || b.isDouble() || b.isBool())) {
    auto as_double = [](const c10::IValue& v) {
      return v.isInt() ? static_cast<double>(v.toInt()) : v.isDouble() ? v.toDouble() : v.toBool() ? 1.0 : 0.0;
    };
    return as_double(a) == as_double(b);
  }
  if (a.isIntList() && b.isIntList()) {
    return a.toIntVector() == b.toIntVector();
  }
  if (a.isString() && b.isString()) {
    return a.toStringRef() == b.toStringRef();
  }
  try {
    return a == b;
  } catch (const std::exception&) {
    return false; // values IValue cannot compare (tensors) are not a default
  }
}

} // namespace

SchemaMatch match_schema(const std::string& declared, const c10::FunctionSchema& running) {
  std::optional<c10::FunctionSchema> parsed;
  try {
    parsed.emplace(torch::jit::parseSchema(declared));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return refused("its schema does not parse: " + what.substr(0, what.find('\n')));
  }
  const c10::FunctionSchema& theirs = *parsed;
  if (theirs.operator_name() != running.operator_name()) {
    return refused("its schema is that of " + c10::toString(theirs.operator_name()));
  }
  if (theirs == running) {
    return {};
  }
  if (theirs.returns() != running.returns()) {
    return refused(
        "it returns " + show_returns(theirs.returns()) + " where PyTorch's returns " +
        show_returns(running.returns()));
  }
  if (theirs.is_vararg() != running.is_vararg()) {
    return refused("one schema takes varargs and the other does not");
  }
  // Every argument the kernel knows, in its order, unchanged; everything
  // PyTorch has besides must have a default.
  SchemaMatch m;
  m.kind = SchemaMatch::Kind::Adapted;
  const auto& mine = theirs.arguments();
  const auto& now = running.arguments();
  size_t j = 0;
  for (size_t i = 0; i < now.size(); ++i) {
    if (j < mine.size() && now[i] == mine[j]) {
      ++j;
      continue;
    }
    if (j < mine.size() && now[i].name() == mine[j].name()) {
      return refused(
          "argument '" + mine[j].name() + "' is '" + show(mine[j]) + "' in the kernel's schema and '" +
          show(now[i]) + "' in PyTorch's");
    }
    if (!now[i].default_value().has_value()) {
      return refused(
          j < mine.size() ? "PyTorch's schema has '" + show(now[i]) + "' where the kernel's has '" +
                                show(mine[j]) + "'"
                          : "PyTorch's schema adds '" + show(now[i]) + "', which has no default");
    }
    m.added.push_back(now[i].name());
  }
  if (j < mine.size()) {
    return refused("the kernel's argument '" + show(mine[j]) + "' is not in PyTorch's schema at that place");
  }
  if (m.added.empty()) {
    return refused("the schemas differ in their return or argument annotations");
  }
  return m;
}

HiddenArgs HiddenArgs::locate(const std::vector<std::string>& names, const c10::FunctionSchema& schema) {
  HiddenArgs h;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    for (const std::string& name : names) {
      if (args[i].name() == name && args[i].default_value().has_value()) {
        h.positions.push_back(i);
        h.defaults.push_back(*args[i].default_value());
        h.names.push_back(name);
      }
    }
  }
  return h;
}

const std::string* HiddenArgs::first_non_default(c10::ArrayRef<c10::IValue> args) const {
  for (size_t k = 0; k < positions.size(); ++k) {
    if (!same_value(args[positions[k]], defaults[k])) {
      return &names[k];
    }
  }
  return nullptr;
}

} // namespace torch_fl::bridge
