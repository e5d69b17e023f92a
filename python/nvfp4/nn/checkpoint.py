"""Checkpoints of frozen NVFP4 models (nvfp4.nn.save / nvfp4.nn.load): a safetensors file
whose metadata describes each frozen layer (shape, recipe, layer index) and each built-in LoRA
adapter around one, so that `load` can rebuild them in a freshly built model. Its own module
because it needs both the frozen layers and the adapters (nn.lora imports nn.frozen)."""
from __future__ import annotations

import json
from typing import Dict, Optional

import torch
from torch import nn

from .frozen import FrozenLinear, recipe_from_dict
from .lora import LoRALinear

__all__ = ["save", "load", "FORMAT_VERSION"]

# ------------------------------------------------------------------------------ checkpoints
_META_KEY = "nvfp4.frozen"
_ALIAS_KEY = "nvfp4.aliases"
_LORA_KEY = "nvfp4.lora"
FORMAT_VERSION = 1


def _frozen_config(model: nn.Module) -> Dict[str, dict]:
    return {n: {"in_features": m.in_features, "out_features": m.out_features, "bias": m.bias is not None,
                "recipe": m.recipe.to_dict(), "layer_index": m.layer_index, "weight_dtype": str(m.weight_dtype)}
            for n, m in model.named_modules() if isinstance(m, FrozenLinear)}


def _lora_config(model: nn.Module) -> Dict[str, dict]:
    out = {}
    for n, m in model.named_modules():
        if isinstance(m, LoRALinear):
            dropout = m.dropout.p if isinstance(m.dropout, nn.Dropout) else 0.0
            out[n] = {"rank": m.rank, "alpha": m.alpha, "dropout": dropout, "dtype": str(m.lora_A.dtype)}
    return out


def save(model: nn.Module, path: str, metadata: Optional[Dict[str, str]] = None) -> None:
    """Write model.state_dict() to a safetensors file, with each frozen layer's shape,
    recipe and layer index in the file's metadata (so that `load` can rebuild them). Tensors
    that share memory (tied weights) are written once; `load` restores the other names."""
    from safetensors.torch import save_file

    sd = model.state_dict()
    tensors, aliases, seen, storages = {}, {}, {}, set()
    for k, v in sd.items():
        v = v.detach()
        if v.numel():
            ptr = (v.device, v.untyped_storage().data_ptr())
            key = ptr + (v.storage_offset(), tuple(v.shape), tuple(v.stride()), v.dtype)
            if key in seen:  # the same tensor under two names (tied weights)
                aliases[k] = seen[key]
                continue
            seen[key] = k
            # safetensors refuses tensors that share memory: copy views into a storage seen before
            v = v.clone() if ptr in storages else v.contiguous()
            storages.add(ptr)
        tensors[k] = v
    meta = {"format": "pt", "nvfp4.version": str(FORMAT_VERSION), _META_KEY: json.dumps(_frozen_config(model)),
            _ALIAS_KEY: json.dumps(aliases), _LORA_KEY: json.dumps(_lora_config(model))}
    if metadata:
        meta.update({str(k): str(v) for k, v in metadata.items()})
    save_file(tensors, path, metadata=meta)


def _set_submodule(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


def load(model: nn.Module, path: str, strict: bool = True, device=None):
    """Load a file written by `save` into `model` (in place) and return load_state_dict's
    result. Modules that are frozen in the file but not in `model` (a freshly built model:
    nn.Linear, nvfp4 Linear or GPT-2 Conv1D) become FrozenLinear first, with the file's recipe
    and layer index, without quantizing their current weights, and those the file has LoRA
    adapters on (nvfp4.nn.add_lora) get them, with the file's rank, alpha, dropout and dtype.
    device: where the frozen layers go (default: where the module's parameters are)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    if _META_KEY not in meta:
        raise ValueError(f"path: {path} has no nvfp4 metadata (not written by nvfp4.nn.save)")
    sd = load_file(path, device="cpu")
    for k, src in json.loads(meta.get(_ALIAS_KEY, "{}")).items():
        sd[k] = sd[src]
    loras = json.loads(meta.get(_LORA_KEY, "{}"))
    built_lora = False
    for name, info in json.loads(meta[_META_KEY]).items():
        lora_name = name[:-len(".base")] if name.endswith(".base") else None
        try:
            m = model.get_submodule(name)
        except AttributeError:
            m = None
        if m is None and lora_name is not None and lora_name in loras:
            try:
                m = model.get_submodule(lora_name)  # the layer the adapter wraps, not wrapped yet
            except AttributeError:
                m = None
            if m is not None and not isinstance(m, LoRALinear):
                target = lora_name
            else:
                m = None
        else:
            target = name
        if m is None:
            if lora_name is not None:
                raise ValueError(f"path: the file has a LoRA adapter around the frozen layer {lora_name!r}, which "
                                 "the model does not have; build the same model first: nvfp4.freeze_fp4(model) and "
                                 "nvfp4.nn.add_lora(model, rank=..., alpha=...) as when it was saved (or load the "
                                 "checkpoint through transformers with nvfp4.hf, which rebuilds both)")
            raise ValueError(f"path: the file has a frozen layer {name!r} that the model does not have") from None
        if isinstance(m, FrozenLinear):
            continue
        wdev = device
        if wdev is None:
            p = next(iter(m.parameters()), None)
            wdev = p.device if p is not None and p.device.type != "meta" else "cpu"
        wdtype = getattr(torch, info.get("weight_dtype", "torch.float32").split(".")[-1])
        new = FrozenLinear(info["in_features"], info["out_features"], bias=info["bias"], device=wdev, dtype=wdtype,
                           recipe=recipe_from_dict(info["recipe"]), layer_index=info["layer_index"])
        if target != name:
            lo = loras[lora_name]
            new = LoRALinear(new, rank=lo["rank"], alpha=lo["alpha"], dropout=lo["dropout"],
                             dtype=getattr(torch, lo["dtype"].split(".")[-1]), device=wdev)
        _set_submodule(model, target, new)
        built_lora = built_lora or target != name
    if built_lora:  # as add_lora leaves a model: only the adapters train
        for n, p in model.named_parameters():
            p.requires_grad_(n.rsplit(".", 1)[-1] in ("lora_A", "lora_B"))
    return model.load_state_dict(sd, strict=strict)

