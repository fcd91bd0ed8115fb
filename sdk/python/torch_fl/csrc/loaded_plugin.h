// A loaded plugin: the shared library, its ABI tables and RAII over them.
//
// Everything the bridge does with a plugin goes through this class, so ABI
// negotiation, the required-function check and the mapping of TFL_Error to
// PyTorch exceptions live in exactly one place.
#pragma once

#include <torch_fl/plugin_api.h>

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace torch_fl::bridge {

// Why a plugin could not be loaded. Mirrored by torch_fl.PluginError subclasses.
enum class LoadErrorKind {
  NotFound,
  NotSharedLibrary,
  NoEntrySymbol,
  AbiMismatch,
  MissingFunctions,
  InitializeFailed,
  Unavailable, // Plugin_Initialize said TFL_ERR_UNAVAILABLE: no hardware or driver here
  BadPlugin,
};

class LoadError : public std::runtime_error {
 public:
  LoadError(LoadErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  LoadErrorKind kind() const {
    return kind_;
  }

 private:
  LoadErrorKind kind_;
};

struct DeviceInfo {
  std::string name;
  uint64_t total_memory = 0;
  uint64_t capabilities = 0;
  uint32_t memory_alignment = 0;
  int32_t preferred_memory_format = 0;
  int32_t compute_units = 0;
  int32_t version_major = 0;
  int32_t version_minor = 0;
};

// A kernel exported through the symbol convention torch_fl_op_<name>_<overload>.
struct SymbolKernel {
  std::string symbol;
  std::string suffix; // the part after torch_fl_op_
  TFL_KernelFn fn = nullptr;
};

class Plugin {
 public:
  // Loads, negotiates and initializes the plugin at `path`. Throws LoadError.
  static std::unique_ptr<Plugin> load(
      const std::string& path,
      const std::map<std::string, std::string>& options);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const TFL_Api& api() const {
    return *api_;
  }
  const std::string& path() const {
    return path_;
  }
  const std::string& name() const {
    return name_;
  }
  const std::string& vendor() const {
    return vendor_;
  }
  const std::string& version() const {
    return version_;
  }
  const std::string& device_type() const {
    return device_type_;
  }
  const std::string& description() const {
    return description_;
  }
  int device_count() const {
    return static_cast<int>(devices_.size());
  }
  const DeviceInfo& device(int index) const;
  const std::vector<SymbolKernel>& symbol_kernels() const {
    return symbol_kernels_;
  }
  bool has_peer_access(int device, int peer) const;

  // Optional groups, nullptr when the plugin leaves them out.
  const TFL_KernelApi* kernels() const;
  const TFL_MemoryApi& memory() const {
    return *api_->memory;
  }
  const TFL_StreamApi& stream() const {
    return *api_->stream;
  }
  const TFL_DeviceApi& device_api() const {
    return *api_->device;
  }
  bool has_host_mapping() const;

  // Reads and releases an error. Returns its code and message.
  std::pair<int32_t, std::string> consume(TFL_Error* error) const;

  // Throws the PyTorch exception for `error` (no-op when null). `what` names
  // the plugin function or the operator, e.g. "Memory_Allocate" or
  // "kernel aten::add.Tensor".
  void check(TFL_Error* error, const char* what) const;
  void check(TFL_Error* error, const std::string& what) const {
    check(error, what.c_str());
  }

  // Calls Plugin_Shutdown once (process exit). Afterwards is_shut_down() is
  // true and the bridge stops calling into the plugin.
  void shutdown() noexcept;
  bool is_shut_down() const {
    return shut_down_;
  }

 private:
  Plugin() = default;
  void negotiate();
  void check_required_functions() const;
  void initialize(const std::map<std::string, std::string>& options);
  void read_info();
  void scan_symbol_kernels();

  std::string path_;
  void* handle_ = nullptr;
  const TFL_Api* api_ = nullptr;
  std::string name_, vendor_, version_, device_type_, description_;
  std::vector<DeviceInfo> devices_;
  std::vector<std::vector<uint8_t>> peer_;
  std::vector<SymbolKernel> symbol_kernels_;
  bool shut_down_ = false;
  int64_t loaded_in_pid_ = 0; // a different getpid() is a forked child
};

// Name of a TFL_ErrorCode, e.g. "TFL_ERR_OUT_OF_MEMORY".
const char* error_code_name(int32_t code);

// The plugin that owns PrivateUse1 in this process.
Plugin& active_plugin();
Plugin* active_plugin_or_null();
void set_active_plugin(std::unique_ptr<Plugin> plugin);

// Validates a device index against the active plugin; an invalid one is a
// torch.AcceleratorError (as CUDA's invalid device ordinal) that names the
// device and the count.
void check_device_index(c10::DeviceIndex index);

} // namespace torch_fl::bridge
