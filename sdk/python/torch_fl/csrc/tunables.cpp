// The tunables group seen from Python: list a plugin's tunable parameters,
// read and set them, and run the plugin's probe for one candidate. The
// probing policy (which candidates, how often, the cache) lives in
// torch_fl.tooling.probe.
#include "bindings.h"
#include "loaded_plugin.h"

#include <pybind11/stl.h>

#include <string>

namespace py = pybind11;

namespace torch_fl::bridge {
namespace {

// The table when the plugin has it; nullptr otherwise.
const TFL_TunablesApi* tunables_table(const Plugin& plugin) {
  const TFL_Api& api = plugin.api();
  if (api.struct_size < TFL_STRUCT_SIZE(TFL_Api, tunables)) {
    return nullptr;
  }
  return api.tunables;
}

// The table with `fn` present, or a NotImplementedError that says which
// function the plugin lacks.
template <class Fn>
const TFL_TunablesApi& require(const Plugin& plugin, size_t needed, Fn TFL_TunablesApi::*fn, const char* what) {
  const TFL_TunablesApi* table = tunables_table(plugin);
  TORCH_CHECK_NOT_IMPLEMENTED(
      table != nullptr,
      "plugin '", plugin.name(), "' has no tunables group (TFL_Api.tunables is NULL): it exposes nothing to probe");
  TORCH_CHECK_NOT_IMPLEMENTED(
      table->struct_size >= needed && table->*fn != nullptr,
      "plugin '", plugin.name(), "' has a tunables group without ", what);
  return *table;
}

void check_device(const Plugin& plugin, int device) {
  TORCH_CHECK_INDEX(
      device >= 0 && device < plugin.device_count(),
      "device index ", device, " is out of range: plugin '", plugin.name(), "' has ", plugin.device_count(),
      " device(s)");
}

bool has_tunables() {
  const Plugin* plugin = active_plugin_or_null();
  return plugin != nullptr && tunables_table(*plugin) != nullptr;
}

py::list list_tunables(int device) {
  const Plugin& plugin = active_plugin();
  check_device(plugin, device);
  const TFL_TunablesApi& t = require(
      plugin, TFL_STRUCT_SIZE(TFL_TunablesApi, Tunables_List), &TFL_TunablesApi::Tunables_List, "Tunables_List");
  TFL_Tunables_List_Args args{};
  args.struct_size = TFL_Tunables_List_Args_STRUCT_SIZE;
  args.device = device;
  plugin.check(t.Tunables_List(&args), "Tunables_List");
  py::list out;
  for (size_t i = 0; i < args.num_tunables; ++i) {
    const TFL_Tunable* tun = args.tunables != nullptr ? args.tunables[i] : nullptr;
    // A struct shorter than 1.0's or without a name cannot be addressed by Get/Set.
    if (tun == nullptr || tun->struct_size < TFL_Tunable_STRUCT_SIZE || tun->name == nullptr) {
      continue;
    }
    py::dict d;
    d["name"] = std::string(tun->name);
    d["description"] = std::string(tun->description != nullptr ? tun->description : "");
    py::list candidates;
    for (size_t c = 0; tun->candidates != nullptr && c < tun->num_candidates; ++c) {
      candidates.append(tun->candidates[c]);
    }
    d["candidates"] = candidates;
    d["default"] = tun->default_value;
    out.append(d);
  }
  return out;
}

int64_t get_tunable(int device, const std::string& name) {
  const Plugin& plugin = active_plugin();
  check_device(plugin, device);
  const TFL_TunablesApi& t = require(
      plugin, TFL_STRUCT_SIZE(TFL_TunablesApi, Tunables_Get), &TFL_TunablesApi::Tunables_Get, "Tunables_Get");
  TFL_Tunables_Value_Args args{};
  args.struct_size = TFL_Tunables_Value_Args_STRUCT_SIZE;
  args.device = device;
  args.name = name.c_str();
  plugin.check(t.Tunables_Get(&args), "Tunables_Get(" + name + ")");
  return args.value;
}

void set_tunable(int device, const std::string& name, int64_t value) {
  const Plugin& plugin = active_plugin();
  check_device(plugin, device);
  const TFL_TunablesApi& t = require(
      plugin, TFL_STRUCT_SIZE(TFL_TunablesApi, Tunables_Set), &TFL_TunablesApi::Tunables_Set, "Tunables_Set");
  TFL_Tunables_Value_Args args{};
  args.struct_size = TFL_Tunables_Value_Args_STRUCT_SIZE;
  args.device = device;
  args.name = name.c_str();
  args.value = value;
  plugin.check(t.Tunables_Set(&args), "Tunables_Set(" + name + "=" + std::to_string(value) + ")");
}

double probe_tunable(int device, const std::string& name, int64_t value) {
  const Plugin& plugin = active_plugin();
  check_device(plugin, device);
  const TFL_TunablesApi& t = require(
      plugin, TFL_STRUCT_SIZE(TFL_TunablesApi, Tunables_Probe), &TFL_TunablesApi::Tunables_Probe,
      "Tunables_Probe");
  TFL_Tunables_Probe_Args args{};
  args.struct_size = TFL_Tunables_Probe_Args_STRUCT_SIZE;
  args.device = device;
  args.name = name.c_str();
  args.value = value;
  TFL_Error* error = nullptr;
  {
    // A probe runs real work for milliseconds: let other Python threads go on.
    py::gil_scoped_release release;
    error = t.Tunables_Probe(&args);
  }
  plugin.check(error, "Tunables_Probe(" + name + "=" + std::to_string(value) + ")");
  TORCH_CHECK(
      args.seconds > 0.0, "plugin '", plugin.name(), "': Tunables_Probe(", name, "=", value,
      ") reported ", args.seconds, " seconds; a probe must report the positive time it took");
  return args.seconds;
}

void bind(py::module_& m) {
  m.def("has_tunables", &has_tunables);
  m.def("tunables_list", &list_tunables, py::arg("device"));
  m.def("tunables_get", &get_tunable, py::arg("device"), py::arg("name"));
  m.def("tunables_set", &set_tunable, py::arg("device"), py::arg("name"), py::arg("value"));
  m.def("tunables_probe", &probe_tunable, py::arg("device"), py::arg("name"), py::arg("value"));
}

TFL_REGISTER_BINDINGS(bind);

} // namespace
} // namespace torch_fl::bridge
