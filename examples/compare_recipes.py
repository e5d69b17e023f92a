#!/usr/bin/env python3
"""Compare training recipes over seeds and corpora, with resumable runs and paired statistics.

Every (corpus, seed, recipe) is one run of examples/train.py's byte-level decoder: the same
seed gives every recipe the same initial weights, the same batches and the same stochastic
rounding seed, so the runs of one seed are paired. Runs are checkpointed every
--ckpt-every steps and when the call's budget ends (--time-budget-min, --stop-at-step); a
later call with --resume continues each unfinished run exactly where it stopped (model,
optimizer, the layers' SR counters, the batch generator, the curves so far), so a long
comparison can be chained over several calls of a few minutes each.

    python3 examples/compare_recipes.py --recipes bf16,nvfp4,4over6 --seeds 0,1,2 \\
        --corpora stdlib,prose --size full --steps 1200 --out runs/cmp --time-budget-min 8
    python3 examples/compare_recipes.py --out runs/cmp --resume --time-budget-min 8   # continue
    python3 examples/compare_recipes.py --out runs/cmp --report-only                  # tables + plots

The report (printed, and written to OUT/report.md and OUT/report.json), per corpus and recipe:
the final validation loss as mean +- sample std over the seeds that finished; the paired gap
to bf16, 100 * (loss / loss_bf16 - 1) per seed, its mean and a 95% Student-t interval over
the seeds (mean +- t_{0.975, n-1} * sd / sqrt(n)); whether that interval excludes 0; the same
paired difference to nvfp4 for the other recipes (does an option move the loss beyond the
spread of the seeds?). The
curves (validation loss per step, the mean over seeds with a band from the lowest to the
highest seed) go to OUT/curves_<corpus>.png when matplotlib is installed; without it the same
numbers go to OUT/curves_<corpus>.csv and the report says so.

Recipes: every nvfp4.nn recipe name (nvfp4, its ablations and options, the MXFP4 recipes),
fp8 / fp8_delayed, and two schedules on top of nvfp4: nvfp4_cooldown (every quantized layer
in BF16 for the last --cooldown-frac of the steps) and nvfp4_fwd_cooldown (only the forward
GEMMs in BF16 then, the NVFP4 paper's switch).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_data  # noqa: E402
import train  # noqa: E402

import nvfp4  # noqa: E402
import nvfp4.nn as nn4  # noqa: E402
from nvfp4.nn.fp8 import FP8_RECIPES  # noqa: E402

SCHEDULES = {"nvfp4_cooldown": ("nvfp4", False), "nvfp4_fwd_cooldown": ("nvfp4", True)}
#: the settings a resumed comparison must share with the one that started it
RUN_KEYS = ("size", "steps", "batch_size", "lr", "warmup_steps", "eval_interval", "eval_batches", "cooldown_frac",
            "skip_quant_first_layers", "skip_quant_last_layers", "amp", "device_type")


def recipe_names():
    return sorted(nn4.RECIPES) + sorted(FP8_RECIPES) + sorted(SCHEDULES)


# ------------------------------------------------------------------------------ statistics
def t_quantile(p: float, df: int) -> float:
    """Quantile p of Student's t with df degrees of freedom (bisection on the CDF, the CDF by
    Simpson's rule on the density: accurate to ~1e-7 for the df used here; no scipy needed)."""
    if df < 1:
        return float("nan")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t):
        n = 2000
        h = t / n
        s = 0.0
        for i in range(n + 1):
            x = i * h
            w = 1 if i in (0, n) else (4 if i % 2 else 2)
            s += w * c * (1 + x * x / df) ** (-(df + 1) / 2)
        return 0.5 + s * h / 3

    lo, hi = 0.0, 1000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_sd(v):
    v = [x for x in v if x is not None and math.isfinite(x)]
    if not v:
        return float("nan"), float("nan"), 0
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")
    return m, sd, len(v)


def t_interval(v, level=0.95):
    m, sd, n = mean_sd(v)
    if n < 2:
        return m, float("nan"), float("nan"), n
    h = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return m, m - h, m + h, n


