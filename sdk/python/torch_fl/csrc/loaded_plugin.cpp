#include "loaded_plugin.h"

#include <dlfcn.h>
#include <elf.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace torch_fl::bridge {

namespace {

std::unique_ptr<Plugin>& active_slot() {
  static std::unique_ptr<Plugin> plugin;
  return plugin;
}

std::string abi_string(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Reads the names of the functions a shared library exports from its ELF
// dynamic symbol table. dlsym cannot enumerate, so the file is parsed; only
// the headers and the two tables are read (a plugin may be tens of MB).
std::vector<std::string> exported_function_names(const std::string& path) {
  std::vector<std::string> names;
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) {
    return names;
  }
  const uint64_t size = static_cast<uint64_t>(file.tellg());
  auto in_bounds = [&](uint64_t off, uint64_t len) {
    return off <= size && len <= size - off;
  };
  auto read_at = [&](uint64_t off, uint64_t len, void* out) {
    if (!in_bounds(off, len)) {
      return false;
    }
    file.seekg(static_cast<std::streamoff>(off));
    file.read(static_cast<char*>(out), static_cast<std::streamsize>(len));
    return static_cast<bool>(file);
  };
  Elf64_Ehdr ehdr{};
  if (!read_at(0, sizeof(ehdr), &ehdr) ||
      std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 ||
      ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr.e_shentsize != sizeof(Elf64_Shdr)) {
    return names;
  }
  std::vector<Elf64_Shdr> sections(ehdr.e_shnum);
  if (!read_at(ehdr.e_shoff, sections.size() * sizeof(Elf64_Shdr), sections.data())) {
    return names;
  }
  for (const Elf64_Shdr& symtab : sections) {
    if (symtab.sh_type != SHT_DYNSYM || symtab.sh_link >= ehdr.e_shnum ||
        symtab.sh_entsize != sizeof(Elf64_Sym)) {
      continue;
    }
    const Elf64_Shdr& strtab = sections[symtab.sh_link];
    std::vector<Elf64_Sym> syms(symtab.sh_size / sizeof(Elf64_Sym));
    std::vector<char> strings(strtab.sh_size);
    if (!read_at(symtab.sh_offset, syms.size() * sizeof(Elf64_Sym), syms.data()) ||
        !read_at(strtab.sh_offset, strings.size(), strings.data())) {
      continue;
    }
    for (const Elf64_Sym& sym : syms) {
      const unsigned bind = ELF64_ST_BIND(sym.st_info);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC ||
          sym.st_shndx == SHN_UNDEF ||
          (bind != STB_GLOBAL && bind != STB_WEAK) ||
          sym.st_name >= strings.size()) {
        continue;
      }
      const char* name = strings.data() + sym.st_name;
      names.emplace_back(name, strnlen(name, strings.size() - sym.st_name));
    }
  }
  return names;
}

bool looks_like_shared_library(const std::string& path, std::string* why) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    *why = "cannot be opened for reading";
    return false;
  }
  Elf64_Ehdr ehdr{};
  file.read(reinterpret_cast<char*>(&ehdr), sizeof(ehdr));
  if (file.gcount() < static_cast<std::streamsize>(EI_NIDENT) ||
      std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0) {
    *why = "is not an ELF file";
    return false;
  }
  if (file.gcount() != sizeof(ehdr) || ehdr.e_ident[EI_CLASS] != ELFCLASS64) {
    *why = "is not a 64-bit ELF file (or its header is cut short)";
    return false;
  }
  if (ehdr.e_type != ET_DYN) {
    *why = "is an ELF file but not a shared library (e_type " +
        std::to_string(ehdr.e_type) + ")";
    return false;
  }
  // dlopen maps what the headers describe; parts past the end of the file
  // (a truncated copy) fault with SIGBUS when touched, killing the process.
  file.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(file.tellg());
  auto beyond = [&](uint64_t offset, uint64_t length) {
    return offset > size || length > size - offset;
  };
  const std::string truncated = "is truncated or corrupt (the file has " +
      std::to_string(size) + " bytes, ";
  const char* reinstall = "); reinstall the plugin";
  if (ehdr.e_phentsize != sizeof(Elf64_Phdr) ||
      beyond(ehdr.e_phoff, uint64_t{ehdr.e_phnum} * sizeof(Elf64_Phdr))) {
    *why = truncated + "its program headers lie beyond it" + reinstall;
    return false;
  }
  if (ehdr.e_shoff != 0 &&
      beyond(ehdr.e_shoff, uint64_t{ehdr.e_shnum} * uint64_t{ehdr.e_shentsize})) {
    *why = truncated + "its section headers lie beyond it" + reinstall;
    return false;
  }
  for (uint16_t i = 0; i < ehdr.e_phnum; ++i) {
    Elf64_Phdr ph{};
    file.seekg(static_cast<std::streamoff>(ehdr.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr)));
    file.read(reinterpret_cast<char*>(&ph), sizeof(ph));
    if (!file || ((ph.p_type == PT_LOAD || ph.p_type == PT_DYNAMIC) && beyond(ph.p_offset, ph.p_filesz))) {
      *why = truncated + "segment " + std::to_string(i) + " needs " +
          std::to_string(ph.p_offset + ph.p_filesz) + reinstall;
      return false;
    }
  }
  return true;
}

