#include "caching_allocator.h"

#include "event_calls.h"
#include "first_use.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

namespace torch_fl::bridge {

namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kMinBlockSize = 512;           // every block is a multiple
constexpr size_t kSmallSize = 1 << 20;          // requests up to 1 MiB are "small"
constexpr size_t kSmallSegment = 2 << 20;       // small blocks come from 2 MiB segments
constexpr size_t kLargeSegment = 20 << 20;      // 1..10 MiB requests share 20 MiB segments
constexpr size_t kMinLargeAlloc = 10 << 20;     // from here on a request is its own segment
constexpr size_t kRoundLarge = 2 << 20;         // ... rounded to 2 MiB

size_t round_size(size_t size) {
  return size < kMinBlockSize ? kMinBlockSize
                              : (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) {
    return kSmallSegment;
  }
  if (size < kMinLargeAlloc) {
    return kLargeSegment;
  }
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::string format_bytes(uint64_t bytes) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed;
  if (bytes >= (1ull << 30)) {
    out << static_cast<double>(bytes) / (1ull << 30) << " GiB";
  } else if (bytes >= (1ull << 20)) {
    out << static_cast<double>(bytes) / (1ull << 20) << " MiB";
  } else if (bytes >= (1ull << 10)) {
    out << static_cast<double>(bytes) / (1ull << 10) << " KiB";
  } else {
    out << bytes << " bytes";
  }
  return out.str();
}

struct Block {
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0; // the stream it was allocated for
  size_t size = 0;
  size_t requested = 0;
  size_t rounded = 0;  // the rounded request it serves (its bin while free)
  char* ptr = nullptr;
  Block* prev = nullptr; // neighbours inside one segment
  Block* next = nullptr;
  bool allocated = false;
  bool small = false;
  bool binned = false; // free, waiting in its bin (not in a pool, not mergeable)
  int pending_events = 0;
  std::vector<c10::StreamId> stream_uses; // record_stream targets
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) {
      return a->stream < b->stream;
    }
    if (a->size != b->size) {
      return a->size < b->size;
    }
    return a->ptr < b->ptr;
  }
};

using Pool = std::set<Block*, BlockLess>;

void free_block_ctx(void* ctx);

} // namespace

