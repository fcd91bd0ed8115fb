// Scratch space reused by the consecutive calls of one thread, so that its
// buffers keep the capacity the largest call needed: a fused optimizer's
// lists would otherwise allocate (and free) a key and descriptors of
// hundreds of tensors on every step. A call nested inside another on the
// same thread (a meta function that runs device ops) gets a fresh one.
#pragma once

#include <optional>

namespace torch_fl::bridge {

// T provides clear(), which empties it (releasing what it holds) and keeps
// its capacity.
template <typename T>
class ThreadScratch {
 public:
  ThreadScratch() {
    // The slot is looked up once (a thread_local of a shared library costs
    // a call to find): the destructor uses the pointer.
    Slot& s = slot();
    if (s.busy) {
      fresh_.emplace();
      value_ = &*fresh_;
      return;
    }
    // Empty: every release clears it (the destructor), the first use finds
    // it fresh. Clearing here again would cost a thread_local lookup per
    // vector, as the compiler recomputes the slot's address after each call.
    s.busy = true;
    value_ = &s.value;
    slot_ = &s;
  }
  ~ThreadScratch() {
    if (slot_ != nullptr) {
      value_->clear();  // drops what it references (tensors) now, not at the next call
      slot_->busy = false;
    }
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;

  T& operator*() {
    return *value_;
  }
  T* operator->() {
    return value_;
  }

 private:
  struct Slot {
    T value;
    bool busy = false;
  };
  static Slot& slot() {
    static thread_local Slot s;
    return s;
  }
  T* value_ = nullptr;
  Slot* slot_ = nullptr; // null: a nested call's fresh value
  std::optional<T> fresh_;
};

} // namespace torch_fl::bridge
