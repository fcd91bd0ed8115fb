#include "kernel_registration.h"

#include "copy.h"
#include "kernel_abi.h"
#include "minimal_ops.h"
#include "native_kernel.h"
#include "schema_guard.h"
#include "signature.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>

namespace torch_fl::bridge {

namespace {

struct NativeTable {
  std::shared_mutex mutex;
  std::map<std::string, uint64_t> dtypes; // schema name -> dtype mask
};

NativeTable& native_table() {
  static auto* table = new NativeTable();
  return *table;
}

// 'a', 'b'
std::string quoted(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& n : names) {
    text += (text.empty() ? "'" : ", '") + n + "'";
  }
  return text;
}

std::optional<c10::OperatorHandle> find_op(const std::string& op) {
  return c10::Dispatcher::singleton().findOp(operator_name_of(op));
}

// Resolves torch_fl_op_<suffix> to a schema name by asking the dispatcher
// which split of the suffix into <name>_<overload> exists.
std::string resolve_symbol(const std::string& suffix, std::string* why) {
  std::vector<std::string> matches;
  auto exists = [](const std::string& name, const std::string& overload) {
    return c10::Dispatcher::singleton()
        .findOp(c10::OperatorName("aten::" + name, overload))
        .has_value();
  };
  if (exists(suffix, "")) {
    matches.push_back("aten::" + suffix);
  }
  for (size_t pos = suffix.find('_', 1); pos != std::string::npos;
       pos = suffix.find('_', pos + 1)) {
    const std::string name = suffix.substr(0, pos);
    const std::string overload = suffix.substr(pos + 1);
    if (!overload.empty() && exists(name, overload)) {
      matches.push_back("aten::" + name + "." + overload);
    }
  }
  if (matches.size() == 1) {
    return matches[0];
  }
  if (matches.empty()) {
    *why = "no aten operator matches; expected torch_fl_op_<name>_<overload>, e.g. "
           "torch_fl_op_add_Tensor for aten::add.Tensor";
  } else {
    *why = "it is ambiguous between";
    for (const auto& m : matches) {
      *why += " " + m;
    }
  }
  return "";
}

// The registrations of plugin kernels, kept for the life of the process as
// torch::Library keeps its own. Registering with the dispatcher directly
// skips torch::Library::impl's parse of the name the operator handle already
// holds (about a third of registering a plugin's kernels).
std::vector<c10::RegistrationHandleRAII>& kernel_registrations() {
  static auto* handles = new std::vector<c10::RegistrationHandleRAII>();
  return *handles;
}

void record_native(const std::string& name, uint64_t dtypes) {
  std::unique_lock<std::shared_mutex> lock(native_table().mutex);
  native_table().dtypes[name] = dtypes;
}

void serve(const c10::OperatorName& op, c10::KernelFunction kernel) {
  kernel_registrations().push_back(c10::Dispatcher::singleton().registerImpl(
      op, c10::DispatchKey::PrivateUse1, std::move(kernel), std::nullopt, nullptr,
      "torch-fl plugin kernel"));
}

// Whether an op can reach the device's kernel slot before any tensor lives on
// the device: it takes no tensor it must be given, and a device or generator
// argument routes it there (randperm). The kernels of all other ops are only
// reached with a device tensor, which the first allocation made.
bool dispatches_without_tensors(const c10::FunctionSchema& schema) {
  for (const c10::Argument& arg : schema.arguments()) {
    const c10::TypePtr& type = arg.type();
    if (type->kind() == c10::TypeKind::TensorType ||
        (type->kind() == c10::TypeKind::ListType &&
         type->containedType(0)->kind() == c10::TypeKind::TensorType)) {
      return false;
    }
  }
  return true;
}

void register_one(
    const KernelSpec& spec,
    const c10::OperatorHandle& handle,
    Signature sig,
    std::optional<c10::OperatorHandle> functional,
    KernelRegistration& report) {
  const std::string name = sig.name;
  if (!sig.unsupported.empty()) {
    report.rejected.emplace_back(name, "cannot be served by a kernel: " + sig.unsupported);
    return;
  }
  KernelSpec own = spec;
  own.op = name;
  HiddenArgs hidden = HiddenArgs::locate(spec.hidden, handle.schema());
  if (functional.has_value() && !hidden.empty()) {
    report.adapted.emplace_back(
        name, "served by the kernel of " + spec.op + ", which does not receive " + quoted(hidden.names));
  }
  record_native(name, spec.dtypes);
  // The kernel object itself is made when it goes into the dispatcher.
  (dispatches_without_tensors(handle.schema()) ? report.factory_kernels : report.kernels).push_back(
      {handle.operator_name(),
       [own = std::move(own), sig = std::move(sig), functional = std::move(functional),
        hidden = std::move(hidden)] {
         return c10::KernelFunction::makeFromBoxedFunctor(
             std::make_unique<NativeKernel>(own, sig, functional, std::vector<int32_t>{}, hidden));
       }});
  report.registered.push_back(name);
}

bool is_composite_implicit(const c10::OperatorHandle& handle) {
  return handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
}

// c10::toString(schema), through one stream for every kernel: making a
// stream costs more than formatting a schema into it.
std::string schema_text(const c10::FunctionSchema& schema) {
  static thread_local std::ostringstream os;
  os.str(std::string());
  os.clear();
  os << schema;
  return os.str();
}

// The schema guard: false (with the reason and a warning in `report`) when
// the kernel was written for a schema this PyTorch does not have.
bool guard_schema(KernelSpec& spec, const c10::OperatorHandle& handle, KernelRegistration& report) {
  if (spec.schema.empty()) {
    return true;
  }
  const std::string running = schema_text(handle.schema());
  if (spec.schema == running) {
    return true; // PyTorch's own text: nothing to parse
  }
  const SchemaMatch match = match_schema(spec.schema, handle.schema());
  if (match.kind == SchemaMatch::Kind::Refused) {
    const std::string why = "it was written for '" + spec.schema + "', and this PyTorch has '" +
        running + "' (" + match.reason + "); it runs on the fallback chain until the plugin states "
        "the new schema";
    report.rejected.emplace_back(spec.op, why);
    report.warnings.push_back("the plugin's kernel for " + spec.op + " is not registered: " + why);
    return false;
  }
  if (match.kind == SchemaMatch::Kind::Adapted) {
    spec.hidden = match.added;
    report.adapted.emplace_back(
        spec.op, "written for '" + spec.schema + "'; this PyTorch adds " + quoted(match.added) +
            ", which the kernel does not receive: calls that pass a non-default value fall back");
  }
  return true;
}

} // namespace

