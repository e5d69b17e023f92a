// Host-only checks of the Blackwell CUTLASS runners and of the cuDNN loader: no kernel
// is launched and no GPU is needed, so they run in CI on any machine that builds the
// sm_100a / sm_120a objects.
//   - the scale-factor layout CUTLASS computes equals core::swizzle_offset (the layout
//     our quantizer writes), over the whole padded range, for odd and real shapes;
//   - can_implement accepts the shapes the runners document and refuses the others
//     with a message that says what to change;
//   - the workspace plan is consistent (alpha, widened bias and C, CUTLASS's part);
//   - each kernel's shared memory fits its target (also a static_assert in the .cu files);
//   - the runner table's target rule (an sm_100a cubin does not run on a B300, an sm_100f
//     one does) and each runner's own host-side self-check;
//   - with NVFP4_CUDNN_PATH pointing nowhere, the cuDNN runner reports a clean error; with a
//     loadable libcudnn.so.9, both cuDNN graphs (fused and separate epilogue) validate.
// Prints "N passed, N failed" and exits non-zero on any failure.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gemm/backends.h"
#include "nvfp4/nvfp4.h"

using namespace nvfp4::detail;

static int g_passed = 0, g_failed = 0;

static void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

static const char* dtype_name(nvfp4_dtype_t t) {
  return t == NVFP4_DTYPE_FLOAT32 ? "f32" : t == NVFP4_DTYPE_FLOAT16 ? "f16" : "bf16";
}

// A job with stand-in, 256-byte-aligned addresses: nothing here dereferences them.
static GemmJob fake_job(int64_t m, int64_t n, int64_t k, nvfp4_dtype_t d) {
  GemmJob j;
  auto addr = [](uintptr_t i) { return reinterpret_cast<uint8_t*>(uintptr_t(0x10000000) * i); };
  j.a = addr(1);
  j.sfa = addr(2);
  j.amax_a = reinterpret_cast<const float*>(addr(3));
  j.b = addr(4);
  j.sfb = addr(5);
  j.amax_b = reinterpret_cast<const float*>(addr(6));
  j.d = addr(7);
  j.m = m;
  j.n = n;
  j.k = k;
  j.layout = NVFP4_SCALES_SWIZZLED;
  j.d_dtype = d;
  return j;
}

static std::string shape_str(const GemmJob& j) {
  return "M=" + std::to_string(j.m) + " N=" + std::to_string(j.n) + " K=" + std::to_string(j.k) + " " +
         dtype_name(j.d_dtype);
}

struct Shape3 {
  int64_t m, n, k;
};

// Shapes every runner must accept: odd M, M = 1, K = 32 (one half-stage), real LLM shapes.
static const std::vector<Shape3> kGood = {{1, 8, 32},       {7, 16, 64},        {13, 136, 96},
                                          {31, 256, 1056},  {128, 128, 256},    {129, 4096, 4096},
                                          {4096, 4096, 4096}, {4096, 14336, 4096}, {16, 4096, 14336},
                                          {2048, 128256, 4096}};

