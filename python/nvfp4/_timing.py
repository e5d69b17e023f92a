"""The one timer of nvfp4's benchmarks (bench/bench_quant.py, bench/bench_gemm.py,
python -m nvfp4.bench).

A measurement is `iters` samples; a sample is `reps` back-to-back calls divided by reps,
reps chosen from a calibration call so that a sample lasts at least `min_sample_us`; the
median sample is the figure, min and mean come with it. Before the samples, `warmup`
untimed calls.

- CUDA: samples are timed with CUDA events on the current stream. The callable takes an
  index and the calls cycle through `sets` copies of the inputs, chosen by `sets()` so
  that together they exceed the L2 cache (`l2_factor` times over): no call finds its
  operands in L2 from the previous one. `graph=True` also times the same calls captured
  in one CUDA graph and replayed (GPU time per call without per-launch host cost).
- CPU: samples are timed with torch.utils.benchmark.Timer.timeit, with `cpu_threads`
  torch threads (default 1, torch.utils.benchmark's own default: on a busy machine a
  parallel region waits for descheduled threads, and a 16 us op can read 40 ms).
"""
from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch

__all__ = ["Measurement", "Timer"]


@dataclass
class Measurement:
    median_us: float
    min_us: float
    mean_us: float
    iters: int
    reps: int
    sets: int
    graph_us: Optional[float] = None  # CUDA-graph replay, per call (GPU, graph=True)

    def as_dict(self) -> dict:
        return asdict(self)


class Timer:
    """Times fn(i), i = 0, 1, 2... modulo the number of input sets, on `device`."""

    def __init__(self, device=None, *, iters: int = 30, warmup: int = 5, min_sample_us: float = 200.0,
                 graph: bool = False, l2_factor: float = 2.0, max_sets: int = 256, cpu_threads: int = 1):
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device: must be cpu or cuda, got {self.device}")
        self.iters = max(1, int(iters))
        self.warmup = max(0, int(warmup))
        self.min_sample_us = max(0.0, float(min_sample_us))
        self.graph = bool(graph) and self.device.type == "cuda"
        self.l2_factor = float(l2_factor)
        self.max_sets = max(1, int(max_sets))
        self.cpu_threads = max(1, int(cpu_threads))
        self.l2_bytes = 0
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 << 20)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def sets(self, set_bytes: float) -> int:
        """How many copies of a working set of `set_bytes` to cycle through: enough to
        exceed l2_factor x L2 on a GPU (bounded by free memory), 1 on the CPU."""
        if not self.on_gpu:
            return 1
        free, _ = torch.cuda.mem_get_info(self.device)
        n = int(self.l2_factor * self.l2_bytes // max(set_bytes, 1)) + 1
        n = min(n, int(0.6 * free // max(set_bytes, 1)), self.max_sets)
        if n < 1:
            raise MemoryError(f"a working set of {set_bytes / 2**20:.0f} MiB does not fit in device memory")
        return n

    # ---- the measurement --------------------------------------------------------------

    def time(self, fn: Callable[[int], object], sets: int = 1) -> Measurement:
        sets = max(1, int(sets))
        counter = itertools.count()

        def call():
            fn(next(counter) % sets)

        for _ in range(self.warmup):
            call()
        if self.on_gpu:
            m = self._time_gpu(call, sets)
            if self.graph:
                m.graph_us = self.time_graph(fn, sets)
            return m
        return self._time_cpu(call, sets)

    def _reps(self, one_us: float) -> int:
        return int(min(10000, max(1, math.ceil(self.min_sample_us / max(one_us, 1e-3)))))

    def _time_gpu(self, call, sets: int) -> Measurement:
        torch.cuda.synchronize(self.device)
        # Calibrate on a few back-to-back calls after one more warm call: a single call timed
        # from an idle GPU includes the launch latency (a 12 us kernel read 140 us), which
        # would make samples of short kernels far shorter than min_sample_us.
        call()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            call()
        end.record()
        end.synchronize()
        reps = self._reps(start.elapsed_time(end) * 1e3 / 5)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.iters)]
        for a, b in events:
            a.record()
            for _ in range(reps):
                call()
            b.record()
        torch.cuda.synchronize(self.device)
        us = [a.elapsed_time(b) * 1e3 / reps for a, b in events]
        return Measurement(statistics.median(us), min(us), statistics.fmean(us), self.iters, reps, sets)

    def _time_cpu(self, call, sets: int) -> Measurement:
        from torch.utils import benchmark
        t = benchmark.Timer(stmt="call()", globals={"call": call}, num_threads=self.cpu_threads)
        one_us = t.timeit(1).median * 1e6  # calibration
        reps = self._reps(one_us)
        us = [t.timeit(reps).median * 1e6 for _ in range(self.iters)]
        return Measurement(statistics.median(us), min(us), statistics.fmean(us), self.iters, reps, sets)

    def time_graph(self, fn: Callable[[int], object], sets: int = 1, reps: int = 5,
                   min_calls: int = 20) -> Optional[float]:
        """Microseconds per call of fn(i) replayed from one CUDA graph that cycles over the
        input sets, median of `reps` replays; None on the CPU or when the calls cannot be
        captured."""
        if not self.on_gpu:
            return None
        try:
            fn(0)  # lazy set-up (handles, attributes) stays out of the capture
            torch.cuda.synchronize(self.device)
            calls = max(min_calls, sets)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(calls):
                    fn(i % sets)
            g.replay()
            torch.cuda.synchronize(self.device)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(max(1, reps)):
                s.record()
                g.replay()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) * 1e3 / calls)
            del g
            return statistics.median(times)
        except Exception:  # noqa: BLE001  (not capturable: the eager time stands alone)
            torch.cuda.synchronize(self.device)
            return None
