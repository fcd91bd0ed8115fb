#include "collective_tensors.h"

#include "kernel_abi.h"

#include <ATen/ATen.h>

namespace torch_fl::bridge::dist {

at::Tensor single(std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "tfl: ", op, " takes exactly one tensor per process (one device per process), got ",
              tensors.size());
  check_device(tensors[0], op);
  return tensors[0];
}

void check_device(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().type() == kType, "tfl: ", op, " got a tensor on ", t.device(), "; the tfl backend takes ",
              c10::get_privateuse1_backend(), " tensors (route CPU tensors to gloo with init_process_group(\"cpu:gloo,",
              c10::get_privateuse1_backend(), ":tfl\"))");
}

void check_dense(const at::Tensor& t, const char* op) {
  check_device(t, op);
  TORCH_CHECK(t.is_non_overlapping_and_dense(), "tfl: ", op,
              " needs a dense tensor (contiguous or a permutation of it); got sizes ", t.sizes(), " strides ",
              t.strides(), "; call .contiguous() first");
}

void check_dense_contiguous(const at::Tensor& t, const char* op) {
  check_device(t, op);
  TORCH_CHECK(t.is_contiguous(), "tfl: ", op, " needs a contiguous tensor; got sizes ", t.sizes(), " strides ",
              t.strides());
}

at::Tensor contiguous_input(const at::Tensor& t, const char* op) {
  check_device(t, op);
  return t.contiguous();
}

void check_same_dtype(const std::vector<at::Tensor>& ts, const at::Tensor& ref, const char* op) {
  for (const auto& t : ts) {
    check_device(t, op);
    TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "tfl: ", op, " mixes ", t.scalar_type(), " and ",
                ref.scalar_type(), " tensors");
  }
}

void check_same_sizes(const std::vector<at::Tensor>& outs, const at::Tensor& in, const char* op) {
  check_same_dtype(outs, in, op);
  for (const auto& o : outs) {
    TORCH_CHECK(o.numel() == in.numel(), "tfl: ", op, " outputs need as many elements as the input (", in.numel(),
                "), got ", o.numel());
  }
}

int32_t dtype_of(const at::Tensor& t) {
  const int32_t d = to_tfl_dtype(t.scalar_type());
  TORCH_CHECK_VALUE(d >= 0, "tfl: the plugin ABI has no dtype for ", t.scalar_type());
  return d;
}

std::vector<at::Tensor> cat_vectors(std::vector<at::Tensor> a, const std::vector<at::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One flat buffer holding `pieces` one after another (copies on the
// current stream, before the collective's ready event).
at::Tensor flatten_into(const std::vector<at::Tensor>& pieces, size_t total, const at::TensorOptions& options) {
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, options);
  int64_t offset = 0;
  for (const auto& p : pieces) {
    check_device(p, "flatten");
    if (p.numel() > 0) {
      flat.narrow(0, offset, p.numel()).view(p.sizes()).copy_(p);
    }
    offset += p.numel();
  }
  return flat;
}

void copy_out_chunks(const at::Tensor& flat, std::vector<at::Tensor>& outs) {
  int64_t offset = 0;
  for (auto& o : outs) {
    if (o.numel() > 0) {
      o.copy_(flat.narrow(0, offset, o.numel()).view(o.sizes()));
    }
    offset += o.numel();
  }
}

void copy_out_pieces(const at::Tensor& flat, std::vector<at::Tensor>& outs, const std::vector<size_t>& offsets) {
  for (size_t p = 0; p < outs.size(); ++p) {
    if (outs[p].numel() > 0) {
      outs[p].copy_(flat.narrow(0, static_cast<int64_t>(offsets[p]), outs[p].numel()).view(outs[p].sizes()));
    }
  }
}

void splits_to_counts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                    int world_size, std::vector<size_t>* counts, std::vector<size_t>* offsets) {
  counts->assign(world_size, 0);
  offsets->assign(world_size, 0);
  if (splits.empty()) {
    TORCH_CHECK(t.numel() % world_size == 0, "tfl: all_to_all_single without split sizes needs the ", which,
                " to divide evenly by the world size ", world_size, ", but it has ", t.numel(), " elements");
    for (int p = 0; p < world_size; ++p) {
      (*counts)[p] = static_cast<size_t>(t.numel() / world_size);
      (*offsets)[p] = static_cast<size_t>(p) * (*counts)[p];
    }
    return;
  }
  TORCH_CHECK(splits.size() == static_cast<size_t>(world_size), "tfl: all_to_all_single: ", which, " split sizes have ",
              splits.size(), " entries, expected ", world_size);
  const int64_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0);
  int64_t rows = 0;
  for (int p = 0; p < world_size; ++p) {
    TORCH_CHECK(splits[p] >= 0, "tfl: all_to_all_single: negative split size ", splits[p]);
    (*counts)[p] = static_cast<size_t>(splits[p] * row);
    (*offsets)[p] = static_cast<size_t>(rows * row);
    rows += splits[p];
  }
  TORCH_CHECK(t.dim() > 0 && rows == t.size(0), "tfl: all_to_all_single: ", which, " split sizes add up to ", rows,
              " but the tensor's first dimension is ", t.dim() > 0 ? t.size(0) : 0);
}

