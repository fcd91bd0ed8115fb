/* torch-fl plugin ABI: the graph group — the plugin's graph compiler behind
 * torch.compile(backend="torchfl").
 *
 * Optional. The bridge partitions a captured graph into regions and offers
 * each region to the plugin in the small IR below. The plugin accepts a
 * region (and compiles it to an executable) or declines it with a reason;
 * declined regions run eagerly, op by op.
 *
 * The IR: a region is a list of values (typed, shaped tensors) and a list of
 * nodes in execution order. Each node names an ATen op by schema name and
 * passes its arguments as TFL_Values in schema order, where tensor arguments
 * are TFL_VALUE_GRAPH_REF values holding an index into `values`. Shapes are
 * static within one region; a new shape is a new region.
 *
 * Every schema argument is passed, keyword-only ones included, in schema
 * order, defaults filled in; an absent optional argument is TFL_VALUE_NONE.
 * Every node has exactly the outputs its schema returns. Values of kind
 * TFL_GRAPH_INTERMEDIATE never reach memory the host can see: the plugin
 * keeps them wherever it likes (registers, on-chip memory, its own scratch).
 *
 * Threading: the host compiles, executes and destroys from any thread, but
 * never calls Graph_Execute for the same stream from two threads at once
 * (the stream rule of stream.h).
 */
#ifndef TORCH_FL_GRAPH_H_
#define TORCH_FL_GRAPH_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum TFL_GraphValueKind {
  TFL_GRAPH_INPUT = 0,        /* provided at execution */
  TFL_GRAPH_OUTPUT = 1,       /* written at execution */
  TFL_GRAPH_INTERMEDIATE = 2, /* internal to the region */
  TFL_GRAPH_INPUT_OUTPUT = 3  /* an input the region mutates */
} TFL_GraphValueKind;

typedef struct TFL_GraphValue {
  size_t struct_size;
  int32_t kind;           /* TFL_GraphValueKind */
  int32_t dtype;          /* TFL_DType */
  int32_t ndim;
  const int64_t* sizes;   /* ndim entries */
  const int64_t* strides; /* ndim entries, elements; fixed for inputs/outputs */
} TFL_GraphValue;
#define TFL_GraphValue_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_GraphValue, strides)

typedef struct TFL_GraphNode {
  size_t struct_size;
  const char* op;          /* ATen schema name, e.g. "aten::mul.Tensor" */
  const TFL_Value* args;   /* schema order; tensors as TFL_VALUE_GRAPH_REF */
  size_t num_args;
  const int32_t* outputs;  /* indices into TFL_Graph.values */
  size_t num_outputs;
} TFL_GraphNode;
#define TFL_GraphNode_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_GraphNode, num_outputs)

typedef struct TFL_Graph {
  size_t struct_size;
  int32_t device;
  const TFL_GraphValue* const* values;
  size_t num_values;
  const TFL_GraphNode* const* nodes;
  size_t num_nodes;
  const int32_t* inputs;   /* value indices, in execution-argument order */
  size_t num_inputs;
  const int32_t* outputs;  /* value indices, in execution-argument order */
  size_t num_outputs;
} TFL_Graph;
#define TFL_Graph_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Graph, num_outputs)

/* Offers a region. The graph is host-owned and valid only during the call.
 *
 * Declining is not an error: the call returns NULL with accepted = 0 and a
 * reason. An error (non-NULL return) means the IR itself is malformed
 * (TFL_ERR_INVALID_ARGUMENT) or the plugin failed.
 *
 * When one node is the reason (an op or an argument the compiler does not
 * take), the plugin names it in declined_node; the host then offers what is
 * left of the region without that node, so one unsupported op does not cost
 * the whole region. The host sets declined_node to -1 before the call.
 * declined_node is part of the 1.0 layout: a plugin requires struct_size to
 * cover it, like every other field of this struct. */
typedef struct TFL_Graph_Compile_Args {
  size_t struct_size;
  const TFL_Graph* graph;     /* in */
  uint8_t accepted;           /* out: 1 = compiled, 0 = declined */
  TFL_Executable* executable; /* out: when accepted; owned by the caller until TFL_Graph_Destroy */
  const char* decline_reason; /* out: when declined; a plugin-owned string valid until the
                                 plugin is unloaded */
  int64_t declined_node;      /* in: -1; out: when declined because of one node, its index
                                 in graph->nodes; -1 when the region as a whole is declined */
} TFL_Graph_Compile_Args;
#define TFL_Graph_Compile_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Graph_Compile_Args, declined_node)
typedef TFL_Error* TFL_Graph_Compile(TFL_Graph_Compile_Args* args);

/* Enqueues one execution on `stream`. Tensors follow TFL_Tensor lifetime.
 * Inputs and outputs have the dtypes, sizes and strides the region declared
 * for them and live on TFL_Graph.device; the plugin refuses anything else
 * with TFL_ERR_INVALID_ARGUMENT. Outputs overlap neither each other nor any
 * input. An executable may be executed any number of times, on any stream of
 * its device, until it is destroyed. */
typedef struct TFL_Graph_Execute_Args {
  size_t struct_size;
  TFL_Executable* executable;       /* in */
  const TFL_Tensor* const* inputs;  /* in: TFL_Graph.num_inputs entries */
  size_t num_inputs;
  const TFL_Tensor* const* outputs; /* in: allocated by the host */
  size_t num_outputs;
  TFL_Stream* stream;               /* in */
} TFL_Graph_Execute_Args;
#define TFL_Graph_Execute_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Graph_Execute_Args, stream)
typedef TFL_Error* TFL_Graph_Execute(TFL_Graph_Execute_Args* args);

/* Frees an executable. Executions already enqueued still complete. */
typedef struct TFL_Graph_Destroy_Args {
  size_t struct_size;
  TFL_Executable* executable; /* in */
} TFL_Graph_Destroy_Args;
#define TFL_Graph_Destroy_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Graph_Destroy_Args, executable)
typedef TFL_Error* TFL_Graph_Destroy(TFL_Graph_Destroy_Args* args);

typedef struct TFL_GraphApi {
  size_t struct_size;
  TFL_Graph_Compile* Graph_Compile;
  TFL_Graph_Execute* Graph_Execute;
  TFL_Graph_Destroy* Graph_Destroy;
} TFL_GraphApi;
#define TFL_GraphApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_GraphApi, Graph_Destroy)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_GRAPH_H_ */