KernelRegistration register_plugin_kernels(
    const Plugin& plugin,
    const std::set<std::string>& disabled) {
  KernelRegistration report;
  std::vector<KernelSpec> specs;
  std::set<std::string> seen;

  if (const TFL_KernelApi* kapi = plugin.kernels()) {
    if (kapi->struct_size >= TFL_STRUCT_SIZE(TFL_KernelApi, Kernels_List) && kapi->Kernels_List) {
      TFL_Kernels_List_Args list{};
      list.struct_size = TFL_Kernels_List_Args_STRUCT_SIZE;
      plugin.check(kapi->Kernels_List(&list), "Kernels_List");
      for (size_t i = 0; i < list.num_kernels; ++i) {
        const TFL_KernelDesc* desc = list.kernels[i];
        if (desc == nullptr || desc->op == nullptr || desc->fn == nullptr) {
          report.rejected.emplace_back(
              "<entry " + std::to_string(i) + ">", "kernel descriptor without op name or function");
          continue;
        }
        std::string op = desc->op;
        if (op == "aten::copy_") {
          set_copy_kernel(desc);
          report.registered.push_back(op + " (used for device copies)");
          continue;
        }
        KernelSpec spec;
        spec.op = op;
        spec.fn = desc->fn;
        spec.user_data = desc->user_data;
        spec.dtypes = desc->dtypes;
        spec.flags = desc->flags;
        if (TFL_HAS_FIELD(desc, TFL_KernelDesc, preferred_memory_format)) {
          spec.memory_format = desc->preferred_memory_format;
        }
        if (TFL_HAS_FIELD(desc, TFL_KernelDesc, schema) && desc->schema != nullptr) {
          spec.schema = desc->schema;
        }
        if (seen.insert(op).second) {
          specs.push_back(spec);
        }
      }
    }
  }
  for (const SymbolKernel& sym : plugin.symbol_kernels()) {
    std::string why;
    const std::string op = resolve_symbol(sym.suffix, &why);
    if (op.empty()) {
      report.rejected.emplace_back(sym.symbol, why);
      continue;
    }
    if (!seen.insert(op).second) {
      continue; // the kernel table wins
    }
    KernelSpec spec;
    spec.op = op;
    spec.fn = sym.fn;
    spec.dtypes = TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32);
    spec.flags = TFL_KERNEL_SYMBOL_DEFAULT_FLAGS;
    specs.push_back(spec);
  }

  const auto& minimal = minimal_op_names();
  std::set<std::string> explicit_ops(seen.begin(), seen.end());
  std::set<std::string> done;
  std::vector<std::string> bases;
  bases.reserve(specs.size());
  for (const KernelSpec& spec : specs) {
    bases.push_back(operator_name_of(spec.op).name);
  }
  const OpNameIndex variant_names(bases);
  for (KernelSpec& spec : specs) {
    if (disabled.count(spec.op)) {
      report.rejected.emplace_back(spec.op, "disabled by TORCH_FL_DISABLE_KERNELS");
      continue;
    }
    if (std::find(minimal.begin(), minimal.end(), spec.op) != minimal.end()) {
      report.rejected.emplace_back(spec.op, "implemented by the bridge for every plugin");
      continue;
    }
    auto handle = find_op(spec.op);
    if (!handle.has_value() || !handle->hasSchema()) {
      report.rejected.emplace_back(spec.op, "no such operator is registered with PyTorch");
      continue;
    }
    if (is_composite_implicit(*handle)) {
      report.rejected.emplace_back(
          spec.op,
          "it is CompositeImplicitAutograd (PyTorch decomposes it before it reaches a "
          "device); register the operators it decomposes into");
      continue;
    }
    if (!guard_schema(spec, *handle, report)) {
      continue;
    }
    Signature sig = analyze(handle->schema());
    const bool functional = sig.variant == TFL_VARIANT_FUNCTIONAL;
    register_one(spec, *handle, std::move(sig), std::nullopt, report);
    done.insert(spec.op);
    if ((spec.flags & TFL_KERNEL_NO_DERIVED_VARIANTS) || !functional) {
      continue;
    }
    for (const c10::OperatorHandle& variant : derived_variants(*handle, variant_names)) {
      const std::string vname = schema_name_of(variant.operator_name());
      if (explicit_ops.count(vname) || done.count(vname) || disabled.count(vname)) {
        continue;
      }
      register_one(spec, variant, analyze(variant.schema()), *handle, report);
      done.insert(vname);
    }
  }
  return report;
}

