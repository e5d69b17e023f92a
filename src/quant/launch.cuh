// Host launchers of the quantization kernel families, one per file, called by
// quantize.cu in stream order: the amax pass, then one quantize pass.
#pragma once

#include <cuda_runtime.h>

#include "internal.h"

namespace nvfp4::detail::quant {

// Where the amax pass left its result for the quantize pass: nothing set, in the amax
// outputs (job.row.amax / job.col.amax); else, per direction, n partials in the job's
// workspace (the bits of one CTA's max each), which the quantize kernel reduces
// (tensor_amax in common.cuh) and stores into the direction's amax output.
struct AmaxParts {
  const uint32_t* row = nullptr;
  int nrow = 0;
  const uint32_t* col = nullptr;
  int ncol = 0;
  // Where the amax pass left the value it read from the job's counter (QuantJob::advance)
  // before advancing it: the offset the quantize pass reads in its place (null: the amax pass
  // did not take the counter).
  const uint64_t* counter_value = nullptr;
};
// The workspace: the row partials, the column partials, then 16 bytes whose first 8 hold the
// counter's value for the quantize pass. The amax kernels' grids are capped to kAmaxParts.
constexpr int kCounterSlotBytes = 16;
constexpr int kAmaxParts =
    (NVFP4_QUANTIZE_WORKSPACE_BYTES - kCounterSlotBytes) / (2 * static_cast<int>(sizeof(uint32_t)));
constexpr int kCounterSlotOffset = NVFP4_QUANTIZE_WORKSPACE_BYTES - kCounterSlotBytes;
static_assert(kCounterSlotOffset % 16 == 0 && 2 * kAmaxParts * 4 <= kCounterSlotOffset, "workspace layout");

// amax.cu: max |x| (and of the Hadamard transform where an output asks for it). With parts
// given and a workspace in the job (job.amax_ws; NVFP4_QUANT_WORKSPACE=0 turns it off, for
// before/after measurements), into the workspace as partials, described in *parts; then, if
// the job has a counter to advance, one thread of the pass also copies its value into the
// workspace and adds one to it (parts->counter_value). Else into job.row.amax / job.col.amax
// with atomics: zero: they hold anything and are zeroed here by memsets first; else the
// caller has zeroed them on the stream.
nvfp4_status_t launch_amax(const QuantJob& job, cudaStream_t stream, bool zero, AmaxParts* parts);

// amax.cu: zeroes the amax output of each wanted direction (one float each) by memsets.
nvfp4_status_t zero_amax(const QuantJob& job, cudaStream_t stream);

// quantize_rowwise.cu: 1D, rowwise output only (RTN or SR, RHT along rows optional).
nvfp4_status_t launch_rowwise(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts);

// quantize_tile.cu: everything with a columnwise output, and every 2D quantization.
nvfp4_status_t launch_tile(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts);

// quantize_tile.cu: whether the quantize pass of a job (one the tile kernel runs, or the
// rowwise kernel's: false) walks x in ascending order; the amax pass walks the other way, so
// that the quantize pass starts on what the amax pass left in L2.
bool tile_walks_ascending(const QuantJob& job);

// quantize_options.cu: the recipe options of 0.3 (4over6, the E4M3 bound, one amax per row,
// a given amax, MS-EDEN), amax included; needs_options_path says whether a job takes it.
bool needs_options_path(const QuantJob& job);
nvfp4_status_t launch_options(const QuantJob& job, cudaStream_t stream);

}  // namespace nvfp4::detail::quant
