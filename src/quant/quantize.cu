// cuda_quantize: the two passes of a quantization, in stream order, with no host
// synchronization. (1) zero the amax outputs and reduce max |x| (or max |RHT(x)|) into
// them with atomics; (2) one quantize kernel that reads those amaxes from device memory.
// Which quantize kernel: 1D with only a rowwise output takes the rowwise kernel (no
// shared memory); anything with a columnwise output, and every 2D quantization, takes
// the tile kernel, which reads x once for both outputs.
#include "quant/common.cuh"
#include "quant/launch.cuh"

namespace nvfp4::detail {

nvfp4_status_t cuda_quantize(const QuantJob& job, nvfp4_stream_t s) {
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  for (const QuantOut* o : {&job.row, &job.col}) {
    if (!wanted(*o) || quant::needs_options_path(job)) continue;  // the options path zeroes its own
    const cudaError_t err = cudaMemsetAsync(o->amax, 0, sizeof(float), stream);
    if (err != cudaSuccess) return fail(NVFP4_ERROR_CUDA, std::string("nvfp4 quantize: cudaMemsetAsync: ") + cudaGetErrorString(err));
  }
  if (job.rows == 0 || job.cols == 0) return NVFP4_SUCCESS;  // amax = 0, no other bytes to write
  if (!wanted(job.row) && !wanted(job.col)) return NVFP4_SUCCESS;
  if (quant::needs_options_path(job)) return quant::launch_options(job, stream);
  if (nvfp4_status_t st = quant::launch_amax(job, stream); st != NVFP4_SUCCESS) return st;
  if (job.cfg.block == NVFP4_BLOCK_1D && !wanted(job.col)) return quant::launch_rowwise(job, stream);
  return quant::launch_tile(job, stream);
}

}  // namespace nvfp4::detail
