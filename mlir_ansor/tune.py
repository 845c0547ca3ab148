"""`python -m mlir_ansor.tune MODEL` — tune a PyTorch model end to end.

MODEL is a bundled example name or path/to/file.py:factory (factory() returns the model
and a tuple of example inputs). Writes records, the tuned library, the tuned module and a
report under --out, and prints the result table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlir_ansor.errors import AnsorError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m mlir_ansor.tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="*", default=["resnet_block"],
                   help="bundled example name or path/to/file.py:factory (default: "
                        "resnet_block); several models are tuned together, sharing tasks")
    p.add_argument("--trials", type=int, default=96, help="measurements in total (default 96)")
    p.add_argument("--target", default="llvm-cpu", help="codegen target (llvm-cpu)")
    p.add_argument("--out", type=Path, default=Path("ansor_out"), help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=4, help="programs per task per round")
    p.add_argument("--policy", choices=["evolution", "random"], default="evolution",
                   help="search policy: evolutionary search on the cost model (default) or "
                        "random sampling")
    p.add_argument("--reuse", type=Path, nargs="*", default=[], metavar="RECORDS",
                   help="records files of earlier runs: warm-start the cost model and offer "
                        "their best programs for export (not counted in --trials)")
    p.add_argument("--scheduler", choices=["gradient", "round_robin"], default="gradient",
                   help="how trials are spread over tasks (default: gradient, paper §6)")
    p.add_argument("--no-layout-rewrite", action="store_true",
                   help="keep the model's layout: no channels-last activations, no packed "
                        "constant weights (llvm-cpu)")
    p.add_argument("--iree-seeds", action="store_true",
                   help="start each task's search with the programs closest to IREE's own "
                        "tile sizes")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from mlir_ansor.tuner.driver import TuneOptions, run

        result = run(TuneOptions(model=args.model[0], models=tuple(args.model),
                                 trials=args.trials, target=args.target,
                                 out=args.out, seed=args.seed, batch=args.batch,
                                 policy=args.policy, scheduler=args.scheduler,
                                 reuse=tuple(args.reuse),
                                 layout_rewrite=not args.no_layout_rewrite,
                                 iree_seeds=args.iree_seeds))
    except AnsorError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(result.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
