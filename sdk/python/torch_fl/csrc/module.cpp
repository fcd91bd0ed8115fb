// torch_fl._C: the Python face of the bridge. Thin: everything here converts
// arguments and forwards to the component that owns the logic.
#include "autocast.h"
#include "bindings.h"
#include "caching_allocator.h"
#include "cpp_meta.h"
#include "fallback.h"
#include "first_use.h"
#include "generator.h"
#include "hooks.h"
#include "host_allocator.h"
#include "kernel_abi.h"
#include "kernel_registration.h"
#include "kernel_trace.h"
#include "meta.h"
#include "minimal_ops.h"
#include "op_rules.h"
#include "op_stats.h"
#include "profiler_stubs.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <torch/csrc/Generator.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <set>

namespace py = pybind11;

namespace torch_fl::bridge {

namespace {

const char* load_error_kind(LoadErrorKind kind) {
  switch (kind) {
    case LoadErrorKind::NotFound:
      return "not_found";
    case LoadErrorKind::NotSharedLibrary:
      return "not_shared_library";
    case LoadErrorKind::NoEntrySymbol:
      return "no_entry_symbol";
    case LoadErrorKind::AbiMismatch:
      return "abi_mismatch";
    case LoadErrorKind::MissingFunctions:
      return "missing_functions";
    case LoadErrorKind::InitializeFailed:
      return "initialize_failed";
    case LoadErrorKind::Unavailable:
      return "unavailable";
    case LoadErrorKind::BadPlugin:
      return "bad_plugin";
  }
  return "bad_plugin";
}

py::list capability_names(uint64_t caps) {
  static const std::pair<uint64_t, const char*> names[] = {
      {TFL_CAP_FP64, "fp64"},
      {TFL_CAP_FP16, "fp16"},
      {TFL_CAP_BF16, "bf16"},
      {TFL_CAP_UNIFIED_MEMORY, "unified_memory"},
      {TFL_CAP_PEER_ACCESS, "peer_access"},
      {TFL_CAP_HOST_MAPPING, "host_mapping"},
      {TFL_CAP_COMPLEX, "complex"},
      {TFL_CAP_TIMING_EVENTS, "timing_events"},
      {TFL_CAP_ASYNC_COPY, "async_copy"},
  };
  py::list out;
  for (const auto& [bit, name] : names) {
    if (caps & bit) {
      out.append(name);
    }
  }
  return out;
}

const char* memory_format_name(int32_t fmt) {
  switch (fmt) {
    case TFL_MEMORY_FORMAT_CONTIGUOUS:
      return "contiguous";
    case TFL_MEMORY_FORMAT_CHANNELS_LAST:
      return "channels_last";
    default:
      return "any";
  }
}

py::dict device_dict(const DeviceInfo& d) {
  py::dict out;
  out["name"] = d.name;
  out["total_memory"] = d.total_memory;
  out["capabilities"] = capability_names(d.capabilities);
  out["memory_alignment"] = d.memory_alignment;
  out["preferred_memory_format"] = memory_format_name(d.preferred_memory_format);
  out["compute_units"] = d.compute_units;
  out["version"] = py::make_tuple(d.version_major, d.version_minor);
  return out;
}

std::vector<const TFL_CustomOpDesc*> custom_op_descs(const Plugin& plugin) {
  std::vector<const TFL_CustomOpDesc*> out;
  const TFL_KernelApi* kapi = plugin.kernels();
  if (kapi == nullptr ||
      kapi->struct_size < TFL_STRUCT_SIZE(TFL_KernelApi, Kernels_ListCustomOps) ||
      kapi->Kernels_ListCustomOps == nullptr) {
    return out;
  }
  TFL_Kernels_ListCustomOps_Args args{};
  args.struct_size = TFL_Kernels_ListCustomOps_Args_STRUCT_SIZE;
  plugin.check(kapi->Kernels_ListCustomOps(&args), "Kernels_ListCustomOps");
  for (size_t i = 0; i < args.num_ops; ++i) {
    if (args.ops[i] != nullptr && args.ops[i]->schema != nullptr && args.ops[i]->forward != nullptr) {
      out.push_back(args.ops[i]);
    }
  }
  return out;
}

py::dict plugin_dict(const Plugin& plugin) {
  py::dict out;
  out["path"] = plugin.path();
  out["name"] = plugin.name();
  out["vendor"] = plugin.vendor();
  out["version"] = plugin.version();
  out["device_type"] = plugin.device_type();
  out["description"] = plugin.description();
  out["abi"] = py::make_tuple(plugin.api().abi_major, plugin.api().abi_minor);
  py::list devices;
  for (int d = 0; d < plugin.device_count(); ++d) {
    devices.append(device_dict(plugin.device(d)));
  }
  out["devices"] = devices;
  py::list peers;
  for (int d = 0; d < plugin.device_count(); ++d) {
    py::list row;
    for (int p = 0; p < plugin.device_count(); ++p) {
      row.append(d == p || plugin.has_peer_access(d, p));
    }
    peers.append(row);
  }
  out["peer_access"] = peers;
  const TFL_Api& api = plugin.api();
  auto has = [&](size_t needed, const void* table) {
    return api.struct_size >= needed && table != nullptr;
  };
  py::dict groups;
  groups["kernels"] = has(TFL_STRUCT_SIZE(TFL_Api, kernels), api.kernels);
  groups["collectives"] = has(TFL_STRUCT_SIZE(TFL_Api, collectives), api.collectives);
  groups["graph"] = has(TFL_STRUCT_SIZE(TFL_Api, graph), api.graph);
  groups["tunables"] = has(TFL_STRUCT_SIZE(TFL_Api, tunables), api.tunables);
  out["groups"] = groups;
  py::list symbols;
  for (const SymbolKernel& s : plugin.symbol_kernels()) {
    symbols.append(s.symbol);
  }
  out["symbol_kernels"] = symbols;
  py::list customs;
  for (const TFL_CustomOpDesc* desc : custom_op_descs(plugin)) {
    py::dict c;
    c["schema"] = desc->schema;
    c["has_backward"] = desc->backward != nullptr;
    c["num_outputs"] = desc->num_outputs;
    py::list like;
    for (size_t i = 0; i < desc->num_outputs; ++i) {
      like.append(desc->output_like[i]);
    }
    c["output_like"] = like;
    customs.append(c);
  }
  out["custom_ops"] = customs;
  return out;
}

py::dict stat_dict(const c10::CachingAllocator::StatArray& stats) {
  static const char* pools[] = {"all", "small_pool", "large_pool"};
  py::dict out;
  for (size_t i = 0; i < stats.size(); ++i) {
    py::dict s;
    s["current"] = stats[i].current;
    s["peak"] = stats[i].peak;
    s["allocated"] = stats[i].allocated;
    s["freed"] = stats[i].freed;
    out[pools[i]] = s;
  }
  return out;
}

struct Libraries {
  std::unique_ptr<torch::Library> aten;
  std::unique_ptr<torch::Library> fallback;
  std::unique_ptr<torch::Library> autocast;
  std::unique_ptr<torch::Library> autocast_fallthrough;
  std::unique_ptr<torch::Library> conjugate;
  std::unique_ptr<torch::Library> negative;
};

Libraries& libraries() {
  static auto* libs = new Libraries();
  return *libs;
}

// Python callables for the decomposition step of the fallback chain
// (torch_fl._decomp); the decisions are kept by fallback.cpp.
struct PyDecomposer {
  py::object exists; // (op_name) -> bool
  py::object usable; // (op_name, args, kwargs) -> bool
  py::object run;    // (op_name, args, kwargs) -> result
};

PyDecomposer*& py_decomposer() {
  static PyDecomposer* d = nullptr;
  return d;
}

// The operator's arguments on the stack as Python (positional, keyword).
std::pair<py::tuple, py::dict> py_arguments(const c10::FunctionSchema& schema,
                                            const torch::jit::Stack& stack) {
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(stack, nargs);
  py::list pos;
  py::dict kwargs;
  for (size_t i = 0; i < nargs; ++i) {
    py::object value = torch::jit::toPyObject(args[i]);
    const c10::Argument& arg = schema.arguments()[i];
    if (arg.kwarg_only()) {
      kwargs[py::str(arg.name())] = value;
    } else {
      pos.append(value);
    }
  }
  return {py::tuple(pos), kwargs};
}

bool decomposition_exists(const std::string& op) {
  py::gil_scoped_acquire gil;
  PyDecomposer* d = py_decomposer();
  return d != nullptr && d->exists(op).cast<bool>();
}

bool decomposition_usable(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  py::gil_scoped_acquire gil;
  PyDecomposer* d = py_decomposer();
  if (d == nullptr) {
    return false;
  }
  auto [pos, kwargs] = py_arguments(op.schema(), stack);
  return d->usable(c10::toString(op.schema().operator_name()), pos, kwargs).cast<bool>();
}

void run_decomposition(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  PyDecomposer* d = py_decomposer();
  TORCH_INTERNAL_ASSERT(d != nullptr, "no decomposer installed");
  const c10::FunctionSchema& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  auto [pos, kwargs] = py_arguments(schema, *stack);
  py::object value = d->run(c10::toString(schema.operator_name()), pos, kwargs);
  // None for a Tensor return is an undefined tensor (e.g. a gradient not asked for).
  auto convert = [](py::handle obj, const c10::TypePtr& type) -> c10::IValue {
    if (obj.is_none() && type->kind() == c10::TypeKind::TensorType) {
      return at::Tensor();
    }
    return torch::jit::toIValue(obj, type);
  };
  std::vector<c10::IValue> returns;
  const auto& rets = schema.returns();
  if (rets.size() == 1) {
    returns.push_back(convert(value, rets[0].real_type()));
  } else if (!rets.empty()) {
    py::tuple tuple = value.cast<py::tuple>();
    TORCH_CHECK(
        tuple.size() == rets.size(), "decomposition of ", schema.name(), " returned ",
        tuple.size(), " values, expected ", rets.size());
    for (size_t i = 0; i < rets.size(); ++i) {
      returns.push_back(convert(tuple[i], rets[i].real_type()));
    }
  }
  torch::jit::drop(*stack, nargs);
  for (auto& r : returns) {
    stack->push_back(std::move(r));
  }
}

py::dict register_backend(const std::vector<std::string>& disabled_list) {
  Plugin& plugin = active_plugin();
  const std::set<std::string> disabled(disabled_list.begin(), disabled_list.end());
  StreamRegistry::get().init(plugin.device_count());
  CachingAllocator::get().init(plugin.device_count());
  register_allocator();
  register_device_guard();
  register_hooks();
  register_profiler_stubs();
  register_kernel_trace();

  Libraries& libs = libraries();
  libs.aten = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  register_minimal_ops(*libs.aten);
  libs.conjugate = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Conjugate, __FILE__, __LINE__);
  libs.negative = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Negative, __FILE__, __LINE__);
  register_math_bit_fallthroughs(*libs.conjugate, *libs.negative);
  KernelRegistration report = register_plugin_kernels(plugin, disabled);
  install_plugin_kernels(report.factory_kernels);
  libs.fallback = std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  register_fallback(*libs.fallback);
  // Everything that only an op on a device tensor reaches (autocast included:
  // its key comes from the tensors) waits for the device's first use
  // (first_use.h).
  defer_to_first_use([kernels = std::move(report.kernels), native = report.registered] {
    install_plugin_kernels(kernels);
    Libraries& libs = libraries();
    register_rule_kernels(*libs.aten, native);
    libs.autocast = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
    register_autocast(*libs.autocast);
    // Ops without an autocast rule run unchanged, as PyTorch does for its own devices.
    libs.autocast_fallthrough = std::make_unique<torch::Library>(
        torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
    libs.autocast_fallthrough->fallback(torch::CppFunction::makeFallthrough());
  });

  py::dict out;
  out["registered"] = report.registered;
  py::list rejected;
  for (const auto& [name, reason] : report.rejected) {
    rejected.append(py::make_tuple(name, reason));
  }
  out["rejected"] = rejected;
  py::list adapted;
  for (const auto& [name, what] : report.adapted) {
    adapted.append(py::make_tuple(name, what));
  }
  out["adapted"] = adapted;
  out["warnings"] = report.warnings;
  return out;
}

void register_custom_kernel_py(
    const std::string& qualified_name,
    int64_t index,
    bool backward,
    const std::vector<int32_t>& output_like) {
  Plugin& plugin = active_plugin();
  const auto descs = custom_op_descs(plugin);
  TORCH_CHECK(
      index >= 0 && static_cast<size_t>(index) < descs.size(),
      "custom op index ", index, " out of range");
  const TFL_CustomOpDesc* desc = descs[index];
  register_custom_kernel(
      qualified_name, backward ? desc->backward : desc->forward, desc->user_data,
      desc->dtypes, desc->flags | TFL_KERNEL_NO_DERIVED_VARIANTS, output_like);
}

void shutdown() {
  Plugin* plugin = active_plugin_or_null();
  if (plugin == nullptr || plugin->is_shut_down()) {
    return;
  }
  for (int d = 0; d < plugin->device_count(); ++d) {
    TFL_Device_Synchronize_Args args{};
    args.struct_size = TFL_Device_Synchronize_Args_STRUCT_SIZE;
    args.device = d;
    plugin->consume(plugin->device_api().Device_Synchronize(&args));
  }
  CachingAllocator::get().release_all();
  HostAllocator::get().empty_cache();
  StreamRegistry::get().destroy_all();
  plugin->shutdown();
}

py::list op_stats_rows(const std::vector<OpStatsRow>& rows) {
  py::list out;
  for (const OpStatsRow& r : rows) {
    out.append(py::make_tuple(
        r.op, r.dtype, r.calls[0], r.calls[1], r.calls[2], r.calls[3], r.time_ns, r.bytes_copied,
        r.plugin_ns));
  }
  return out;
}

c10::Stream stream_from(int64_t stream_id, int64_t device_index) {
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_index)),
      stream_id);
}

} // namespace

