// The vendor libraries flemu calls (OpenBLAS, oneDNN) load on first use, not
// with flemu: mapping and relocating them costs milliseconds at every
// `import torch` that autoloads the plugin, for processes that may never run
// a GEMM or a convolution. flemu does not link them. Each library's loader
// (blas_loader.cpp, dnnl_loader.cpp) defines the C functions flemu calls with
// FLEMU_LAZY_FORWARD; each finds its function in the library once. A function
// flemu starts to call and that no loader forwards fails flemu's link
// (--no-undefined).
#ifndef FLEMU_KERNELS_SUPPORT_LAZY_LIBRARY_H_
#define FLEMU_KERNELS_SUPPORT_LAZY_LIBRARY_H_

namespace flemu {

// What flemu needs to know to load a library and to say what went wrong.
struct LazyLibrary {
  const char* soname;         // dlopen'ed through flemu's own run path
  const char* what;           // "OpenBLAS": for messages
  const char* built_against;  // the version flemu was built with: for messages
  const char* remedy;         // what to do when it cannot be loaded
};

// The library's handle, loaded on the first call (RTLD_NOW | RTLD_LOCAL). A
// library that cannot be loaded fails with TFL_ERR_UNAVAILABLE naming the
// remedy, on this call and every later one.
void* load_library(const LazyLibrary& lib);

// `name` in the loaded library; TFL_ERR_UNAVAILABLE when it has no such symbol.
void* library_symbol(const LazyLibrary& lib, void* handle, const char* name);

}  // namespace flemu

// Defines the C function `name` as a call of the same function in the
// LazyLibrary `lib`, whose loaded handle `handle()` returns.
#define FLEMU_LAZY_FORWARD(lib, handle, ret, name, params, args)                   \
  extern "C" ret name params {                                                     \
    using Fn = ret(*) params;                                                      \
    static const Fn fn = reinterpret_cast<Fn>(flemu::library_symbol(lib, handle(), #name)); \
    return fn args;                                                                \
  }

#endif  // FLEMU_KERNELS_SUPPORT_LAZY_LIBRARY_H_
