// The tensors a kernel sees, made to keep what its flags promise (kernel.h,
// TFL_KernelFlags) for every variant of the call:
//
//   - read-only inputs are cast (PROMOTE_INPUTS), expanded (BROADCAST_INPUTS)
//     and made dense (CONTIGUOUS_INPUTS) as copies, never in place;
//   - a tensor the kernel writes — an output, an in-place self, an out=
//     tensor, or an argument the operator mutates (running statistics,
//     optimizer state) — is handed over as it is when it already keeps the
//     promises and overlaps no input; otherwise the kernel works on a dense
//     temporary holding its values, which is copied back after the launch;
//   - for the in-place variant outputs[0] and inputs[0] are one buffer; a
//     derived in-place call whose result dtype differs from what inputs[0]
//     must hold (an in-place comparison: a bool result into a float self)
//     runs as the functional kernel's out= form into a temporary of the
//     result dtype, cast into self afterwards (Operands::variant says so).
//
// So a kernel written for the functional overload serves in-place and out=
// calls on views, transposes and mixed dtypes with the results PyTorch gives.
#pragma once

#include "call_scan.h"
#include "meta.h"
#include "signature.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <utility>

namespace torch_fl::bridge {

struct Operands {
  // Every tensor input (out= tensors excluded) in schema order, list
  // elements flattened; undefined for an absent optional.
  c10::SmallVector<at::Tensor, 8> inputs;
  // Per input: its descriptor is to be broadcast to the output shape (stride
  // 0) rather than the tensor materialized.
  c10::SmallVector<uint8_t, 8> broadcast;
  c10::SmallVector<at::Tensor, 4> outputs; // what the kernel writes
  c10::SmallVector<at::Tensor, 4> targets; // what the caller gets back (in-place/out=)
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> copy_back; // (caller's tensor, temporary)
  // Fresh outputs laid out as the metadata says where that is not dense
  // (channels-last) while the kernel writes dense ones: (index into outputs,
  // the tensor the caller gets). The kernel writes outputs[index], a dense
  // temporary that copy_back holds too; write_back puts the caller's tensor
  // in its place.
  c10::SmallVector<std::pair<size_t, at::Tensor>, 1> laid_out;
  int32_t variant = 0; // TFL_KernelVariant the kernel is told (ctx->variant)

  void clear() {
    inputs.clear();
    broadcast.clear();
    outputs.clear();
    targets.clear();
    copy_back.clear();
    laid_out.clear();
    variant = 0;
  }
};

struct OperandRules {
  const Signature* sig = nullptr;
  uint32_t flags = 0;         // TFL_KernelFlags
  int32_t memory_format = 0;  // TFL_MemoryFormat of fresh outputs
  bool derived = false;       // an in-place/out= overload served by a functional kernel
  // Per argument: the kernel reads and writes it through its input
  // descriptor (mutated in the kernel's own schema; for a derived variant,
  // in the functional schema).
  const std::vector<bool>* read_write = nullptr;
};

// Builds the operands of one call. Throws for calls PyTorch refuses (an out=
// dtype the result cannot be cast to, a written tensor with internal overlap,
// an in-place shape mismatch).
void prepare_operands(
    const OperandRules& rules,
    c10::ArrayRef<c10::IValue> args,
    const MetaEntry& meta,
    const CallShape& call,
    Operands& ops);

// Copies the temporaries back into the caller's tensors (after the launch),
// and puts fresh outputs laid out otherwise than dense in their temporaries'
// place.
void write_back(Operands& ops);

} // namespace torch_fl::bridge
