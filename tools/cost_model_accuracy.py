"""Cost-model accuracy on held-out measured programs: pairwise accuracy and recall@k.

Uses the records of `tools/tuning_curve.py` (random and evolution runs pooled). 5-fold
cross validation: the model is trained on 4/5 of the programs and scored on the rest.

  python tools/cost_model_accuracy.py [--out bench_out/curves] [--k 30]

It times nothing: the throughputs it ranks are those of the curve records, each checked
by the measurer (compiled, strategy applied, output matched) or recorded as a failure.
It writes only what `tuning_curve.prepare` writes under --out (ignored by git).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from mlir_ansor.tuner.cost_model import (CostModel, normalized_throughputs, pairwise_accuracy,
                                         recall_at_k)
from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.records import RecordStore
from mlir_ansor.tuner.toolchain import Toolchain

sys.path.insert(0, str(Path(__file__).parent))
from tuning_curve import WORKLOADS, prepare  # noqa: E402


def evaluate(task, records, k: int, folds: int = 5, seed: int = 0) -> tuple[float, float, int]:
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(records))
    truth_all = normalized_throughputs(records)
    accs, recalls = [], []
    for f in range(folds):
        test = idx[f::folds]
        train = np.setdiff1d(idx, test)
        model = CostModel()
        model.add_task(task)
        model.fit_records([records[i] for i in train])
        pred = model.predict(task, [records[i].to_program() for i in test])
        accs.append(pairwise_accuracy(pred, truth_all[test]))
        recalls.append(recall_at_k(pred, truth_all[test], k))
    return float(np.mean(accs)), float(np.mean(recalls)), len(idx[0::folds])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench_out/curves"))
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--policies", default="random,evolution",
                    help="whose records to pool (template programs compile another way)")
    args = ap.parse_args()
    tools, cfg = Toolchain.find(), MeasureConfig()
    print(f"{'workload':9s} {'programs':>8s} {'test/fold':>9s} {'pairwise acc':>12s} "
          f"{'recall@' + str(args.k):>10s}")
    for w in sorted(WORKLOADS):
        files = [args.out / w / p / "records.jsonl" for p in args.policies.split(",")]
        files = [f for f in files if f.exists()]
        if not files:
            continue
        m = prepare(w, args.out / w, tools, cfg)
        seen, records = set(), []
        for f in files:
            for r in RecordStore(f).load():
                if r.task_key == m.task.key and r.program_key not in seen:
                    seen.add(r.program_key)
                    records.append(r)
        acc, rec, n_test = evaluate(m.task, records, args.k)
        # recall@k says nothing when a fold holds no more than k programs
        rec_s = f"{rec:10.3f}" if n_test > 2 * args.k else f"{'n/a':>10s}"
        print(f"{w:9s} {len(records):8d} {n_test:9d} {acc:12.3f} {rec_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
