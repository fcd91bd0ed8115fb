// The graph group of the plugin ABI, bridge side: a region described from
// Python (torch_fl.compile) becomes a TFL_Graph offered to the plugin's
// Graph_Compile; an accepted region is a GraphExecutable that runs on the
// current stream of its device and is destroyed with its Python object.
#include "bindings.h"
#include "kernel_abi.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace torch_fl::bridge {

namespace {

const TFL_GraphApi* graph_api(const Plugin& plugin) {
  const TFL_Api& api = plugin.api();
  if (!TFL_HAS_FIELD(&api, TFL_Api, graph) || api.graph == nullptr) {
    return nullptr;
  }
  const TFL_GraphApi* g = api.graph;
  if (g->struct_size < TFL_GraphApi_STRUCT_SIZE || g->Graph_Compile == nullptr ||
      g->Graph_Execute == nullptr || g->Graph_Destroy == nullptr) {
    return nullptr;
  }
  return g;
}

const TFL_GraphApi& require_graph_api(const Plugin& plugin) {
  const TFL_GraphApi* g = graph_api(plugin);
  TORCH_CHECK(
      g != nullptr,
      "plugin '", plugin.name(),
      "' has no graph compiler (its TFL_Api.graph table is absent or incomplete); "
      "check torch_fl._C.graph_available() before offering regions");
  return *g;
}

// What the region declared for one execution operand.
struct Declared {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
};

// Storage for one TFL_Graph while it is offered: every pointer in the graph
// points into these vectors.
struct GraphBuilder {
  std::vector<std::vector<int64_t>> value_sizes, value_strides;
  std::vector<TFL_GraphValue> values;
  std::vector<const TFL_GraphValue*> value_ptrs;
  std::vector<std::string> ops, strings;
  std::vector<std::vector<TFL_Value>> args;
  std::vector<std::vector<int64_t>> int_lists;
  std::vector<std::vector<double>> double_lists;
  std::vector<std::vector<uint8_t>> bool_lists;
  std::vector<std::vector<int32_t>> node_outputs;
  std::vector<TFL_GraphNode> nodes;
  std::vector<const TFL_GraphNode*> node_ptrs;
  std::vector<int32_t> inputs, outputs;
};

int32_t value_dtype(const py::handle& obj, size_t index) {
  const c10::ScalarType t = torch::python::detail::py_object_to_dtype(py::reinterpret_borrow<py::object>(obj));
  const int32_t d = to_tfl_dtype(t);
  TORCH_CHECK(d >= 0, "graph value ", index, " has dtype ", t, ", which the plugin ABI cannot describe");
  return d;
}

// One argument: (tag, payload) with tag one of ref, int, double, bool, none,
// ints, doubles, bools, str, dtype, memory_format, layout, device.
TFL_Value convert_arg(GraphBuilder& b, const py::handle& item, const std::string& op) {
  auto tuple = py::reinterpret_borrow<py::tuple>(item);
  TORCH_CHECK(tuple.size() == 2, "graph node ", op, ": an argument must be a (tag, payload) pair");
  const std::string tag = tuple[0].cast<std::string>();
  py::handle payload = tuple[1];
  TFL_Value v{};
  if (tag == "ref") {
    v.tag = TFL_VALUE_GRAPH_REF;
    v.v.i = payload.cast<int64_t>();
  } else if (tag == "int") {
    v.tag = TFL_VALUE_INT;
    v.v.i = payload.cast<int64_t>();
  } else if (tag == "double") {
    v.tag = TFL_VALUE_DOUBLE;
    v.v.d = payload.cast<double>();
  } else if (tag == "bool") {
    v.tag = TFL_VALUE_BOOL;
    v.v.i = payload.cast<bool>() ? 1 : 0;
  } else if (tag == "none") {
    v.tag = TFL_VALUE_NONE;
  } else if (tag == "ints") {
    b.int_lists.push_back(payload.cast<std::vector<int64_t>>());
    v.tag = TFL_VALUE_INT_LIST;
    v.v.ints.data = b.int_lists.back().data();
    v.v.ints.size = b.int_lists.back().size();
  } else if (tag == "doubles") {
    b.double_lists.push_back(payload.cast<std::vector<double>>());
    v.tag = TFL_VALUE_DOUBLE_LIST;
    v.v.doubles.data = b.double_lists.back().data();
    v.v.doubles.size = b.double_lists.back().size();
  } else if (tag == "bools") {
    std::vector<uint8_t> bools;
    for (py::handle x : payload) {
      bools.push_back(x.cast<bool>() ? 1 : 0);
    }
    b.bool_lists.push_back(std::move(bools));
    v.tag = TFL_VALUE_BOOL_LIST;
    v.v.bools.data = b.bool_lists.back().data();
    v.v.bools.size = b.bool_lists.back().size();
  } else if (tag == "str") {
    b.strings.push_back(payload.cast<std::string>());
    v.tag = TFL_VALUE_STRING;
    v.v.str.data = b.strings.back().c_str();
    v.v.str.size = b.strings.back().size();
  } else if (tag == "dtype") {
    v.tag = TFL_VALUE_SCALAR_TYPE;
    v.v.i = value_dtype(payload, 0);
  } else if (tag == "memory_format") {
    v.tag = TFL_VALUE_MEMORY_FORMAT;
    v.v.i = payload.cast<int64_t>();
  } else if (tag == "layout") {
    v.tag = TFL_VALUE_LAYOUT;
    v.v.i = payload.cast<int64_t>();
  } else if (tag == "device") {
    v.tag = TFL_VALUE_DEVICE;
    v.v.i = payload.cast<int64_t>();
  } else {
    TORCH_CHECK(false, "graph node ", op, ": unknown argument tag '", tag, "'");
  }
  return v;
}

class GraphExecutable {
 public:
  GraphExecutable(
      Plugin* plugin,
      TFL_Executable* handle,
      c10::DeviceIndex device,
      std::vector<Declared> inputs,
      std::vector<Declared> outputs)
      : plugin_(plugin),
        handle_(handle),
        device_(device),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {}
  GraphExecutable(const GraphExecutable&) = delete;
  GraphExecutable& operator=(const GraphExecutable&) = delete;

