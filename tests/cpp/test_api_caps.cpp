// Version, status strings and capability queries of the C API and its C++ layer.
#include "api_test.h"

namespace api_test {

int test_caps() {
  // Version: the loaded library is the one this header describes.
  const std::string v = nvfp4_version_string();
  std::printf("nvfp4 %s (header %s), CUDA archs \"%s\", %d CUDA device(s)\n", v.c_str(),
              nvfp4::header_version().c_str(), nvfp4_build_cuda_archs(), nvfp4_cuda_device_count());
  CHECK(v == nvfp4::header_version());
  CHECK(nvfp4::runtime_matches_header());
  CHECK(nvfp4_build_cuda_archs() != nullptr);
  // Every target is arch-specific ("90a") or a family ("100f", the default for Blackwell).
  for (const std::string& a : nvfp4::build_cuda_archs()) CHECK(!a.empty() && (a.back() == 'a' || a.back() == 'f'));

  // Status strings: defined for every status, distinct, and safe for unknown values.
  std::set<std::string> seen;
  for (int s = NVFP4_SUCCESS; s <= NVFP4_ERROR_INTERNAL; ++s) {
    const char* str = nvfp4_status_string(static_cast<nvfp4_status_t>(s));
    CHECK(str != nullptr && *str != '\0');
    if (str) seen.insert(str);
  }
  CHECK(seen.size() == 7);
  for (int s : {-1, 7, 1000}) {
    const char* str = nvfp4_test_c_status_string(s);
    CHECK(str != nullptr && *str != '\0');
  }
  CHECK(std::string(nvfp4_last_error()).empty());

  // Capabilities never fail, whatever they are asked.
  const int n = nvfp4_cuda_device_count();
  CHECK(n >= 0);
  if (n == 0) CHECK(nvfp4_cuda_device_cc(0) == 0);
  for (int i = 0; i < n; ++i) CHECK(nvfp4_cuda_device_cc(i) >= 10);
  CHECK(nvfp4_cuda_device_cc(-1) == 0);
  CHECK(nvfp4_cuda_device_cc(1 << 20) == 0);
  CHECK(nvfp4_backend_supported(NVFP4_BACKEND_REFERENCE, 0) == 1);
  CHECK(nvfp4_backend_supported(NVFP4_BACKEND_CUTLASS, 0) == 0);
  CHECK(nvfp4_backend_supported(NVFP4_BACKEND_CUDNN, 0) == 0);
  CHECK(nvfp4_test_c_backend_supported(77, 0) == 0);
  CHECK(nvfp4_test_c_backend_supported(-3, 90) == 0);
  for (int cc : {-5, 75, 80, 89, 90, 100, 103, 120, 121, 999}) {
    for (int b = NVFP4_BACKEND_AUTO; b <= NVFP4_BACKEND_CUDNN; ++b) {
      const int r = nvfp4_backend_supported(static_cast<nvfp4_backend_t>(b), cc);
      CHECK(r == 0 || r == 1);
    }
  }
  // Without CUDA in the build no GPU backend can be supported anywhere.
  if (nvfp4::build_cuda_archs().empty())
    for (int cc : {90, 100, 120}) CHECK(!nvfp4::backend_supported(NVFP4_BACKEND_CUTLASS, cc));
  for (int i = 0; i < n; ++i) {
    const int cc = nvfp4_cuda_device_cc(i);
    std::printf("device %d: cc %d, cutlass %d, cudnn %d, auto %d\n", i, cc,
                nvfp4_backend_supported(NVFP4_BACKEND_CUTLASS, cc), nvfp4_backend_supported(NVFP4_BACKEND_CUDNN, cc),
                nvfp4_backend_supported(NVFP4_BACKEND_AUTO, cc));
  }

  // Defaults promised by the header.
  nvfp4_quant_config_t cfg;
  std::memset(&cfg, 0x5a, sizeof cfg);
  nvfp4_quant_config_default(&cfg);
  CHECK(cfg.block == NVFP4_BLOCK_1D && cfg.rounding == NVFP4_ROUND_NEAREST);
  CHECK(cfg.scale_layout == NVFP4_SCALES_SWIZZLED && cfg.rht == NVFP4_RHT_NONE);
  CHECK(cfg.rht_sign_mask == nvfp4_default_rht_sign_mask() && cfg.seed == 0 && cfg.offset == 0);
  // TransformerEngine's wgrad signs [1,1,1,-1,1,-1,-1,-1,-1,-1,-1,1,-1,1,-1,-1], bit i = lane i negative.
  const int signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  uint32_t mask = 0;
  for (int i = 0; i < 16; ++i) mask |= (signs[i] < 0 ? 1u : 0u) << i;
  CHECK(nvfp4_default_rht_sign_mask() == mask);

  // Size helpers against the layouts written in nvfp4.h.
  const auto r = nvfp4::rowwise_layout(200, 96);
  CHECK(r.data_rows == 200 && r.data_cols == 48 && r.scale_rows == 256 && r.scale_cols == 8);
  const auto rl = nvfp4::rowwise_layout(200, 96, NVFP4_SCALES_LINEAR);
  CHECK(rl.scale_rows == 200 && rl.scale_cols == 6 && rl.scale_bytes() == 1200);
  const auto c = nvfp4::columnwise_layout(37, 64);
  CHECK(c.rows == 64 && c.cols == 48 && c.data_rows == 64 && c.data_cols == 24 && c.scale_rows == 128 &&
        c.scale_cols == 4);
  const auto cl = nvfp4::columnwise_layout(37, 64, NVFP4_SCALES_LINEAR);
  CHECK(cl.scale_rows == 64 && cl.scale_cols == 3);
  const int64_t shp[3] = {2, 3, 32};
  CHECK(nvfp4::flatten_2d(shp) == std::make_pair(int64_t{6}, int64_t{32}));
  CHECK(r.packed_bytes() >= r.data_bytes() + r.scale_bytes() + 4);
  return finish("caps");
}

}  // namespace api_test