// The cache of one device. All members are guarded by mutex_.
class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex device) : device_(device) {}

  c10::DataPtr allocate(size_t nbytes) {
    // No device tensor exists before the first allocation: the kernels that
    // ops on one need are in place before it (first_use.h).
    on_first_use();
    const c10::DeviceIndex d = device_;
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, nullptr, nullptr, device());
    }
    const c10::StreamId stream = StreamRegistry::get().current(d).id();
    std::lock_guard<std::mutex> lock(mutex_);
    process_events();
    const size_t size = round_size(nbytes);
    const bool small = size <= kSmallSize;
    Block* block = take_binned(size, stream);
    if (block == nullptr) {
      block = take_from_pool(size, stream, small);
    }
    if (block == nullptr && small) {
      block = take_larger_binned(size, stream);
    }
    if (block == nullptr && binned_ > 0) {
      // Blocks waiting in bins of other sizes may merge into one that fits.
      flush_bins();
      block = take_from_pool(size, stream, small);
    }
    if (block == nullptr) {
      block = new_segment(size, nbytes, stream, small);
      split(block, size);
    }
    block->allocated = true;
    block->requested = nbytes;
    block->rounded = size;
    update(stats_.allocation, small, +1);
    update(stats_.allocated_bytes, small, block->size);
    update(stats_.active, small, +1);
    update(stats_.active_bytes, small, block->size);
    update(stats_.requested_bytes, small, nbytes);
    return c10::DataPtr(block->ptr, block, &free_block_ctx, device());
  }

  void free(Block* block) {
    std::vector<std::pair<TFL_Event*, c10::StreamId>> to_record;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      block->allocated = false;
      const bool small = block->small;
      downdate(stats_.allocation, small, 1);
      downdate(stats_.allocated_bytes, small, block->size);
      downdate(stats_.requested_bytes, small, block->requested);
      if (block->stream_uses.empty() || plugin_gone()) {
        free_locked(block);
        return;
      }
      // Other streams may still read the memory: only the events recorded
      // now on those streams tell when it is safe to reuse. Until they are
      // pending, the block's count keeps it out of every pool and merge.
      for (c10::StreamId use : block->stream_uses) {
        to_record.emplace_back(take_event(), use);
      }
      block->pending_events += static_cast<int>(to_record.size());
      block->stream_uses.clear();
    }
    // Recorded without the allocator's lock: recording takes the stream's
    // enqueue guard, which a thread launching a kernel holds while the plugin
    // allocates its workspace here (the other order would deadlock).
    for (const auto& [event, use] : to_record) {
      record_event(event, StreamRegistry::get().native(device_, use));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [event, use] : to_record) {
      pending_.emplace_back(event, block);
    }
  }

  // free() of a block no other stream uses. Caller holds mutex_.
  void free_locked(Block* block) {
    const bool small = block->small;
    if (plugin_gone()) {
      release_to_pool(block);
      return;
    }
    // Into the bin of its size: the next request of that size on its stream
    // takes it back without searching or splitting the pool.
    downdate(stats_.active, small, 1);
    downdate(stats_.active_bytes, small, block->size);
    block->binned = true;
    bin_for(block->rounded, block->small).push_back(block);
    ++binned_;
  }

  void record_stream(Block* block, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stream == block->stream) {
      return;
    }
    if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) ==
        block->stream_uses.end()) {
      block->stream_uses.push_back(stream);
    }
  }

  // Returns every whole free segment to the plugin. Synchronizes the device
  // first: a free block may still be used by queued work on its stream.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    flush_bins();
    recount_inactive_split();
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat([](StatArray& s) {
      for (Stat& stat : s) {
        stat.reset_peak();
      }
    });
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat([](StatArray& s) {
      for (Stat& stat : s) {
        stat.reset_accumulated();
      }
    });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  c10::DeviceIndex index() const {
    return device_;
  }

  bool owns(const void* ptr) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = segments_.upper_bound(static_cast<const char*>(ptr));
    if (it == segments_.begin()) {
      return false;
    }
    --it;
    return static_cast<const char*>(ptr) < it->first + it->second;
  }

 private:
  c10::Device device() const {
    return c10::Device(c10::DeviceType::PrivateUse1, device_);
  }

  static bool plugin_gone() {
    Plugin* plugin = active_plugin_or_null();
    return plugin == nullptr || plugin->is_shut_down();
  }

  static bool is_split(const Block* block) {
    return block->prev != nullptr || block->next != nullptr;
  }

  template <typename F>
  void for_each_stat(F f) {
    f(stats_.allocation);
    f(stats_.segment);
    f(stats_.active);
    f(stats_.inactive_split);
    f(stats_.allocated_bytes);
    f(stats_.reserved_bytes);
    f(stats_.active_bytes);
    f(stats_.inactive_split_bytes);
    f(stats_.requested_bytes);
  }

  static void update(StatArray& stat, bool small, size_t amount) {
    stat[static_cast<size_t>(StatType::AGGREGATE)].increase(amount);
    stat[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)]
        .increase(amount);
  }

  static void downdate(StatArray& stat, bool small, size_t amount) {
    stat[static_cast<size_t>(StatType::AGGREGATE)].decrease(amount);
    stat[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)]
        .decrease(amount);
  }

  // inactive_split counts free blocks that are pieces of a partly used
  // segment. It is recomputed from the pools when stats are read, which keeps
  // the allocation path free of bookkeeping.
  void recount_inactive_split() {
    for (bool small : {true, false}) {
      int64_t count = 0;
      int64_t bytes = 0;
      for (const Block* b : small ? small_pool_ : large_pool_) {
        if (is_split(b)) {
          ++count;
          bytes += static_cast<int64_t>(b->size);
        }
      }
      const size_t idx = static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
      set_current(stats_.inactive_split[idx], count);
      set_current(stats_.inactive_split_bytes[idx], bytes);
    }
    constexpr size_t agg = static_cast<size_t>(StatType::AGGREGATE);
    constexpr size_t sp = static_cast<size_t>(StatType::SMALL_POOL);
    constexpr size_t lp = static_cast<size_t>(StatType::LARGE_POOL);
    set_current(
        stats_.inactive_split[agg],
        stats_.inactive_split[sp].current + stats_.inactive_split[lp].current);
    set_current(
        stats_.inactive_split_bytes[agg],
        stats_.inactive_split_bytes[sp].current +
            stats_.inactive_split_bytes[lp].current);
  }

  static void set_current(Stat& stat, int64_t value) {
    if (value > stat.current) {
      stat.increase(static_cast<size_t>(value - stat.current));
    } else if (value < stat.current) {
      stat.decrease(static_cast<size_t>(stat.current - value));
    }
  }

  Block* new_segment(size_t size, size_t requested, c10::StreamId stream, bool small) {
    const size_t bytes = segment_size(size);
    void* ptr = nullptr;
    if (!try_plugin_alloc(bytes, &ptr)) {
      ++stats_.num_alloc_retries;
      release_cached_locked();
      if (!try_plugin_alloc(bytes, &ptr)) {
        ++stats_.num_ooms;
        raise_oom(requested, bytes);
      }
    }
    auto* block = new Block();
    block->device = device_;
    block->stream = stream;
    block->size = bytes;
    block->ptr = static_cast<char*>(ptr);
    block->small = small;
    segments_.emplace(block->ptr, bytes);
    ++stats_.num_device_alloc;
    update(stats_.segment, small, 1);
    update(stats_.reserved_bytes, small, bytes);
    return block;
  }

  bool try_plugin_alloc(size_t bytes, void** ptr) {
    Plugin& plugin = active_plugin();
    TFL_Memory_Allocate_Args args{};
    args.struct_size = TFL_Memory_Allocate_Args_STRUCT_SIZE;
    args.device = device_;
    args.size = bytes;
    TFL_Error* err = plugin.memory().Memory_Allocate(&args);
    if (err == nullptr) {
      *ptr = args.ptr;
      return true;
    }
    auto [code, message] = plugin.consume(err);
    if (code != TFL_ERR_OUT_OF_MEMORY) {
      throw c10::AcceleratorError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, code,
          "plugin '" + plugin.name() + "': Memory_Allocate of " + format_bytes(bytes) +
              " on device " + std::to_string(device_) + " failed with " +
              error_code_name(code) + ": " + message);
    }
    last_oom_message_ = message;
    return false;
  }

  [[noreturn]] void raise_oom(size_t requested, size_t segment) {
    Plugin& plugin = active_plugin();
    uint64_t free_bytes = 0;
    uint64_t total_bytes = plugin.device(device_).total_memory;
    TFL_Memory_GetInfo_Args info{};
    info.struct_size = TFL_Memory_GetInfo_Args_STRUCT_SIZE;
    info.device = device_;
    if (TFL_Error* err = plugin.memory().Memory_GetInfo(&info)) {
      plugin.consume(err);
    } else {
      free_bytes = info.free_bytes;
      total_bytes = info.total_bytes;
    }
    constexpr size_t agg = static_cast<size_t>(StatType::AGGREGATE);
    TORCH_CHECK_WITH(
        OutOfMemoryError, false,
        plugin.name(), " out of memory: tried to allocate ", format_bytes(requested),
        " (a ", format_bytes(segment), " segment) on ", plugin.device_type(), ":",
        static_cast<int>(device_), ", which has ", format_bytes(total_bytes),
        " in total and ", format_bytes(free_bytes), " free; ",
        format_bytes(stats_.allocated_bytes[agg].current),
        " are allocated by tensors and ",
        format_bytes(stats_.reserved_bytes[agg].current),
        " reserved by the caching allocator. Free tensors you no longer need or "
        "use smaller batches. (plugin: ", last_oom_message_, ")");
  }

  std::vector<Block*>& bin_for(size_t rounded, bool small) {
    if (!small) {
      return large_bins_[rounded];
    }
    const size_t index = rounded / kMinBlockSize;
    filled_small_bins_[index / 64] |= uint64_t{1} << (index % 64);
    return small_bins_[index];
  }

  Block* take_binned(size_t size, c10::StreamId stream) {
    if (binned_ == 0) {
      return nullptr;
    }
    const bool small = size <= kSmallSize;
    std::vector<Block*>* bin = nullptr;
    if (small) {
      bin = &small_bins_[size / kMinBlockSize];
    } else {
      auto it = large_bins_.find(size);
      if (it == large_bins_.end()) {
        return nullptr;
      }
      bin = &it->second;
    }
    return take_from_bin(*bin, stream);
  }

  // The block of `bin` last freed on `stream`, if any.
  Block* take_from_bin(std::vector<Block*>& bin, c10::StreamId stream) {
    for (size_t i = bin.size(); i-- > 0;) {
      Block* block = bin[i];
      if (block->stream == stream) {
        bin[i] = bin.back();
        bin.pop_back();
        block->binned = false;
        --binned_;
        return block;
      }
    }
    return nullptr;
  }

  // The smallest binned small block above `size` for `stream`, split to
  // size (the rest goes to the pool). Taken before flushing every bin into
  // the pools: a flush merges what the bins hold, so the next step finds its
  // sizes' bins empty and flushes again; splitting one block keeps the rest.
  Block* take_larger_binned(size_t size, c10::StreamId stream) {
    if (binned_ == 0) {
      return nullptr;
    }
    Block* block = nullptr;
    visit_filled_small_bins(size / kMinBlockSize + 1, [&](std::vector<Block*>& bin) {
      block = take_from_bin(bin, stream);
      return block != nullptr;
    });
    if (block != nullptr) {
      split(block, size);
    }
    return block;
  }

  // Calls visit(bin) on each small bin from index `first` up that received a
  // block since the last flush, smallest first, until visit returns true.
  template <typename F>
  void visit_filled_small_bins(size_t first, F visit) {
    for (size_t word = first / 64; word < filled_small_bins_.size(); ++word) {
      uint64_t bits = filled_small_bins_[word];
      if (word == first / 64) {
        bits &= ~uint64_t{0} << (first % 64);
      }
      for (; bits != 0; bits &= bits - 1) {
        if (visit(small_bins_[word * 64 + static_cast<size_t>(__builtin_ctzll(bits))])) {
          return;
        }
      }
    }
  }

  // A free pool block of at least `size` for `stream`, split to size.
  Block* take_from_pool(size_t size, c10::StreamId stream, bool small) {
    Pool& pool = small ? small_pool_ : large_pool_;
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) {
      return nullptr;
    }
    Block* block = *it;
    pool.erase(it);
    split(block, size);
    return block;
  }

  // Leaves `block` with `size` bytes; the rest, if worth keeping apart, becomes
  // a free block of the pool.
  void split(Block* block, size_t size) {
    const bool small = block->small;
    const size_t remaining = block->size - size;
    if (!(small ? remaining >= kMinBlockSize : remaining > kSmallSize)) {
      return;
    }
    auto* rest = new Block();
    rest->device = device_;
    rest->stream = block->stream;
    rest->size = remaining;
    rest->ptr = block->ptr + size;
    rest->small = small;
    rest->prev = block;
    rest->next = block->next;
    if (rest->next != nullptr) {
      rest->next->prev = rest;
    }
    block->next = rest;
    block->size = size;
    (small ? small_pool_ : large_pool_).insert(rest);
  }

  // Every binned block back into its pool, merged with free neighbours.
  void flush_bins() {
    if (binned_ == 0) {
      return;
    }
    // One at a time: a block still binned is no neighbour to merge with yet.
    auto drain = [this](std::vector<Block*>& bin) {
      for (Block* block : bin) {
        block->binned = false;
        return_to_pool(block);
      }
      bin.clear();
    };
    // Only the bins that received a block since the last flush.
    visit_filled_small_bins(0, [&](std::vector<Block*>& bin) {
      drain(bin);
      return false;
    });
    filled_small_bins_.fill(0);
    for (auto& [size, bin] : large_bins_) {
      drain(bin);
    }
    large_bins_.clear();
    binned_ = 0;
  }

  void release_to_pool(Block* block) {
    downdate(stats_.active, block->small, 1);
    downdate(stats_.active_bytes, block->small, block->size);
    return_to_pool(block);
  }

  void return_to_pool(Block* block) {
    const bool small = block->small;
    Pool& pool = small ? small_pool_ : large_pool_;
    // Merge with free neighbours of the same segment.
    for (Block* neighbour : {block->prev, block->next}) {
      if (neighbour == nullptr || neighbour->allocated || neighbour->binned ||
          neighbour->pending_events > 0) {
        continue;
      }
      pool.erase(neighbour);
      if (neighbour == block->prev) {
        block->ptr = neighbour->ptr;
        block->prev = neighbour->prev;
        if (block->prev != nullptr) {
          block->prev->next = block;
        }
      } else {
        block->next = neighbour->next;
        if (block->next != nullptr) {
          block->next->prev = block;
        }
      }
      block->size += neighbour->size;
      delete neighbour;
    }
    pool.insert(block);
  }

  void process_events() {
    if (pending_.empty() || plugin_gone()) {
      return;
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!query_event(it->first)) {
        ++it;
        continue;
      }
      spare_events_.push_back(it->first);
      Block* block = it->second;
      it = pending_.erase(it);
      if (--block->pending_events == 0) {
        release_to_pool(block);
      }
    }
  }

  TFL_Event* take_event() {
    if (!spare_events_.empty()) {
      TFL_Event* event = spare_events_.back();
      spare_events_.pop_back();
      return event;
    }
    return create_event(device_);
  }

  void release_cached_locked() {
    if (plugin_gone()) {
      return;
    }
    synchronize_device(device_);
    process_events();
    flush_bins();
    Plugin& plugin = active_plugin();
    for (Pool* pool : {&small_pool_, &large_pool_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (is_split(block)) {
          ++it;
          continue;
        }
        TFL_Memory_Free_Args args{};
        args.struct_size = TFL_Memory_Free_Args_STRUCT_SIZE;
        args.device = device_;
        args.ptr = block->ptr;
        plugin.check(plugin.memory().Memory_Free(&args), "Memory_Free");
        segments_.erase(block->ptr);
        ++stats_.num_device_free;
        downdate(stats_.segment, block->small, 1);
        downdate(stats_.reserved_bytes, block->small, block->size);
        it = pool->erase(it);
        delete block;
      }
    }
  }

  const c10::DeviceIndex device_;
  mutable std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  // Free blocks by the rounded request they served (small: by size / 512).
  std::array<std::vector<Block*>, kSmallSize / kMinBlockSize + 1> small_bins_;
  // Bit i: small_bins_[i] received a block since the last flush (it may
  // have been emptied since).
  std::array<uint64_t, (kSmallSize / kMinBlockSize + 1 + 63) / 64> filled_small_bins_{};
  std::unordered_map<size_t, std::vector<Block*>> large_bins_;
  size_t binned_ = 0;
  std::map<const char*, size_t> segments_; // base -> bytes of each segment reserved from the plugin
  std::deque<std::pair<TFL_Event*, Block*>> pending_;
  std::vector<TFL_Event*> spare_events_;
  DeviceStats stats_;
  std::string last_oom_message_;
};

