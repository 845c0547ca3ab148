"""Derivation rules, one per module, and the deterministic default list per target.

A user rule is any object with `name`, `condition(ops, state)` and `apply(ops, state)`
(see `mlir_ansor.sketch_passes.sketch.Rule`); pass your list to `generate_sketches` or
register it with `register_rule`, which inserts it before the catch-all Skip rule.
"""
from __future__ import annotations

from mlir_ansor.sketch_passes.rules.always_inline import AlwaysInline
from mlir_ansor.sketch_passes.rules.cache_write import AddCacheWrite
from mlir_ansor.sketch_passes.rules.cross_thread_reduction import AddCrossThreadReduction
from mlir_ansor.sketch_passes.rules.multi_level_tiling import MultiLevelTiling
from mlir_ansor.sketch_passes.rules.multi_level_tiling_fusion import MultiLevelTilingWithFusion
from mlir_ansor.sketch_passes.rules.multi_level_tiling_gpu import MultiLevelTilingGPU
from mlir_ansor.sketch_passes.rules.rfactor import AddRfactor
from mlir_ansor.sketch_passes.rules.skip import Skip
from mlir_ansor.sketch_passes.sketch import Rule

__all__ = ["AddCacheWrite", "AddCrossThreadReduction", "AddRfactor", "AlwaysInline",
           "MultiLevelTiling", "MultiLevelTilingGPU", "MultiLevelTilingWithFusion", "Skip",
           "default_cpu_rules", "default_gpu_rules", "register_rule", "rules_for"]

_USER_RULES: list[Rule] = []


def register_rule(rule: Rule) -> None:
    """Add a user rule; it runs after the built-in rules and before Skip, in call order."""
    _USER_RULES.append(rule)


def default_cpu_rules() -> list[Rule]:
    # AddRfactor precedes MultiLevelTiling, which ends the rule list for its op.
    return [AlwaysInline(), AddRfactor(), MultiLevelTilingWithFusion(), AddCacheWrite(),
            MultiLevelTiling(), *_USER_RULES, Skip()]


def default_gpu_rules() -> list[Rule]:
    # AddCrossThreadReduction keeps the other sketches of its op (APPLY).
    return [AlwaysInline(), AddCrossThreadReduction(), MultiLevelTilingGPU(), *_USER_RULES,
            Skip()]


def rules_for(target: str) -> list[Rule]:
    """The default rule list of a codegen target (a name or target file: `targets`)."""
    from mlir_ansor.targets import get_target

    return default_gpu_rules() if get_target(target).backend == "cuda" else default_cpu_rules()
