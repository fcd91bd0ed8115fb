// lazy_library.h: loading a vendor library on first use.
#include "lazy_library.h"

#include <dlfcn.h>

#include <string>

#include "../../errors.h"

namespace flemu {

void* load_library(const LazyLibrary& lib) {
  void* h = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    fail(TFL_ERR_UNAVAILABLE, lib.what, " (", lib.soname, ") cannot be loaded (", why ? why : "unknown error",
         "): ", lib.remedy);
  }
  return h;
}

void* library_symbol(const LazyLibrary& lib, void* handle, const char* name) {
  void* fn = dlsym(handle, name);
  if (!fn) {
    const char* why = dlerror();
    fail(TFL_ERR_UNAVAILABLE, "the ", lib.what, " library flemu loaded has no ", name, " (",
         why ? why : "unknown error", "); flemu was built against ", lib.built_against);
  }
  return fn;
}

}  // namespace flemu
