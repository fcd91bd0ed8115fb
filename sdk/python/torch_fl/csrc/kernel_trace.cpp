#include "kernel_trace.h"

#include "loaded_plugin.h"
#include "streams.h"
#include "timing_events.h"

#include <c10/util/ApproximateClock.h>
#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch_fl::bridge {

namespace detail {
std::atomic<bool> kernel_trace_on{false};
} // namespace detail

namespace {

using libkineto::ActivityType;

// Kineto's ResourceInfo changed shape between releases: torch 2.11 constructs
// it as (deviceId, id, sortIndex, name), later releases made it the aggregate
// {id, sortIndex, deviceId, name}. Filled positionally, one of them files a
// stream's row under another device.
template <class Info = libkineto::ResourceInfo>
Info resource_info(int64_t device, int64_t id, int64_t sort_index, std::string name) {
  if constexpr (std::is_aggregate_v<Info>) {
    return Info{id, sort_index, device, std::move(name)};
  } else {
    return Info(device, id, sort_index, std::move(name));
  }
}

// One timed launch, waiting for the session to process its trace.
struct LaunchRecord {
  std::string op;
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;
  TFL_Event* start = nullptr;
  TFL_Event* end = nullptr;
  uint64_t correlation = 0;
};

void release_events(const LaunchRecord& r) noexcept {
  TimingEventPool::get().release(r.device, r.start);
  TimingEventPool::get().release(r.device, r.end);
}

// The launches of the session now recording. Kineto runs one trace at a
// time; each session gets a generation so that a launch finishing after its
// session stopped is dropped, not handed to the next one.
class LaunchLog {
 public:
  static LaunchLog& get() {
    static auto* log = new LaunchLog();
    return *log;
  }

  uint64_t open() {
    std::lock_guard<std::mutex> lock(mutex_);
    discard_locked();
    const uint64_t generation = ++last_generation_;
    open_generation_.store(generation, std::memory_order_release);
    detail::kernel_trace_on.store(true, std::memory_order_release);
    return generation;
  }

  void close(uint64_t generation) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_generation_.load(std::memory_order_relaxed) == generation) {
      detail::kernel_trace_on.store(false, std::memory_order_release);
      open_generation_.store(0, std::memory_order_release);
    }
  }

  // The generation now recording; 0 when none is.
  uint64_t recording() const {
    return open_generation_.load(std::memory_order_acquire);
  }

  // False when `generation` is no longer recording (the caller keeps `r`).
  bool add(uint64_t generation, LaunchRecord&& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_generation_.load(std::memory_order_relaxed) != generation) {
      return false;
    }
    records_.push_back(std::move(r));
    return true;
  }

  void note_error(uint64_t generation, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_generation_.load(std::memory_order_relaxed) == generation && errors_.size() < 8) {
      errors_.push_back(message);
    }
  }

  // The records and errors of a closed generation.
  std::pair<std::vector<LaunchRecord>, std::vector<std::string>> take(uint64_t generation) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation != last_generation_ ||
        open_generation_.load(std::memory_order_relaxed) == generation) {
      return {};
    }
    return {std::exchange(records_, {}), std::exchange(errors_, {})};
  }

  // Drops what a generation left unprocessed (a session destroyed early).
  void discard(uint64_t generation) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation == last_generation_) {
      discard_locked();
    }
  }

 private:
  void discard_locked() {
    for (const LaunchRecord& r : records_) {
      release_events(r);
    }
    records_.clear();
    errors_.clear();
  }

  std::mutex mutex_;
  uint64_t last_generation_ = 0;
  std::atomic<uint64_t> open_generation_{0};
  std::vector<LaunchRecord> records_;
  std::vector<std::string> errors_;
};

// Kineto pushes the correlation id of each host operator on the thread that
// runs it; the innermost one is the operator whose kernel launches.
struct CorrelationStack {
  uint64_t generation = 0;
  std::vector<uint64_t> ids;
};
thread_local CorrelationStack tls_correlation;

uint64_t current_correlation(uint64_t generation) {
  const CorrelationStack& s = tls_correlation;
  return s.generation == generation && !s.ids.empty() ? s.ids.back() : 0;
}

std::string device_type_name() {
  Plugin* plugin = active_plugin_or_null();
  return plugin != nullptr ? plugin->device_type() : std::string("privateuseone");
}

// Device rows sort below every process row (Linux pids stay under 2^22).
constexpr int64_t kDeviceSortBase = int64_t{1} << 22;

libkineto::DeviceInfo device_info(c10::DeviceIndex device) {
  const std::string type = device_type_name();
  Plugin* plugin = active_plugin_or_null();
  const std::string label =
      plugin != nullptr && device < plugin->device_count() ? plugin->device(device).name : type;
  return libkineto::DeviceInfo{
      device, kDeviceSortBase + device, type + ":" + std::to_string(device), label};
}