// Formats the plugin's own message for a load-time error.
std::string init_error_message(int32_t code, const std::string& message) {
  return std::string(error_code_name(code)) + ": " + message;
}

std::string init_error_message(const Plugin& plugin, TFL_Error* error) {
  auto [code, message] = plugin.consume(error);
  return init_error_message(code, message);
}

} // namespace

const char* error_code_name(int32_t code) {
  switch (code) {
    case TFL_OK:
      return "TFL_OK";
    case TFL_ERR_INVALID_ARGUMENT:
      return "TFL_ERR_INVALID_ARGUMENT";
    case TFL_ERR_OUT_OF_MEMORY:
      return "TFL_ERR_OUT_OF_MEMORY";
    case TFL_ERR_UNIMPLEMENTED:
      return "TFL_ERR_UNIMPLEMENTED";
    case TFL_ERR_DEVICE:
      return "TFL_ERR_DEVICE";
    case TFL_ERR_TIMEOUT:
      return "TFL_ERR_TIMEOUT";
    case TFL_ERR_ABORTED:
      return "TFL_ERR_ABORTED";
    case TFL_ERR_UNAVAILABLE:
      return "TFL_ERR_UNAVAILABLE";
    case TFL_ERR_INTERNAL:
      return "TFL_ERR_INTERNAL";
    case TFL_ERR_ABI_MISMATCH:
      return "TFL_ERR_ABI_MISMATCH";
    default:
      return "TFL_ERR_UNKNOWN";
  }
}

std::unique_ptr<Plugin> Plugin::load(
    const std::string& path,
    const std::map<std::string, std::string>& options) {
  std::unique_ptr<Plugin> plugin(new Plugin());
  plugin->path_ = path;
  plugin->loaded_in_pid_ = static_cast<int64_t>(getpid());

  std::string why;
  if (!looks_like_shared_library(path, &why)) {
    throw LoadError(
        LoadErrorKind::NotSharedLibrary,
        "plugin library '" + path + "' " + why +
            "; pass the path of the plugin's shared library (.so)");
  }
  dlerror();
  plugin->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (plugin->handle_ == nullptr) {
    const char* err = dlerror();
    throw LoadError(
        LoadErrorKind::NotSharedLibrary,
        "cannot load plugin library '" + path +
            "': " + (err ? err : "dlopen failed"));
  }
  void* entry = dlsym(plugin->handle_, TFL_ENTRY_SYMBOL);
  if (entry == nullptr) {
    throw LoadError(
        LoadErrorKind::NoEntrySymbol,
        "'" + path + "' does not export the entry symbol " TFL_ENTRY_SYMBOL
        "; a torch-fl plugin must define `const TFL_Api* " TFL_ENTRY_SYMBOL
        "(void)` with TFL_EXPORT (see torch_fl/plugin_api.h)");
  }
  plugin->api_ = reinterpret_cast<TFL_GetPluginApiFn>(entry)();
  if (plugin->api_ == nullptr) {
    throw LoadError(
        LoadErrorKind::BadPlugin,
        "'" + path + "': " TFL_ENTRY_SYMBOL " returned NULL");
  }
  plugin->negotiate();
  plugin->check_required_functions();
  plugin->initialize(options);
  plugin->read_info();
  plugin->scan_symbol_kernels();
  return plugin;
}

void Plugin::negotiate() {
  if (api_->abi_major != TFL_ABI_MAJOR) {
    throw LoadError(
        LoadErrorKind::AbiMismatch,
        "'" + path_ + "' was built for torch-fl plugin ABI " +
            abi_string(api_->abi_major, api_->abi_minor) +
            " but this torch_fl speaks ABI " +
            abi_string(TFL_ABI_MAJOR, TFL_ABI_MINOR) +
            "; the major versions must match: rebuild the plugin against "
            "the headers of this torch_fl (torch_fl.get_include())");
  }
  if (api_->struct_size < TFL_STRUCT_SIZE(TFL_Api, stream)) {
    throw LoadError(
        LoadErrorKind::BadPlugin,
        "'" + path_ + "': its TFL_Api table is too small (struct_size " +
            std::to_string(api_->struct_size) + ")");
  }
}

