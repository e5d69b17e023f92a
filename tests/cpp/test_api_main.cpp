// ctest for the public C API (nvfp4.h) and its C++ layer (nvfp4.hpp), one case per topic:
//
//   args_quantize, args_cuda_descriptors, args_dequantize, args_swizzle, args_gemm,
//   args_cxx, args_threads
//                   argument checking: every malformed call returns the right status with
//                   a message that names the parameter, and nothing crashes
//                   (test_api_args.cpp, test_api_gemm_args.cpp)
//   hardening       sizes past int64, raw enum values, alignment, overlaps
//                   (test_api_hardening.cpp)
//   caps            version, status strings, capability queries (test_api_caps.cpp)
//   cpu_roundtrip   CPU quantize -> dequantize -> GEMM against an independent decoder and
//                   float64 sums (test_api_roundtrip.cpp)
//   fp8             the FP8 cast on the CPU (test_api_fp8.cpp)
//   gpu_roundtrip   cudaMalloc'd quantize + GEMM per backend against the CPU results (exit
//                   77 = skipped when there is no usable GPU)
//   args            every args_* case; all: every case
#include <cstdio>
#include <exception>
#include <string>

#include "api_test.h"

using namespace api_test;

namespace {

struct Case {
  const char* name;
  int (*run)();
};

template <int (ArgsFixture::*Test)()>
int args_case() {
  ArgsFixture fixture;
  return (fixture.*Test)();
}

const Case kArgs[] = {
    {"args_quantize", &args_case<&ArgsFixture::quantize>},
    {"args_cuda_descriptors", &args_case<&ArgsFixture::cuda_descriptors>},
    {"args_dequantize", &args_case<&ArgsFixture::dequantize>},
    {"args_swizzle", &args_case<&ArgsFixture::swizzle>},
    {"args_gemm", &args_case<&ArgsFixture::gemm>},
    {"args_cxx", &args_case<&ArgsFixture::cxx_layer>},
    {"args_threads", &args_case<&ArgsFixture::threads>},
};
const Case kOthers[] = {
    {"hardening", &test_hardening},
    {"caps", &test_caps},
    {"cpu_roundtrip", &test_cpu_roundtrip},
    {"fp8", &test_fp8},
};

int run_args() {
  int rc = 0;
  for (const Case& c : kArgs) rc |= c.run();
  return rc;
}

int run(const std::string& which) {
  for (const Case& c : kArgs)
    if (which == c.name) return c.run();
  for (const Case& c : kOthers)
    if (which == c.name) return c.run();
  if (which == "args") return run_args();
  if (which == "gpu_roundtrip") return gpu_entry();
  if (which == "all") {
    int rc = run_args();
    for (const Case& c : kOthers) rc |= c.run();
    const int g = gpu_entry();
    return rc ? rc : (g == kSkip ? 0 : g);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = argc > 1 ? argv[1] : "all";
  for (int i = 2; i < argc; ++i) g_verbose |= std::string(argv[i]) == "-v";
  try {
    const int rc = run(which);
    if (rc >= 0) return rc;
  } catch (const nvfp4::Error& e) {
    std::fprintf(stderr, "unexpected nvfp4::Error (status %d): %s\n", static_cast<int>(e.status()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s <case>|args|all [-v]; cases:", argv[0]);
  for (const Case& c : kArgs) std::fprintf(stderr, " %s", c.name);
  for (const Case& c : kOthers) std::fprintf(stderr, " %s", c.name);
  std::fprintf(stderr, " gpu_roundtrip\n");
  return 2;
}