// A host time for each device's clock: an event recorded on an idle default
// stream completes between the host times read around its record and its
// synchronize, so the midpoint is off by at most half that window; the
// shortest of a few tries is kept. All devices are anchored in each try at
// once, so a session's start costs one round trip per try.
struct Anchor {
  TFL_Event* event = nullptr;
  int64_t host_ns = 0;
  int64_t window_ns = std::numeric_limits<int64_t>::max();
};

void take_anchors(std::vector<Anchor>& anchors) {
  constexpr int kTries = 3;
  constexpr int64_t kGoodWindowNs = 10000;
  std::vector<c10::DeviceIndex> devices;
  for (size_t d = 0; d < anchors.size(); ++d) {
    const auto device = static_cast<c10::DeviceIndex>(d);
    if (device_has_timing_events(device)) {
      synchronize_device(device);
      devices.push_back(device);
    }
  }
  std::vector<TFL_Event*> events(anchors.size(), nullptr);
  std::vector<int64_t> before(anchors.size(), 0);
  try {
    for (int i = 0; i < kTries; ++i) {
      bool good = true;
      for (const c10::DeviceIndex d : devices) {
        good = good && anchors[d].window_ns <= kGoodWindowNs;
      }
      if (good) {
        break;
      }
      for (const c10::DeviceIndex d : devices) {
        events[d] = TimingEventPool::get().acquire(d);
        before[d] = c10::getTime();
        record_event(events[d], StreamRegistry::get().native(d, 0));
      }
      for (const c10::DeviceIndex d : devices) {
        synchronize_event(events[d]);
        const int64_t window = c10::getTime() - before[d];
        TFL_Event* worse = std::exchange(events[d], nullptr);
        if (window < anchors[d].window_ns) {
          std::swap(worse, anchors[d].event);
          anchors[d].host_ns = before[d] + window / 2;
          anchors[d].window_ns = window;
        }
        TimingEventPool::get().release(d, worse);
      }
    }
  } catch (...) {
    for (size_t d = 0; d < events.size(); ++d) {
      TimingEventPool::get().release(static_cast<c10::DeviceIndex>(d), events[d]);
    }
    throw;
  }
}

class KernelTraceSession final : public libkineto::IActivityProfilerSession {
 public:
  KernelTraceSession() : buffer_(std::make_unique<libkineto::CpuTraceBuffer>()) {}

  ~KernelTraceSession() override {
    if (generation_ != 0) {
      LaunchLog::get().close(generation_);
      LaunchLog::get().discard(generation_);
    }
    release_anchors();
  }

  void start() override {
    Plugin* plugin = active_plugin_or_null();
    if (plugin == nullptr || plugin->is_shut_down()) {
      return;
    }
    try {
      anchors_.assign(static_cast<size_t>(plugin->device_count()), Anchor{});
      take_anchors(anchors_);
    } catch (const std::exception& e) {
      errors_.push_back(std::string("device timeline anchor: ") + e.what());
      release_anchors();
      status_ = libkineto::TraceStatus::ERROR;
      return;
    }
    start_ns_ = c10::getTime();
    generation_ = LaunchLog::get().open();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (generation_ != 0) {
      LaunchLog::get().close(generation_);
    }
    stop_ns_ = c10::getTime();
    if (status_ == libkineto::TraceStatus::RECORDING) {
      status_ = libkineto::TraceStatus::PROCESSING;
    }
  }

