// flemu's TFL_GraphApi: the graph compiler behind torch.compile(backend="torchfl").
// It accepts regions of elementwise ops (see fused_program.h) and declines
// everything else with a reason and, where one node is the cause, its index.
#ifndef FLEMU_GRAPH_GRAPH_API_H_
#define FLEMU_GRAPH_GRAPH_API_H_

#include "torch_fl/graph.h"

namespace flemu {

TFL_Error* Graph_Compile(TFL_Graph_Compile_Args* args);
TFL_Error* Graph_Execute(TFL_Graph_Execute_Args* args);
TFL_Error* Graph_Destroy(TFL_Graph_Destroy_Args* args);

}  // namespace flemu

#endif  // FLEMU_GRAPH_GRAPH_API_H_
