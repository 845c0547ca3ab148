"""Do the pruning rules flag slow programs? Judged on measured random programs of run
folders (records.jsonl + tasks.json of `--policy random` runs, e.g. bench_out/pretrain):
per rule, the share of programs it flags, the share of those in their task's top 10% (a
sound rule flags fewer than the overall share), and their mean throughput normalized per
task (best = 1).

  python tools/pruning_check.py RUN_FOLDER...

It times nothing: the throughputs are those of the records, each checked by the measurer.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from mlir_ansor.sketch_passes.pruning import RULES, flagged
from mlir_ansor.targets import host
from mlir_ansor.tuner.cost_model import normalized_throughputs
from mlir_ansor.tuner.pretraining import load_corpus


def main() -> int:
    target = host()
    corpus = load_corpus([Path(p) for p in sys.argv[1:]], target.device_kind)
    flags = {r.name: [] for r in RULES}  # per flagged program: (in top 10%, throughput)
    n = top = 0
    values = []
    for w in corpus:
        thr = normalized_throughputs(w.records)
        cut = np.quantile(thr, 0.9)
        for rec, v in zip(w.records, thr):
            n += 1
            top += v >= cut
            values.append(v)
            for name in flagged(w.ops, rec.to_program(), target):
                flags[name].append((v >= cut, v))
    print(f"{n} programs of {len(corpus)} tasks on {target.device_kind} ({target.cores} cores, "
          f"L1 {target.l1d_bytes >> 10} KiB, L2 {target.l2_bytes >> 10} KiB); in their "
          f"task's top 10%: {top / max(n, 1):.1%}; mean throughput {np.mean(values):.2f}")
    print(f"{'rule':18s} {'flags':>6s} {'in top 10%':>10s} {'mean thr':>8s}")
    for name, got in flags.items():
        if got:
            print(f"{name:18s} {len(got) / n:6.1%} {np.mean([t for t, _ in got]):10.1%} "
                  f"{np.mean([v for _, v in got]):8.2f}")
        else:
            print(f"{name:18s} {0:6.1%} {'-':>10s} {'-':>8s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
