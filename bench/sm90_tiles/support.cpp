// The one library function the GEMM template calls that lives outside its headers
// (src/api.cpp): the sweep keeps the last message and prints it on a failed run.
#include <cstdio>
#include <string>

#include "internal.h"

namespace nvfp4::detail {
nvfp4_status_t fail(nvfp4_status_t status, const std::string& message) {
  std::fprintf(stderr, "sm90_tiles: %s\n", message.c_str());
  return status;
}
}  // namespace nvfp4::detail
