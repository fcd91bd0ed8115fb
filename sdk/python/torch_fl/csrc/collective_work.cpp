#include "collective_work.h"

#include "kernel_abi.h"

namespace torch_fl::bridge::dist {

std::string device_name(c10::DeviceIndex index) {
  return c10::get_privateuse1_backend() + ":" + std::to_string(static_cast<int>(index));
}

const TFL_CollectivesApi& collectives() {
  const TFL_Api& api = active_plugin().api();
  const bool present = api.struct_size >= TFL_STRUCT_SIZE(TFL_Api, collectives) && api.collectives != nullptr &&
      api.collectives->struct_size >= TFL_CollectivesApi_STRUCT_SIZE;
  TORCH_CHECK_NOT_IMPLEMENTED(
      present, "plugin '", active_plugin().name(),
      "' has no collectives group; torch.distributed can only use gloo (CPU tensors) with it");
  return *api.collectives;
}

[[noreturn]] void throw_comm_error(TFL_Error* error, const std::string& what) {
  const Plugin& plugin = active_plugin();
  auto [code, message] = plugin.consume(error);
  throw c10::DistBackendError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      "plugin '" + plugin.name() + "': " + what + " failed with " + error_code_name(code) + ": " + message);
}

void check_call(TFL_Error* error, const char* what) {
  if (error == nullptr) {
    return;
  }
  const Plugin& plugin = active_plugin();
  TFL_Error_GetCode_Args c{};
  c.struct_size = TFL_Error_GetCode_Args_STRUCT_SIZE;
  c.error = error;
  plugin.api().core->Error_GetCode(&c);
  if (c.code == TFL_ERR_INVALID_ARGUMENT || c.code == TFL_ERR_UNIMPLEMENTED || c.code == TFL_ERR_OUT_OF_MEMORY) {
    plugin.check(error, what);
  }
  throw_comm_error(error, what);
}

void CompletionLane::loop() {
  for (;;) {
    c10::intrusive_ptr<WorkTFL> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) {
        return;  // stop_ and drained
      }
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    Plugin* plugin = active_plugin_or_null();
    for (TFL_Event* e : work->events()) {
      if (plugin == nullptr || plugin->is_shut_down()) {
        error = std::make_exception_ptr(c10::DistBackendError(
            {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
            "tfl: " + work->what() + " cannot complete: the plugin was shut down"));
        break;
      }
      TFL_Event_Synchronize_Args args{};
      args.struct_size = TFL_Event_Synchronize_Args_STRUCT_SIZE;
      args.event = e;
      TFL_Error* err = plugin->stream().Event_Synchronize(&args);
      if (err != nullptr && !error) {
        try {
          throw_comm_error(err, work->what() + " on " + device_name(device_));
        } catch (...) {
          error = std::current_exception();
        }
      } else if (err != nullptr) {
        plugin->consume(err);
      }
    }
    // A stream reports only its first pending failure; a communicator
    // that failed fails everything after it, so later Works on this lane
    // inherit the failure instead of reporting a silent success.
    if (error) {
      failed_ = error;
    } else if (failed_) {
      error = failed_;
    }
    work->complete(error);
    std::lock_guard<std::mutex> lock(mu_);
    --pending_;
  }
}

} // namespace torch_fl::bridge::dist