TFL_Comm_Collective_Args collective_args(TFL_Communicator* comm, TFL_Stream* s, const at::Tensor& in,
                                              const at::Tensor& out, int64_t count, c10::ScalarType type) {
  TFL_Comm_Collective_Args a{};
  a.struct_size = TFL_Comm_Collective_Args_STRUCT_SIZE;
  a.comm = comm;
  a.sendbuf = in.numel() > 0 ? in.data_ptr() : nullptr;
  a.recvbuf = out.numel() > 0 ? out.data_ptr() : nullptr;
  a.count = static_cast<size_t>(count);
  const int32_t d = to_tfl_dtype(type);
  TORCH_CHECK_VALUE(d >= 0, "tfl: the plugin ABI has no dtype for ", type);
  a.dtype = d;
  a.stream = s;
  return a;
}

void all_to_all(TFL_Communicator* comm, TFL_Stream* s, const at::Tensor& in, const at::Tensor& out,
                     const std::vector<size_t>& sc, const std::vector<size_t>& so, const std::vector<size_t>& rc,
                       const std::vector<size_t>& ro) {
  TFL_Comm_AllToAll_Args a{};
  a.struct_size = TFL_Comm_AllToAll_Args_STRUCT_SIZE;
  a.comm = comm;
  a.sendbuf = in.numel() > 0 ? in.data_ptr() : nullptr;
  a.recvbuf = out.numel() > 0 ? out.data_ptr() : nullptr;
  a.send_counts = sc.data();
  a.send_offsets = so.data();
  a.recv_counts = rc.data();
  a.recv_offsets = ro.data();
  a.dtype = dtype_of(out.numel() > 0 ? out : in);
  a.stream = s;
  check_call(collectives().Comm_AllToAll(&a), "Comm_AllToAll");
}

PlannedReduction plan(const at::Tensor& in, const at::Tensor& out, const c10d::ReduceOp& op) {
  PlannedReduction p{in, out, TFL_REDUCE_SUM, in.scalar_type()};
  switch (op.op_) {
    case c10d::ReduceOp::SUM: p.op = TFL_REDUCE_SUM; break;
    case c10d::ReduceOp::AVG: p.op = TFL_REDUCE_AVG; break;
    case c10d::ReduceOp::PRODUCT: p.op = TFL_REDUCE_PRODUCT; break;
    case c10d::ReduceOp::MIN: p.op = TFL_REDUCE_MIN; break;
    case c10d::ReduceOp::MAX: p.op = TFL_REDUCE_MAX; break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
      TORCH_CHECK_NOT_IMPLEMENTED(in.scalar_type() == at::kBool, "tfl: bitwise ",
                                  op.op_ == c10d::ReduceOp::BAND ? "BAND" : "BOR",
                                  " is supported for bool tensors only, got ", in.scalar_type());
      p.op = op.op_ == c10d::ReduceOp::BAND ? TFL_REDUCE_MIN : TFL_REDUCE_MAX;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      // The name torch 2.11 gives the type; 2.13 renamed it PreMulSumSupplement and kept this one.
      auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "tfl: PREMUL_SUM without its factor");
      p.send = supplement->tensor_factor.defined() ? in * supplement->tensor_factor.to(in.device())
                                                   : in * supplement->double_factor;
      p.op = TFL_REDUCE_SUM;
      break;
    }
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "tfl: reduce op ", static_cast<int>(op.op_),
                                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM; BAND/BOR on bool)");
  }
  if (in.is_complex()) {
    TORCH_CHECK_NOT_IMPLEMENTED(p.op == TFL_REDUCE_SUM || p.op == TFL_REDUCE_AVG,
                                "tfl: complex tensors support SUM, AVG and PREMUL_SUM only");
    p.send = at::view_as_real(p.send);
    p.recv = at::view_as_real(p.recv);
    p.type = p.send.scalar_type();
  }
  return p;
}

at::Tensor contiguous_output(const at::Tensor& out) {
  return out.is_contiguous() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
}

std::function<void()> copy_back(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& dsts) {
  return [&outputs, &dsts] {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!dsts[i].is_same(outputs[i])) {
        outputs[i].copy_(dsts[i]);
      }
    }
  };
}

} // namespace torch_fl::bridge::dist
