#include "registry.h"

#include <array>
#include <cstring>
#include <vector>

#include "../../errors.h"
#include "isa.h"
#include "launch.h"
#include "../kernel_schemas.h"

namespace flemu {

namespace {

using namespace table;

struct Entry {
  const char* name;
  TFL_KernelFn fn;
  uint64_t dtypes;
  uint32_t flags;
  MinimalProfile minimal;
};

const Entry kTable[] = {
#define FLEMU_KERNEL_ENTRY(id, name, fn, dtypes, flags, minimal) {name, fn, dtypes, flags, minimal},
    FLEMU_KERNELS(FLEMU_KERNEL_ENTRY)
#undef FLEMU_KERNEL_ENTRY
};
constexpr size_t kNumTable = sizeof(kTable) / sizeof(kTable[0]);

// The schema each kernel was written for (kernel_schemas.h, generated).
struct SchemaEntry {
  const char* op;
  const char* schema;
};
const SchemaEntry kSchemas[] = {
#define FLEMU_SCHEMA_ENTRY(op, schema) {op, schema},
    FLEMU_KERNEL_SCHEMAS(FLEMU_SCHEMA_ENTRY)
#undef FLEMU_SCHEMA_ENTRY
};

const char* schema_of(const char* op) {
  for (const SchemaEntry& s : kSchemas) {
    if (std::strcmp(s.op, op) == 0) return s.schema;
  }
  return nullptr;
}

struct CustomEntry {
  int32_t id;
  const char* name;
  const char* schema;
  TFL_KernelFn forward;
  int32_t backward_id;
  const char* backward_name;
  TFL_KernelFn backward;
  uint64_t dtypes;
  uint32_t flags;
  int32_t like;
};

const CustomEntry kCustom[] = {
#define FLEMU_CUSTOM_ENTRY(id, name, schema, fn, bwd_id, bwd_name, bwd_fn, dtypes, flags, like) \
  {id, name, schema, fn, bwd_id, bwd_name, bwd_fn, dtypes, flags, like},
    FLEMU_CUSTOM_OPS(FLEMU_CUSTOM_ENTRY)
#undef FLEMU_CUSTOM_ENTRY
};
constexpr size_t kNumCustom = sizeof(kCustom) / sizeof(kCustom[0]);
static_assert(kNumTable + 2 * kNumCustom == kNumKernels, "an id per table line, two per custom op");

// Filled by configure_kernels; they live until the library is unloaded.
std::array<TFL_KernelDesc, kNumTable> g_descs;
std::vector<const TFL_KernelDesc*> g_listed;
std::array<TFL_CustomOpDesc, kNumCustom> g_custom;
std::vector<const TFL_CustomOpDesc*> g_custom_listed;

}  // namespace

const char* kernel_name(int32_t id) {
  if (id >= 0 && static_cast<size_t>(id) < kNumTable) return kTable[id].name;
  for (const CustomEntry& c : kCustom) {
    if (id == c.id) return c.name;
    if (id == c.backward_id) return c.backward_name;
  }
  return "unknown kernel";
}

int32_t kernel_id_by_name(const std::string& name) {
  for (int32_t i = 0; i < kNumKernels; ++i)
    if (name == kernel_name(i)) return i;
  return -1;
}

void configure_kernels(const Config& cfg) {
  uint64_t disabled = 0;
  if (!cfg.fp64) disabled |= TFL_DTYPE_BIT(TFL_DTYPE_FLOAT64);
  if (!cfg.fp16) disabled |= TFL_DTYPE_BIT(TFL_DTYPE_FLOAT16);
  if (!cfg.bf16) disabled |= TFL_DTYPE_BIT(TFL_DTYPE_BFLOAT16);

  KernelSettings s;
  s.enabled_dtypes = kAll & ~disabled;
  s.strict = cfg.strict;
  s.check_contracts = cfg.check_contracts;
  s.peer_access = cfg.peer_access;
  s.blas = cfg.blas;
  s.dnnl = cfg.dnnl;
  const Isa cpu = cpu_isa();
  s.isa = cpu;
  if (cfg.max_isa >= 0) {
    const Isa asked = static_cast<Isa>(cfg.max_isa);
    if (asked > cpu)
      invalid_argument("FLEMU_ISA=", isa_name(asked), " asks for a build this CPU cannot run (its widest is ",
                       isa_name(cpu), "); use ", isa_name(cpu), " or lower, or auto");
    s.isa = asked;
  }

  // Descriptors and contracts: the table, through the profile's filter.
  const bool minimal = cfg.minimal_profile;
  std::vector<bool> registered(kNumKernels, !minimal);
  g_listed.clear();
  g_listed.reserve(kNumTable);
  for (size_t i = 0; i < kNumTable; ++i) {
    const Entry& e = kTable[i];
    if (minimal && !e.minimal.listed) continue;
    TFL_KernelDesc& d = g_descs[i];
    d.struct_size = TFL_KernelDesc_STRUCT_SIZE;
    d.op = e.name;
    d.fn = e.fn;
    d.user_data = nullptr;
    d.dtypes = e.dtypes & (minimal ? e.minimal.dtypes : ~uint64_t{0}) & ~disabled;
    d.flags = minimal ? e.minimal.flags : e.flags;
    d.preferred_memory_format = TFL_MEMORY_FORMAT_ANY;
    d.schema = schema_of(e.name);
    g_listed.push_back(&d);
    s.contracts[i] = {d.dtypes, d.flags};
    registered[i] = true;
  }
  g_custom_listed.clear();
  g_custom_listed.reserve(kNumCustom);
  static const int32_t kLike[] = {
#define FLEMU_CUSTOM_LIKE(id, name, schema, fn, bwd_id, bwd_name, bwd_fn, dtypes, flags, like) like,
      FLEMU_CUSTOM_OPS(FLEMU_CUSTOM_LIKE)
#undef FLEMU_CUSTOM_LIKE
  };
  for (size_t i = 0; i < kNumCustom && !minimal; ++i) {
    const CustomEntry& c = kCustom[i];
    TFL_CustomOpDesc& d = g_custom[i];
    d.struct_size = TFL_CustomOpDesc_STRUCT_SIZE;
    d.schema = c.schema;
    d.forward = c.forward;
    d.backward = c.backward;
    d.user_data = nullptr;
    d.dtypes = c.dtypes & ~disabled;
    d.flags = c.flags;
    d.output_like = &kLike[i];
    d.num_outputs = 1;
    g_custom_listed.push_back(&d);
    s.contracts[static_cast<size_t>(c.id)] = s.contracts[static_cast<size_t>(c.backward_id)] = {d.dtypes, d.flags};
  }

  // An injection into a kernel the profile leaves out would never fire.
  auto unregistered = [&](int32_t id) {
    return id >= 0 && !registered[static_cast<size_t>(id)] ? " (FLEMU_PROFILE=minimal does not register it)" : "";
  };
  if (!cfg.inject_error_op.empty()) {
    s.inject_error_id = kernel_id_by_name(cfg.inject_error_op);
    if (s.inject_error_id < 0 || !registered[static_cast<size_t>(s.inject_error_id)])
      invalid_argument("invalid FLEMU_INJECT_ERROR='", cfg.inject_error_op, ":", cfg.inject_error_code,
                       cfg.inject_error_async ? ":async" : "", "': '", cfg.inject_error_op,
                       "' is not a flemu kernel (e.g. aten::mm, aten::add.Tensor, flemu::scale_add)",
                       unregistered(s.inject_error_id));
    s.inject_error_code = cfg.inject_error_code;
    s.inject_error_async = cfg.inject_error_async;
  }
  if (!cfg.inject_crash_op.empty()) {
    s.inject_crash_id = kernel_id_by_name(cfg.inject_crash_op);
    if (s.inject_crash_id < 0 || !registered[static_cast<size_t>(s.inject_crash_id)])
      invalid_argument("invalid FLEMU_INJECT_CRASH='", cfg.inject_crash_op,
                       "': not a flemu kernel (e.g. aten::mm, aten::add.Tensor, flemu::scale_add)",
                       unregistered(s.inject_crash_id));
  }
  for (int32_t f = 0; f < static_cast<int32_t>(Fault::kCount); ++f) {
    const Fault fault = static_cast<Fault>(f);
    if ((cfg.faults & fault_bit(fault)) == 0) continue;
    const std::vector<std::string> ops = fault_kernels(fault);
    for (const std::string& op : ops) {
      const int32_t id = kernel_id_by_name(op);
      if (id < 0) invalid_argument("FLEMU_FAULT=", fault_info(fault).name, " changes ", op, ", which is not a flemu kernel");
      if (!registered[static_cast<size_t>(id)])
        invalid_argument("FLEMU_FAULT=", fault_info(fault).name, " changes ", op,
                         ", which FLEMU_PROFILE=minimal does not register");
      s.kernel_faults[static_cast<size_t>(id)] |= fault_bit(fault);
    }
    if (ops.empty() && (fault == Fault::kFp64ComputedInFp32 || fault == Fault::kSeedIgnored)) {
      // Faults of a class of kernels: the shared launch code decides where they act.
      for (FaultSet& k : s.kernel_faults) k |= fault_bit(fault);
    }
  }
  kernel_settings() = s;
}

void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count) {
  *kernels = g_listed.data();
  *count = g_listed.size();
}

void list_custom_ops(const TFL_CustomOpDesc* const** ops, size_t* count) {
  *ops = g_custom_listed.data();
  *count = g_custom_listed.size();
}

}  // namespace flemu
