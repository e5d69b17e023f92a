// Where the cuDNN runner finds libcudnn.so.9: it is opened with dlopen the first time the
// backend is used (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), so nvfp4 loads and runs
// everywhere else without cuDNN. Where it looks, in order:
//   NVFP4_CUDNN_PATH (the library file or its directory; nothing else is tried if set),
//   a libcudnn.so.9 already in the process (torch loads the one from its nvidia wheel),
//   the dynamic loader's search path, then the nvidia-cudnn wheels in the site-packages
//   this library was installed into (nvidia/cudnn/lib, nvidia/cu13/lib, nvidia/cu12/lib,
//   nvidia/cudnn_jit/lib).
// No cuDNN header here: the frontend is compiled only where graphs are.
#pragma once

#include <cstdint>
#include <string>

namespace nvfp4::detail::cudnn {

constexpr int64_t kMinVersion = 90000;        // any cuDNN 9: the BF16 matmul graph
constexpr int64_t kNativeMinVersion = 90700;  // FP4 block_scale_dequantize + matmul

struct Library {
  void* handle = nullptr;
  int64_t version = 0;
  std::string error;  // why it is unusable, when handle is null
};

// Opened once per process (thread-safe); handle null and error set when unusable.
const Library& library();

}  // namespace nvfp4::detail::cudnn
