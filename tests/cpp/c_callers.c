/* The C API called from C, with plain ints where the prototypes have enum parameters.
 * In C an enum parameter may hold any int (the type is compatible with an integer type);
 * in C++ an out-of-range enum value is undefined behaviour, so the C++ tests reach these
 * entry points through this file to pass what a C caller can. */
#include "nvfp4/nvfp4.h"

nvfp4_status_t nvfp4_test_c_dequantize(const nvfp4_quantized_t* q, int scale_layout, nvfp4_tensor_t* out) {
  return nvfp4_dequantize(q, (nvfp4_scale_layout_t)scale_layout, out, 0);
}

const char* nvfp4_test_c_status_string(int status) { return nvfp4_status_string((nvfp4_status_t)status); }

int nvfp4_test_c_backend_supported(int backend, int cc) {
  return nvfp4_backend_supported((nvfp4_backend_t)backend, cc);
}
