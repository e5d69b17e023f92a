#!/usr/bin/env python3
"""FSDP2 training step: the NVFP4 model with the ordinary (BF16) weight all-gather and with
the FP4 all-gather (nvfp4.distributed), and the BF16 model, measured in the same run.

The model is examples/train.py's transformer (--size 400m: d2048, 8 layers; 1b: d2048, 20
layers), every block's Linear converted for the NVFP4 rows, each block and the root
sharded by fully_shard with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) and
BF16 autocast on the GPU. A step is forward + backward + fused AdamW on each rank's own
batch (--batch-size sequences per rank). Step time: the median over --steps steps after
--warmup, the slowest rank's. Bytes: what each rank's all-gathers deliver in one step
(counted on torch.distributed's collectives), and the formula for the converted layers
(N*K*(1/2 + 1/16) bytes in FP4 against 2*N*K in BF16).

    torchrun --nproc-per-node 2 bench/bench_fsdp.py --size 400m --json fsdp_400m_2.json
    torchrun --nproc-per-node 4 bench/bench_fsdp.py --size 1b
    python3 -m torch.distributed.run --nproc-per-node 2 bench/bench_fsdp.py --smoke   # CPU, gloo
    python3 bench/bench_fsdp.py --table OUT/fsdp_*.json      # one table from several runs
    python3 -m torch.distributed.run --nproc-per-node 1 bench/bench_fsdp.py --smoke --count-ops

--count-ops profiles one step of each NVFP4 variant (torch.profiler, after --warmup steps)
instead of timing it and prints what the weight gathers cost in work rather than time: the
ops dispatched per step (top-level aten/nvfp4 calls), the ops that touch memory (leaves that
are not views or allocations), the kernel launches on a GPU, and for the FP4 gather the same
counts inside each FSDP2 hook (fsdp_pre_all_gather, fsdp_post_all_gather) per call. The
counts do not depend on the model's width, so the CPU smoke model gives the GPU's op counts.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train as T  # noqa: E402

import nvfp4  # noqa: E402
import nvfp4.distributed as nd  # noqa: E402
import nvfp4.nn as nn4  # noqa: E402

VARIANTS = ("bf16", "nvfp4", "nvfp4_fp4gather")


def build(name, a, dev, mesh, rank):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    margs = argparse.Namespace(d_model=a.d_model, n_layers=a.n_layers, n_heads=a.n_heads, seq_len=a.seq_len, seed=0,
                               master_dtype=torch.float32, moe=a.moe, moe_top_k=a.moe_top_k, moe_ffn=a.moe_ffn)
    model = T.build_model(margs, dev)
    converted = []
    if name != "bf16":
        nn4.convert(model, nn4.get_recipe(a.recipe, backend=a.backend, seed=1000 + rank), include="blocks.*",
                    exclude=list(nn4.DEFAULT_EXCLUDE) + list(nn4.ROUTER_NAMES))
        converted = [m for m in model.modules() if isinstance(m, (nn4.Linear, nn4.GroupedExperts))]
    if name == "nvfp4_fp4gather":
        nd.enable_fp4_all_gather(model)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if dev.type == "cuda" \
        else MixedPrecisionPolicy()
    for b in model.blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model, converted


def trainer(name, a, dev, mesh, rank, batches):
    """(model, optimizer, converted layers, step(i) -> loss) of one variant: AdamW, BF16
    autocast on a GPU, batch i % len(batches)."""
    model, converted = build(name, a, dev, mesh, rank)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")

    def step(i):
        x, y = batches[i % len(batches)]
        with amp:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, T.VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return model, opt, converted, step


def converted_bytes(converted):
    """(FP4 bytes, BF16 bytes) of the converted layers' weights as a gather moves them: a dense
    weight [N, K] as N*K/2 code bytes + N*K/16 scale bytes (Wᵀ is rebuilt from its 2D tiles);
    an expert weight [E, N, K] as W and Wᵀ both (1D blocks of each orientation)."""
    fp4 = bf16 = 0
    for m in converted:
        if isinstance(m, nn4.GroupedExperts):
            for p in (m.up_proj, m.down_proj):
                e, n, k = p.shape
                fp4 += e * (n * (k // 2 + k // 16) + k * (n // 2 + n // 16))
                bf16 += 2 * e * n * k
        else:
            fp4 += m.out_features * (m.in_features // 2 + m.in_features // 16)
            bf16 += 2 * m.out_features * m.in_features
    return fp4, bf16


def time_variant(name, a, dev, mesh, rank, world, batches):
    model, opt, converted, step = trainer(name, a, dev, mesh, rank, batches)
    for i in range(a.warmup):
        step(i)
    with nd.count_collectives() as c:
        loss = step(a.warmup)
    sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for i in range(a.steps):
        dist.barrier()
        sync(dev)
        t0 = time.perf_counter()
        step(i)
        sync(dev)
        times.append(time.perf_counter() - t0)
    med = torch.tensor([statistics.median(times)], dtype=torch.float64, device=dev)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)  # the slowest rank's median
    lin_fp4, lin_bf16 = converted_bytes(converted)
    row = {"step_ms": 1e3 * med.item(), "loss": loss.detach().item(), "all_gather_bytes": c.all_gather_bytes,
           "all_gather_calls": c.all_gather_calls, "all_reduce_calls": c.all_reduce_calls,
           "reduce_scatter_bytes": c.reduce_scatter_bytes, "converted_layers": len(converted),
           "converted_fp4_bytes": lin_fp4, "converted_bf16_bytes": lin_bf16}
    if dev.type == "cuda":
        row["peak_memory_gb"] = torch.cuda.max_memory_allocated(dev) / 2**30
    del model, opt
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return row


# ops that neither compute nor move data (views, allocations, metadata)
_NO_WORK = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::slice",
            "aten::select", "aten::t", "aten::transpose", "aten::reshape", "aten::_reshape_alias", "aten::alias",
            "aten::detach", "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::narrow", "aten::split",
            "aten::_unsafe_view", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg", "aten::unflatten",
            "aten::permute", "aten::chunk", "aten::unbind", "aten::set_", "aten::record_stream", "detach",
            "aten::flatten", "aten::view_as", "aten::_to_copy_meta", "aten::is_nonzero"}
_HOOKS = ("fsdp_pre_all_gather", "fsdp_post_all_gather")
_LAUNCH = ("LaunchKernel", "cudaMemsetAsync", "cudaMemcpyAsync", "cuMemsetD8Async", "cudaLaunchCooperativeKernel")


def _is_op(e):
    return e.name.startswith(("aten::", "nvfp4::", "c10d::", "fsdp::", "_c10d_functional::"))


def _scope_of(e):
    """The FP4-gather hook an event ran in (None: elsewhere)."""
    p = e
    while p is not None:
        if p.name.startswith("bench::"):
            return p.name[len("bench::"):]
        p = p.cpu_parent
    return None


def op_counts(events):
    """{scope: {"calls", "ops", "work_ops", "launches"}} of one profiled step; scope "step"
    counts everything, the hook names what ran inside that hook."""
    out = {k: {"calls": 0, "ops": 0, "work_ops": 0, "launches": 0} for k in ("step",) + _HOOKS}
    names = {}  # top-level ops of the step by name
    host = {k: {} for k in ("step",) + _HOOKS}  # host self time (us) by event name, per scope
    for e in events:
        sc = _scope_of(e)
        rows = [out["step"]] + ([out[sc]] if sc in out else [])
        if e.device_type == torch.autograd.DeviceType.CPU:
            for k in ("step",) + ((sc,) if sc in host else ()):
                host[k][e.name] = host[k].get(e.name, 0.0) + e.self_cpu_time_total
        if e.name.startswith("bench::"):
            # (on a GPU the profiler also shows each range on the device's timeline: counted once)
            if e.device_type == torch.autograd.DeviceType.CPU:
                out[e.name[len("bench::"):]]["calls"] += 1
            continue
        parent_op = e.cpu_parent is not None and _is_op(e.cpu_parent)
        for r in rows:
            if _is_op(e) and not parent_op:
                r["ops"] += 1
                if r is out["step"]:
                    names[e.name] = names.get(e.name, 0) + 1
            if _is_op(e) and not e.cpu_children and e.name not in _NO_WORK:
                r["work_ops"] += 1
            if any(k in e.name for k in _LAUNCH):
                r["launches"] += 1
    out["op_names"] = names
    for k, d in host.items():  # the largest ten (under the profiler, which inflates every event alike)
        out[k]["host_self_us"] = dict(sorted(d.items(), key=lambda kv: -kv[1])[:10])
    return out


def kernel_times(events, top=15):
    """{"kernel_ms": GPU kernel time of the step summed over streams, "top": [(name, ms, launches)]}."""
    from torch.autograd import DeviceType

    tot = {}
    for e in events:
        if e.device_type == DeviceType.CUDA:
            name = e.name if len(e.name) <= 90 else e.name[:87] + "..."
            t, c = tot.get(name, (0.0, 0))
            tot[name] = (t + e.time_range.elapsed_us() / 1e3, c + 1)
    rows = sorted(((k, t, c) for k, (t, c) in tot.items()), key=lambda r: -r[1])
    return {"kernel_ms": sum(r[1] for r in rows), "top": rows[:top]}


def count_variant(name, a, dev, mesh, rank, world, batches):
    """One profiled step (after the warm-up ones) of a variant: op_counts of it."""
    import functools

    from torch.profiler import ProfilerActivity, profile, record_function

    # the experts' class defines hooks of its own: both classes' hooks counted alike
    classes = (nd._ShardWeight, nd._ExpertShardWeight)
    saved = {(c, h): c.__dict__[h] for c in classes for h in _HOOKS}
    host = {h: [0, 0.0] for h in _HOOKS}  # calls, seconds: filled during the last (unprofiled) step
    timing = [False]

    def scoped(h, f):
        @functools.wraps(f)
        def g(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                with record_function("bench::" + h):
                    return f(*args, **kwargs)
            finally:
                if timing[0]:
                    host[h][0] += 1
                    host[h][1] += time.perf_counter() - t0
        return g

    for (c, h), f in saved.items():
        setattr(c, h, scoped(h, f))
    try:
        model, opt, converted, step = trainer(name, a, dev, mesh, rank, batches)
        for i in range(a.warmup):
            step(i)
        sync(dev)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            step(a.warmup)
            sync(dev)
        counts = op_counts(prof.events())
        counts["kernels"] = kernel_times(prof.events())
        counts["converted_layers"] = len(converted)
        # the host's time in each hook (on a GPU the time to issue its work; on the CPU its
        # work too), and the step's, without the profiler
        timing[0] = True
        t0 = time.perf_counter()
        step(a.warmup + 1)
        counts["host_step_ms"] = 1e3 * (time.perf_counter() - t0)
        sync(dev)
        timing[0] = False
        for h, (n, sec) in host.items():
            counts[h]["host_us_per_call"] = 1e6 * sec / n if n else 0.0
        del model, opt
        return counts
    finally:
        for (c, h), f in saved.items():
            setattr(c, h, f)


def print_op_diff(rows, a="nvfp4", b="nvfp4_fp4gather", top=12):
    """The top-level ops whose count per step differs most between two variants."""
    if a not in rows or b not in rows:
        return
    na, nb = rows[a].get("op_names", {}), rows[b].get("op_names", {})
    diff = sorted(((nb.get(k, 0) - na.get(k, 0), k) for k in set(na) | set(nb)), key=lambda d: -abs(d[0]))
    print(f"  ops per step, {b} minus {a}: " + ", ".join(f"{k} {d:+d}" for d, k in diff[:top] if d))


def print_counts(a, world, rows):
    print(f"ops per step, {a.size} model, {world} rank(s) (ops: top-level aten/nvfp4 calls; work: leaf ops that are "
          f"not views or allocations; launches: CUDA kernel/memset/memcpy launches)")
    for name, c in rows.items():
        s = c["step"]
        print(f"  {name:16s} step: {s['ops']:6d} ops {s['work_ops']:6d} work {s['launches']:6d} launches"
              f"  ({c['converted_layers']} converted layers; host {c['host_step_ms']:.1f} ms to issue the step)")
        k = c.get("kernels")
        if k and k["top"]:
            print(f"  {'':16s} GPU kernels {k['kernel_ms']:.2f} ms a step (summed over streams); the largest:")
            for name, ms, n in k["top"]:
                print(f"  {'':16s}   {ms:8.3f} ms {n:5d}x  {name}")
        for h in _HOOKS:
            r = c[h]
            if r["calls"]:
                print(f"  {'':16s} {h}: {r['calls']} calls, per call {r['ops'] / r['calls']:.1f} ops "
                      f"{r['work_ops'] / r['calls']:.1f} work {r['launches'] / r['calls']:.1f} launches, "
                      f"host {r['host_us_per_call']:.0f} us")
                print(f"  {'':16s}   host self time in it, us per call (profiled): " + ", ".join(
                    f"{n} {t / r['calls']:.0f}" for n, t in list(r.get("host_self_us", {}).items())[:6]))
        print(f"  {'':16s} host self time of the step, ms (profiled): " + ", ".join(
            f"{n} {t / 1e3:.1f}" for n, t in list(s.get("host_self_us", {}).items())[:8]))


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def print_table(results):
    print(f"{'size/bs':16s} {'GPUs':>4s} {'bf16 ms':>9s} {'nvfp4 ms':>9s} {'fp4gath ms':>10s} {'fp4g/bf16g':>10s} "
          f"{'nvfp4/bf16':>10s} {'fp4g/bf16':>10s} {'AG GB bf16g':>11s} {'AG GB fp4g':>10s} {'AG ratio':>8s} "
          f"{'lin ratio':>9s}  device")
    for r in results:
        rows = r["rows"]
        b, q, f = (rows.get(v, {}) for v in VARIANTS)

        def ms(x):
            return f"{x['step_ms']:9.2f}" if "step_ms" in x else f"{'-':>9s}"

        def ratio(x, y):
            return f"{x['step_ms'] / y['step_ms']:10.3f}" if "step_ms" in x and "step_ms" in y else f"{'-':>10s}"

        ag = (f"{q['all_gather_bytes'] / 1e9:11.3f} {f['all_gather_bytes'] / 1e9:10.3f} "
              f"{f['all_gather_bytes'] / q['all_gather_bytes']:8.3f} "
              f"{f['converted_fp4_bytes'] / f['converted_bf16_bytes']:9.4f}") if ("all_gather_bytes" in q and
                                                                                  q.get("all_gather_bytes")) else ""
        label = f"{r['size']}/b{r['model']['batch_size_per_rank']}"
        if r["model"].get("moe"):
            label += f"/moe{r['model']['moe']['experts']}"
        if r.get("nccl_env", {}).get("NCCL_P2P_DISABLE") == "1":
            label += "/no-p2p"
        print(f"{label:16s} {r['world']:4d} {ms(b)} {ms(q)} {ms(f):>10s} {ratio(f, q)} {ratio(q, b)} {ratio(f, b)} "
              f"{ag}  {r['device']}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="400m", choices=sorted(T.SIZES))
    ap.add_argument("--batch-size", type=int, default=None, help="sequences per rank (default: the size's)")
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--moe", type=int, default=0, metavar="E",
                    help="every block's MLP a mixture of E experts (train.py's MoEMLP; --size moe: 32)")
    ap.add_argument("--moe-top-k", type=int, default=2)
    ap.add_argument("--moe-ffn", type=int, default=None, help="hidden units per expert (default d_model)")
    ap.add_argument("--recipe", default="nvfp4")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 10; 2 with --smoke)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; 1 with --smoke)")
    ap.add_argument("--smoke", action="store_true", help="CPU (gloo), toy size")
    ap.add_argument("--json", default=None, help="rank 0 writes the results here")
    ap.add_argument("--count-ops", action="store_true",
                    help="profile one step of each NVFP4 variant and print op/kernel counts instead of timing")
    ap.add_argument("--table", nargs="+", default=None, metavar="JSON", help="print one table from earlier runs")
    a = ap.parse_args(argv)
    if a.table:
        print_table([json.load(open(p)) for p in a.table])
        return None
    if a.smoke:
        a.size = "smoke"
    size = T.SIZES[a.size]
    a.d_model, a.n_layers, a.n_heads = size["d_model"], size["n_layers"], size["n_heads"]
    a.seq_len = a.seq_len or size["seq_len"]
    a.batch_size = a.batch_size or size["batch_size"]
    if a.size == "moe" and not a.moe:
        a.moe = 32
    if a.moe:
        a.moe_ffn = a.moe_ffn or a.d_model
        if not 1 <= a.moe_top_k <= a.moe:
            ap.error("--moe-top-k must lie in [1, --moe]")
    elif a.moe_ffn is not None:
        ap.error("--moe-ffn: needs --moe")
    a.steps = a.steps or (2 if a.smoke else 10)
    a.warmup = a.warmup or (1 if a.smoke else 3)
    for v in a.variants.split(","):
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant {v!r} (choose from {VARIANTS})")
    if "RANK" not in os.environ:
        ap.error("run under torchrun (torchrun --nproc-per-node N bench/bench_fsdp.py ...)")

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    use_cuda = torch.cuda.is_available() and not a.smoke
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=dev)
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(dev.type, (world,))
    g = torch.Generator().manual_seed(rank)
    batches = []
    for _ in range(4):
        xy = torch.randint(0, T.VOCAB, (a.batch_size, a.seq_len + 1), generator=g).to(dev)
        batches.append((xy[:, :-1], xy[:, 1:]))
    results = {"size": a.size, "world": world, "device": torch.cuda.get_device_name(dev) if use_cuda else "cpu",
               "torch": torch.__version__, "nvfp4": nvfp4.__version__, "recipe": a.recipe,
               "date": time.strftime("%Y-%m-%d"),
               "model": {"d_model": a.d_model, "n_layers": a.n_layers, "seq_len": a.seq_len,
                         "batch_size_per_rank": a.batch_size,
                         "moe": {"experts": a.moe, "top_k": a.moe_top_k, "ffn": a.moe_ffn} if a.moe else None},
               # NCCL's transport settings (NCCL_P2P_DISABLE=1: no NVLink/PCIe peer copies, a slower link)
               "nccl_env": {k: v for k, v in sorted(os.environ.items())
                            if k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL",
                                     "NCCL_NET", "NCCL_ALGO", "NCCL_PROTO")},
               "rows": {}}
    try:
        if a.count_ops:
            rows = {v: count_variant(v, a, dev, mesh, rank, world, batches) for v in a.variants.split(",")
                    if v != "bf16"}
            if rank == 0:
                print_counts(a, world, rows)
                print_op_diff(rows)
                if a.json:
                    with open(a.json, "w") as fh:
                        json.dump({**{k: v for k, v in results.items() if k != "rows"}, "op_counts": rows}, fh,
                                  indent=1)
            dist.barrier()
            return rows
        for name in a.variants.split(","):
            r = time_variant(name, a, dev, mesh, rank, world, batches)
            results["rows"][name] = r
            if rank == 0:
                print(f"{a.size} x{world} {name:16s} step {r['step_ms']:9.2f} ms  all-gathered "
                      f"{r['all_gather_bytes'] / 1e6:10.2f} MB/step/rank in {r['all_gather_calls']} calls, "
                      f"{r['all_reduce_calls']} all-reduces, loss {r['loss']:.4f}", flush=True)
        rows = results["rows"]
        ratios = {}
        if "nvfp4" in rows and "nvfp4_fp4gather" in rows:
            q, f = rows["nvfp4"], rows["nvfp4_fp4gather"]
            ratios["fp4gather_over_bf16gather_step_time"] = f["step_ms"] / q["step_ms"]
            if q["all_gather_bytes"]:  # 0 only if this torch's FSDP2 bypasses the counted functions
                ratios["fp4gather_over_bf16gather_all_gather_bytes"] = f["all_gather_bytes"] / q["all_gather_bytes"]
            ratios["converted_layers_fp4_over_bf16_bytes"] = f["converted_fp4_bytes"] / f["converted_bf16_bytes"]
        if "bf16" in rows:
            for v in ("nvfp4", "nvfp4_fp4gather"):
                if v in rows:
                    ratios[f"{v}_over_bf16_step_time"] = rows[v]["step_ms"] / rows["bf16"]["step_ms"]
        results["ratios"] = ratios
        if rank == 0:
            for k, v in ratios.items():
                print(f"{k}: {v:.4f}")
            print_table([results])
            if a.json:
                with open(a.json, "w") as fh:
                    json.dump(results, fh, indent=1)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return results


if __name__ == "__main__":
    main()