namespace {

// Device caches are created once and never destroyed: tensors freed during
// interpreter teardown still find theirs.
std::vector<DeviceCache*>& all_caches() {
  static auto* caches = new std::vector<DeviceCache*>();
  return *caches;
}

void free_block_ctx(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  all_caches()[block->device]->free(block);
}

} // namespace

CachingAllocator& CachingAllocator::get() {
  static auto* allocator = new CachingAllocator();
  return *allocator;
}

void CachingAllocator::init(int device_count) {
  auto& caches = all_caches();
  TORCH_CHECK(caches.empty(), "the torch-fl caching allocator is already initialized");
  for (int d = 0; d < device_count; ++d) {
    caches.push_back(new DeviceCache(static_cast<c10::DeviceIndex>(d)));
  }
}

DeviceCache& CachingAllocator::cache(c10::DeviceIndex device) const {
  check_device_index(device);
  return *all_caches()[device];
}

c10::DataPtr CachingAllocator::allocate(size_t nbytes) {
  return cache(current_device()).allocate(nbytes);
}

c10::DataPtr CachingAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes) {
  return cache(device).allocate(nbytes);
}

void CachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) {
    return;
  }
  const auto device = device_of(src);
  TORCH_CHECK(device.has_value(), "copy_data: source is not torch-fl device memory");
  Plugin& plugin = active_plugin();
  TFL_Memory_Copy_Args args{};
  args.struct_size = TFL_Memory_Copy_Args_STRUCT_SIZE;
  args.kind = TFL_COPY_DEVICE_TO_DEVICE;
  args.dst = dest;
  args.dst_device = *device;
  args.src = src;
  args.src_device = *device;
  args.size = count;
  args.stream = StreamRegistry::get().current_native(*device);
  args.blocking = 1;
  EnqueueGuard enqueuing(args.stream, *device);
  plugin.check(plugin.memory().Memory_Copy(&args), "Memory_Copy");
}

