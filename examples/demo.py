"""nvfp4 demo: quantize a realistic tensor, print the error metrics of each recipe
option, run an FP4 GEMM against the high-precision product. CPU by default, the GPU
when there is one (--device to choose)."""
import argparse
import time

import torch

import nvfp4


def metrics(x: torch.Tensor, xh: torch.Tensor) -> str:
    x, xh = x.double(), xh.double()
    err = xh - x
    rel = (err.norm() / x.norm()).item()
    snr = -20 * torch.log10(torch.tensor(rel)).item()
    return f"rel L2 {rel:.4f}  SNR {snr:5.1f} dB  max|err| {err.abs().max().item():.4g}"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", type=int, default=None, help="square size (default 4096 on GPU, 512 on CPU)")
    args = p.parse_args()
    dev = torch.device(args.device)
    n = args.size or (4096 if dev.type == "cuda" else 512)
    info = nvfp4.device_info()
    print(f"nvfp4 {nvfp4.__version__}; built for CUDA archs {info['build_cuda_archs'] or 'none'}; "
          f"running on {dev}")
    for d in info["cuda_devices"]:
        print(f"  GPU {d['index']}: {d['name']} (cc {d['compute_capability']}): {d['backends']}")

    g = torch.Generator().manual_seed(0)
    # activations with a few outlier channels, as in LLMs
    x = torch.randn(n, n, generator=g)
    x[:, torch.randperm(n, generator=g)[: n // 64]] *= 20
    x = x.to(torch.bfloat16).to(dev)
    w = (torch.randn(n, n, generator=g) * 0.02).to(torch.bfloat16).to(dev)

    print(f"\nquantize x [{n}x{n}] bfloat16 -> NVFP4 ({x.numel() * 2 / 2**20:.1f} MiB -> "
          f"{x.numel() / 2 / 2**20 + x.numel() / 16 / 2**20:.2f} MiB incl. scales)")
    for label, kw in [("1d rtn", {}), ("1d sr", {"rounding": "sr", "seed": 1}),
                      ("2d rtn (weights)", {"block": "2d"}), ("1d rtn + RHT", {"rht": True})]:
        q = nvfp4.quantize(x, **kw)
        print(f"  {label:18s} {metrics(x, q.dequantize(torch.float32))}")

    qx = nvfp4.quantize(x)
    qw = nvfp4.quantize(w, block="2d")
    if dev.type == "cuda":
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            nvfp4.quantize(x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / 10
        print(f"  quantize time {dt * 1e6:.0f} us ({x.numel() * 2.5625 / dt / 1e9:.0f} GB/s read+write)")

    m = min(n, 256) if dev.type == "cpu" else n
    ref = x[:m].double() @ w.double().t()
    print(f"\nGEMM [{m}x{n}] @ [{n}x{n}]^T against the float64 product of the unquantized inputs:")
    for backend in ["reference"] if dev.type == "cpu" else nvfp4.supported_backends(dev):
        try:
            y = nvfp4.gemm(nvfp4.quantize(x[:m].contiguous()), qw, backend=backend, out_dtype=torch.float32)
            print(f"  nvfp4 {backend:9s} {metrics(ref, y)}")
        except Exception as e:  # a backend this machine can't run
            print(f"  nvfp4 {backend:9s} unavailable: {e}")
    y16 = (x[:m] @ w.t()).double()
    print(f"  bf16 matmul     {metrics(ref, y16)}")


if __name__ == "__main__":
    main()
