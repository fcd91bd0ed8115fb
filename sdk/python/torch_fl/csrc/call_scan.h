// The first pass over one call's arguments: which device it runs on (every
// tensor on one device; 0-dim CPU tensors are legal operands), the metadata
// cache key, and how much scratch space marshalling will need. One pass,
// because it runs on every call. The common dtype of the tensor inputs is a
// function of the key (dtypes, dims, wrapped numbers), so it is computed
// once per key with the metadata (common_dtype) and kept in the cache.
#pragma once

#include "meta.h"
#include "signature.h"

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>

namespace torch_fl::bridge {

struct CallShape {
  c10::DeviceIndex device = -1;
  c10::ScalarType dtype = c10::ScalarType::Undefined; // common dtype of the tensor inputs (MetaEntry)
  size_t num_tensors = 0;
  size_t num_ints = 0;
  size_t num_doubles = 0;
  size_t num_bools = 0;
  size_t num_strings = 0;
  size_t max_dims = 0;
};

void scan_call(const Signature& sig, c10::ArrayRef<c10::IValue> args, CallShape& call, MetaKey& key);

// The dtype the tensor inputs (out= tensors excluded) promote to, as
// TensorIterator computes it; Undefined for an operator without tensor inputs.
c10::ScalarType common_dtype(const Signature& sig, c10::ArrayRef<c10::IValue> args);

// The error PyTorch gives for tensors on two devices, naming the operator.
[[noreturn]] void device_mismatch(const c10::Device& a, const c10::Device& b, const std::string& op);

int64_t int_of(const c10::IValue& v);
double double_of(const c10::IValue& v);

} // namespace torch_fl::bridge