bool CachingAllocator::initialized() {
  return !all_caches().empty();
}

void CachingAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  for (DeviceCache* cache : all_caches()) {
    cache->release_cached();
  }
}

void CachingAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || ptr.get_deleter() != &free_block_ctx) {
    return;
  }
  auto* block = static_cast<Block*>(ptr.get_context());
  TORCH_CHECK(
      stream.device_index() == block->device,
      "record_stream: the stream is on device ", static_cast<int>(stream.device_index()),
      " but the tensor's memory is on device ", static_cast<int>(block->device));
  all_caches()[block->device]->record_stream(block, stream.id());
}

DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  return cache(device).stats();
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  cache(device).reset_accumulated();
}

void CachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  cache(device).reset_peak();
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  Plugin& plugin = active_plugin();
  TFL_Memory_GetInfo_Args args{};
  args.struct_size = TFL_Memory_GetInfo_Args_STRUCT_SIZE;
  args.device = device;
  plugin.check(plugin.memory().Memory_GetInfo(&args), "Memory_GetInfo");
  return {static_cast<size_t>(args.free_bytes), static_cast<size_t>(args.total_bytes)};
}

std::optional<c10::DeviceIndex> CachingAllocator::device_of(const void* ptr) const {
  for (DeviceCache* cache : all_caches()) {
    if (cache->owns(ptr)) {
      return cache->index();
    }
  }
  return std::nullopt;
}

void CachingAllocator::release_all() noexcept {
  for (DeviceCache* cache : all_caches()) {
    try {
      cache->release_cached();
    } catch (const std::exception&) {
      // Process exit: nothing useful can be done with the error.
    }
  }
}

void register_allocator() {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &CachingAllocator::get());
}

} // namespace torch_fl::bridge
