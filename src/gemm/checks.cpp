// Host-only self-checks of the GEMM runners (nvfp4_runner_check): what can be verified of
// kernels without running them, so that builds for GPUs this project cannot borrow are
// still checked wherever they are built, CI included.
//   cutlass sm100 / sm110 / sm120 (NVFP4 and MXFP4 rows): the scale-factor layout CUTLASS
//     computes equals the one nvfp4 writes (core::swizzle_offset) over the whole padded
//     range of odd and real shapes; can_implement accepts the shapes the runner documents,
//     for every output dtype it has (MXFP4: BF16, the others refused), with and without C
//     and bias; each kernel's shared memory fits its target.
//   cutlass sm100 / sm110 / sm120 grouped: the grouped kernels' per-group scale layout equals
//     the swizzle, can_implement takes the documented per-group problems, shared memory fits.
//   cudnn: the fused and the separate-epilogue graphs of the runner's path validate in the
//     frontend (needs a loadable libcudnn.so.9; no GPU).
#include <string>

#include "gemm/backends.h"

namespace nvfp4::detail {
namespace {

[[maybe_unused]] GemmJob fake_job(int64_t m, int64_t n, int64_t k, nvfp4_dtype_t d, Format f) {
  // Stand-in, 256-byte-aligned addresses: nothing here dereferences them.
  auto addr = [](uintptr_t i) { return reinterpret_cast<uint8_t*>(uintptr_t(0x10000000) * i); };
  GemmJob j;
  j.format = f;
  const bool mx = f == Format::kMxfp4;  // no per-tensor scale
  j.a = addr(1);
  j.sfa = addr(2);
  j.amax_a = mx ? nullptr : reinterpret_cast<const float*>(addr(3));
  j.b = addr(4);
  j.sfb = addr(5);
  j.amax_b = mx ? nullptr : reinterpret_cast<const float*>(addr(6));
  j.d = addr(7);
  j.m = m;
  j.n = n;
  j.k = k;
  j.layout = NVFP4_SCALES_SWIZZLED;
  j.d_dtype = d;
  return j;
}

#if defined(NVFP4_HAS_SM100_GEMM) || defined(NVFP4_HAS_SM120_GEMM)
// The checks of one Blackwell row: its architecture's table, its operand format.
nvfp4_status_t check_blockscaled(const Runner& r, const BlockscaledGemms& g, int* checked) {
  const char* arch = r.name;
  const Format format = r.format;
  const bool mx = format == Format::kMxfp4;
  auto compare = mx ? g.mx_compare_scale_layout : g.compare_scale_layout;
  auto smem = mx ? g.mx_smem_bytes : g.smem_bytes;
  auto can_implement = g.can_implement;
  int n = 0;
  const int64_t rows[] = {1, 7, 31, 128, 129, 300, 4096};
  const int64_t ks[] = {16, 32, 48, 96, 1040, 4096};
  for (int64_t r : rows)
    for (int64_t k : ks) {
      std::string diff = compare(r, k);
      if (!diff.empty()) return fail(NVFP4_ERROR_INTERNAL, std::string(arch) + " scale layout: " + diff);
      ++n;
    }
  struct Shape {
    int64_t m, n, k;
  };
  const Shape good[] = {{1, 8, 32}, {13, 136, 96}, {129, 4096, 4096}, {4096, 14336, 4096}, {2048, 128256, 4096}};
  const nvfp4_dtype_t dtypes[] = {NVFP4_DTYPE_BFLOAT16, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_FLOAT32};
  for (nvfp4_dtype_t d : dtypes) {
    if (format == Format::kMxfp4 && d != NVFP4_DTYPE_BFLOAT16) {
      // The MXFP4 kernel is BF16-output only: the others must be refused, by name.
      if (can_implement(fake_job(128, 128, 128, d, format)) == NVFP4_SUCCESS)
        return fail(NVFP4_ERROR_INTERNAL, std::string(arch) + ": mxfp4 accepted output dtype " + std::to_string(d));
      clear_error();
      ++n;
      continue;
    }
    int limit = 0;
    const int bytes = smem(d, &limit);
    if (bytes <= 0 || bytes > limit)
      return fail(NVFP4_ERROR_INTERNAL, std::string(arch) + ": kernel for output dtype " + std::to_string(d) +
                                            " uses " + std::to_string(bytes) + " bytes of shared memory, limit " +
                                            std::to_string(limit));
    ++n;
    for (const Shape& s : good)
      for (int epi = 0; epi < 2; ++epi) {
        GemmJob j = fake_job(s.m, s.n, s.k, d, format);
        if (epi) {
          j.c = j.d;
          j.c_dtype = d;
          j.beta = 0.5f;
          j.bias = reinterpret_cast<const void*>(uintptr_t(0x90000000));
          j.bias_dtype = NVFP4_DTYPE_BFLOAT16;
        }
        if (can_implement(j) != NVFP4_SUCCESS)
          return fail(NVFP4_ERROR_INTERNAL, std::string(arch) + ": can_implement refused M=" + std::to_string(s.m) +
                                                " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) +
                                                (epi ? " +C +bias" : "") + ": " + nvfp4_last_error());
        ++n;
      }
  }
  *checked = n;
  return NVFP4_SUCCESS;
}

#endif

}  // namespace

nvfp4_status_t runner_self_check(const Runner& r, int* checked) {
  *checked = 0;
  if (!r.built) return NVFP4_SUCCESS;
  // The Blackwell CUTLASS rows are the ones that launch their architecture's kernel object.
#if defined(NVFP4_HAS_SM100_GEMM)
  const std::string name = r.name;
  if (name == "cutlass-sm100-grouped" || name == "cutlass-sm110-grouped") return sm100_grouped_self_check(checked);
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
  if (std::string(r.name) == "cutlass-sm120-grouped") return sm120_grouped_self_check(checked);
#endif
#if defined(NVFP4_HAS_SM100_GEMM)
  if (r.objects & kObjSm100) return check_blockscaled(r, sm100_gemms(), checked);
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
  if (r.objects & kObjSm120) return check_blockscaled(r, sm120_gemms(), checked);
#endif
#if defined(NVFP4_HAS_CUDNN)
  if (r.backend == NVFP4_BACKEND_CUDNN) return cudnn_check_graphs(r.cc_min, r.format == Format::kMxfp4, checked);
#endif
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