  ~GraphExecutable() {
    // At interpreter exit the plugin may already be shut down; its memory
    // went with it.
    Plugin* active = active_plugin_or_null();
    if (handle_ == nullptr || active != plugin_ || plugin_->is_shut_down()) {
      return;
    }
    const TFL_GraphApi* g = graph_api(*plugin_);
    if (g == nullptr) {
      return;
    }
    TFL_Graph_Destroy_Args args{};
    args.struct_size = TFL_Graph_Destroy_Args_STRUCT_SIZE;
    args.executable = handle_;
    if (TFL_Error* error = g->Graph_Destroy(&args)) {
      plugin_->consume(error); // nothing to report to from a destructor
    }
  }

  void run(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
    TORCH_CHECK(
        active_plugin_or_null() == plugin_ && !plugin_->is_shut_down(),
        "graph executable: the plugin that compiled it is no longer active");
    check("input", inputs, inputs_);
    check("output", outputs, outputs_);
    const TFL_GraphApi& g = require_graph_api(*plugin_);
    std::vector<TFL_Tensor> descs(inputs.size() + outputs.size());
    std::vector<const TFL_Tensor*> in_ptrs(inputs.size()), out_ptrs(outputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      describe(inputs[i], &descs[i]);
      in_ptrs[i] = &descs[i];
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      describe(outputs[i], &descs[inputs.size() + i]);
      out_ptrs[i] = &descs[inputs.size() + i];
    }
    TFL_Graph_Execute_Args args{};
    args.struct_size = TFL_Graph_Execute_Args_STRUCT_SIZE;
    args.executable = handle_;
    args.inputs = in_ptrs.data();
    args.num_inputs = in_ptrs.size();
    args.outputs = out_ptrs.data();
    args.num_outputs = out_ptrs.size();
    args.stream = StreamRegistry::get().current_native(device_);
    EnqueueGuard enqueuing(args.stream, device_);
    plugin_->check(g.Graph_Execute(&args), "Graph_Execute");
  }

