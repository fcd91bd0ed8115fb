// Output metadata for the op path: the sizes, strides and dtype of what an
// operator returns, computed on Meta tensors and cached per call shape.
//
// The cache key is built by the call's scan (native_kernel.cpp) from the
// argument kinds, dtypes, sizes, strides, devices and scalar kinds, so a
// hit costs a hash and a compare; a miss runs the operator's meta function
// (C++ structured meta functions are cheap, PyTorch's Python ones are not:
// cpp_meta.h skips them where a C++ one exists).
#pragma once

#include "signature.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>
#include <c10/util/DimVector.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_fl::bridge {

struct OutSpec {
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::DimVector sizes;
  c10::DimVector strides;
  bool defined = true; // false: the caller did not ask for it (output_mask)
  // Bytes of storage the layout spans, set once per cache entry (set_nbytes);
  // kUnknownBytes: not set, or sizes a meta function got wrong (negative).
  size_t nbytes = kUnknownBytes;
  static constexpr size_t kUnknownBytes = ~size_t{0};
};

// Fills in each defined spec's nbytes (see OutSpec::nbytes).
void set_nbytes(std::vector<OutSpec>& specs);

// A fact about a cache entry's calls learned on the first of them and read
// by the rest: -1 not yet known, 0 no, 1 yes. A copy starts unknown.
struct LearnedFlag {
  mutable std::atomic<int8_t> value{-1};
  LearnedFlag() = default;
  LearnedFlag(const LearnedFlag& /*other*/) {}
  LearnedFlag& operator=(const LearnedFlag& /*other*/) {
    value.store(-1, std::memory_order_relaxed);
    return *this;
  }
};

struct MetaEntry {
  c10::ScalarType common_dtype = c10::ScalarType::Undefined; // of the tensor inputs (call_scan.h)
  // Whether a functional call of this shape hands the kernel every input as
  // given (no cast, copy, upload or broadcast descriptor): operands.cpp.
  LearnedFlag inputs_as_given;
  std::vector<OutSpec> outs;
  std::vector<int64_t> ints; // the int returns, in order (Signature::int_returns)
  bool unavailable = false; // the call cannot be served natively: `reason` says why
  std::string reason;
};

struct MetaKey {
  c10::SmallVector<int64_t, 48> words;
  void clear() {
    words.clear();
  }
  bool operator==(const MetaKey& other) const {
    return words.size() == other.words.size() &&
        std::memcmp(words.data(), other.words.data(), words.size() * sizeof(int64_t)) == 0;
  }
};

struct MetaKeyHash {
  size_t operator()(const MetaKey& key) const;
};

// One operator's entries. Bounded: cleared when full (shapes in a model are few).
class MetaCache {
 public:
  std::shared_ptr<const MetaEntry> find(const MetaKey& key) const;
  void insert(const MetaKey& key, std::shared_ptr<const MetaEntry> entry);

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<MetaKey, std::shared_ptr<const MetaEntry>, MetaKeyHash> entries_;
};

// TORCH_FL_META_CACHE=0 recomputes on every call (measurements, debugging).
void set_meta_cache_enabled(bool enabled);
bool meta_cache_enabled();

// How one registered kernel's output metadata is found.
struct MetaSource {
  const Signature* sig = nullptr;
  // Derived in-place/out= overloads take their metadata from the functional
  // overload: the result the kernel computes.
  std::optional<c10::OperatorHandle> functional;
  // Custom ops have no meta function: output i is shaped like the tensor
  // argument at schema position output_like[i].
  std::vector<int32_t> output_like;
  // PyTorch's C++ meta function for the operator asked, where its Meta key
  // runs a Python one instead (cpp_meta.h); nullptr: ask the Meta key.
  const c10::KernelFunction* cpp_meta = nullptr;
};

// The metadata of `op` called with `args` (the operator's own arguments).
MetaEntry compute_meta(const MetaSource& src, const c10::OperatorHandle& op,
                       c10::ArrayRef<c10::IValue> args);

// The metadata of every tensor in a stack of results.
std::vector<OutSpec> specs_of(const torch::jit::Stack& results);

} // namespace torch_fl::bridge