std::vector<BindingFn>& binding_functions() {
  static std::vector<BindingFn> functions;
  return functions;
}

} // namespace torch_fl::bridge

PYBIND11_MODULE(_C, m) {
  using namespace torch_fl::bridge;
  m.doc() = "torch-fl bridge: plugin loading, devices, memory, op path and fallback";

  m.def("abi_version", [] { return py::make_tuple(TFL_ABI_MAJOR, TFL_ABI_MINOR); });

  m.def(
      "load_plugin",
      [](const std::string& path, const std::map<std::string, std::string>& options) -> py::tuple {
        try {
          set_active_plugin(Plugin::load(path, options));
          return py::make_tuple(true, "", "", plugin_dict(active_plugin()));
        } catch (const LoadError& e) {
          return py::make_tuple(false, load_error_kind(e.kind()), e.what(), py::none());
        }
      },
      py::arg("path"), py::arg("options"));
  m.def("has_plugin", [] { return active_plugin_or_null() != nullptr; });
  m.def("plugin_info", [] { return plugin_dict(active_plugin()); });
  m.def("register_backend", &register_backend, py::arg("disabled"));
  // What registering left for the device's first use (first_use.h), done now:
  // for whoever reads the dispatcher's tables before the device is used.
  m.def("install_deferred", [] { on_first_use(); });
  m.def("first_use_pending", &first_use_pending);
  m.def("shutdown", &shutdown);

  m.def("device_count", [] {
    Plugin* plugin = active_plugin_or_null();
    return plugin ? plugin->device_count() : 0;
  });
  m.def("current_device", [] { return static_cast<int>(current_device()); });
  m.def("set_device", [](int device) { set_current_device(static_cast<c10::DeviceIndex>(device)); });
  m.def("synchronize", [](int device) {
    py::gil_scoped_release release;
    synchronize_device(static_cast<c10::DeviceIndex>(device));
  });
  m.def("current_stream", [](int device) {
    const c10::Stream s = StreamRegistry::get().current(static_cast<c10::DeviceIndex>(device));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()), static_cast<int>(s.device_type()));
  });
  m.def("default_stream", [](int device) {
    const c10::Stream s = StreamRegistry::get().default_stream(static_cast<c10::DeviceIndex>(device));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()), static_cast<int>(s.device_type()));
  });
  m.def("set_stream", [](int64_t stream_id, int64_t device_index) {
    StreamRegistry::get().exchange(stream_from(stream_id, device_index));
  });

  m.def("memory_stats", [](int device) {
    const auto stats = CachingAllocator::get().getDeviceStats(static_cast<c10::DeviceIndex>(device));
    py::dict out;
    out["allocation"] = stat_dict(stats.allocation);
    out["segment"] = stat_dict(stats.segment);
    out["active"] = stat_dict(stats.active);
    out["inactive_split"] = stat_dict(stats.inactive_split);
    out["allocated_bytes"] = stat_dict(stats.allocated_bytes);
    out["reserved_bytes"] = stat_dict(stats.reserved_bytes);
    out["active_bytes"] = stat_dict(stats.active_bytes);
    out["inactive_split_bytes"] = stat_dict(stats.inactive_split_bytes);
    out["requested_bytes"] = stat_dict(stats.requested_bytes);
    out["num_alloc_retries"] = stats.num_alloc_retries;
    out["num_ooms"] = stats.num_ooms;
    out["num_device_alloc"] = stats.num_device_alloc;
    out["num_device_free"] = stats.num_device_free;
    return out;
  });
  m.def("reset_peak_memory_stats", [](int device) {
    CachingAllocator::get().resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
  m.def("reset_accumulated_memory_stats", [](int device) {
    CachingAllocator::get().resetAccumulatedStats(static_cast<c10::DeviceIndex>(device));
  });
  m.def("empty_cache", [] {
    py::gil_scoped_release release;
    CachingAllocator::get().emptyCache();
  });
  m.def("host_empty_cache", [] { HostAllocator::get().empty_cache(); });
  m.def("mem_get_info", [](int device) {
    return CachingAllocator::get().getMemoryInfo(static_cast<c10::DeviceIndex>(device));
  });

  m.def("default_generator", [](int device) {
    const at::Generator& gen = default_generator(static_cast<c10::DeviceIndex>(device));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
  });

  m.def("op_stats", [] { return op_stats_rows(op_stats_snapshot()); });
  m.def("op_stats_reset", &op_stats_reset);
  m.def("op_stats_setup_ns", &setup_ns);
  m.def("op_stats_scope_begin", &op_stats_scope_begin);
  m.def("op_stats_scope_end", [](uint64_t id) { return op_stats_rows(op_stats_scope_end(id)); });
  m.def("set_fallback_mode", [](const std::string& mode) {
    if (mode == "warn") {
      set_fallback_mode(FallbackMode::Warn);
    } else if (mode == "silent") {
      set_fallback_mode(FallbackMode::Silent);
    } else if (mode == "error") {
      set_fallback_mode(FallbackMode::Error);
    } else {
      throw py::value_error(
          "fallback mode must be 'warn', 'silent' or 'error', got '" + mode + "'");
    }
  });
  m.def("fallback_mode", [] {
    switch (fallback_mode()) {
      case FallbackMode::Silent:
        return "silent";
      case FallbackMode::Error:
        return "error";
      default:
        return "warn";
    }
  });
  m.def("set_decomposer", [](py::object exists, py::object usable, py::object run) {
    if (py_decomposer() == nullptr) {
      py_decomposer() = new PyDecomposer();
    }
    py_decomposer()->exists = std::move(exists);
    py_decomposer()->usable = std::move(usable);
    py_decomposer()->run = std::move(run);
    set_decomposer({&decomposition_exists, &decomposition_usable, &run_decomposition});
  });
  m.def("bridge_ops", [] { return minimal_op_names(); });
  m.def("cpp_meta_ops", &cpp_meta_ops);
  m.def("native_kernels", [] {
    py::dict out;
    for (const auto& [name, mask] : native_kernel_table()) {
      py::list dtypes;
      for (int32_t d = 0; d < 64; ++d) {
        if (mask & TFL_DTYPE_BIT(d)) {
          const c10::ScalarType t = from_tfl_dtype(d);
          if (t != c10::ScalarType::Undefined) {
            dtypes.append(std::string(c10::getDtypeNames(t).first));
          }
        }
      }
      out[py::str(name)] = dtypes;
    }
    return out;
  });
  m.def("has_native_kernel", [](const std::string& op, py::object dtype) {
    const c10::ScalarType t = torch::python::detail::py_object_to_dtype(dtype);
    return has_native_kernel(op, t);
  });
  m.def("set_meta_cache_enabled", &set_meta_cache_enabled);
  m.def("register_custom_kernel", &register_custom_kernel_py);
  for (BindingFn bind : binding_functions()) {
    bind(m);
  }
}