void register_custom_kernel(
    const std::string& qualified_name,
    TFL_KernelFn fn,
    void* user_data,
    uint64_t dtypes,
    uint32_t flags,
    std::vector<int32_t> output_like) {
  auto handle = find_op(qualified_name);
  TORCH_CHECK(
      handle.has_value() && handle->hasSchema(), "custom op ", qualified_name,
      " is not defined");
  Signature sig = analyze(handle->schema());
  TORCH_CHECK(
      sig.unsupported.empty(), "custom op ", qualified_name,
      " cannot be served by a kernel: ", sig.unsupported);
  KernelSpec spec;
  spec.op = qualified_name;
  spec.fn = fn;
  spec.user_data = user_data;
  spec.dtypes = dtypes;
  spec.flags = flags;
  serve(handle->operator_name(),
        c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<NativeKernel>(
            spec, std::move(sig), std::nullopt, std::move(output_like))));
  record_native(qualified_name, dtypes);
}

void install_plugin_kernels(const std::vector<PendingKernel>& kernels) {
  kernel_registrations().reserve(kernel_registrations().size() + kernels.size());
  for (const PendingKernel& kernel : kernels) {
    serve(kernel.op, kernel.make());
  }
}

bool has_native_kernel(const std::string& op, c10::ScalarType dtype) {
  std::shared_lock<std::shared_mutex> lock(native_table().mutex);
  auto it = native_table().dtypes.find(op);
  return it != native_table().dtypes.end() && (it->second & dtype_bit(dtype)) != 0;
}

std::map<std::string, uint64_t> native_kernel_table() {
  std::shared_lock<std::shared_mutex> lock(native_table().mutex);
  return native_table().dtypes;
}


} // namespace torch_fl::bridge