  std::vector<std::string> errors() override {
    return errors_;
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(
      libkineto::ActivityLogger& logger,
      libkineto::getLinkedActivityCallback linked_activity,
      int64_t /*window_start*/,
      int64_t /*window_end*/) override {
    if (generation_ == 0 || !buffer_) {
      return;
    }
    auto [records, errors] = LaunchLog::get().take(generation_);
    errors_.insert(errors_.end(), errors.begin(), errors.end());
    buffer_->span = libkineto::TraceSpan(start_ns_, stop_ns_, device_type_name());
    buffer_->gpuOpCount = static_cast<int>(records.size());
    for (const LaunchRecord& r : records) {
      add_activity(logger, linked_activity, r);
      release_events(r);
    }
    // getDeviceInfo() names the first device; the others are named here.
    bool first = true;
    for (const c10::DeviceIndex device : devices_) {
      if (!first) {
        logger.handleDeviceInfo(device_info(device), start_ns_);
      }
      first = false;
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (devices_.empty()) {
      return nullptr;
    }
    return std::make_unique<libkineto::DeviceInfo>(device_info(*devices_.begin()));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [device, stream] : streams_) {
      out.push_back(resource_info(device, stream, stream, "stream " + std::to_string(stream)));
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    CorrelationStack& s = tls_correlation;
    if (s.generation != generation_) {
      s.generation = generation_;
      s.ids.clear();
    }
    s.ids.push_back(id);
  }

  void popCorrelationId() override {
    CorrelationStack& s = tls_correlation;
    if (s.generation == generation_ && !s.ids.empty()) {
      s.ids.pop_back();
    }
  }

 private:
  void add_activity(
      libkineto::ActivityLogger& logger,
      const libkineto::getLinkedActivityCallback& linked_activity,
      const LaunchRecord& r) {
    const Anchor& anchor = anchors_.at(r.device);
    double start_ms = 0;
    double end_ms = 0;
    try {
      synchronize_event(r.end);
      start_ms = elapsed_ms(anchor.event, r.start);
      end_ms = elapsed_ms(anchor.event, r.end);
    } catch (const std::exception& e) {
      if (errors_.size() < 8) {
        errors_.push_back(r.op + ": " + e.what());
      }
      return;
    }
    const auto to_host_ns = [&](double ms) {
      return anchor.host_ns + static_cast<int64_t>(std::llround(std::max(ms, 0.0) * 1e6));
    };
    const int64_t start_ns = to_host_ns(start_ms);
    const int64_t end_ns = std::max(start_ns, to_host_ns(end_ms));
    buffer_->emplace_activity(buffer_->span, ActivityType::CONCURRENT_KERNEL, r.op);
    libkineto::GenericTraceActivity& act = *buffer_->activities.back();
    act.startTime = start_ns;
    act.endTime = end_ns;
    // The host operator's id: the trace's "External id" names the launching op.
    act.id = static_cast<int32_t>(r.correlation);
    act.device = r.device;
    act.resource = static_cast<int32_t>(r.stream);
    if (linked_activity && r.correlation != 0) {
      act.linked = linked_activity(static_cast<int32_t>(r.correlation));
    }
    logger.handleActivity(act);
    devices_.insert(r.device);
    streams_.insert({r.device, r.stream});
  }

  void release_anchors() noexcept {
    for (size_t d = 0; d < anchors_.size(); ++d) {
      TimingEventPool::get().release(static_cast<c10::DeviceIndex>(d), anchors_[d].event);
    }
    anchors_.clear();
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::vector<Anchor> anchors_;
  std::vector<std::string> errors_;
  std::set<c10::DeviceIndex> devices_;
  std::set<std::pair<c10::DeviceIndex, c10::StreamId>> streams_;
  uint64_t generation_ = 0;
  int64_t start_ns_ = 0;
  int64_t stop_ns_ = 0;
};

class KernelTraceProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string name = "torch_fl";
    return name;
  }

  const std::set<ActivityType>& availableActivities() const override {
    static const std::set<ActivityType> activities{ActivityType::CONCURRENT_KERNEL};
    return activities;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    // A CPU-only trace asks for no device kernels: no session, no cost.
    if (activity_types.count(ActivityType::CONCURRENT_KERNEL) == 0 ||
        active_plugin_or_null() == nullptr) {
      return nullptr;
    }
    return std::make_unique<KernelTraceSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/,
      int64_t /*duration_ms*/,
      const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }
};

} // namespace

TracedLaunch::TracedLaunch(c10::DeviceIndex device, const std::string& op)
    : op_(op), device_(device) {
  generation_ = LaunchLog::get().recording();
  if (generation_ == 0 || !device_has_timing_events(device)) {
    generation_ = 0;
    return;
  }
  correlation_ = current_correlation(generation_);
  TFL_Event* start = nullptr;
  try {
    const c10::Stream stream = StreamRegistry::get().current(device);
    stream_id_ = stream.id();
    stream_ = StreamRegistry::get().native(stream);
    start = TimingEventPool::get().acquire(device);
    record_event(start, stream_);
    start_ = start;
  } catch (const std::exception& e) {
    // Profiling never fails the operator; the session reports what it lost.
    TimingEventPool::get().release(device, start);
    LaunchLog::get().note_error(generation_, op_ + ": " + e.what());
  }
}

TracedLaunch::~TracedLaunch() {
  TimingEventPool::get().release(device_, start_);
}

void TracedLaunch::finish(bool launched) {
  TFL_Event* start = std::exchange(start_, nullptr);
  if (start == nullptr) {
    return;
  }
  if (!launched) {
    TimingEventPool::get().release(device_, start);
    return;
  }
  TFL_Event* end = nullptr;
  try {
    end = TimingEventPool::get().acquire(device_);
    record_event(end, stream_);
  } catch (const std::exception& e) {
    TimingEventPool::get().release(device_, start);
    TimingEventPool::get().release(device_, end);
    LaunchLog::get().note_error(generation_, op_ + ": " + e.what());
    return;
  }
  LaunchRecord record{op_, device_, stream_id_, start, end, correlation_};
  if (!LaunchLog::get().add(generation_, std::move(record))) {
    release_events(record);
  }
}

void register_kernel_trace() {
  static std::once_flag once;
  std::call_once(once, [] {
    libkineto::api().registerProfilerFactory(
        []() -> std::unique_ptr<libkineto::IActivityProfiler> {
          return std::make_unique<KernelTraceProfiler>();
        });
  });
}

} // namespace torch_fl::bridge
