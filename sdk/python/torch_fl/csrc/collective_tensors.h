// How torch.distributed's tensor arguments become the collectives ABI's flat
// buffers (collectives.h): the checks the tfl backend makes of them, flat
// scratch buffers and the copies out of them, all_to_all split sizes, and
// c10d reduce ops as plugin reduce ops.
#pragma once

#include "collective_work.h"

#include <torch_fl/collectives.h>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>
#include <vector>

namespace torch_fl::bridge::dist {

// The one tensor of a per-process tensor list (one device per process).
at::Tensor single(std::vector<at::Tensor>& tensors, const char* op);
void check_device(const at::Tensor& t, const char* op);
// all_reduce, broadcast, send and recv treat a tensor as its block of memory:
// any dense layout works as long as every rank uses the same one.
void check_dense(const at::Tensor& t, const char* op);
void check_dense_contiguous(const at::Tensor& t, const char* op);
at::Tensor contiguous_input(const at::Tensor& t, const char* op);
void check_same_dtype(const std::vector<at::Tensor>& ts, const at::Tensor& ref, const char* op);
void check_same_sizes(const std::vector<at::Tensor>& outs, const at::Tensor& in, const char* op);
int32_t dtype_of(const at::Tensor& t);
std::vector<at::Tensor> cat_vectors(std::vector<at::Tensor> a, const std::vector<at::Tensor>& b);

// One flat buffer holding `pieces` one after another (copies on the current
// stream, before the collective's ready event), and the copies back out.
at::Tensor flatten_into(const std::vector<at::Tensor>& pieces, size_t total, const at::TensorOptions& options);
void copy_out_chunks(const at::Tensor& flat, std::vector<at::Tensor>& outs);
void copy_out_pieces(const at::Tensor& flat, std::vector<at::Tensor>& outs, const std::vector<size_t>& offsets);

// all_to_all_single's split sizes as element counts and offsets per rank.
void splits_to_counts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                      int world_size, std::vector<size_t>* counts, std::vector<size_t>* offsets);

TFL_Comm_Collective_Args collective_args(TFL_Communicator* comm, TFL_Stream* s, const at::Tensor& in,
                                         const at::Tensor& out, int64_t count, c10::ScalarType type);
void all_to_all(TFL_Communicator* comm, TFL_Stream* s, const at::Tensor& in, const at::Tensor& out,
                const std::vector<size_t>& sc, const std::vector<size_t>& so, const std::vector<size_t>& rc,
                const std::vector<size_t>& ro);

// A c10d reduce op as a plugin op on `t`, possibly after a rewrite: complex
// sums go through their real view, PREMUL_SUM scales first, bitwise and/or
// on bool are min/max.
struct PlannedReduction {
  at::Tensor send, recv;  // the buffers the plugin sees
  int32_t op;
  c10::ScalarType type;
};
PlannedReduction plan(const at::Tensor& in, const at::Tensor& out, const c10d::ReduceOp& op);

// A non-contiguous output is written through a contiguous stand-in ...
at::Tensor contiguous_output(const at::Tensor& out);
// ... that this copies back when the work finishes.
std::function<void()> copy_back(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& dsts);

} // namespace torch_fl::bridge::dist
