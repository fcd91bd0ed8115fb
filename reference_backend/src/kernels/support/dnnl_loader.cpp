// oneDNN's C functions, which the C++ API (dnnl.hpp) calls, forwarded to the
// library loaded on first use (lazy_library.h).
#include <oneapi/dnnl/dnnl.h>

#include "lazy_library.h"

namespace flemu {
namespace {

#define FLEMU_STR2(x) #x
#define FLEMU_STR(x) FLEMU_STR2(x)

const LazyLibrary kDnnl{
    "libdnnl.so.3", "oneDNN",
    "oneDNN " FLEMU_STR(DNNL_VERSION_MAJOR) "." FLEMU_STR(DNNL_VERSION_MINOR),
    "flemu's float32 convolutions and GEMMs run on it; install the onednn-cpu-gomp wheel flemu was built with "
    "(pip install onednn-cpu-gomp==2023.2.0), or set FLEMU_DNNL=0"};

void* dnnl_library() {
  static void* const handle = load_library(kDnnl);
  return handle;
}

}  // namespace
}  // namespace flemu

#define FLEMU_DNNL_FORWARD(ret, name, params, args) \
  FLEMU_LAZY_FORWARD(flemu::kDnnl, flemu::dnnl_library, ret, name, params, args)

FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_convolution_backward_data_primitive_desc_create,
  (dnnl_primitive_desc_t* primitive_desc, dnnl_engine_t engine, dnnl_alg_kind_t alg_kind,
   const_dnnl_memory_desc_t diff_src_desc, const_dnnl_memory_desc_t weights_desc,
   const_dnnl_memory_desc_t diff_dst_desc, const dnnl_dims_t strides, const dnnl_dims_t dilates,
   const dnnl_dims_t padding_l, const dnnl_dims_t padding_r, const_dnnl_primitive_desc_t hint_fwd_pd,
   const_dnnl_primitive_attr_t attr),
  (primitive_desc, engine, alg_kind, diff_src_desc, weights_desc, diff_dst_desc, strides, dilates, padding_l,
   padding_r, hint_fwd_pd, attr))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_convolution_backward_weights_primitive_desc_create,
  (dnnl_primitive_desc_t* primitive_desc, dnnl_engine_t engine, dnnl_alg_kind_t alg_kind,
   const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t diff_weights_desc,
   const_dnnl_memory_desc_t diff_bias_desc, const_dnnl_memory_desc_t diff_dst_desc, const dnnl_dims_t strides,
   const dnnl_dims_t dilates, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
   const_dnnl_primitive_desc_t hint_fwd_pd, const_dnnl_primitive_attr_t attr),
  (primitive_desc, engine, alg_kind, src_desc, diff_weights_desc, diff_bias_desc, diff_dst_desc, strides, dilates,
   padding_l, padding_r, hint_fwd_pd, attr))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_convolution_forward_primitive_desc_create,
  (dnnl_primitive_desc_t* primitive_desc, dnnl_engine_t engine, dnnl_prop_kind_t prop_kind,
   dnnl_alg_kind_t alg_kind, const_dnnl_memory_desc_t src_desc, const_dnnl_memory_desc_t weights_desc,
   const_dnnl_memory_desc_t bias_desc, const_dnnl_memory_desc_t dst_desc, const dnnl_dims_t strides,
   const dnnl_dims_t dilates, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
   const_dnnl_primitive_attr_t attr),
  (primitive_desc, engine, prop_kind, alg_kind, src_desc, weights_desc, bias_desc, dst_desc, strides, dilates,
   padding_l, padding_r, attr))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_engine_create,
  (dnnl_engine_t* engine, dnnl_engine_kind_t kind, size_t index),
  (engine, kind, index))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_engine_destroy,
  (dnnl_engine_t engine),
  (engine))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_matmul_primitive_desc_create,
  (dnnl_primitive_desc_t* primitive_desc, dnnl_engine_t engine, const_dnnl_memory_desc_t src_desc,
   const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t bias_desc, const_dnnl_memory_desc_t dst_desc,
   const_dnnl_primitive_attr_t attr),
  (primitive_desc, engine, src_desc, weights_desc, bias_desc, dst_desc, attr))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_create_v2,
  (dnnl_memory_t* memory, const_dnnl_memory_desc_t memory_desc, dnnl_engine_t engine, int nhandles, void** handles),
  (memory, memory_desc, engine, nhandles, handles))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_desc_clone,
  (dnnl_memory_desc_t* memory_desc, const_dnnl_memory_desc_t existing_memory_desc),
  (memory_desc, existing_memory_desc))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_desc_create_with_strides,
  (dnnl_memory_desc_t* memory_desc, int ndims, const dnnl_dims_t dims, dnnl_data_type_t data_type,
   const dnnl_dims_t strides),
  (memory_desc, ndims, dims, data_type, strides))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_desc_create_with_tag,
  (dnnl_memory_desc_t* memory_desc, int ndims, const dnnl_dims_t dims, dnnl_data_type_t data_type,
   dnnl_format_tag_t tag),
  (memory_desc, ndims, dims, data_type, tag))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_desc_destroy,
  (dnnl_memory_desc_t memory_desc),
  (memory_desc))
