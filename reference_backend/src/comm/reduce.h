// Element-wise reductions the collectives apply to received data, for every
// dtype flemu computes in (bool, uint8, int8–int64, float16, bfloat16,
// float32, float64).
//
//   sum      integers wrap (two's complement); bool: logical or
//   product  integers wrap; bool: logical and
//   min/max  floating NaN propagates (like torch.minimum/maximum);
//            bool: and / or
//   avg      a sum, then a division by the world size: floating divide,
//            integers truncate toward zero; not defined for bool
//
// float16 and bfloat16 combine in float32 and round once per step, as every
// ring implementation does.
#ifndef FLEMU_COMM_REDUCE_H_
#define FLEMU_COMM_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "../kernels/support/dtype.h"

namespace flemu::comm {

// Data movement (all_gather, broadcast, all_to_all, send/recv) takes every
// dtype with a size (flemu::element_size); reductions only those listed above.

// Throws TFL_ERR_INVALID_ARGUMENT (unknown op, avg on bool) or
// TFL_ERR_UNIMPLEMENTED (a dtype flemu does not reduce).
void check_reduction(int32_t dtype, int32_t op);

// dst[i] = dst[i] (op) src[i]; avg accumulates like sum.
void reduce_into(void* dst, const void* src, size_t count, int32_t dtype, int32_t op);

// out[i] = a[i] (op) b[i]; `out` may alias `a` or `b`.
void reduce_to(void* out, const void* a, const void* b, size_t count, int32_t dtype, int32_t op);

// Finishes an average: buf[i] /= divisor (no-op for other ops).
void finish_reduction(void* buf, size_t count, int32_t dtype, int32_t op, int divisor);

}  // namespace flemu::comm

#endif  // FLEMU_COMM_REDUCE_H_
