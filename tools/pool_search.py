"""Replay the start of a guided search on a pool of programs already measured: a cheap
stand-in for `tools/tuning_curve.py` when choosing how to train the cost model.

The pool is a random run's records (`tuning_curve.py --policy random --trials 1000`).
Each batch of 8, the model (a base trained on corpus folders, the workload's task left
out, then the run's own trees on top once 16 valid results exist, as `CostModel` does)
ranks the pool's unmeasured programs, those the pruning rules flag demoted as in the
search; its top 7 and one random program (unflagged where any is left) are "measured" by
looking up their recorded latency. Printed: the best found after each batch as a share of
the pool's best, mean and worst over seeds. Unlike the real search nothing new is
proposed (evolution can find programs better than the pool's), so it ranks models, not
searches. Training is deterministic: the seeds vary only the random program of each batch
(and so the run's own trees), not the base's ranking. Choosing how to train on the
workloads the search is judged on makes them less unseen: replay on corpus folders' tasks
(leave them out with --corpus) where that matters.

  python tools/pool_search.py bench_out/curves/matmul --corpus RUN_FOLDER... \\
      --balance 0,0.5,1 --seeds 6
  python tools/pool_search.py bench_out/curves/conv \\
      --model mlir_ansor/tuner/pretrained/x86_64-avx512.json
"""
from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import xgboost as xgb

from mlir_ansor.errors import UsageError
from mlir_ansor.sketch_passes.pruning import Pruner, demote
from mlir_ansor.targets import get_target, host
from mlir_ansor.tuner.cost_model import (CostModel, CostModelConfig, load_booster,
                                         normalized_throughputs)
from mlir_ansor.tuner.evolution import EvolutionConfig
from mlir_ansor.tuner.pretraining import load_corpus, train
from mlir_ansor.tuner.records import Record, RecordStore
from mlir_ansor.tuner.builder import single_configuration
from mlir_ansor.tuner.tasks import Task, extract_tasks, with_codegen_view


def pool_of(workload_dir: Path) -> tuple[Task, list[Record]]:
    """The workload's main task and its random run's records (tuning_curve.py's layout:
    task_key.txt, tasks/t*/task.mlir, random/records.jsonl)."""
    key_file, recs = workload_dir / "task_key.txt", workload_dir / "random" / "records.jsonl"
    task_files = sorted((workload_dir / "tasks").glob("t*/task.mlir"))
    if not key_file.is_file() or not recs.is_file() or not task_files:
        raise UsageError(f"{workload_dir}: not a tuning_curve.py workload folder with a "
                         "random run (needs task_key.txt, tasks/t*/task.mlir and "
                         "random/records.jsonl)")
    key = key_file.read_text().strip()
    found = [(f, t) for f in task_files for t in extract_tasks(f.read_text()) if t.key == key]
    if not found:
        raise UsageError(f"{workload_dir}: no task with key {key} under tasks/")
    # The records' loops are those of the payload IREE's codegen hands the strategy (the
    # measurer re-analyzes the task on it: a unit batch loop kept, for one), not of the
    # task module.
    f, task = found[0]
    task = with_codegen_view(task, single_configuration(f.parent / "default_configs",
                                                        task.name), task.target)
    return task, [r for r in RecordStore(recs).load() if r.task_key == key]


def replay(task: Task, pool: Sequence[Record], base: xgb.Booster | None, seed: int,
           batches: int = 4, batch: int = 8, cfg: EvolutionConfig = EvolutionConfig()
           ) -> list[float]:
    """Best found (share of the pool's best) after each batch; the batch split between
    the model's picks and random ones as `EvolutionPolicy.propose` splits it."""
    if len(pool) < 2 * batches * batch:
        raise UsageError(f"{len(pool)} records of task {task.key}: a replay of {batches} "
                         f"batches of {batch} needs a pool of {2 * batches * batch} or more")
    n_rand = cfg.random_count(batch)
    rng = random.Random(seed)
    truth = normalized_throughputs(pool)
    programs = [r.to_program() for r in pool]
    factors = Pruner(get_target(task.target)).demotions(task, programs)
    model = CostModel(replace(cfg.model, seed=seed), base)
    model.add_task(task)
    measured: list[int] = []
    out = []
    for _ in range(batches):
        model.fit_records([pool[i] for i in measured])  # base alone below min_valid
        left = sorted(set(range(len(pool))) - set(measured))
        scores = demote(model.predict(task, [programs[i] for i in left]),
                        [factors[i] for i in left])
        ranked = [left[j] for j in np.argsort(-scores, kind="stable")]
        pick = ranked[:batch - n_rand]
        rest = ranked[batch - n_rand:]
        unflagged = [i for i in rest if factors[i] == 1.0]
        pick += rng.sample(unflagged if len(unflagged) >= n_rand else rest, n_rand)
        measured += pick
        out.append(float(truth[measured].max()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="+", type=Path, metavar="WORKLOAD_DIR")
    ap.add_argument("--corpus", nargs="*", type=Path, default=[], metavar="RUN_FOLDER",
                    help="train a base per --balance on these (the workload's task left out)")
    ap.add_argument("--balance", default="0.5", help="task_balance values, comma-separated")
    ap.add_argument("--model", type=Path, action="append", default=[],
                    help="a saved model as the base (repeatable)")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--batches", type=int, default=4)
    args = ap.parse_args()
    if not args.corpus and not args.model:
        ap.error("give --corpus RUN_FOLDER... (bases trained per --balance) or --model FILE")
    kind = host().device_kind
    corpus = load_corpus(args.corpus, kind) if args.corpus else []
    print(f"{'workload':10s} {'base':28s} best / pool's best after each batch of 8 "
          "(mean over seeds), worst at the end")
    for wdir in args.workloads:
        task, pool = pool_of(wdir)
        bases: list[tuple[str, xgb.Booster]] = [
            (m.name, load_booster(m, kind, same_arch=True)) for m in args.model]
        for b in (float(x) for x in args.balance.split(",")) if corpus else ():
            model = train([w for w in corpus if w.key != task.key],
                          CostModelConfig(task_balance=b))
            if model.booster is None:
                raise UsageError("the corpus has too few valid records to train a model")
            bases.append((f"corpus, balance {b}", model.booster))
        for name, base in bases:
            runs = np.array([replay(task, pool, base, s, args.batches)
                             for s in range(args.seeds)])
            print(f"{wdir.name:10s} {name[:28]:28s} " +
                  " ".join(f"{v:.3f}" for v in runs.mean(axis=0)) +
                  f"   worst {runs[:, -1].min():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as e:
        sys.exit(f"error: {e}")
