// cuda_quantize: the two passes of a quantization, in stream order, with no host
// synchronization. (1) the amax pass: max |x| (or max |RHT(x)|) as one partial per CTA
// into the job's workspace, or, without one, into the amax outputs with atomics after two
// memsets zero them (amax.cu); (2) one quantize kernel that reduces the partials (and
// stores the amax outputs) or reads the amax outputs, from device memory. A given amax
// (NVFP4_AMAX_GIVEN with no other recipe option) skips (1): the quantize kernel reduces it
// as a single partial.
// Which quantize kernel: 1D with only a rowwise output takes the rowwise kernel (no
// shared memory); anything with a columnwise output, and every 2D quantization, takes
// the tile kernel, which reads x once for both outputs.
#include "quant/common.cuh"
#include "quant/launch.cuh"

namespace nvfp4::detail {

nvfp4_status_t cuda_quantize(const QuantJob& job, nvfp4_stream_t s) {
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  if (!wanted(job.row) && !wanted(job.col)) return NVFP4_SUCCESS;
  // (the API answers an empty tensor itself; kept for a direct caller) amax = 0, no other bytes
  if (job.rows == 0 || job.cols == 0) return quant::zero_amax(job, stream);
  if (quant::needs_options_path(job)) return quant::launch_options(job, stream);  // zeroes its own amax outputs
  quant::AmaxParts parts;
  if (job.cfg.amax_mode == NVFP4_AMAX_GIVEN) {
    // no amax pass: the given amax is the one partial of each wanted direction, so the
    // quantize kernel reads it as it starts and CTA 0 stores it into the amax outputs (the
    // bits as given: one partial reduces to itself, whatever its sign or NaN payload)
    const uint32_t* given = reinterpret_cast<const uint32_t*>(job.cfg.amax_in);
    if (wanted(job.row)) parts.row = given, parts.nrow = 1;
    if (wanted(job.col)) parts.col = given, parts.ncol = 1;
  } else if (nvfp4_status_t st = quant::launch_amax(job, stream, true, &parts); st != NVFP4_SUCCESS) {
    return st;
  }
  if (job.cfg.block == NVFP4_BLOCK_1D && !wanted(job.col)) return quant::launch_rowwise(job, stream, parts);
  return quant::launch_tile(job, stream, parts);
}

}  // namespace nvfp4::detail
