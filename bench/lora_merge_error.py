"""How much of a LoRA fine-tune survives the export of a frozen NVFP4 base, over seeds.

For a tiny Llama (built from a config, random weights) with a frozen NVFP4 base and LoRA
adapters of a trained size (B ~ N(0, b_std²), rank 8), it prints per seed and as mean ± std:
the adapter's effect on the logits (unmerged vs adapters disabled), and the distance of each
export from the unmerged model: the default high-precision merge (Ŵ + ΔW in the base's
dtype) and the FP4 re-quantization (fp4=True), both against the unmerged model run with its
bases in high precision (only the merge differs) and against the unmerged W4A4 model (what
the fine-tune ran). Relative Frobenius norms of the logits. CPU, a few seconds a seed.

    python3 bench/lora_merge_error.py --seeds 5 --dtype bfloat16 --lora builtin
"""
import argparse
import copy
import statistics
import warnings

import torch

import nvfp4.nn as nn4


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    ap.add_argument("--lora", choices=["builtin", "peft"], default="builtin")
    ap.add_argument("--b-std", type=float, default=0.02, help="std of the adapters' B matrices")
    args = ap.parse_args()
    import transformers
    dtype = getattr(torch, args.dtype)
    ref = nn4.get_recipe("nvfp4", backend="reference")
    rows = []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                       tie_word_embeddings=False, pad_token_id=0)
        model = nn4.freeze_fp4(transformers.LlamaForCausalLM(cfg).to(dtype).eval(), ref)
        g = torch.Generator().manual_seed(1000 + seed)
        if args.lora == "builtin":
            nn4.add_lora(model, rank=8, alpha=16, dtype=dtype)
            bs = [m.lora_B for m in model.modules() if isinstance(m, nn4.LoRALinear)]
        else:
            import peft
            model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                               exclude_modules=["lm_head"]))
            bs = [m.lora_B["default"].weight for m in model.modules() if isinstance(m, peft.tuners.lora.Linear)]
        with torch.no_grad():
            for b in bs:
                b.copy_(torch.randn(b.shape, generator=g) * args.b_std)
        ids = torch.randint(1, 256, (4, 64), generator=g)

        def run(m):
            with torch.no_grad():
                return m(input_ids=ids).logits.float()

        def rel(a, b):
            return ((a - b).norm() / b.norm()).item()

        w4a4 = run(model)
        nn4.set_precision(model, "bf16")
        hp_ref = run(model)
        saved = [b.detach().clone() for b in bs]
        with torch.no_grad():
            for b in bs:
                b.zero_()
        base = run(model)
        with torch.no_grad():
            for b, s in zip(bs, saved):
                b.copy_(s)
        nn4.set_precision(model, "nvfp4")

        def merged(fp4):
            m = copy.deepcopy(model)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", nn4.FP4MergeWarning)
                if args.lora == "builtin":
                    return nn4.merge_and_unload(m, fp4=fp4)
                if fp4:
                    with nn4.requantize_writes(warn=False):
                        return m.merge_and_unload()
                return m.merge_and_unload()

        hp, fp4 = merged(False), merged(True)
        y_hp, y_fp4 = run(hp), run(fp4)
        nn4.set_precision(fp4, "bf16")
        y_fp4_hp = run(fp4)
        rows.append({"effect": rel(hp_ref, base), "hp vs unmerged (hp bases)": rel(y_hp, hp_ref),
                     "fp4 vs unmerged (hp bases)": rel(y_fp4_hp, hp_ref), "hp vs unmerged W4A4": rel(y_hp, w4a4),
                     "fp4 (W4A4) vs unmerged W4A4": rel(y_fp4, w4a4)})
        print(f"seed {seed}: " + ", ".join(f"{k} {v:.4f}" for k, v in rows[-1].items()), flush=True)
    print(f"{args.lora} LoRA, {args.dtype}, B std {args.b_std}, {args.seeds} seeds (mean ± std of the relative logit distance):")
    for k in rows[0]:
        v = [r[k] for r in rows]
        print(f"  {k:<30s} {statistics.mean(v):.4f} ± {statistics.stdev(v) if len(v) > 1 else 0:.4f}")
    gap = [r["fp4 (W4A4) vs unmerged W4A4"] - r["hp vs unmerged W4A4"] for r in rows]
    print(f"  paired gap fp4 - hp (W4A4 ref)  {statistics.mean(gap):.4f} ± {statistics.stdev(gap) if len(gap) > 1 else 0:.4f}")


if __name__ == "__main__":
    main()
