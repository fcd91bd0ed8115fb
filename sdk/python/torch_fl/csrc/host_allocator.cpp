#include "host_allocator.h"

#include "event_calls.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace torch_fl::bridge {

namespace {

constexpr size_t kMinPinned = 4096;

size_t size_class(size_t n) {
  size_t size = kMinPinned;
  while (size < n) {
    size <<= 1;
  }
  return size;
}

struct PinnedBlock {
  char* ptr = nullptr;
  size_t size = 0;
  bool in_use = false;
  // Uses not yet known to be complete, with the device of each event.
  std::vector<std::pair<TFL_Event*, c10::DeviceIndex>> events;
};

struct State {
  std::mutex mutex;
  std::map<const char*, PinnedBlock*> blocks;           // every block, by address
  std::multimap<size_t, PinnedBlock*> free_blocks;      // ready for reuse, by size
  std::vector<PinnedBlock*> waiting;                    // freed, events pending
  std::map<c10::DeviceIndex, std::vector<TFL_Event*>> spare_events; // by device
};

State& state() {
  static auto* s = new State();
  return *s;
}

bool plugin_usable() {
  Plugin* plugin = active_plugin_or_null();
  return plugin != nullptr && !plugin->is_shut_down();
}

// Drops completed events; true when none is left.
bool events_done(State& s, PinnedBlock* block) {
  auto& events = block->events;
  for (auto it = events.begin(); it != events.end();) {
    if (query_event(it->first)) {
      s.spare_events[it->second].push_back(it->first);
      it = events.erase(it);
    } else {
      ++it;
    }
  }
  return events.empty();
}

void poll_waiting(State& s) {
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    if (events_done(s, *it)) {
      s.free_blocks.emplace((*it)->size, *it);
      it = s.waiting.erase(it);
    } else {
      ++it;
    }
  }
}

void release_pinned(void* ctx) {
  auto* block = static_cast<PinnedBlock*>(ctx);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  block->in_use = false;
  if (block->events.empty()) {
    s.free_blocks.emplace(block->size, block);
  } else {
    s.waiting.push_back(block);
  }
}

} // namespace

HostAllocator& HostAllocator::get() {
  static auto* allocator = new HostAllocator();
  return *allocator;
}

c10::DataPtr HostAllocator::allocate(size_t nbytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, nullptr, nullptr, cpu);
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  poll_waiting(s);
  const size_t size = size_class(nbytes);
  PinnedBlock* block = nullptr;
  auto it = s.free_blocks.find(size);
  if (it != s.free_blocks.end()) {
    block = it->second;
    s.free_blocks.erase(it);
  } else {
    Plugin& plugin = active_plugin();
    TFL_HostMemory_Allocate_Args args{};
    args.struct_size = TFL_HostMemory_Allocate_Args_STRUCT_SIZE;
    args.size = size;
    plugin.check(plugin.memory().HostMemory_Allocate(&args), "HostMemory_Allocate");
    block = new PinnedBlock();
    block->ptr = static_cast<char*>(args.ptr);
    block->size = size;
    s.blocks[block->ptr] = block;
  }
  block->in_use = true;
  return c10::DataPtr(block->ptr, block, &release_pinned, cpu);
}

void HostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count != 0) {
    std::memcpy(dest, src, count);
  }
}

bool HostAllocator::is_pinned(const void* ptr) const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.blocks.upper_bound(static_cast<const char*>(ptr));
  if (it == s.blocks.begin()) {
    return false;
  }
  --it;
  return static_cast<const char*>(ptr) < it->first + it->second->size;
}

void HostAllocator::record_use(const void* ptr, const c10::Stream& stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.blocks.upper_bound(static_cast<const char*>(ptr));
  if (it == s.blocks.begin()) {
    return;
  }
  --it;
  PinnedBlock* block = it->second;
  if (static_cast<const char*>(ptr) >= block->ptr + block->size) {
    return;
  }
  TFL_Event* event = nullptr;
  auto& spare = s.spare_events[stream.device_index()];
  if (!spare.empty()) {
    event = spare.back();
    spare.pop_back();
  } else {
    event = create_event(stream.device_index());
  }
  record_event(event, StreamRegistry::get().native(stream));
  block->events.emplace_back(event, stream.device_index());
}

void HostAllocator::empty_cache() {
  if (!plugin_usable()) {
    return;
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  poll_waiting(s);
  Plugin& plugin = active_plugin();
  for (auto& [size, block] : s.free_blocks) {
    TFL_HostMemory_Free_Args args{};
    args.struct_size = TFL_HostMemory_Free_Args_STRUCT_SIZE;
    args.ptr = block->ptr;
    plugin.consume(plugin.memory().HostMemory_Free(&args));
    s.blocks.erase(block->ptr);
    delete block;
  }
  s.free_blocks.clear();
}

} // namespace torch_fl::bridge
