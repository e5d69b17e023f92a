"""Hugging Face transformers integration: NVFP4 models through ``from_pretrained``.

    import nvfp4.hf                                      # registers the quantizer
    from nvfp4.hf import NVFP4Config
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=NVFP4Config(recipe="nvfp4"))
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=NVFP4Config(frozen=True))
    model.save_pretrained(out)                            # FP4 layers, recipe and SR counters
    model = AutoModelForCausalLM.from_pretrained(out)    # the same model, bit for bit

The quantizer plugs into transformers' own mechanism for quantization methods
(``transformers.quantizers.register_quantization_config`` / ``register_quantizer``, the
registration API transformers exports for methods that live outside it) under the method
name ``"nvfp4-nn"`` (``QUANT_METHOD``; transformers' built-in ``"nvfp4"`` is a different
method: weight-only NVFP4 inference on Blackwell). Importing ``nvfp4.hf`` registers it; a
checkpoint written by it names the method in its config.json, so loading one needs
``import nvfp4.hf`` first (transformers otherwise skips the unknown method with a warning
and the FP4 tensors do not load).

What ``from_pretrained(..., quantization_config=NVFP4Config(...))`` does with an ordinary
checkpoint: it loads the model as usual, then converts it with the config's selection
(``nvfp4.convert``: trainable ``nvfp4.nn.Linear`` layers that keep their master weights, or
``frozen=True``: ``nvfp4.freeze_fp4``, FrozenLinear layers that hold only the NVFP4 weight).
``save_pretrained`` then writes the model's state_dict as the layers hold it: trainable
layers their master weight and SR counter, frozen layers their E2M1 codes (uint8), E4M3 tile
scales (uint8, 128x4 swizzled), FP32 amax and SR counter, LoRA adapters (nvfp4.nn.add_lora)
their A and B; config.json's ``quantization_config`` (and each safetensors file's metadata)
records every converted layer with its kind, recipe and layer index. Loading that checkpoint
rebuilds those layers before the tensors load, so the model, counters included, is the one
that was saved bit for bit, and a Trainer resumed from it continues exactly.

``model.dequantize()`` (transformers' call) turns frozen layers into nn.Linear layers holding
the decoded weights and trainable ones back into nn.Linear: a plain high-precision model.
"""
from __future__ import annotations

import copy
import json
from typing import Any, Dict, Optional, Union

import torch
from torch import nn

from .nn.convert import Conv1DLinear, convert, freeze_fp4, is_conv1d
from .nn.checkpoint import _frozen_config, _set_submodule
from .nn.frozen import FrozenLinear, _check_frozen_recipe, recipe_from_dict
from .nn.linear import Linear
from .nn.lora import LoRALinear
from .nn.recipe import Recipe, get_recipe

try:
    from transformers.quantizers import HfQuantizer, register_quantization_config, register_quantizer
    from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING
    from transformers.utils.quantization_config import QuantizationConfigMixin
except ImportError as e:  # pragma: no cover
    raise ImportError(f"nvfp4.hf: needs the transformers package ({e})") from e

__all__ = ["NVFP4Config", "NVFP4HfQuantizer", "QUANT_METHOD", "FORMAT_VERSION", "describe_layers", "recipe_from_dict",
           "SRCounterCallback", "COUNTERS_FILE", "attach"]

#: The name under which the method is registered with transformers and written in config.json.
QUANT_METHOD = "nvfp4-nn"
#: Version of the layer table in the config; a checkpoint with another version is refused.
FORMAT_VERSION = 1

_KINDS = ("linear", "conv1d", "frozen")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).rsplit(".", 1)[-1]


def _as_recipe(recipe, what="recipe") -> Recipe:
    if isinstance(recipe, dict):
        try:
            return recipe_from_dict(recipe)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what}: not a valid nvfp4 recipe ({e})") from None
    return get_recipe(recipe)


