// What the one kernel table (kernel_table.h) becomes: kernel ids and names,
// the descriptors Kernels_List and Kernels_ListCustomOps hand to the host
// (filtered by the profile), and each kernel's registered contract.
#ifndef FLEMU_KERNELS_SUPPORT_REGISTRY_H_
#define FLEMU_KERNELS_SUPPORT_REGISTRY_H_

#include <cstdint>
#include <string>

#include "../../config.h"
#include "../kernel_table.h"
#include "torch_fl/kernel.h"

namespace flemu {

// One id per table line, then the custom operators and their backwards.
enum KernelId : int32_t {
#define FLEMU_KERNEL_ID(id, ...) id,
  FLEMU_KERNELS(FLEMU_KERNEL_ID)
#undef FLEMU_KERNEL_ID
#define FLEMU_CUSTOM_OP_IDS(id, name, schema, fn, bwd_id, ...) id, bwd_id,
  FLEMU_CUSTOM_OPS(FLEMU_CUSTOM_OP_IDS)
#undef FLEMU_CUSTOM_OP_IDS
  kNumKernels
};

// "aten::mm", "flemu::scale_add_backward", ...
const char* kernel_name(int32_t id);
int32_t kernel_id_by_name(const std::string& name);  // -1 when unknown

// Applies the configuration: the descriptors of the profile with the dtypes
// the device has, launch-time settings (dtypes, contracts, injections and
// faults). Throws for an injection or fault naming a kernel flemu lacks.
void configure_kernels(const Config& cfg);

// The tables of TFL_Kernels_List and TFL_Kernels_ListCustomOps.
void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count);
void list_custom_ops(const TFL_CustomOpDesc* const** ops, size_t* count);

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_REGISTRY_H_
