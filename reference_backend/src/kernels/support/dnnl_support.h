// What flemu's oneDNN calls share (dnnl_conv.cpp, dnnl_gemm.cpp): the CPU
// engine, each thread's stream and buffers, and a cache of primitives.
//
// oneDNN runs single-threaded on whichever flemu thread calls it, and flemu's
// pool splits the work. oneDNN's own OpenMP threads would make the process
// hold more OpenMP threads than CPUs, and libgomp then stops every team's
// spin-wait, PyTorch's CPU threads included: CPU operators beside flemu ran
// 2.5x slower. A primitive is made for the OpenMP thread count of the thread
// that makes it, so thread_exec() comes before a primitive is made.
//
// Primitives run in oneDNN's "user scratchpad" mode: every buffer a call
// needs (reordered operands, scratchpad) belongs to the thread that runs it,
// so two streams may run one cached primitive at once.
#ifndef FLEMU_KERNELS_SUPPORT_DNNL_SUPPORT_H_
#define FLEMU_KERNELS_SUPPORT_DNNL_SUPPORT_H_

#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "nn_common.h"

namespace flemu {

inline dnnl::engine& dnnl_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Buffers of the calling thread, one per slot, grown on demand and kept.
enum DnnlSlot : size_t {
  kSrc, kWeight, kBias, kDst, kDiffDstData, kDiffDstWeights, kDiffWeight, kDiffBias, kScratch, kMoveScratch,
  kPartials, kNumSlots
};

class ThreadBuffers {
 public:
  ThreadBuffers() = default;
  ThreadBuffers(const ThreadBuffers&) = delete;
  ThreadBuffers& operator=(const ThreadBuffers&) = delete;
  ~ThreadBuffers() {
    for (Buffer& b : buffers_) std::free(b.ptr);
  }
  void* at(DnnlSlot slot, size_t bytes) {
    Buffer& b = buffers_[slot];
    if (b.bytes < bytes) {
      std::free(b.ptr);
      b.ptr = nullptr;
      b.bytes = 0;
      const size_t rounded = (bytes + 63) / 64 * 64;
      b.ptr = std::aligned_alloc(64, rounded);
      if (!b.ptr) throw std::bad_alloc();
      b.bytes = rounded;
    }
    return b.ptr;
  }

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Buffer buffers_[kNumSlots];
};

struct Exec {
  dnnl::stream& stream;
  ThreadBuffers& buffers;
};

// The calling thread's oneDNN stream and buffers, with OpenMP's thread count
// (per thread) at one.
inline Exec thread_exec() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  thread_local dnnl::stream stream(dnnl_engine());
  thread_local ThreadBuffers buffers;
  return {stream, buffers};
}

inline dnnl::memory scratch_memory(const Exec& x, const dnnl::memory::desc& md, DnnlSlot slot) {
  return dnnl::memory(md, dnnl_engine(), md.get_size() ? x.buffers.at(slot, md.get_size()) : nullptr);
}

// The key of a cached primitive: everything its creation read.
class Key {
 public:
  explicit Key(char kind) { s_.push_back(kind); }
  void add(int64_t v) { s_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void add(double v) { s_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void add(const Strided* t) {
    if (!t) return add(int64_t{-1});
    add(int64_t{t->ndim});
    for (int32_t d = 0; d < t->ndim; ++d) {
      add(t->sizes[d]);
      add(t->strides[d]);
    }
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

// Made primitives by key; a null entry records a case oneDNN refused.
template <class Entry>
class Cache {
 public:
  template <class Make>
  std::shared_ptr<const Entry> get(const std::string& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    std::shared_ptr<const Entry> made;
    try {
      made = std::make_shared<const Entry>(make());
    } catch (const dnnl::error&) {
      made = nullptr;  // unimplemented here, or a layout oneDNN does not describe
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kCapacity) map_.clear();
    map_.emplace(key, made);
    return made;
  }

 private:
  static constexpr size_t kCapacity = 512;
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> map_;
};

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_DNNL_SUPPORT_H_