void Plugin::check_required_functions() const {
  std::vector<std::string> missing;
  // A function is present when the table is long enough to hold it and the
  // pointer is set.
#define TFL_REQUIRE(table, Type, field)                                  \
  if (table == nullptr ||                                                \
      table->struct_size < TFL_STRUCT_SIZE(Type, field) ||               \
      table->field == nullptr) {                                         \
    missing.emplace_back(#field);                                        \
  }
  const TFL_CoreApi* core = api_->core;
  TFL_REQUIRE(core, TFL_CoreApi, Error_Destroy)
  TFL_REQUIRE(core, TFL_CoreApi, Error_Message)
  TFL_REQUIRE(core, TFL_CoreApi, Error_GetCode)
  TFL_REQUIRE(core, TFL_CoreApi, Plugin_GetInfo)
  TFL_REQUIRE(core, TFL_CoreApi, Plugin_Initialize)
  TFL_REQUIRE(core, TFL_CoreApi, Plugin_Shutdown)
  const TFL_DeviceApi* device = api_->device;
  TFL_REQUIRE(device, TFL_DeviceApi, Device_Count)
  TFL_REQUIRE(device, TFL_DeviceApi, Device_GetProperties)
  TFL_REQUIRE(device, TFL_DeviceApi, Device_Synchronize)
  TFL_REQUIRE(device, TFL_DeviceApi, Device_CanAccessPeer)
  const TFL_MemoryApi* memory = api_->memory;
  TFL_REQUIRE(memory, TFL_MemoryApi, Memory_Allocate)
  TFL_REQUIRE(memory, TFL_MemoryApi, Memory_Free)
  TFL_REQUIRE(memory, TFL_MemoryApi, Memory_GetInfo)
  TFL_REQUIRE(memory, TFL_MemoryApi, HostMemory_Allocate)
  TFL_REQUIRE(memory, TFL_MemoryApi, HostMemory_Free)
  TFL_REQUIRE(memory, TFL_MemoryApi, Memory_Copy)
  TFL_REQUIRE(memory, TFL_MemoryApi, Memory_Set)
  const TFL_StreamApi* stream = api_->stream;
  TFL_REQUIRE(stream, TFL_StreamApi, Stream_Create)
  TFL_REQUIRE(stream, TFL_StreamApi, Stream_Destroy)
  TFL_REQUIRE(stream, TFL_StreamApi, Stream_Synchronize)
  TFL_REQUIRE(stream, TFL_StreamApi, Stream_Query)
  TFL_REQUIRE(stream, TFL_StreamApi, Stream_WaitEvent)
  TFL_REQUIRE(stream, TFL_StreamApi, Event_Create)
  TFL_REQUIRE(stream, TFL_StreamApi, Event_Destroy)
  TFL_REQUIRE(stream, TFL_StreamApi, Event_Record)
  TFL_REQUIRE(stream, TFL_StreamApi, Event_Synchronize)
  TFL_REQUIRE(stream, TFL_StreamApi, Event_Query)
  TFL_REQUIRE(stream, TFL_StreamApi, Event_ElapsedTime)
#undef TFL_REQUIRE
  if (!missing.empty()) {
    std::ostringstream msg;
    msg << "'" << path_ << "' lacks " << missing.size()
        << " required ABI function(s): ";
    for (size_t i = 0; i < missing.size(); ++i) {
      msg << (i ? ", " : "") << missing[i];
    }
    msg << "; implement them (see torch_fl/plugin_api.h for the required "
           "groups) and rebuild the plugin";
    throw LoadError(LoadErrorKind::MissingFunctions, msg.str());
  }
}

namespace {
void host_log(void* /*host_data*/, int32_t level, const char* message) {
  if (message == nullptr) {
    return;
  }
  if (level >= TFL_LOG_WARNING) {
    TORCH_WARN(message);
  }
}

const TFL_HostServices kHostServices = {
    TFL_HostServices_STRUCT_SIZE,
    nullptr,
    &host_log,
};
} // namespace

void Plugin::initialize(const std::map<std::string, std::string>& options) {
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : options) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  TFL_Plugin_Initialize_Args args{};
  args.struct_size = TFL_Plugin_Initialize_Args_STRUCT_SIZE;
  args.host_abi_major = TFL_ABI_MAJOR;
  args.host_abi_minor = TFL_ABI_MINOR;
  args.host = &kHostServices;
  args.option_keys = keys.data();
  args.option_values = values.data();
  args.num_options = keys.size();
  if (TFL_Error* err = api_->core->Plugin_Initialize(&args)) {
    auto [code, message] = consume(err);
    const bool absent = code == TFL_ERR_UNAVAILABLE; // no hardware or driver here
    throw LoadError(
        absent ? LoadErrorKind::Unavailable : LoadErrorKind::InitializeFailed,
        "'" + path_ +
            (absent ? "' is unavailable on this machine: " : "' refused to initialize: ") +
            init_error_message(code, message));
  }
}

