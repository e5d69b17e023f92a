"""nvfp4: NVIDIA's 4-bit floating point format (NVFP4) for PyTorch.

E2M1 values, one E4M3 scale per 16 values and one FP32 scale per tensor; quantization,
FP4 GEMMs (CUTLASS and cuDNN backends, a CPU reference) and training layers.
"""
from __future__ import annotations

try:
    from . import _ops
except ImportError as e:  # pragma: no cover
    raise ImportError("nvfp4: the compiled extension nvfp4._C could not be loaded "
                      f"({e}); reinstall with `pip install .`") from e

from ._format import DEFAULT_RHT_SIGNS, rht_matrix
from ._tensor import NVFP4Tensor, dequantize
from ._quantize import quantize, swizzle_scales, unswizzle_scales
from ._gemm import gemm
from ._mx import MXFP4Tensor, gemm_mxfp4, quantize_mxfp4
from ._options import dequantize_options, percentile_amax, quantize_options
from ._grouped import BatchedNVFP4Tensor, GroupedNVFP4Tensor, batched_quantize, grouped_gemm, grouped_quantize
from .backends import device_info, is_supported, supported_backends
from . import nn
from .nn import convert, freeze_fp4, unconvert

__version__ = _ops.version()

__all__ = [
    "NVFP4Tensor", "quantize", "dequantize", "gemm", "swizzle_scales", "unswizzle_scales",
    "device_info", "is_supported", "supported_backends", "nn", "convert", "freeze_fp4", "unconvert",
    "DEFAULT_RHT_SIGNS", "rht_matrix", "__version__", "MXFP4Tensor", "quantize_mxfp4", "gemm_mxfp4",
    "quantize_options", "dequantize_options", "percentile_amax",
    "GroupedNVFP4Tensor", "BatchedNVFP4Tensor", "grouped_quantize", "batched_quantize", "grouped_gemm",
]
