"""nvfp4.nn: training with NVFP4 linear layers.

``Linear`` (a drop-in nn.Linear), ``Recipe`` and the canned recipes, ``convert`` /
``unconvert`` for whole models, and the precision schedule (``set_precision``, ``Cooldown``).
The device work runs through nvfp4's torch ops (``nvfp4.nn.ops`` is ``nvfp4._ops``,
namespace ``nvfp4``).
"""
from .. import _ops as ops
from .recipe import RECIPES, QuantConfig, Recipe, get_recipe, layer_seed
from .linear import Linear
from .convert import (DEFAULT_EXCLUDE, Cooldown, convert, converted_layers, plan_conversion, set_precision,
                      set_sr_step, set_weight_reuse, unconvert)

__all__ = ["Linear", "Recipe", "QuantConfig", "RECIPES", "get_recipe", "layer_seed", "convert", "unconvert",
           "plan_conversion", "converted_layers", "set_precision", "set_sr_step", "set_weight_reuse", "Cooldown",
           "DEFAULT_EXCLUDE", "ops"]
