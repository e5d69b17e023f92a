// Host launchers of the quantization kernel families, one per file, called by
// quantize.cu in stream order: the amax pass, then one quantize pass.
#pragma once

#include <cuda_runtime.h>

#include "internal.h"

namespace nvfp4::detail::quant {

// amax.cu: max |x| (and of the Hadamard transform where an output asks for it) into
// job.row.amax / job.col.amax. zero: the amax outputs hold anything and are zeroed here
// (by memsets first; with NVFP4_QUANT_COOP=1 inside the kernel that reduces into them,
// under a cooperative launch); else the caller has zeroed them on the stream.
nvfp4_status_t launch_amax(const QuantJob& job, cudaStream_t stream, bool zero);

// amax.cu: zeroes the amax output of each wanted direction (one float each) by memsets.
nvfp4_status_t zero_amax(const QuantJob& job, cudaStream_t stream);

// quantize_rowwise.cu: 1D, rowwise output only (RTN or SR, RHT along rows optional).
nvfp4_status_t launch_rowwise(const QuantJob& job, cudaStream_t stream);

// quantize_tile.cu: everything with a columnwise output, and every 2D quantization.
nvfp4_status_t launch_tile(const QuantJob& job, cudaStream_t stream);

// quantize_options.cu: the recipe options of 0.3 (4over6, the E4M3 bound, one amax per row,
// a given amax, MS-EDEN), amax included; needs_options_path says whether a job takes it.
bool needs_options_path(const QuantJob& job);
nvfp4_status_t launch_options(const QuantJob& job, cudaStream_t stream);

}  // namespace nvfp4::detail::quant
