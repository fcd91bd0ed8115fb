// Python bindings of torch_fl._C are contributed by each component from its
// own file: a file defines `static void bind(pybind11::module_& m)` and
// registers it with `TFL_REGISTER_BINDINGS(bind)`; module.cpp calls them all
// when the extension is imported. New components need no edit elsewhere.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

namespace torch_fl::bridge {

using BindingFn = void (*)(pybind11::module_& m);

std::vector<BindingFn>& binding_functions();

struct BindingRegistrar {
  explicit BindingRegistrar(BindingFn fn) {
    binding_functions().push_back(fn);
  }
};

} // namespace torch_fl::bridge

#define TFL_BINDINGS_CONCAT_(a, b) a##b
#define TFL_BINDINGS_CONCAT(a, b) TFL_BINDINGS_CONCAT_(a, b)
#define TFL_REGISTER_BINDINGS(fn)                                    \
  static ::torch_fl::bridge::BindingRegistrar TFL_BINDINGS_CONCAT( \
      tfl_bindings_registrar_, __LINE__)(fn)
