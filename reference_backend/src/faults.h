// Fault injection: flemu emulating a faulty device (FLEMU_FAULT=<name>,...),
// so that a check which no buggy plugin can fail shows up as such.
//
// FLEMU_FAULTS is the catalogue, one line per fault:
//   X(id, name, scope, description)
// `name` is what FLEMU_FAULT takes (a contract with the conformance suite:
// never rename one); `scope` is the kernel the fault changes ("aten::...") or,
// for the others, the public API where it shows; `description` is the line
// the Initialize error lists. The code hook of a fault is its id: kernels test
// it with Launch::faulty(Fault::id), the ABI entry points with fault_on(). A
// fault stays confined to its scope: everything else computes exactly.
#ifndef FLEMU_FAULTS_H_
#define FLEMU_FAULTS_H_

#include <cstdint>
#include <string>
#include <vector>

// clang-format off
#define FLEMU_FAULTS(X)                                                                                       \
  X(kAddIgnoresAlpha, "add_ignores_alpha", "aten::add.Tensor",                                                \
    "add.Tensor computes self + other, ignoring alpha")                                                       \
  X(kMulIgnoresStrides, "mul_ignores_strides", "aten::mul.Tensor",                                            \
    "mul.Tensor reads every tensor input as dense row-major, ignoring its strides")                           \
  X(kExpIgnoresOffset, "exp_ignores_offset", "aten::exp",                                                     \
    "exp reads its input from the start of the storage (data - storage_offset), ignoring a slice's offset")   \
  X(kSubBroadcastWrong, "sub_broadcast_wrong", "aten::sub.Tensor",                                            \
    "sub.Tensor reads a broadcast (stride-0) input dim with the dense stride")                                \
  X(kMulOutIgnored, "mul_out_ignored", "aten::mul.Tensor",                                                    \
    "mul.Tensor's out= variant returns success without writing the output")                                   \
  X(kAddInplaceAliasing, "add_inplace_aliasing", "aten::add.Tensor",                                          \
    "in-place add.Tensor accumulates in its output (alpha*other last to first, then + self first to last), "  \
    "so it is wrong exactly when the output is self")                                                         \
  X(kGeluBackwardScaled, "gelu_backward_scaled", "aten::gelu_backward",                                       \
    "gelu_backward returns the gradient multiplied by 1.02")                                                  \
  X(kSoftmaxBackwardWrong, "softmax_backward_wrong",                                                          \
    "aten::_softmax_backward_data, aten::_scaled_dot_product_fused_attention_overrideable_backward",          \
    "the softmax backward (_softmax_backward_data, and the fused attention backward's softmax step) drops "   \
    "the -sum(grad*out) term for one row in three")                                                           \
  X(kFp64ComputedInFp32, "fp64_computed_in_fp32", "float64 elementwise kernels",                              \
    "float64 unary math and binary arithmetic compute in float32 and widen the result")                       \
  X(kExpLowPrecision, "exp_low_precision", "aten::exp",                                                       \
    "float32 exp uses a fast approximation with about 1e-4 relative error")                                   \
  X(kSumFp16Accumulator, "sum_fp16_accumulator", "aten::sum.dim_IntList",                                     \
    "float32 sum.dim_IntList accumulates in float16 precision")                                               \
  X(kMmCrash, "mm_crash", "aten::mm",                                                                         \
    "mm calls abort() in the kernel (the process dies)")                                                      \
  X(kMmHang, "mm_hang", "aten::mm",                                                                           \
    "mm's enqueued work blocks its stream worker forever")                                                    \
  X(kEventEarly, "event_early", "Event_Query, Event_Synchronize",                                             \
    "Event_Query and Event_Synchronize report completion at once, even while earlier work is pending")        \
  X(kStreamSyncNoop, "stream_sync_noop", "Stream_Synchronize, Device_Synchronize",                            \
    "Stream_Synchronize and Device_Synchronize return at once without waiting")                               \
  X(kFreeLeaks, "free_leaks", "Memory_Free, Memory_GetInfo",                                                  \
    "Memory_Free succeeds but never returns the bytes (free memory never goes back up)")                      \
  X(kMemoryOverreport, "memory_overreport", "Device_GetProperties, Memory_GetInfo",                           \
    "total memory is reported as 4x the real capacity")                                                       \
  X(kOobWrite, "oob_write", "aten::relu",                                                                     \
    "relu writes one element past the end of its output")                                                     \
  X(kUniformRangeWrong, "uniform_range_wrong", "aten::uniform_",                                              \
    "uniform_ draws from [from, to + (to - from) / 10)")                                                      \
  X(kSeedIgnored, "seed_ignored", "random kernels",                                                           \
    "random kernels ignore ctx->rng_seed/rng_offset and draw from a fresh seed every call")                   \
  X(kPeerCopyCorrupt, "peer_copy_corrupt", "Memory_Copy (PEER), aten::copy_ across devices",                  \
    "copies between two different devices flip the lowest bit of the last byte")
// clang-format on

namespace flemu {

enum class Fault : int32_t {
#define FLEMU_FAULT_ID(id, name, scope, description) id,
  FLEMU_FAULTS(FLEMU_FAULT_ID)
#undef FLEMU_FAULT_ID
  kCount
};
static_assert(static_cast<int32_t>(Fault::kCount) <= 64, "fault sets are 64-bit masks");

using FaultSet = uint64_t;
constexpr FaultSet fault_bit(Fault f) { return FaultSet{1} << static_cast<int32_t>(f); }

struct FaultInfo {
  Fault id;
  const char* name;
  const char* scope;  // "aten::a, aten::b" for a kernel fault: the kernels it changes
  const char* description;
};

const FaultInfo& fault_info(Fault f);
// The kernels a fault changes (its scope's names); empty when it acts elsewhere.
std::vector<std::string> fault_kernels(Fault f);

// Parses a comma-separated list of names. Throws TFL_ERR_INVALID_ARGUMENT for
// an unknown or empty name, listing every fault with its description.
FaultSet parse_faults(const std::string& key, const std::string& value);
// "a,b" for a set, in catalogue order.
std::string fault_names(FaultSet faults);

// The faults of the running configuration (set at Plugin_Initialize).
FaultSet active_faults();
void set_active_faults(FaultSet faults);
inline bool fault_on(Fault f) { return (active_faults() & fault_bit(f)) != 0; }

// What a hanging device does: blocks the calling stream worker until
// release_hung_work() (Plugin_Shutdown) lets it go.
void hang_until_released();
void release_hung_work();

}  // namespace flemu

#endif  // FLEMU_FAULTS_H_