template <class CanImpl, class WsSize>
static void check_runner(const char* arch, CanImpl can_implement, WsSize workspace_size) {
  const nvfp4_dtype_t dtypes[] = {NVFP4_DTYPE_BFLOAT16, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_FLOAT32};
  for (nvfp4_dtype_t d : dtypes) {
    for (const Shape3& s : kGood) {
      GemmJob j = fake_job(s.m, s.n, s.k, d);
      nvfp4_status_t st = can_implement(j);
      check(st == NVFP4_SUCCESS, std::string(arch) + " can_implement(" + shape_str(j) + ") = " +
                                     std::to_string(st) + ": " + nvfp4_last_error());
      // With C (same dtype, beta != 0) and a bias of each dtype.
      j.c = j.d;
      j.c_dtype = d;
      j.beta = 0.5f;
      j.bias = reinterpret_cast<const void*>(uintptr_t(0x90000000));
      j.bias_dtype = NVFP4_DTYPE_BFLOAT16;
      st = can_implement(j);
      check(st == NVFP4_SUCCESS, std::string(arch) + " can_implement(" + shape_str(j) + " +C +bias) = " +
                                     std::to_string(st) + ": " + nvfp4_last_error());
    }

    // Workspace: alpha (256 B) + bias widened to fp32 + whatever CUTLASS adds, each part
    // 256-byte aligned; a 16-bit C for an fp32 output adds an M*N fp32 copy.
    GemmJob j = fake_job(129, 4096, 4096, d);
    const size_t plain = workspace_size(j);
    check(plain >= 256 && plain % 256 == 0, std::string(arch) + " workspace " + std::to_string(plain));
    j.bias = reinterpret_cast<const void*>(uintptr_t(0x90000000));
    j.bias_dtype = NVFP4_DTYPE_FLOAT32;
    const size_t with_bias = workspace_size(j);
    check(with_bias == plain + 4096 * 4, std::string(arch) + " workspace with bias " + std::to_string(with_bias) +
                                             ", expected " + std::to_string(plain + 4096 * 4));
    if (d == NVFP4_DTYPE_FLOAT32) {
      j.c = j.d;
      j.c_dtype = NVFP4_DTYPE_BFLOAT16;
      j.beta = 1.0f;
      const size_t with_c = workspace_size(j);
      check(with_c == with_bias + size_t(129) * 4096 * 4,
            std::string(arch) + " workspace with widened C " + std::to_string(with_c));
      check(can_implement(j) == NVFP4_SUCCESS, std::string(arch) + " bf16 C into f32 D: " + nvfp4_last_error());
    }
  }

  // Refusals, each with the reason in the message.
  struct Bad {
    GemmJob job;
    const char* expect;  // a word the message must contain
  };
  std::vector<Bad> bad;
  bad.push_back({fake_job(128, 128, 48, NVFP4_DTYPE_BFLOAT16), "multiple of 32"});
  bad.push_back({fake_job(128, 128, 16, NVFP4_DTYPE_FLOAT32), "multiple of 32"});
  bad.push_back({fake_job(128, 12, 64, NVFP4_DTYPE_BFLOAT16), "16 bytes"});
  bad.push_back({fake_job(128, 6, 64, NVFP4_DTYPE_FLOAT32), "16 bytes"});
  {
    GemmJob j = fake_job(128, 128, 64, NVFP4_DTYPE_BFLOAT16);
    j.layout = NVFP4_SCALES_LINEAR;
    bad.push_back({j, "swizzle"});
  }
  {
    GemmJob j = fake_job(128, 128, 64, NVFP4_DTYPE_BFLOAT16);
    j.sfb = reinterpret_cast<const uint8_t*>(uintptr_t(0x50000008));
    bad.push_back({j, "aligned"});
  }
  {
    GemmJob j = fake_job(128, 128, 64, NVFP4_DTYPE_BFLOAT16);
    j.c = j.d;
    j.c_dtype = NVFP4_DTYPE_FLOAT32;  // narrowing C would round it: refused
    j.beta = 1.0f;
    bad.push_back({j, "dtype"});
  }
  for (const Bad& b : bad) {
    nvfp4_status_t st = can_implement(b.job);
    std::string msg = nvfp4_last_error();
    check(st == NVFP4_ERROR_NOT_SUPPORTED && msg.find(b.expect) != std::string::npos,
          std::string(arch) + " refuses " + shape_str(b.job) + " (layout " + std::to_string(b.job.layout) +
              "): status " + std::to_string(st) + ", message '" + msg + "', expected '" + b.expect + "'");
  }
}

template <class Compare>
static void check_layout(const char* arch, Compare compare) {
  const int64_t rows[] = {1, 7, 31, 128, 129, 255, 300, 4096};
  const int64_t ks[] = {16, 32, 48, 64, 96, 256, 1040, 4096};
  for (int64_t r : rows)
    for (int64_t k : ks) {
      std::string diff = compare(r, k);
      check(diff.empty(), std::string(arch) + " scale layout: " + diff);
    }
}