  int device() const {
    return device_;
  }
  size_t num_inputs() const {
    return inputs_.size();
  }
  size_t num_outputs() const {
    return outputs_.size();
  }

 private:
  void check(const char* kind, const std::vector<at::Tensor>& given, const std::vector<Declared>& declared)
      const {
    TORCH_CHECK(
        given.size() == declared.size(), "graph executable: got ", given.size(), " ", kind,
        "s, the region has ", declared.size());
    for (size_t i = 0; i < given.size(); ++i) {
      const at::Tensor& t = given[i];
      const Declared& d = declared[i];
      TORCH_CHECK(
          t.device().type() == c10::DeviceType::PrivateUse1 && t.device().index() == device_,
          "graph executable: ", kind, " ", i, " is on ", t.device(), ", the region runs on device ",
          static_cast<int>(device_));
      TORCH_CHECK(
          t.scalar_type() == d.dtype, "graph executable: ", kind, " ", i, " has dtype ", t.scalar_type(),
          ", the region declared ", d.dtype);
      TORCH_CHECK(
          t.sizes() == c10::IntArrayRef(d.sizes) && t.strides() == c10::IntArrayRef(d.strides),
          "graph executable: ", kind, " ", i, " has sizes ", t.sizes(), " and strides ", t.strides(),
          ", the region declared ", c10::IntArrayRef(d.sizes), " and ", c10::IntArrayRef(d.strides));
    }
  }