FLEMU_DNNL_FORWARD(int, dnnl_memory_desc_equal,
  (const_dnnl_memory_desc_t lhs, const_dnnl_memory_desc_t rhs),
  (lhs, rhs))
FLEMU_DNNL_FORWARD(size_t, dnnl_memory_desc_get_size_v2,
  (const_dnnl_memory_desc_t memory_desc, int index),
  (memory_desc, index))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_desc_query,
  (const_dnnl_memory_desc_t memory_desc, dnnl_query_t what, void*result),
  (memory_desc, what, result))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_destroy,
  (dnnl_memory_t memory),
  (memory))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_memory_set_data_handle,
  (dnnl_memory_t memory, void* handle),
  (memory, handle))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_post_ops_append_sum,
  (dnnl_post_ops_t post_ops, float scale, int32_t zero_point, dnnl_data_type_t data_type),
  (post_ops, scale, zero_point, data_type))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_post_ops_create,
  (dnnl_post_ops_t* post_ops),
  (post_ops))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_post_ops_destroy,
  (dnnl_post_ops_t post_ops),
  (post_ops))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_attr_create,
  (dnnl_primitive_attr_t* attr),
  (attr))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_attr_destroy,
  (dnnl_primitive_attr_t attr),
  (attr))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_attr_set_post_ops,
  (dnnl_primitive_attr_t attr, const_dnnl_post_ops_t post_ops),
  (attr, post_ops))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_attr_set_scales_mask,
  (dnnl_primitive_attr_t attr, int arg, int mask),
  (attr, arg, mask))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_attr_set_scratchpad_mode,
  (dnnl_primitive_attr_t attr, dnnl_scratchpad_mode_t mode),
  (attr, mode))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_create,
  (dnnl_primitive_t* primitive, const_dnnl_primitive_desc_t primitive_desc),
  (primitive, primitive_desc))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_desc_destroy,
  (dnnl_primitive_desc_t primitive_desc),
  (primitive_desc))
FLEMU_DNNL_FORWARD(const_dnnl_memory_desc_t, dnnl_primitive_desc_query_md,
  (const_dnnl_primitive_desc_t primitive_desc, dnnl_query_t what, int index),
  (primitive_desc, what, index))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_destroy,
  (dnnl_primitive_t primitive),
  (primitive))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_primitive_execute,
  (const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs, const dnnl_exec_arg_t* args),
  (primitive, stream, nargs, args))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_reorder_primitive_desc_create,
  (dnnl_primitive_desc_t* reorder_primitive_desc, const_dnnl_memory_desc_t src_desc, dnnl_engine_t src_engine,
   const_dnnl_memory_desc_t dst_desc, dnnl_engine_t dst_engine, const_dnnl_primitive_attr_t attr),
  (reorder_primitive_desc, src_desc, src_engine, dst_desc, dst_engine, attr))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_stream_create,
  (dnnl_stream_t* stream, dnnl_engine_t engine, unsigned flags),
  (stream, engine, flags))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_stream_destroy,
  (dnnl_stream_t stream),
  (stream))
FLEMU_DNNL_FORWARD(dnnl_status_t, dnnl_stream_wait,
  (dnnl_stream_t stream),
  (stream))
