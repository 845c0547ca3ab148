"""Train a cost model from the output folders of earlier runs.

  python -m mlir_ansor.train_cost_model RUN_FOLDER... --out cost_model.json [--evaluate]
  python -m mlir_ansor.train_cost_model RUN_FOLDER... --judge MODEL.json

Each folder is a `python -m mlir_ansor.tune` output (records.jsonl + tasks.json). Only
records measured on --device-kind (default: this machine's) are used. --evaluate first
judges the model on workloads it never saw: for each task, a model trained on all the
others ranks that task's measured programs (pairwise accuracy; measurements, in predicted
order, to a program within 5% of the best, against random order). --exclude-task KEY
leaves a task out of the training set (the `task_key` of its records), e.g. to judge the
model on a workload it never saw. Pass the model to a run with --cost-model FILE; the
package ships one per device kind under tuner/pretrained/.

--judge MODEL ranks each task's measured programs with a saved model that never trained on
them (the same table as --evaluate): whether a model trained on another machine of the
same kind, such as the shipped one, still ranks this machine's programs. Judge it on
records of a random search (`--policy random`): the programs a model-guided search chose
are a narrow band near the top, which the models judged so far ranked near chance.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlir_ansor.errors import AnsorError, UsageError, print_error


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlir_ansor.train_cost_model",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", type=Path, metavar="RUN_FOLDER")
    p.add_argument("--out", type=Path, help="where to write the model (.json); required "
                   "unless --judge is given")
    p.add_argument("--judge", type=Path, metavar="MODEL",
                   help="rank the records with this saved model (trained elsewhere) first")
    p.add_argument("--device-kind", default="", help="default: this machine's")
    p.add_argument("--exclude-task", action="append", default=[], metavar="KEY",
                   help="leave out the task with this key (records' task_key); repeatable")
    p.add_argument("--evaluate", action="store_true",
                   help="print the leave-one-workload-out table first")
    args = p.parse_args(argv)
    if args.out is None and args.judge is None:
        p.error("one of --out and --judge is required")
    from mlir_ansor.targets import host
    from mlir_ansor.tuner.cost_model import load_booster, saved_for
    from mlir_ansor.tuner.pretraining import (judge, leave_one_out, load_corpus, summary_table,
                                              train)

    kind = args.device_kind or host().device_kind
    try:
        corpus = load_corpus(args.folders, kind)
        unknown = set(args.exclude_task) - {w.key for w in corpus}
        if unknown:
            raise UsageError(f"--exclude-task: no task with key {', '.join(sorted(unknown))} "
                             f"in {', '.join(map(str, args.folders))}")
        if args.exclude_task:
            print("left out: " + ", ".join(w.name for w in corpus if w.key in args.exclude_task))
            corpus = [w for w in corpus if w.key not in args.exclude_task]
        n = sum(len(w.records) for w in corpus)
        valid = sum(w.valid for w in corpus)
        print(f"{len(corpus)} tasks, {n} records ({valid} valid) measured on {kind}")
        if args.judge is not None:
            base = load_booster(args.judge, kind, same_arch=True)
            print(f"judged: {args.judge}, trained for {saved_for(base)}, "
                  "never trained on these records")
            print(summary_table(judge(corpus, base), "workload (records it never trained on)"))
            if args.out is None:
                return 0
        if args.evaluate:
            print(summary_table(leave_one_out(corpus)))
        model = train(corpus)
        if not model.trained:
            raise AnsorError(f"too few valid records to train ({valid})")
        model.save(args.out, kind)
    except AnsorError as e:
        return print_error(e)
    print(f"wrote {args.out} (for {kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