def _patterns(value, what):
    """include/exclude: None or fnmatch/"re:" strings (the config is written to JSON, so
    callables and compiled regexes cannot be recorded)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise ValueError(f"{what}: must be None or a list of name patterns (str: fnmatch, or 're:' + a regex), "
                         f"got {value!r}")
    return list(value)


def _count(value, what) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: must be a non-negative int, got {value!r}")
    return value


class NVFP4Config(QuantizationConfigMixin):
    """How ``from_pretrained`` makes an nvfp4 model (and, in a saved checkpoint, what it made).

    recipe: a recipe name (nvfp4.nn.RECIPES), an nvfp4.nn.Recipe or its to_dict().
    frozen: False: trainable nvfp4.nn.Linear layers (NVIDIA's training recipe on the master
        weights); True: nvfp4.nn.FrozenLinear layers holding only the NVFP4 weight (a LoRA
        base, or W4A4 inference; the recipe must be a fused NVFP4 one with 2D weight tiles).
    skip_first_blocks, skip_last_blocks, skip_first, skip_last, include, exclude: the layer
        selection of nvfp4.convert (name patterns as strings only).
    layers: the converted layers, written when the model is saved (name -> kind, layer index,
        recipe, shape); not to be given by hand.
    """

    def __init__(self, recipe: Union[str, Recipe, dict] = "nvfp4", frozen: bool = False, skip_first_blocks: int = 0,
                 skip_last_blocks: int = 0, skip_first: int = 0, skip_last: int = 0, include=None, exclude=None,
                 layers: Optional[Dict[str, dict]] = None, format_version: int = FORMAT_VERSION,
                 quant_method: str = QUANT_METHOD, **kwargs):
        if kwargs:
            raise ValueError(f"{sorted(kwargs)[0]}: not an NVFP4Config argument (known: recipe, frozen, "
                             "skip_first_blocks, skip_last_blocks, skip_first, skip_last, include, exclude)")
        if quant_method != QUANT_METHOD:
            raise ValueError(f"quant_method: must be {QUANT_METHOD!r}, got {quant_method!r}")
        if format_version != FORMAT_VERSION:
            raise ValueError(f"format_version: this nvfp4 reads version {FORMAT_VERSION} of the layer table, the "
                             f"checkpoint has {format_version!r}; use the nvfp4 version that wrote it")
        if not isinstance(frozen, bool):
            raise ValueError(f"frozen: must be a bool, got {frozen!r}")
        self.quant_method = QUANT_METHOD
        self.format_version = FORMAT_VERSION
        self.recipe = _as_recipe(recipe)
        if frozen:
            _check_frozen_recipe(self.recipe)
        self.frozen = frozen
        self.skip_first_blocks = _count(skip_first_blocks, "skip_first_blocks")
        self.skip_last_blocks = _count(skip_last_blocks, "skip_last_blocks")
        self.skip_first = _count(skip_first, "skip_first")
        self.skip_last = _count(skip_last, "skip_last")
        self.include = _patterns(include, "include")
        self.exclude = _patterns(exclude, "exclude")
        self.layers = None if layers is None else _check_layers(layers)

    def to_dict(self) -> Dict[str, Any]:
        d = copy.deepcopy({k: v for k, v in self.__dict__.items() if k != "recipe"})
        d["recipe"] = self.recipe.to_dict()
        return d

    def selection(self) -> dict:
        """The keyword arguments of nvfp4.convert / freeze_fp4 this config stands for."""
        return dict(skip_first=self.skip_first, skip_last=self.skip_last, include=self.include, exclude=self.exclude,
                    skip_first_blocks=self.skip_first_blocks, skip_last_blocks=self.skip_last_blocks)


def _check_layers(layers) -> Dict[str, dict]:
    if not isinstance(layers, dict):
        raise ValueError(f"layers: must be a dict of layer name -> description, got {type(layers).__name__}")
    for name, d in layers.items():
        if not isinstance(d, dict) or d.get("kind") not in _KINDS:
            raise ValueError(f"layers: entry {name!r} must be a dict with 'kind' in {_KINDS}, got {d!r}")
        for k in ("layer_index", "in_features", "out_features"):
            if isinstance(d.get(k), bool) or not isinstance(d.get(k), int):
                raise ValueError(f"layers: entry {name!r} needs an int {k!r}")
        if d["kind"] == "frozen" and d.get("weight_dtype") not in _DTYPES:
            raise ValueError(f"layers: frozen entry {name!r} needs a weight_dtype in {sorted(_DTYPES)}")
        lora = d.get("lora")
        if lora is not None and (not isinstance(lora, dict) or not {"rank", "alpha", "dropout", "dtype"} <= set(lora)):
            raise ValueError(f"layers: the lora of entry {name!r} needs rank, alpha, dropout and dtype")
    return copy.deepcopy(layers)


# ------------------------------------------------------------------------------ the layer table
def describe_layers(model: nn.Module) -> Dict[str, dict]:
    """Every nvfp4 layer of `model` as the config's layer table records it: qualified name ->
    kind ("linear", "conv1d" or "frozen"), layer_index, recipe, in/out features, bias, and for
    frozen layers their weight dtype and the LoRA adapter around them (nvfp4.nn.LoRALinear;
    the entry is then named after the adapter, the frozen layer is its `.base`)."""
    out: Dict[str, dict] = {}
    lora_of = {id(m.base): (n, m) for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    for name, m in model.named_modules():
        if isinstance(m, FrozenLinear):
            kind = "frozen"
        elif isinstance(m, Conv1DLinear):
            kind = "conv1d"
        elif isinstance(m, Linear):
            kind = "linear"
        elif isinstance(m, LoRALinear) or not type(m).__module__.startswith("nvfp4."):
            continue
        else:
            # e.g. the FP8 baseline layer: not in the layer table, so a reload would silently
            # lose it; refused until the format describes it
            raise ValueError(f"model: {name} is an nvfp4 {type(m).__name__}, which the {QUANT_METHOD!r} checkpoint "
                             "format does not describe (it records Linear, Conv1DLinear, FrozenLinear and LoRALinear)")
        d = {"kind": kind, "layer_index": m.layer_index, "recipe": m.recipe.to_dict(),
             "in_features": m.in_features, "out_features": m.out_features, "bias": m.bias is not None}
        if kind == "frozen":
            d["weight_dtype"] = _dtype_name(m.weight_dtype)
        if id(m) in lora_of:
            if kind != "frozen":
                raise ValueError(f"model: {name} is a LoRA adapter around a trainable nvfp4 layer; the checkpoint "
                                 "format records adapters on frozen layers (nvfp4.freeze_fp4 first)")
            lname, lm = lora_of[id(m)]
            name = lname
            dropout = lm.dropout.p if isinstance(lm.dropout, nn.Dropout) else 0.0
            d["lora"] = {"rank": lm.rank, "alpha": lm.alpha, "dropout": dropout, "dtype": _dtype_name(lm.lora_A.dtype)}
        out[name] = d
    return out


def _rebuild(model: nn.Module, layers: Dict[str, dict]) -> Dict[str, tuple]:
    """Turn the (meta-device) modules named in `layers` into the nvfp4 layers they were, so
    that the checkpoint's tensors load into them. GPT-2's Conv1D layers stay Conv1D until
    the weights are in (the checkpoint holds their [in, out] layout, which transformers'
    loader assigns as it is), with a counter buffer to load into; returned as
    {name: (recipe, layer_index)} for _finish_conv1d."""
    pending = {}
    for name, d in layers.items():
        try:
            m = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"quantization_config.layers: the checkpoint has an nvfp4 layer {name!r} that this "
                             f"model ({type(model).__name__}) does not have") from None
        recipe = _as_recipe(d["recipe"], f"quantization_config.layers[{name!r}].recipe")
        feats = (d["in_features"], d["out_features"])
        if is_conv1d(m):
            have = tuple(m.weight.shape)
        elif isinstance(m, nn.Linear):
            have = (m.in_features, m.out_features)
        else:
            raise ValueError(f"quantization_config.layers: {name!r} is a {type(m).__name__} in this model, not a "
                             "linear layer")
        if have != feats:
            raise ValueError(f"quantization_config.layers: {name!r} is {feats[0]}x{feats[1]} in the checkpoint, "
                             f"{have[0]}x{have[1]} in this model")
        kind = d["kind"]
        if kind == "linear":
            Linear.from_linear(m, recipe, layer_index=d["layer_index"])
        elif kind == "conv1d":
            if not is_conv1d(m):
                raise ValueError(f"quantization_config.layers: {name!r} was a Conv1D, this model has a "
                                 f"{type(m).__name__}")
            m.register_buffer("sr_step", torch.zeros((), dtype=torch.int64, device=m.weight.device))
            pending[name] = (recipe, d["layer_index"])
        else:
            dev = next(iter(m.parameters())).device
            new = FrozenLinear(feats[0], feats[1], bias=d["bias"], device=dev, dtype=_DTYPES[d["weight_dtype"]],
                               recipe=recipe, layer_index=d["layer_index"])
            lora = d.get("lora")
            if lora is not None:
                new = LoRALinear(new, rank=lora["rank"], alpha=lora["alpha"], dropout=lora["dropout"],
                                 dtype=_DTYPES[lora["dtype"]], device=dev)
            _set_submodule(model, name, new)
    return pending


def _finish_conv1d(model: nn.Module, pending: Dict[str, tuple]) -> None:
    for name, (recipe, index) in pending.items():
        m = model.get_submodule(name)
        step = m._buffers.pop("sr_step")
        if not getattr(step, "_is_hf_initialized", False):
            raise ValueError(f"checkpoint: {name}.sr_step is missing; the file does not hold the nvfp4 layer its "
                             "config.json describes")
        Conv1DLinear.from_conv1d(m, recipe, layer_index=index)
        with torch.no_grad():
            m.sr_step.copy_(step)


def _check_loaded(model: nn.Module) -> None:
    """Every tensor of an nvfp4 layer came from the checkpoint (transformers marks what it
    loaded); a missing one would otherwise be left as uninitialized memory."""
    for name, m in model.named_modules():
        if isinstance(m, FrozenLinear):
            keys = ("weight_data", "weight_scales", "weight_amax", "sr_step") + (("bias",) if m.bias is not None else ())
        elif isinstance(m, Linear):
            keys = ("sr_step",)
        elif isinstance(m, LoRALinear):
            keys = ("lora_A", "lora_B")
        else:
            continue
        for k in keys:
            t = m._buffers.get(k) if k in m._buffers else m._parameters.get(k)
            if not getattr(t, "_is_hf_initialized", False):
                raise ValueError(f"checkpoint: {name}.{k} is missing; the file does not hold the nvfp4 layer its "
                                 "config.json describes")


# ------------------------------------------------------------------------------ the quantizer
class NVFP4HfQuantizer(HfQuantizer):
    """transformers' side of NVFP4Config (see the module docstring)."""

    requires_calibration = False

    def __init__(self, quantization_config, **kwargs):
        if isinstance(quantization_config, dict):
            quantization_config = NVFP4Config.from_dict(quantization_config)
        super().__init__(quantization_config, **kwargs)

    def validate_environment(self, *args, **kwargs):
        if self.pre_quantized and not self.quantization_config.layers:
            raise ValueError("quantization_config: the checkpoint says it was written by nvfp4 (quant_method "
                             f"{QUANT_METHOD!r}) but records no nvfp4 layers")

    def _process_model_before_weight_loading(self, model, **kwargs):
        if self.pre_quantized:
            self._conv1d_pending = _rebuild(model, self.quantization_config.layers)
            for m in model.modules():
                if isinstance(m, (FrozenLinear, LoRALinear)):
                    # transformers' weight initialization would write random values through the
                    # weight stand-in (a re-quantization); what these layers hold comes only
                    # from the checkpoint, which _check_loaded verifies
                    m._is_hf_initialized = True
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        cfg = self.quantization_config
        if self.pre_quantized:
            _check_loaded(model)
            _finish_conv1d(model, getattr(self, "_conv1d_pending", {}))
            self._conv1d_pending = {}
        else:
            if cfg.frozen:
                freeze_fp4(model, cfg.recipe, **cfg.selection())
            else:
                convert(model, cfg.recipe, **cfg.selection())
        # The loader makes every float tensor it loads trainable. Frozen layers stay frozen, and
        # a checkpoint with LoRA adapters comes back as add_lora leaves a model: only the
        # adapters train.
        for m in model.modules():
            if isinstance(m, FrozenLinear) and m.bias is not None:
                m.bias.requires_grad_(False)
        if self.pre_quantized and any(isinstance(m, LoRALinear) for m in model.modules()):
            for n, p in model.named_parameters():
                p.requires_grad_(n.rsplit(".", 1)[-1] in ("lora_A", "lora_B"))
        cfg.layers = describe_layers(model)
        return model

    def get_state_dict_and_metadata(self, model):
        # the table describes the model as it is saved (an adapter added, a layer frozen since)
        self.quantization_config.layers = describe_layers(model)
        meta = {"nvfp4.hf": json.dumps(self.quantization_config.to_dict()),
                # nvfp4.nn.load reads the frozen layers' shapes and recipes from here
                "nvfp4.frozen": json.dumps({n: v for n, v in _frozen_config(model).items()})}
        return None, meta

    def is_serializable(self, safe_serialization=None):
        return True

    @property
    def is_trainable(self) -> bool:
        return True

    @property
    def is_qat_trainable(self) -> bool:
        # trainable nvfp4 layers train their master weights; frozen ones train through adapters
        return True

    @property
    def is_compileable(self) -> bool:
        return True

    def _dequantize(self, model, dtype=None):
        for name, m in list(model.named_modules()):
            if isinstance(m, LoRALinear):
                raise ValueError(f"model: {name} still has a LoRA adapter; merge it first "
                                 "(nvfp4.nn.merge_and_unload) and dequantize the merged model")
        for name, m in list(model.named_modules()):
            if isinstance(m, FrozenLinear):
                lin = m.to_linear(dtype if dtype is not None else m.weight_dtype)
                _set_submodule(model, name, lin.to(m.weight_data.device))
            elif isinstance(m, Linear):
                m.to_linear()
        return model