void Plugin::read_info() {
  TFL_Plugin_GetInfo_Args info{};
  info.struct_size = TFL_Plugin_GetInfo_Args_STRUCT_SIZE;
  if (TFL_Error* err = api_->core->Plugin_GetInfo(&info)) {
    throw LoadError(
        LoadErrorKind::BadPlugin,
        "'" + path_ + "': Plugin_GetInfo failed: " +
            init_error_message(*this, err));
  }
  auto str = [](const char* s) { return std::string(s ? s : ""); };
  name_ = str(info.name);
  vendor_ = str(info.vendor);
  version_ = str(info.version);
  device_type_ = str(info.device_type);
  description_ = str(info.description);

  TFL_Device_Count_Args count{};
  count.struct_size = TFL_Device_Count_Args_STRUCT_SIZE;
  if (TFL_Error* err = api_->device->Device_Count(&count)) {
    throw LoadError(
        LoadErrorKind::BadPlugin,
        "'" + path_ + "': Device_Count failed: " +
            init_error_message(*this, err));
  }
  if (count.count < 0 || count.count > 64) {
    throw LoadError(
        LoadErrorKind::BadPlugin,
        "'" + path_ + "': Device_Count reported " +
            std::to_string(count.count) + " devices; expected 0..64");
  }
  for (int d = 0; d < count.count; ++d) {
    TFL_DeviceProperties props{};
    props.struct_size = TFL_DeviceProperties_STRUCT_SIZE;
    TFL_Device_GetProperties_Args args{};
    args.struct_size = TFL_Device_GetProperties_Args_STRUCT_SIZE;
    args.device = d;
    args.properties = &props;
    if (TFL_Error* err = api_->device->Device_GetProperties(&args)) {
      throw LoadError(
          LoadErrorKind::BadPlugin,
          "'" + path_ + "': Device_GetProperties(" + std::to_string(d) +
              ") failed: " + init_error_message(*this, err));
    }
    DeviceInfo info_d;
    info_d.name = std::string(props.name, strnlen(props.name, sizeof(props.name)));
    info_d.total_memory = props.total_memory;
    info_d.capabilities = props.capabilities;
    info_d.memory_alignment = props.memory_alignment;
    info_d.preferred_memory_format = props.preferred_memory_format;
    info_d.compute_units = props.compute_units;
    info_d.version_major = props.version_major;
    info_d.version_minor = props.version_minor;
    devices_.push_back(std::move(info_d));
  }
  peer_.assign(devices_.size(), std::vector<uint8_t>(devices_.size(), 0));
  for (int d = 0; d < count.count; ++d) {
    for (int p = 0; p < count.count; ++p) {
      if (d == p) {
        continue;
      }
      TFL_Device_CanAccessPeer_Args args{};
      args.struct_size = TFL_Device_CanAccessPeer_Args_STRUCT_SIZE;
      args.device = d;
      args.peer = p;
      if (TFL_Error* err = api_->device->Device_CanAccessPeer(&args)) {
        consume(err);
        continue;
      }
      peer_[d][p] = args.can_access;
    }
  }
}

void Plugin::scan_symbol_kernels() {
  static constexpr size_t kPrefixLen = sizeof(TFL_OP_SYMBOL_PREFIX) - 1;
  for (const std::string& name : exported_function_names(path_)) {
    if (name.compare(0, kPrefixLen, TFL_OP_SYMBOL_PREFIX) != 0 ||
        name.size() == kPrefixLen) {
      continue;
    }
    void* fn = dlsym(handle_, name.c_str());
    if (fn == nullptr) {
      continue;
    }
    symbol_kernels_.push_back(
        {name, name.substr(kPrefixLen), reinterpret_cast<TFL_KernelFn>(fn)});
  }
}

// The library stays mapped: kernels, allocator deleters and static tables
// may still be referenced while the process tears down.
Plugin::~Plugin() = default;