  Plugin* plugin_;
  TFL_Executable* handle_;
  c10::DeviceIndex device_;
  std::vector<Declared> inputs_, outputs_;
};

// Offers one region. Returns (executable or None, decline reason, declined node).
py::tuple graph_compile(
    int device,
    const py::list& values,
    const py::list& nodes,
    const std::vector<int32_t>& inputs,
    const std::vector<int32_t>& outputs) {
  Plugin& plugin = active_plugin();
  const TFL_GraphApi& g = require_graph_api(plugin);
  check_device_index(static_cast<c10::DeviceIndex>(device));
  GraphBuilder b;
  const size_t nv = values.size();
  b.value_sizes.reserve(nv);
  b.value_strides.reserve(nv);
  b.values.resize(nv);
  std::vector<c10::ScalarType> dtypes(nv);
  for (size_t i = 0; i < nv; ++i) {
    auto v = values[i].cast<py::tuple>();
    TORCH_CHECK(v.size() == 4, "graph value ", i, " must be (kind, dtype, sizes, strides)");
    b.value_sizes.push_back(v[2].cast<std::vector<int64_t>>());
    b.value_strides.push_back(v[3].cast<std::vector<int64_t>>());
    TORCH_CHECK(
        b.value_sizes.back().size() == b.value_strides.back().size(), "graph value ", i,
        " has ", b.value_sizes.back().size(), " sizes but ", b.value_strides.back().size(), " strides");
    TFL_GraphValue& gv = b.values[i];
    gv.struct_size = TFL_GraphValue_STRUCT_SIZE;
    gv.kind = v[0].cast<int32_t>();
    gv.dtype = value_dtype(v[1], i);
    dtypes[i] = from_tfl_dtype(gv.dtype);
    gv.ndim = static_cast<int32_t>(b.value_sizes.back().size());
    gv.sizes = b.value_sizes.back().data();
    gv.strides = b.value_strides.back().data();
  }
  for (const TFL_GraphValue& gv : b.values) {
    b.value_ptrs.push_back(&gv);
  }
  const size_t nn = nodes.size();
  // Reserved up front: arguments point into these lists.
  b.ops.reserve(nn);
  b.args.reserve(nn);
  b.node_outputs.reserve(nn);
  size_t list_args = 0;
  for (py::handle n : nodes) {
    list_args += n.cast<py::tuple>()[1].cast<py::list>().size();
  }
  b.int_lists.reserve(list_args);
  b.double_lists.reserve(list_args);
  b.bool_lists.reserve(list_args);
  b.strings.reserve(list_args);
  b.nodes.resize(nn);
  for (size_t i = 0; i < nn; ++i) {
    auto n = nodes[i].cast<py::tuple>();
    TORCH_CHECK(n.size() == 3, "graph node ", i, " must be (op, args, outputs)");
    b.ops.push_back(n[0].cast<std::string>());
    std::vector<TFL_Value> args;
    for (py::handle a : n[1].cast<py::list>()) {
      args.push_back(convert_arg(b, a, b.ops.back()));
    }
    b.args.push_back(std::move(args));
    b.node_outputs.push_back(n[2].cast<std::vector<int32_t>>());
    TFL_GraphNode& gn = b.nodes[i];
    gn.struct_size = TFL_GraphNode_STRUCT_SIZE;
    gn.op = b.ops.back().c_str();
    gn.args = b.args.back().data();
    gn.num_args = b.args.back().size();
    gn.outputs = b.node_outputs.back().data();
    gn.num_outputs = b.node_outputs.back().size();
  }
  for (const TFL_GraphNode& gn : b.nodes) {
    b.node_ptrs.push_back(&gn);
  }
  b.inputs = inputs;
  b.outputs = outputs;
  for (int32_t v : inputs) {
    TORCH_CHECK(v >= 0 && static_cast<size_t>(v) < nv, "graph input refers to value ", v, " of ", nv);
  }
  for (int32_t v : outputs) {
    TORCH_CHECK(v >= 0 && static_cast<size_t>(v) < nv, "graph output refers to value ", v, " of ", nv);
  }

  TFL_Graph graph{};
  graph.struct_size = TFL_Graph_STRUCT_SIZE;
  graph.device = device;
  graph.values = b.value_ptrs.data();
  graph.num_values = b.value_ptrs.size();
  graph.nodes = b.node_ptrs.data();
  graph.num_nodes = b.node_ptrs.size();
  graph.inputs = b.inputs.data();
  graph.num_inputs = b.inputs.size();
  graph.outputs = b.outputs.data();
  graph.num_outputs = b.outputs.size();

  TFL_Graph_Compile_Args args{};
  args.struct_size = TFL_Graph_Compile_Args_STRUCT_SIZE;
  args.graph = &graph;
  args.declined_node = -1;
  plugin.check(g.Graph_Compile(&args), "Graph_Compile");
  if (!args.accepted || args.executable == nullptr) {
    const char* reason = args.decline_reason != nullptr ? args.decline_reason : "no reason given";
    return py::make_tuple(py::none(), std::string(reason), args.declined_node);
  }
  auto declared = [&](const std::vector<int32_t>& indices) {
    std::vector<Declared> out;
    for (int32_t v : indices) {
      out.push_back(Declared{dtypes[v], b.value_sizes[v], b.value_strides[v]});
    }
    return out;
  };
  auto exe = std::make_shared<GraphExecutable>(
      &plugin, args.executable, static_cast<c10::DeviceIndex>(device), declared(inputs), declared(outputs));
  return py::make_tuple(py::cast(exe), std::string(), int64_t{-1});
}

void bind(py::module_& m) {
  py::class_<GraphExecutable, std::shared_ptr<GraphExecutable>>(m, "GraphExecutable")
      .def("run", &GraphExecutable::run, py::arg("inputs"), py::arg("outputs"))
      .def_property_readonly("device", &GraphExecutable::device)
      .def_property_readonly("num_inputs", &GraphExecutable::num_inputs)
      .def_property_readonly("num_outputs", &GraphExecutable::num_outputs);
  m.def("graph_available", [] {
    Plugin* plugin = active_plugin_or_null();
    return plugin != nullptr && graph_api(*plugin) != nullptr;
  });
  m.def(
      "graph_compile", &graph_compile, py::arg("device"), py::arg("values"), py::arg("nodes"),
      py::arg("inputs"), py::arg("outputs"));
}

TFL_REGISTER_BINDINGS(bind);

} // namespace

} // namespace torch_fl::bridge
