"""Derivation rules, one per module, and the deterministic default list per target.

A user rule is any object with `name`, `condition(ops, state)` and `apply(ops, state)`
(see `mlir_ansor.sketch_passes.sketch.Rule`); pass your list to `generate_sketches` or
register it with `register_rule`, which inserts it before the catch-all Skip rule. A rule
adds structure as steps (`StructureStep` subclasses; the built-in ones are defined with the
rule that adds them and listed here); a new kind of step brings its own hooks.
"""
from __future__ import annotations

from typing import Iterator

from mlir_ansor.sketch_passes.rules.always_inline import AlwaysInline, Inline
from mlir_ansor.sketch_passes.rules.cache_write import AddCacheWrite, CacheWrite
from mlir_ansor.sketch_passes.rules.cross_thread_reduction import (AddCrossThreadReduction,
                                                                   CrossThreadReduction)
from mlir_ansor.sketch_passes.rules.multi_level_tiling import MultiLevelTile, MultiLevelTiling
from mlir_ansor.sketch_passes.rules.multi_level_tiling_fusion import (FuseConsumer,
                                                                      MultiLevelTilingWithFusion)
from mlir_ansor.sketch_passes.rules.multi_level_tiling_gpu import (CacheReadShared,
                                                                   MultiLevelTileGPU,
                                                                   MultiLevelTilingGPU)
from mlir_ansor.sketch_passes.rules.rfactor import AddRfactor, Rfactor
from mlir_ansor.sketch_passes.rules.skip import Skip
from mlir_ansor.sketch_passes.sketch import Rule, StructureStep

__all__ = ["AddCacheWrite", "AddCrossThreadReduction", "AddRfactor", "AlwaysInline",
           "CacheReadShared", "CacheWrite", "CrossThreadReduction", "FuseConsumer", "Inline",
           "MultiLevelTile", "MultiLevelTileGPU", "MultiLevelTiling", "MultiLevelTilingGPU",
           "MultiLevelTilingWithFusion", "Rfactor", "Skip", "default_cpu_rules",
           "default_gpu_rules", "legacy_steps", "register_rule", "rules_for"]

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


def legacy_steps(d: dict) -> Iterator[StructureStep]:
    """The built-in steps a sketch's stored fields stand for (root, flags, inlined)."""
    root, gpu = d.get("root", ""), bool(d.get("gpu", False))
    for op in d.get("inlined", ()):
        yield Inline(op)
    if not root:
        return
    if d.get("rfactor"):
        yield CrossThreadReduction(root) if gpu else Rfactor(root)
    else:
        yield MultiLevelTileGPU(root) if gpu else MultiLevelTile(root)
    if d.get("fuse_consumer"):
        yield FuseConsumer(root)
    if d.get("cache_write"):
        yield CacheWrite(root)
    if d.get("cache_read"):
        yield CacheReadShared(root)
