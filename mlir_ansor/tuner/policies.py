"""Search policies by name (the CLI and the benchmarks choose one)."""
from __future__ import annotations

import xgboost as xgb

from mlir_ansor.sketch_passes.template import TemplatePolicy
from mlir_ansor.tuner.evolution import EvolutionPolicy, SharedEvolution
from mlir_ansor.tuner.search import PolicyFactory, RandomPolicy

POLICIES: dict[str, PolicyFactory] = {"random": RandomPolicy, "evolution": EvolutionPolicy,
                                      "template": TemplatePolicy}


def make_policy(name: str, base: xgb.Booster | None = None) -> PolicyFactory:
    """The factory of one search: "evolution" gives every task one shared cost model
    (started from `base`, a saved or shipped model); the others are stateless."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} (choose from {sorted(POLICIES)})")
    return SharedEvolution(base=base) if name == "evolution" else POLICIES[name]
