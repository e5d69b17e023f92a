"""nvfp4.nn: training with NVFP4 linear layers.

``Linear`` (a drop-in nn.Linear), ``Recipe`` and the canned recipes, ``convert`` /
``unconvert`` for whole models, and the precision schedule (``set_precision``, ``Cooldown``).
Frozen NVFP4 bases: ``FrozenLinear`` (weight stored only in NVFP4), ``freeze_fp4`` for whole
models, ``save`` / ``load`` (safetensors), and LoRA adapters on top (``LoRALinear``,
``add_lora``, ``merge_and_unload``; peft's LoRA works too). The device work runs through
nvfp4's torch ops (namespace ``nvfp4``): ``nvfp4.nn.ops`` holds the layers' passes and
re-exports the op layer's basic ops (nvfp4._ops).
"""
from . import _passes as ops
from .recipe import RECIPES, QuantConfig, Recipe, four_over_six, get_recipe, layer_seed, rotation_signs
from .linear import Linear
from .grouped import GroupedExperts, GroupedLinear
from .frozen import FP4MergeWarning, FP4Weight, FrozenLinear, recipe_from_dict, requantize_writes
from .convert import (DEFAULT_EXCLUDE, ConversionPlan, Conv1DLinear, Cooldown, convert, converted_layers,
                      find_blocks, freeze_fp4, frozen_layers, plan_conversion, set_precision, set_saved_operands,
                      set_sr_step, set_weight_reuse, unconvert, ROUTER_NAMES)
from .lora import LoRALinear, add_lora, lora_parameters, lora_state_dict, merge_and_unload
from .checkpoint import load, save

__all__ = ["Linear", "GroupedLinear", "GroupedExperts", "ROUTER_NAMES", "Recipe", "QuantConfig", "RECIPES", "get_recipe", "layer_seed", "convert", "unconvert",
           "plan_conversion", "ConversionPlan", "find_blocks", "converted_layers", "frozen_layers",
           "set_precision", "set_saved_operands", "set_sr_step", "set_weight_reuse", "Cooldown", "DEFAULT_EXCLUDE",
           "Conv1DLinear",
           "FrozenLinear", "FP4Weight", "freeze_fp4", "save", "load", "recipe_from_dict", "LoRALinear", "add_lora",
           "merge_and_unload", "lora_parameters", "lora_state_dict", "ops", "requantize_writes", "FP4MergeWarning",
           "four_over_six", "rotation_signs"]
