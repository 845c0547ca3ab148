"""Search policies by name (the CLI and the benchmarks choose one)."""
from mlir_ansor.sketch_passes.template import TemplatePolicy
from mlir_ansor.tuner.evolution import EvolutionPolicy
from mlir_ansor.tuner.search import PolicyFactory, RandomPolicy

POLICIES: dict[str, PolicyFactory] = {"random": RandomPolicy, "evolution": EvolutionPolicy,
                                      "template": TemplatePolicy}