def attach(model: nn.Module) -> nn.Module:
    """Make a transformers model that was converted by hand (nvfp4.convert, freeze_fp4,
    add_lora) save and load like one loaded with NVFP4Config: its save_pretrained then writes
    the layer table, and from_pretrained rebuilds the layers (SR counters included) instead
    of dropping them as unexpected keys. Returns the model."""
    from transformers import PreTrainedModel
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"model: expected a transformers PreTrainedModel, got {type(model).__name__}")
    existing = getattr(model, "hf_quantizer", None)
    if existing is not None and not isinstance(existing, NVFP4HfQuantizer):
        raise ValueError(f"model: already quantized by transformers' {existing.quantization_config.quant_method!r}")
    layers = describe_layers(model)
    if not layers:
        raise ValueError("model: has no nvfp4 layers (convert or freeze it first)")
    first = next(iter(layers.values()))
    cfg = NVFP4Config(recipe=first["recipe"], frozen=first["kind"] == "frozen", layers=layers)
    model.hf_quantizer = NVFP4HfQuantizer(cfg, pre_quantized=True)
    model.config.quantization_config = cfg
    model.is_quantized = True
    model.quantization_method = QUANT_METHOD
    return model


# ------------------------------------------------------------------------------ Trainer
COUNTERS_FILE = "nvfp4_sr_counters.safetensors"


