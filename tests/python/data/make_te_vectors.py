"""Generates te_nvfp4_options.pt: test vectors of TransformerEngine's pure-PyTorch NVFP4
reference quantizer (transformer_engine/pytorch/custom_recipes/reference_nvfp4.py) for the
options nvfp4 follows (4over6 MAE/MSE with the E4M3 bound 448/256, 1x16 and 16x16 tiles;
row-scaled NVFP4). Only the vectors are kept in the repository; this script loads the
reference from a TransformerEngine checkout given on the command line, with the few
TransformerEngine modules it imports replaced by stubs (it calls no GEMM and no CUDA code):

    python3 tests/python/data/make_te_vectors.py /path/to/TransformerEngine [commit]

The vectors in the repository come from TransformerEngine commit
d0067d0da6cb01811b8072a7d304f0e00344ce2b.
"""
import enum
import os
import subprocess
import sys
import types

import torch


def load_reference(te_root, commit=None):
    if commit:
        src = subprocess.run(["git", "--git-dir", te_root, "show",
                              f"{commit}:transformer_engine/pytorch/custom_recipes/reference_nvfp4.py"],
                             check=True, capture_output=True, text=True).stdout
    else:
        with open(os.path.join(te_root, "transformer_engine/pytorch/custom_recipes/reference_nvfp4.py")) as f:
            src = f.read()

    class Fp4Formats(enum.Enum):
        E2M1 = "e2m1"

    class Quantizer:
        def __init__(self, rowwise=True, columnwise=True):
            self.rowwise_usage = rowwise
            self.columnwise_usage = columnwise

    utils = types.SimpleNamespace(Fp4Formats=Fp4Formats, roundup_div=lambda a, b: (a + b - 1) // b,
                                  HIGH_PRECISION_FLOAT_DTYPES=(torch.float32, torch.float16, torch.bfloat16))
    mods = {
        "transformer_engine": types.ModuleType("transformer_engine"),
        "transformer_engine.pytorch": types.ModuleType("transformer_engine.pytorch"),
        "transformer_engine.pytorch.custom_recipes": types.ModuleType("transformer_engine.pytorch.custom_recipes"),
        "transformer_engine.pytorch.quantized_tensor": types.ModuleType("transformer_engine.pytorch.quantized_tensor"),
    }
    class _Anything(types.ModuleType):  # the GEMM module: names used in annotations and defaults only
        def __getattr__(self, name):
            return types.SimpleNamespace(FPROP="fprop", DGRAD="dgrad", WGRAD="wgrad")

    gemm = _Anything("gemm")
    mods["transformer_engine.pytorch.custom_recipes"].gemm = gemm
    mods["transformer_engine.pytorch.custom_recipes"].reference_utils = utils
    mods["transformer_engine.pytorch.quantized_tensor"].Quantizer = Quantizer
    mods["transformer_engine.pytorch.quantized_tensor"].QuantizedTensorStorage = object
    sys.modules.update(mods)
    ns = {"__name__": "te_reference_nvfp4"}
    exec(compile(src, "reference_nvfp4.py", "exec"), ns)
    return ns["NVFP4QuantizerRef"], Fp4Formats


def main():
    te_root = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else None
    Ref, F = load_reference(te_root, commit)
    g = torch.Generator().manual_seed(20261126)
    cases = []
    configs = []
    for tile in ((1, 16), (16, 16)):
        for mode in ("MAE", "MSE"):
            for bound in (448, 256):
                configs.append(dict(tile=tile, four_over_six=mode, bound=bound, row_scaled=False))
    for fos in (None, "MAE", "MSE"):
        configs.append(dict(tile=(1, 16), four_over_six=fos, bound=256 if fos else 448, row_scaled=True))
    for dtype in (torch.float32, torch.bfloat16):
        for shape in ((64, 128), (48, 96)):
            x = torch.randn(shape, generator=g) * torch.exp(torch.randn(shape[0], 1, generator=g) * 1.5)
            x[torch.rand(shape, generator=g) < 0.02] *= 30.0
            x[:3, :16] = 0.0
            x = x.to(dtype)
            for c in configs:
                q = Ref(F.E2M1, rowwise=True, columnwise=True, quant_tile_shape=c["tile"],
                        row_scaled_nvfp4=c["row_scaled"], nvfp4_use_4over6=c["four_over_six"] is not None,
                        nvfp4_e4m3_max=c["bound"], nvfp4_4over6_err_mode=c["four_over_six"] or "MAE")
                qx, sx, qxt, sxt, ar, ac = q._quantize(x)
                cases.append(dict(config=c, x=x, data=qx, scales=sx.view(torch.uint8), data_t=qxt,
                                  scales_t=sxt.view(torch.uint8), amax=ar, amax_t=ac))
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_nvfp4_options.pt")
    torch.save({"te_commit": commit or "working tree", "cases": cases}, out)
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
