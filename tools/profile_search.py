"""Wall time of one proposal of the evolutionary search (population 1024, 4 generations)
on the task with the most records of run folders, with the shared cost model trained on
all their records: the search's own overhead per batch, without compiling or measuring.
The digest of the proposed programs' keys shows whether a speed-up changed what the
search proposes (same folders, same digest).

  python tools/profile_search.py RUN_FOLDER... [--batch 8] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import sys
import time
from pathlib import Path

from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.targets import host
from mlir_ansor.tuner.cost_model import CostModel
from mlir_ansor.tuner.evolution import EvolutionConfig, EvolutionPolicy
from mlir_ansor.tuner.pretraining import load_corpus
from mlir_ansor.tuner.tasks import Task


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    args = ap.parse_args()
    corpus = load_corpus(args.folders, host().device_kind)
    w = max(corpus, key=lambda w: len(w.records))
    task = Task("t0", "d", w.key, 1, "", "", (), (), w.ops,
                tuple(generate_sketches(w.ops, default_cpu_rules())))
    model = CostModel()
    for o in corpus:
        model.add_task(o)
    records = [r for o in corpus for r in o.records]
    start = time.monotonic()
    model.fit_records(records)
    fit = time.monotonic() - start
    policy = EvolutionPolicy(task, 0, EvolutionConfig(), model=model)
    prof = cProfile.Profile() if args.profile else None
    start = time.monotonic()
    if prof:
        prof.enable()
    out = policy.propose(args.batch, {r.program_key for r in w.records}, records)
    if prof:
        prof.disable()
    took = time.monotonic() - start
    print(f"task {w.name}: fit on {len(records)} records {fit:.2f} s; propose({args.batch}) "
          f"{took:.2f} s{' (profiled)' if prof else ''}; proposals "
          f"{hashlib.sha1(''.join(p.key for p in out).encode()).hexdigest()[:12]}")
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(20)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
