"""Where a step's GPU waits on its host: the idle gaps of a profiled step, attributed.

Reads a torch.profiler Chrome trace (kineto JSON: `prof.export_chrome_trace(path)`) and walks
the GPU's activities (kernels, memsets, copies; every stream merged) in start order. Between
two of them the GPU may sit idle. A gap is the host's when the activity that ends it was
launched (its runtime call's start, found by correlation id) after the GPU had gone idle: the
GPU waited for that launch. Such a gap's window runs from the moment the GPU went idle to that
launch, and is charged to what the launching thread was doing then: the self time (time not
inside a child op) of the host ops (`cpu_op`, `cuda_runtime`, `cuda_driver` events) of that
thread that overlap the window, by name; time inside no recorded op is charged to
"(outside any op: Python)". The other gaps (the next activity was already queued) are launch
latency and dependencies, reported as one total.

    from step_gaps import gap_report
    rep = gap_report(json.load(open(trace)), steps=3)

Used by bench_train_step.py --profile (its "gaps" entry and printed line); the attribution
is tested on synthetic traces in tests/python/test_bench.py.
"""
from __future__ import annotations

import bisect

GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
HOST_CATS = ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation")
OUTSIDE = "(outside any op: Python)"


def _self_intervals(events):
    """[(start, end, name)] of the self time of nested host events on one thread (each event's
    interval minus its children's), sorted by start."""
    evs = sorted(events, key=lambda e: (e[0], -(e[1] - e[0])))
    out = []
    stack = []  # [start, end, name, cursor]: cursor = where this event's uncovered time resumes

    def close_until(t):
        while stack and stack[-1][1] <= t:
            s, e, name, cur = stack.pop()
            if e > cur:
                out.append((cur, e, name))
            if stack:
                stack[-1][3] = max(stack[-1][3], e)

    for s, e, name in evs:
        close_until(s)
        if stack:
            top = stack[-1]
            if s > top[3]:
                out.append((top[3], s, top[2]))
            top[3] = max(top[3], min(e, top[1]))
            e = min(e, top[1])  # a child cannot outlast its parent (clock rounding)
        stack.append([s, e, name, s])
    close_until(float("inf"))
    out.sort()
    return out


def _charge(selfs, starts, lo, hi, acc):
    """Add to acc[name] the overlap of the self intervals with [lo, hi); returns the time
    charged."""
    charged = 0.0
    i = max(bisect.bisect_right(starts, lo) - 1, 0)
    while i < len(selfs) and selfs[i][0] < hi:
        s, e, name = selfs[i]
        o = min(e, hi) - max(s, lo)
        if o > 0:
            acc[name] = acc.get(name, 0.0) + o
            charged += o
        i += 1
    return charged


def gap_report(trace, steps: int = 1, top: int = 12) -> dict:
    """trace: the parsed Chrome trace (a dict with "traceEvents", or the event list). Times in
    the report are ms per step (the trace's microseconds / 1e3 / steps)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    launch = {}      # correlation -> (ts, tid) of the runtime/driver call that launched it
    host = {}        # tid -> [(start, end, name)]
    gpu = []         # (start, end, correlation, name)
    for ev in events:
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat", "")
        ts, dur = float(ev.get("ts", 0.0)), float(ev.get("dur", 0.0))
        args = ev.get("args") or {}
        if cat in GPU_CATS:
            gpu.append((ts, ts + dur, args.get("correlation"), ev.get("name", "")))
        elif cat in HOST_CATS:
            tid = (ev.get("pid"), ev.get("tid"))
            host.setdefault(tid, []).append((ts, ts + dur, ev.get("name", "")))
            if cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
                launch[args["correlation"]] = (ts, tid)
    gpu.sort()
    selfs = {tid: _self_intervals(evs) for tid, evs in host.items()}
    starts = {tid: [s for s, _, _ in v] for tid, v in selfs.items()}

    idle = host_late = other = 0.0
    gaps = 0
    by_op: dict = {}
    by_next: dict = {}
    cur_end = None
    for s, e, corr, name in gpu:
        if cur_end is not None and s > cur_end:
            gap = s - cur_end
            idle += gap
            gaps += 1
            lt = launch.get(corr)
            if lt is not None and lt[0] >= cur_end:
                host_late += gap
                lo, hi = cur_end, lt[0]
                tid = lt[1]
                charged = _charge(selfs.get(tid, []), starts.get(tid, []), lo, hi, by_op) if tid in selfs else 0.0
                if hi - lo > charged:
                    by_op[OUTSIDE] = by_op.get(OUTSIDE, 0.0) + (hi - lo - charged)
                key = name[:60]
                by_next[key] = by_next.get(key, 0.0) + gap
            else:
                other += gap
        cur_end = e if cur_end is None else max(cur_end, e)
    span = (gpu[-1][1] - gpu[0][0]) if gpu else 0.0
    k = 1e-3 / max(steps, 1)
    return {
        "gpu_span_ms": span * k,
        "gpu_idle_ms": idle * k,
        "gaps_per_step": gaps / max(steps, 1),
        "host_late_ms": host_late * k,
        "launch_latency_ms": other * k,
        # what the launching thread was doing while the GPU waited (self time by op name)
        "waiting_on_ms": {n: v * k for n, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:top]},
        # which GPU activity the GPU was waiting for
        "waiting_for_ms": {n: v * k for n, v in sorted(by_next.items(), key=lambda kv: -kv[1])[:top]},
    }
