// Float32 convolutions through oneDNN (the onednn-cpu-gomp wheel flemu is
// built with), as a vendor plugin calls its vendor's kernel library.
//
// The tensors keep the layout the caller gave (any strides); oneDNN picks
// its own blocked layouts, and operands are reordered into and out of them.
// Each call returns false when oneDNN does not take the case (FLEMU_DNNL=0,
// a layout it refuses): the caller then runs flemu's own im2col path, which
// writes every output (the backward may have written grad_input already).
#ifndef FLEMU_KERNELS_SUPPORT_DNNL_CONV_H_
#define FLEMU_KERNELS_SUPPORT_DNNL_CONV_H_

#include <cstdint>

#include "nn_common.h"

namespace flemu {

// A regular (not transposed) convolution's parameters: nd spatial dims, the
// call's values for each (PyTorch's convention: dilation 1 means none).
struct ConvParams {
  int32_t nd = 2;
  int64_t groups = 1;
  int64_t stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
};

// dst = conv(src, w) (+ bias). All float32.
bool dnnl_conv_forward(const ConvParams& p, const Strided& src, const Strided& w, const Strided* bias,
                       const Strided& dst);

// The gradients a non-null pointer asks for, from diff_dst; diff_b only
// together with diff_w.
bool dnnl_conv_backward(const ConvParams& p, const Strided& diff_dst, const Strided& src, const Strided& w,
                        const Strided* diff_src, const Strided* diff_w, const Strided* diff_b);

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_DNNL_CONV_H_