# ------------------------------------------------------------------------------ runs
def run_dir(out, corpus, recipe, seed):
    return os.path.join(out, corpus, recipe, f"seed{seed}")


def make_args(opts, recipe, seed, data_dir):
    """examples/train.py's settings for one run (its defaults, and the comparison's choices)."""
    base = SCHEDULES.get(recipe, (recipe, False))[0]
    argv = ["--recipe", base, "--size", opts.size, "--steps", str(opts.steps), "--seed", str(seed), "--data", data_dir,
            "--lr", str(opts.lr), "--warmup-steps", str(opts.warmup_steps), "--eval-interval", str(opts.eval_interval),
            "--eval-batches", str(opts.eval_batches), "--amp", opts.amp, "--backend", opts.backend]
    if opts.batch_size:
        argv += ["--batch-size", str(opts.batch_size)]
    if opts.device:
        argv += ["--device", opts.device]
    for flag, v in (("--skip-quant-first-layers", opts.skip_quant_first_layers),
                    ("--skip-quant-last-layers", opts.skip_quant_last_layers)):
        if v is not None:
            argv += [flag, str(v)]
    a = train.parse_args(argv)
    a.rank, a.world = 0, 1  # one process per run (train.main sets these from torchrun's environment)
    return a


def save_ckpt(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a call cut off mid-write leaves the previous checkpoint whole


class Deadline:
    def __init__(self, minutes, t0):
        self.t_end = t0 + 60 * minutes if minutes else None

    def passed(self):
        return self.t_end is not None and time.time() > self.t_end


def train_run(opts, corpus, recipe, seed, data_dir, deadline: Deadline, log):
    """Run (or continue) one run; returns its result dict, "partial" while unfinished."""
    d = run_dir(opts.out, corpus, recipe, seed)
    os.makedirs(d, exist_ok=True)
    res_path, ckpt_path = os.path.join(d, "result.json"), os.path.join(d, "ckpt.pt")
    if os.path.exists(res_path):
        with open(res_path) as f:
            r = json.load(f)
        if r.get("status") == "done":
            return r
    args = make_args(opts, recipe, seed, data_dir)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    r = train.make_recipe(args)
    model = train.build_model(args, device)
    converted = train.convert_model(model, args, r)
    fused = device.type == "cuda"
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), fused=fused)
    cooldown = None
    if recipe in SCHEDULES:
        cooldown = nn4.Cooldown(model, args.steps, opts.cooldown_frac, forward_only=SCHEDULES[recipe][1])
    batches = train.Batches(os.path.join(data_dir, "train.bin"), args.seq_len, args.batch_size, device, args.seed)
    val_src = train.Batches(os.path.join(data_dir, "val.bin"), args.seq_len, args.batch_size, device, 1234)
    val_batches = [val_src.get() for _ in range(args.eval_batches)]
    tokens_per_step = args.seq_len * args.batch_size
    state = {"step": 0, "train_curve": [], "val_curve": [], "train_s": 0.0, "timed_steps": 0}
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location=device, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        batches.gen.set_state(ck["data_gen"])
        torch.set_rng_state(ck["torch_rng"])
        state = ck["state"]
        log(f"  resumed {corpus}/{recipe}/seed{seed} at step {state['step']}")
    n_params = sum(p.numel() for p in model.parameters())
    stop_reason = None
    step = state["step"]
    t_window, win_steps = time.time(), 0  # training time between validations (and its steps)
    while step < args.steps:
        if deadline.passed():
            stop_reason = "time budget"
            break
        if opts.stop_at_step and step >= opts.stop_at_step:
            stop_reason = f"--stop-at-step {opts.stop_at_step}"
            break
        if cooldown is not None:
            cooldown(step)
        for g in opt.param_groups:
            g["lr"] = train.lr_at(step, args)
        x, y = batches.get()
        with train.autocast_ctx(args, device):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, train.VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        win_steps += 1
        if step % opts.log_interval == 0 or step == args.steps:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            state["train_curve"].append({"step": step, "loss": loss.item()})
        if step % args.eval_interval == 0 or step == args.steps:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            state["train_s"] += time.time() - t_window
            state["timed_steps"] += win_steps
            vl = train.evaluate(model, val_batches, args, device)
            state["val_curve"].append({"step": step, "tokens": step * tokens_per_step, "val_loss": vl})
            log(f"  {corpus}/{recipe}/seed{seed} step {step}: val_loss {vl:.4f}")
            t_window, win_steps = time.time(), 0
        if step % opts.ckpt_every == 0 and step < args.steps:
            state["step"] = step
            save_ckpt(ckpt_path, {"model": model.state_dict(), "opt": opt.state_dict(), "data_gen": batches.gen.get_state(),
                                  "torch_rng": torch.get_rng_state(), "state": state})
    state["step"] = step
    done = step >= args.steps
    if not done:
        save_ckpt(ckpt_path, {"model": model.state_dict(), "opt": opt.state_dict(), "data_gen": batches.gen.get_state(),
                              "torch_rng": torch.get_rng_state(), "state": state})
        log(f"  {corpus}/{recipe}/seed{seed}: stopped at step {step} ({stop_reason}); checkpoint saved")
    result = {
        "corpus": corpus, "recipe": recipe, "seed": seed, "status": "done" if done else "partial", "steps": step,
        "total_steps": args.steps, "tokens": step * tokens_per_step, "params": n_params,
        "converted_layers": len(converted),
        "final_val_loss": state["val_curve"][-1]["val_loss"] if done and state["val_curve"] else None,
        # wall time per step between validations, the first steps (warm-up, compilation) included
        "step_time_s": state["train_s"] / state["timed_steps"] if state["timed_steps"] else None,
        "val_curve": state["val_curve"], "train_curve": state["train_curve"],
        "recipe_def": dataclasses.asdict(r) if dataclasses.is_dataclass(r) else str(r),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu"),
        "torch": torch.__version__, "nvfp4": nvfp4.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    with open(res_path, "w") as f:
        json.dump(result, f, indent=1)
    if done and os.path.exists(ckpt_path) and not opts.keep_ckpt:
        os.remove(ckpt_path)
    return result


# ------------------------------------------------------------------------------ report
def load_results(out):
    res = []
    for dirpath, _, files in os.walk(out):
        if "result.json" in files:
            with open(os.path.join(dirpath, "result.json")) as f:
                res.append(json.load(f))
    return res


def report(out, plan=None):
    res = load_results(out)
    corpora = sorted({r["corpus"] for r in res})
    lines, summary = [], {}
    devices = sorted({r["device"] for r in res})
    dates = sorted({r["date"][:10] for r in res})
    lines.append(f"Device: {', '.join(devices)}; dates: {', '.join(dates)}; nvfp4 {res[0]['nvfp4'] if res else '?'}")
    for corpus in corpora:
        rs = [r for r in res if r["corpus"] == corpus]
        recipes = (plan["recipes"] if plan else []) + sorted({r["recipe"] for r in rs} - set(plan["recipes"] if plan else []))
        done = {(r["recipe"], r["seed"]): r for r in rs if r["status"] == "done"}
        steps = sorted({r["total_steps"] for r in rs})
        tokens = sorted({r["total_steps"] * (r["tokens"] // max(r["steps"], 1)) for r in rs if r["steps"]})
        lines.append("")
        lines.append(f"## {corpus}: {', '.join(map(str, steps))} steps ({', '.join(f'{t / 1e6:.1f}M' for t in tokens)} tokens), "
                     f"{rs[0]['params'] / 1e6:.1f}M parameters")
        lines.append("")
        lines.append("| recipe | seeds done | final val loss (mean +- sd) | paired gap to bf16 (mean, 95% t-interval) | "
                     "per-seed gaps | vs nvfp4 (paired, 95% t-interval) | step (ms) |")
        lines.append("|---|---|---|---|---|---|---|")
        summary[corpus] = {}
        for rec in recipes:
            seeds = sorted(s for (r_, s) in done if r_ == rec)
            losses = [done[(rec, s)]["final_val_loss"] for s in seeds]
            m, sd, n = mean_sd(losses)
            gaps = [100.0 * (done[(rec, s)]["final_val_loss"] / done[("bf16", s)]["final_val_loss"] - 1.0)
                    for s in seeds if ("bf16", s) in done] if rec != "bf16" else []
            gm, lo, hi, gn = t_interval(gaps)
            st = [r["step_time_s"] for r in rs if r["recipe"] == rec and r["step_time_s"]]
            partial = [r for r in rs if r["recipe"] == rec and r["status"] != "done"]
            loss_s = f"{m:.4f} +- {sd:.4f}" if n > 1 else (f"{m:.4f}" if n else "-")
            if rec == "bf16":
                gap_s = "(baseline)"
            elif gn >= 2:
                sig = "excludes 0" if (lo > 0 or hi < 0) else "includes 0"
                gap_s = f"{gm:+.2f}% [{lo:+.2f}, {hi:+.2f}] ({sig})"
            elif gn == 1:
                gap_s = f"{gm:+.2f}% (one seed)"
            else:
                gap_s = "-"
            per = ", ".join(f"{g:+.2f}" for g in gaps) if gaps else "-"
            # an option against the recipe it modifies: does it move the loss beyond the seeds' spread?
            vs = [100.0 * (done[(rec, s_)]["final_val_loss"] / done[("nvfp4", s_)]["final_val_loss"] - 1.0)
                  for s_ in seeds if ("nvfp4", s_) in done] if rec not in ("nvfp4", "bf16") else []
            vm, vlo, vhi, vn = t_interval(vs)
            vs_s = (f"{vm:+.2f}% [{vlo:+.2f}, {vhi:+.2f}]" + (" (excludes 0)" if (vlo > 0 or vhi < 0) else "")
                    if vn >= 2 else (f"{vm:+.2f}% (one seed)" if vn == 1 else "-"))
            seeds_s = f"{n}" + (f" (+{len(partial)} unfinished)" if partial else "")
            step_s = f"{1000 * float(np.median(st)):.1f}" if st else "-"
            lines.append(f"| {rec} | {seeds_s} | {loss_s} | {gap_s} | {per} | {vs_s} | {step_s} |")
            summary[corpus][rec] = {"seeds": seeds, "final_val_loss": losses, "mean": m, "sd": sd, "gaps_pct": gaps,
                                    "gap_mean": gm, "gap_ci95": [lo, hi], "vs_nvfp4_pct": vs, "vs_nvfp4_ci95": [vlo, vhi],
                                    "step_ms": 1000 * float(np.median(st)) if st else None,
                                    "unfinished": len(partial)}
        lines.append("")
        lines.append(plot(out, corpus, rs, recipes))
    text = "\n".join(lines)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return text


def curves_by_recipe(rs, recipes):
    out = {}
    for rec in recipes:
        runs = [r for r in rs if r["recipe"] == rec and r["val_curve"]]
        if not runs:
            continue
        steps = sorted(set.intersection(*[{p["step"] for p in r["val_curve"]} for r in runs]))
        vals = np.array([[{p["step"]: p["val_loss"] for p in r["val_curve"]}[s] for s in steps] for r in runs])
        out[rec] = (steps, vals)
    return out


def plot(out, corpus, rs, recipes) -> str:
    curves = curves_by_recipe(rs, recipes)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = os.path.join(out, f"curves_{corpus}.csv")
        with open(path, "w") as f:
            f.write("recipe,step,mean,min,max,n_seeds\n")
            for rec, (steps, vals) in curves.items():
                for i, s in enumerate(steps):
                    f.write(f"{rec},{s},{vals[:, i].mean():.6f},{vals[:, i].min():.6f},{vals[:, i].max():.6f},{vals.shape[0]}\n")
        return f"matplotlib is not installed: no plot; the curves (mean, min, max over seeds) are in {path}"
    fig, ax = plt.subplots(figsize=(8, 5))
    for rec, (steps, vals) in curves.items():
        line, = ax.plot(steps, vals.mean(0), label=f"{rec} (n={vals.shape[0]})")
        if vals.shape[0] > 1:
            ax.fill_between(steps, vals.min(0), vals.max(0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/byte)")
    ax.set_title(f"{corpus}: mean over seeds, band = lowest to highest seed")
    allv = np.concatenate([v[:, len(v[0]) // 3:].ravel() for _, v in curves.values() if v.shape[1]]) if curves else []
    if len(allv):
        ax.set_ylim(float(np.min(allv)) - 0.05, float(np.percentile(allv, 95)) + 0.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(out, f"curves_{corpus}.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return f"Curves: {path}"


# ------------------------------------------------------------------------------ main
def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default=None, help="comma-separated; bf16 is the paired baseline [bf16,nvfp4]")
    ap.add_argument("--seeds", default=None, help="comma-separated [0,1,2]")
    ap.add_argument("--corpora", default=None, help=f"comma-separated, of {sorted(prepare_data.CORPORA)} [stdlib]")
    ap.add_argument("--data-root", default=None, help="where the corpora are prepared (default ~/.cache/nvfp4)")
    # the run settings (RUN_KEYS): with --resume, those not given are the comparison's own
    ap.add_argument("--size", default=None, choices=sorted(train.SIZES), help="model size [full]")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per run [600]")
    ap.add_argument("--batch-size", type=int, default=None, help="sequences per step [the size's]")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate [6e-4]")
    ap.add_argument("--warmup-steps", type=int, default=None, help="[100]")
    ap.add_argument("--eval-interval", type=int, default=None, help="[steps/10]")
    ap.add_argument("--eval-batches", type=int, default=None, help="[20]")
    ap.add_argument("--cooldown-frac", type=float, default=None, help="for nvfp4_cooldown and nvfp4_fwd_cooldown [0.15]")
    ap.add_argument("--skip-quant-first-layers", type=int, default=None, help="[1]")
    ap.add_argument("--skip-quant-last-layers", type=int, default=None, help="[1]")
    ap.add_argument("--amp", default=None, choices=["auto", "bf16", "off"], help="[auto]")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--device", default=None)
    ap.add_argument("--ckpt-every", type=int, default=100, help="steps between checkpoints")
    ap.add_argument("--keep-ckpt", action="store_true", help="keep the checkpoints of finished runs")
    ap.add_argument("--log-interval", type=int, default=25)
    ap.add_argument("--time-budget-min", type=float, default=0.0,
                    help="stop (checkpointing the current run) after this many minutes; 0: no limit")
    ap.add_argument("--stop-at-step", type=int, default=0, help="stop every run at this step (checkpointed)")
    ap.add_argument("--out", required=True, help="comparison directory")
    ap.add_argument("--resume", action="store_true", help="continue the comparison in --out")
    ap.add_argument("--report-only", action="store_true", help="write the report of --out and exit")
    a = ap.parse_args(argv)
    a.recipes = [r for r in (a.recipes or "").split(",") if r]
    a.corpora = [c for c in (a.corpora or "").split(",") if c]
    try:
        a.seeds = [int(s) for s in (a.seeds or "").split(",") if s]
    except ValueError:
        ap.error(f"--seeds: comma-separated integers, got {a.seeds!r}")
    for r in a.recipes:
        if r not in recipe_names():
            ap.error(f"--recipes: unknown recipe {r!r} (known: {', '.join(recipe_names())})")
    for c in a.corpora:
        if c not in prepare_data.CORPORA:
            ap.error(f"--corpora: unknown corpus {c!r} (known: {', '.join(sorted(prepare_data.CORPORA))})")
    if a.ckpt_every < 1:
        ap.error("--ckpt-every: must be >= 1")
    a.device_type = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu")).type
    return a


DEFAULTS = {"size": "full", "steps": 600, "batch_size": None, "lr": 6e-4, "warmup_steps": 100, "eval_batches": 20,
            "cooldown_frac": 0.15, "skip_quant_first_layers": 1, "skip_quant_last_layers": 1, "amp": "auto"}


def settle(a, old):
    """Fill the run settings: from the comparison being resumed (old), else the defaults; an
    explicit setting that differs from the resumed comparison's is an error."""
    given = {k: getattr(a, k) for k in RUN_KEYS}
    for k in RUN_KEYS:
        if old is not None:
            if k == "eval_interval" and given[k] is None:
                setattr(a, k, old[k])
            elif given[k] is not None and given[k] != old[k]:
                raise SystemExit(f"--resume: --{k.replace('_', '-')} is {given[k]!r} here but {old[k]!r} in the "
                                 f"comparison being resumed")
            else:
                setattr(a, k, old[k])
        elif given[k] is None and k in DEFAULTS:
            setattr(a, k, DEFAULTS[k])
    if old is None:
        if a.size == "smoke":  # two blocks: quantize both unless told otherwise
            a.skip_quant_first_layers = given["skip_quant_first_layers"] or 0
            a.skip_quant_last_layers = given["skip_quant_last_layers"] or 0
        a.recipes = a.recipes or ["bf16", "nvfp4"]
        a.seeds = a.seeds or [0, 1, 2]
        a.corpora = a.corpora or ["stdlib"]
    if a.eval_interval is None:
        a.eval_interval = max(1, a.steps // 10)


def plan_of(a):
    p = {"recipes": a.recipes, "seeds": a.seeds, "corpora": a.corpora, "backend": a.backend}
    p.update({k: getattr(a, k) for k in RUN_KEYS})
    return p


def main(argv=None):
    t0 = time.time()
    a = parse(argv)
    plan_path = os.path.join(a.out, "plan.json")
    if a.report_only:
        if not os.path.exists(plan_path):
            raise SystemExit(f"--out: no comparison in {a.out} (no plan.json)")
        with open(plan_path) as f:
            print(report(a.out, json.load(f)))
        return
    old = None
    if os.path.exists(plan_path):
        with open(plan_path) as f:
            old = json.load(f)
        if not a.resume:
            raise SystemExit(f"--out: {a.out} already holds a comparison; pass --resume to continue it "
                             f"(or choose another --out)")
    elif a.resume:
        raise SystemExit(f"--resume: no comparison in {a.out} to continue")
    settle(a, old)
    plan = plan_of(a)
    if old is not None:  # a resumed call may add recipes, seeds or corpora; it keeps the ones there
        for k in ("recipes", "seeds", "corpora"):
            plan[k] = old[k] + [v for v in plan[k] if v not in old[k]]
    os.makedirs(a.out, exist_ok=True)
    with open(plan_path, "w") as f:
        json.dump(plan, f, indent=1)

    def log(msg):
        print(f"[{time.time() - t0:6.0f} s] {msg}", flush=True)

    deadline = Deadline(a.time_budget_min, t0)
    data = {}
    for c in plan["corpora"]:
        d = os.path.join(a.data_root, c) if a.data_root else None
        meta = prepare_data.prepare_corpus(c, d, quiet=False)
        data[c] = d or prepare_data.CORPORA[c][1]
        log(f"corpus {c}: {meta['train_tokens'] / 1e6:.1f}M train / {meta['val_tokens'] / 1e6:.2f}M val bytes")
    # seed-major order: every recipe of a seed before the next seed, so that a comparison
    # cut short still holds complete pairs
    for seed in plan["seeds"]:
        for c in plan["corpora"]:
            for rec in plan["recipes"]:
                if deadline.passed():
                    break
                log(f"run {c}/{rec}/seed{seed}")
                r = train_run(a, c, rec, seed, data[c], deadline, log)
                if r["status"] == "done":
                    log(f"  {c}/{rec}/seed{seed}: final val loss {r['final_val_loss']:.4f}, "
                        f"{1000 * (r['step_time_s'] or float('nan')):.1f} ms/step")
    print(report(a.out, plan))
    left = [f"{c}/{r}/seed{s}" for s in plan["seeds"] for c in plan["corpora"] for r in plan["recipes"]
            if not os.path.exists(os.path.join(run_dir(a.out, c, r, s), "result.json"))
            or json.load(open(os.path.join(run_dir(a.out, c, r, s), "result.json")))["status"] != "done"]
    print(f"\n{len(left)} runs unfinished" + (f" (continue with --resume): {', '.join(left[:8])}"
                                               f"{' ...' if len(left) > 8 else ''}" if left else ""))


if __name__ == "__main__":
    main()
