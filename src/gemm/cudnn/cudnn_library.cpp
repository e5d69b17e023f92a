// Loading libcudnn.so.9 (see cudnn_library.h) and the runner's availability query.
#include "gemm/cudnn/cudnn_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "gemm/backends.h"

namespace cudnn_frontend {
// With dynamic loading the frontend resolves every cuDNN entry point through this
// handle; it is set once, before the first frontend call (library() below).
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace nvfp4::detail {
namespace cudnn {
namespace {

std::string directory_of_this_library() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&directory_of_this_library), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool is_directory(const std::string& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Library open_library() {
  Library lib;
  std::string tried;
  auto attempt = [&](const std::string& name, int flags) {
    dlerror();
    lib.handle = dlopen(name.c_str(), flags);
    if (!lib.handle && !(flags & RTLD_NOLOAD)) {
      const char* e = dlerror();  // already names the file
      tried += "\n  " + (e ? std::string(e) : name + ": not found");
    }
    return lib.handle != nullptr;
  };
  const char* forced = std::getenv("NVFP4_CUDNN_PATH");
  if (forced && *forced) {
    std::string p = forced;
    if (is_directory(p)) p += "/libcudnn.so.9";
    attempt(p, RTLD_NOW | RTLD_LOCAL);
  } else if (!attempt("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD) && !attempt("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL)) {
    const std::string here = directory_of_this_library();
    const char* wheels[] = {"/../nvidia/cudnn/lib", "/../nvidia/cu13/lib", "/../nvidia/cu12/lib",
                            "/../nvidia/cudnn_jit/lib"};
    for (const char* w : wheels)
      if (!here.empty() && attempt(here + w + "/libcudnn.so.9", RTLD_NOW | RTLD_LOCAL)) break;
  }
  if (!lib.handle) {
    lib.error = "cudnn: libcudnn.so.9 could not be loaded; tried:" + tried +
                "\nInstall cuDNN 9 (pip install nvidia-cudnn-cu13, or cu12 to match the CUDA driver), import torch "
                "first, or set NVFP4_CUDNN_PATH to libcudnn.so.9 or its directory";
    return lib;
  }
  using GetVersion = size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(dlsym(lib.handle, "cudnnGetVersion"));
  if (!get_version) {
    lib.error = "cudnn: the libcudnn.so.9 loaded has no cudnnGetVersion";
    lib.handle = nullptr;
    return lib;
  }
  lib.version = static_cast<int64_t>(get_version());
  if (lib.version < kMinVersion) {
    lib.error = "cudnn: libcudnn version " + std::to_string(lib.version) + " is too old; nvfp4 needs cuDNN 9";
    lib.handle = nullptr;
    return lib;
  }
  cudnn_frontend::cudnn_dlhandle = lib.handle;
  return lib;
}

}  // namespace

const Library& library() {
  static const Library lib = open_library();  // once per process, thread-safe
  return lib;
}

}  // namespace cudnn

int cudnn_available(int cc) {
  try {
    const cudnn::Library& lib = cudnn::library();
    if (!lib.handle) return 0;
    // The FP4 block-scale graph of the Blackwell path needs cuDNN >= 9.7.
    return cc >= 100 && lib.version < cudnn::kNativeMinVersion ? 0 : 1;
  } catch (...) {
    return 0;
  }
}

}  // namespace nvfp4::detail