def _counter_modules(model: nn.Module) -> Dict[str, nn.Module]:
    return {n: m for n, m in model.named_modules() if isinstance(m, (Linear, FrozenLinear))}


try:
    from transformers import TrainerCallback as _TrainerCallback
except ImportError:  # pragma: no cover
    _TrainerCallback = object


class SRCounterCallback(_TrainerCallback):
    """Keeps the nvfp4 layers' stochastic-rounding counters in the Trainer's checkpoints, for
    the runs whose checkpoints do not hold the model: peft's adapter checkpoints (a frozen
    base's counters advance with every dgrad and are not adapter weights). Without it a run
    resumed from such a checkpoint draws other SR bits than the uninterrupted run.

        trainer = Trainer(model=peft_model, ..., callbacks=[nvfp4.hf.SRCounterCallback()])

    Each checkpoint gets a COUNTERS_FILE; a resumed run (state.global_step > 0 when training
    begins) reads it back from `resume_from` if given, else from the output directory's
    checkpoint-<step> (where resume_from_checkpoint=True finds it), and refuses to start if
    it is missing or names other layers."""

    def __init__(self, resume_from: Optional[str] = None):
        self.resume_from = resume_from

    def on_save(self, args, state, control, model=None, **kwargs):
        import os
        from safetensors.torch import save_file
        if model is None or not state.is_world_process_zero:
            return
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        os.makedirs(path, exist_ok=True)
        counters = {n: m.sr_step.detach().reshape(1).cpu() for n, m in _counter_modules(model).items()}
        save_file(counters, os.path.join(path, COUNTERS_FILE), metadata={"format": "pt"})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        import os
        from safetensors.torch import load_file
        if model is None or state.global_step == 0:
            return
        path = self.resume_from or os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        f = os.path.join(path, COUNTERS_FILE)
        if not os.path.isfile(f):
            raise ValueError(f"resume_from: no {COUNTERS_FILE} in {path}; the run resumes at step {state.global_step} "
                             "and its SR counters would restart from the model's values. Name the checkpoint "
                             "directory: SRCounterCallback(resume_from=...)")
        saved = load_file(f)
        mods = _counter_modules(model)
        if set(saved) != set(mods):
            diff = sorted(set(saved) ^ set(mods))
            raise ValueError(f"resume_from: {f} holds the counters of other layers than the model has "
                             f"(e.g. {diff[0]!r})")
        with torch.no_grad():
            for n, m in mods.items():
                m.sr_step.fill_(int(saved[n].item()))


def _register() -> None:
    # idempotent: a second import (importlib.reload, two copies on sys.path) keeps the first
    if AUTO_QUANTIZATION_CONFIG_MAPPING.get(QUANT_METHOD) is not NVFP4Config:
        AUTO_QUANTIZATION_CONFIG_MAPPING.pop(QUANT_METHOD, None)
        register_quantization_config(QUANT_METHOD)(NVFP4Config)
    if AUTO_QUANTIZER_MAPPING.get(QUANT_METHOD) is not NVFP4HfQuantizer:
        AUTO_QUANTIZER_MAPPING.pop(QUANT_METHOD, None)
        register_quantizer(QUANT_METHOD)(NVFP4HfQuantizer)


_register()
