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
// A counter to advance (QuantJob::advance, cfg.offset_counter): where (1) runs with a
// workspace, its first CTA copies the counter's value into the workspace, for (2) to read in
// its place, and adds one; elsewhere a one-thread kernel adds one after (2).
#include "quant/common.cuh"
#include "quant/launch.cuh"

namespace nvfp4::detail {
namespace {

__global__ void advance_counter_kernel(uint64_t* counter) { *counter += 1u; }

// The passes; *advanced: the amax pass took the job's counter.
nvfp4_status_t quantize_passes(const QuantJob& job, cudaStream_t stream, bool* advanced) {
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
  QuantJob q = job;
  if (parts.counter_value) {
    q.cfg.offset_device = parts.counter_value;  // the value the amax pass read, before its +1
    *advanced = true;
  }
  if (q.cfg.block == NVFP4_BLOCK_1D && !wanted(q.col)) return quant::launch_rowwise(q, stream, parts);
  return quant::launch_tile(q, stream, parts);
}

}  // namespace

nvfp4_status_t cuda_advance_counter(uint64_t* counter, nvfp4_stream_t s) {
  advance_counter_kernel<<<1, 1, 0, reinterpret_cast<cudaStream_t>(s)>>>(counter);
  return gpu::check_launch("nvfp4 quantize (offset_counter +1) kernel");
}

nvfp4_status_t cuda_quantize(const QuantJob& job, nvfp4_stream_t s) {
  bool advanced = false;
  const nvfp4_status_t st = quantize_passes(job, reinterpret_cast<cudaStream_t>(s), &advanced);
  if (st != NVFP4_SUCCESS || job.advance == nullptr || advanced) return st;
  return cuda_advance_counter(job.advance, s);
}

}  // namespace nvfp4::detail