static void check_target_rule() {
  struct Case {
    const char* target;
    int cc;
    bool runs;
  };
  const Case cases[] = {{"100a", 100, true},  {"100a", 103, false}, {"100f", 100, true},  {"100f", 103, true},
                        {"100f", 110, false}, {"100f", 120, false}, {"103a", 103, true},  {"103a", 100, false},
                        {"110f", 110, true},  {"110f", 100, false}, {"120f", 120, true},  {"120f", 121, true},
                        {"120a", 121, false}, {"121a", 121, true},  {"121a", 120, false}, {"90a", 90, true},
                        {"90a", 100, false},  {"120", 121, true},   {"100x", 100, false}, {"", 100, false},
                        {"100f", 101, false}, {"100", 101, false}};
  for (const Case& c : cases)
    check(target_runs_on(c.target, c.cc) == c.runs,
          std::string("target_runs_on(") + c.target + ", " + std::to_string(c.cc) + ") should be " +
              (c.runs ? "true" : "false"));
  for (int i = 0; i < runner_count(); ++i) {
    const Runner& r = *runner_at(i);
    int n = 0;
    nvfp4_status_t st = runner_self_check(r, &n);
    const bool no_cudnn = r.backend == NVFP4_BACKEND_CUDNN && st == NVFP4_ERROR_CUDNN;
    check(st == NVFP4_SUCCESS || no_cudnn, std::string(r.name) + " self-check: " + nvfp4_last_error());
    std::printf("runner %-22s built=%d targets=%-14s self-checks %s%d\n", r.name, r.built ? 1 : 0,
                r.built ? object_targets(r.objects & ~kObjCommon) : "", no_cudnn ? "skipped (no libcudnn) " : "", n);
  }
}

template <class Smem>
static void check_smem(const char* arch, Smem smem) {
  const nvfp4_dtype_t dtypes[] = {NVFP4_DTYPE_BFLOAT16, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_FLOAT32};
  for (nvfp4_dtype_t d : dtypes) {
    int limit = 0;
    const int bytes = smem(d, &limit);
    check(bytes > 0 && bytes <= limit, std::string(arch) + " " + dtype_name(d) + " kernel: " + std::to_string(bytes) +
                                           " bytes of shared memory, limit " + std::to_string(limit));
    std::printf("%s %s kernel: %d bytes of shared memory of %d (headroom %d)\n", arch, dtype_name(d), bytes, limit,
                limit - bytes);
  }
}

#if defined(NVFP4_HAS_SM100_GEMM) || defined(NVFP4_HAS_SM120_GEMM)
// Every check of one architecture's table (gemm/common/sm1xx_blockscaled.cuh).
static void check_arch(const BlockscaledGemms& g) {
  check_layout(g.arch, g.compare_scale_layout);
  check_runner(g.arch, g.can_implement, g.workspace_size);
  check_smem(g.arch, g.smem_bytes);
}
#endif

int main() {
  int runners = 0;
  check_target_rule();
#if defined(NVFP4_HAS_SM100_GEMM)
  ++runners;
  check_arch(sm100_gemms());
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
  ++runners;
  check_arch(sm120_gemms());
#endif
#if defined(NVFP4_HAS_CUDNN)
  ++runners;
  {
    // ctest sets NVFP4_CUDNN_PATH to a file that does not exist for this binary's
    // "missing" run; without it, the loader may or may not find a libcudnn.so.9.
    const char* forced = std::getenv("NVFP4_CUDNN_PATH");
    int avail = cudnn_available(100);
    check(avail == 0 || avail == 1, "cudnn_available(100) is 0 or 1");
    if (forced && std::string(forced).find("nonexistent") != std::string::npos) {
      check(avail == 0, "cudnn_available() with NVFP4_CUDNN_PATH=" + std::string(forced));
      GemmJob j = fake_job(128, 128, 64, NVFP4_DTYPE_BFLOAT16);
      size_t bytes = 1;
      nvfp4_status_t st = cudnn_gemm_workspace_size(j, 100, &bytes);
      std::string msg = nvfp4_last_error();
      check(st == NVFP4_ERROR_CUDNN && msg.find("libcudnn") != std::string::npos,
            "cudnn_gemm_workspace_size without cuDNN: status " + std::to_string(st) + ", '" + msg + "'");
      st = cudnn_gemm(j, 100, nullptr, 0, nullptr);
      msg = nvfp4_last_error();
      check(st == NVFP4_ERROR_CUDNN && msg.find("libcudnn") != std::string::npos,
            "cudnn_gemm without cuDNN: status " + std::to_string(st) + ", '" + msg + "'");
    } else if (avail) {
      // Both graphs of both paths validate in the frontend (no GPU needed).
      for (int cc : {90, 100, 120})
        for (bool mx : {false, true}) {
          int n = 0;
          nvfp4_status_t st = cudnn_check_graphs(cc, mx, &n);
          check(st == NVFP4_SUCCESS && n > 0, std::string("cudnn ") + (mx ? "mxfp4" : "nvfp4") + " graphs at cc " +
                                                  std::to_string(cc) + ": " + std::to_string(n) + " validated; " +
                                                  nvfp4_last_error());
        }
    }
  }
#endif
  std::printf("runners checked: %d\n", runners);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
