// Marshalling: one call's arguments as the kernel ABI's tagged values
// (types.h, TFL_Value) and tensor descriptors, in scratch space that lives
// for the duration of the launch. Scalars keep their kind (int, double,
// bool, complex); nothing goes through a lossy double.
#pragma once

#include "call_scan.h"
#include "operands.h"
#include "signature.h"

#include <torch_fl/plugin_api.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <string>

namespace torch_fl::bridge {

// Sized up front from the call's scan so that pointers into it stay valid.
struct CallScratch {
  c10::SmallVector<TFL_Tensor, 16> descs;
  c10::SmallVector<const TFL_Tensor*, 8> desc_ptrs; // tensor-list entries
  c10::SmallVector<int64_t, 32> ints;                // int lists and broadcast shapes
  c10::SmallVector<double, 4> doubles;
  c10::SmallVector<uint8_t, 8> bools;
  c10::SmallVector<TFL_Value, 8> values;
  c10::SmallVector<std::string, 1> strings;
  c10::SmallVector<const TFL_Tensor*, 4> outputs;    // NULL = not requested

  void clear() {
    descs.clear();
    desc_ptrs.clear();
    ints.clear();
    doubles.clear();
    bools.clear();
    values.clear();
    strings.clear();
    outputs.clear();
  }
};

// Fills `s` with the kernel's inputs (every argument except out= tensors,
// tensors taken from `ops.inputs`) and outputs (`ops.outputs`).
void marshal_call(
    const Signature& sig,
    c10::ArrayRef<c10::IValue> args,
    const CallShape& call,
    const Operands& ops,
    CallScratch& s);

// A device tensor holding a 0-dim CPU tensor's value in `dtype`, cached per
// value, device and stream (`x * 0.5` uploads 0.5 once).
at::Tensor upload_scalar(const at::Tensor& cpu, c10::ScalarType dtype, c10::DeviceIndex device);

} // namespace torch_fl::bridge