void Plugin::shutdown() noexcept {
  if (shut_down_ || api_ == nullptr) {
    return;
  }
  shut_down_ = true;
  TFL_Plugin_Shutdown_Args args{};
  args.struct_size = TFL_Plugin_Shutdown_Args_STRUCT_SIZE;
  consume(api_->core->Plugin_Shutdown(&args));
}

const DeviceInfo& Plugin::device(int index) const {
  TORCH_CHECK(
      index >= 0 && index < device_count(),
      name_, ": device index ", index, " is out of range; the plugin has ",
      device_count(), " device(s)");
  return devices_[index];
}

bool Plugin::has_peer_access(int device, int peer) const {
  return device >= 0 && peer >= 0 && device < device_count() &&
      peer < device_count() && peer_[device][peer] != 0;
}

const TFL_KernelApi* Plugin::kernels() const {
  if (api_->struct_size < TFL_STRUCT_SIZE(TFL_Api, kernels)) {
    return nullptr;
  }
  return api_->kernels;
}

bool Plugin::has_host_mapping() const {
  const TFL_MemoryApi* m = api_->memory;
  return m->struct_size >= TFL_STRUCT_SIZE(TFL_MemoryApi, Memory_Unmap) &&
      m->Memory_MapToHost != nullptr && m->Memory_Unmap != nullptr;
}

std::pair<int32_t, std::string> Plugin::consume(TFL_Error* error) const {
  if (error == nullptr) {
    return {TFL_OK, ""};
  }
  TFL_Error_GetCode_Args code{};
  code.struct_size = TFL_Error_GetCode_Args_STRUCT_SIZE;
  code.error = error;
  api_->core->Error_GetCode(&code);
  TFL_Error_Message_Args msg{};
  msg.struct_size = TFL_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api_->core->Error_Message(&msg);
  std::string message =
      msg.message ? std::string(msg.message, msg.message_size) : "";
  TFL_Error_Destroy_Args destroy{};
  destroy.struct_size = TFL_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api_->core->Error_Destroy(&destroy);
  return {code.code, message};
}

void Plugin::check(TFL_Error* error, const char* what) const {
  if (error == nullptr) {
    return;
  }
  auto [code, message] = consume(error);
  std::string full = "plugin '" + name_ + "': " + what + " failed with " +
      error_code_name(code) + ": " + message;
  const c10::SourceLocation loc{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  if (code == TFL_ERR_UNAVAILABLE && static_cast<int64_t>(getpid()) != loaded_in_pid_) {
    // Plugin state does not survive fork() (core.h): say what a user can do.
    throw c10::AcceleratorError(
        loc, code,
        "the '" + c10::get_privateuse1_backend() + "' device cannot be used in a process forked "
        "from one that had initialized it (" + what + " failed); start processes that use the "
        "device with the 'spawn' start method: torch.multiprocessing.set_start_method('spawn'), "
        "multiprocessing.get_context('spawn'), or DataLoader(..., multiprocessing_context='spawn'). "
        "The plugin said: " + message);
  }
  switch (code) {
    case TFL_ERR_OUT_OF_MEMORY:
      throw c10::OutOfMemoryError(loc, full);
    case TFL_ERR_UNIMPLEMENTED:
      throw c10::NotImplementedError(loc, full);
    case TFL_ERR_INVALID_ARGUMENT:
      throw c10::ValueError(loc, full);
    default:
      throw c10::AcceleratorError(loc, code, full);
  }
}

Plugin& active_plugin() {
  Plugin* plugin = active_slot().get();
  TORCH_CHECK(
      plugin != nullptr,
      "no torch-fl plugin is registered in this process; call "
      "torch_fl.register_device_plugin(<name>) first");
  return *plugin;
}

Plugin* active_plugin_or_null() {
  return active_slot().get();
}

void set_active_plugin(std::unique_ptr<Plugin> plugin) {
  TORCH_CHECK(
      active_slot() == nullptr,
      "a torch-fl plugin is already registered in this process ('",
      active_slot()->name(), "')");
  active_slot() = std::move(plugin);
}

void check_device_index(c10::DeviceIndex index) {
  Plugin& plugin = active_plugin();
  if (index >= 0 && index < plugin.device_count()) {
    return;
  }
  throw c10::AcceleratorError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, TFL_ERR_INVALID_ARGUMENT,
      "invalid device index " + std::to_string(static_cast<int>(index)) + " for '" +
          c10::get_privateuse1_backend() + "': it has " + std::to_string(plugin.device_count()) +
          " device(s), so use an index from 0 to " + std::to_string(plugin.device_count() - 1));
}

} // namespace torch_fl::bridge
