"""`python -m mlir_ansor.tune MODEL` — tune a PyTorch model end to end.

MODEL is a bundled example name or path/to/file.py:factory (factory() returns the model
and a tuple of example inputs). Writes records, the tuned library, the tuned module,
build.sh and a report under --out, and prints the result table.

Exit codes (docs/cli.md): 0 done, 1 other error, 2 bad option, 3 model cannot be loaded or
imported, 4 output folder not writable or full, 5 IREE tools missing, 6 a tuned module
failed to build or check, 130 interrupted. Errors end with one line on stderr.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlir_ansor.errors import INTERRUPTED_EXIT, AnsorError, UsageError, print_error


def _positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _non_negative_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _non_negative_float(text: str) -> float:
    v = float(text)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, the documented code, no usage dump
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(UsageError.exit_code)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog="python -m mlir_ansor.tune", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="*", default=["resnet_block"],
                   help="bundled example name or path/to/file.py:factory (default: "
                        "resnet_block); several models are tuned together, sharing tasks")
    p.add_argument("--trials", type=_non_negative_int, default=96,
                   help="measurements in total (default 96)")
    p.add_argument("--target", default="llvm-cpu",
                   help="llvm-cpu (this machine, default), aarch64 (Neoverse N1: checked "
                        "under qemu, ranked by llvm-mca, not timed), cuda[:sm_NN] (writes an "
                        "offline batch for a GPU machine), or a "
                        "target name / JSON file (mlir_ansor/targets.py)")
    p.add_argument("--ray", default="", metavar="ADDRESS",
                   help="compile and measure on a Ray cluster (auto: the one this machine "
                        "belongs to): builds go to nodes with a 'builder' resource, timings to "
                        "a node offering the device kind (e.g. x86_64-avx2) as a resource; "
                        "needs pip install 'mlir-ansor[ray]'")
    p.add_argument("--ssh", default="", metavar="[USER@]HOST[:PORT]",
                   help="check and time the candidates on a device reached by ssh (key "
                        "login) that has IREE's runtime tools; its kind must be --target's")
    p.add_argument("--ssh-key", default="", metavar="FILE", help="identity file for --ssh")
    p.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                   help="an ssh -o option for --ssh (repeatable), e.g. Port=2222")
    p.add_argument("--ssh-tools", default="", metavar="DIR",
                   help="folder of iree-run-module and iree-benchmark-module on the ssh "
                        "device (default: its PATH)")
    p.add_argument("--allow-unmeasured", action="store_true",
                   help="hand back strategies that were ranked, not timed (a target of "
                        "another architecture with no runner on it: checked under qemu, "
                        "ranked by llvm-mca); without it IREE's default is handed back and "
                        "the withheld strategies are listed")
    p.add_argument("--out", type=Path, default=Path("ansor_out"), help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=_positive_int, default=4,
                   help="programs per task per round")
    p.add_argument("--policy", choices=["evolution", "random"], default="evolution",
                   help="search policy: evolutionary search on the cost model (default) or "
                        "random sampling")
    p.add_argument("--reuse", type=Path, action="append", default=[], metavar="RECORDS",
                   help="a records file of an earlier run (repeatable): warm-starts the cost "
                        "model and offers its best programs for export, re-validated here "
                        "(not counted in --trials)")
    p.add_argument("--cost-model", default="auto", metavar="auto|none|FILE",
                   help="the cost model to start from: auto (default: the cost_model.json "
                        "beside a --reuse file, else the one shipped for the target), none, "
                        "or a cost_model.json of an earlier run")
    p.add_argument("--dynamic", action="append", default=[], metavar="INPUT:DIM=LO..HI",
                   help="a dynamic input dimension (repeatable; INPUT is the forward "
                        "argument's name or position; @NAME after HI shares one size between "
                        "specs): one module serves every size in LO..HI")
    p.add_argument("--shape-weights", default="", metavar="FILE",
                   help="with --dynamic: the sizes the model sees, one 'SIZE COUNT' line "
                        "each; they weight the sizes a dynamic dispatch is tuned at "
                        "(default: uniform)")
    p.add_argument("--size-samples", type=int, default=5, metavar="N",
                   help="with --dynamic: how many sizes of each range a dynamic dispatch is "
                        "measured at while tuning (default 5; at least 2, the ends)")
    p.add_argument("--scheduler", choices=["gradient", "round_robin"], default="gradient",
                   help="how trials are spread over tasks (default: gradient, paper §6)")
    p.add_argument("--objective", choices=["f1", "f2", "f3", "f4"], default="f1",
                   help="the gradient scheduler's objective: f1 summed latency (default), "
                        "f2 each model until --latency-requirement-ms, f3 geometric mean "
                        "speedup over IREE's default, f4 f1 with early stopping")
    p.add_argument("--latency-requirement-ms", type=float, default=0.0,
                   help="f2: the latency each model must reach")
    p.add_argument("--early-stop", type=_non_negative_int, default=0, metavar="ROUNDS",
                   help="stop tuning a task after this many rounds without improvement "
                        "(0: never; f4 defaults to 3)")
    p.add_argument("--search-minutes", type=_non_negative_float, default=0.0, metavar="MIN",
                   help="wall minutes the search may take (0: no limit; --trials stays the "
                        "upper bound; import, layout and hand back come on top)")
    p.add_argument("--repeat", type=_positive_int, default=5,
                   help="timed repetitions of every module benchmark (default 5)")
    p.add_argument("--min-repeat-ms", type=float, default=50.0,
                   help="each repetition calls the module back to back for at least this "
                        "long (default 50)")
    p.add_argument("--retime-rounds", type=_positive_int, default=4,
                   help="interleaved rounds of each task's best programs against IREE's "
                        "default before the hand-back (default 4)")
    p.add_argument("--e2e-rounds", type=_positive_int, default=11,
                   help="interleaved rounds of the end-to-end timing against torch and "
                        "IREE's default (default 11; a dynamic model's sizes: at most 3)")
    p.add_argument("--no-layout-rewrite", action="store_true",
                   help="keep the model's layout: no channels-last activations, no packed "
                        "constant weights (llvm-cpu)")
    p.add_argument("--io-layout", choices=["as-imported", "channels-last"],
                   default="as-imported",
                   help="the layout of the model's 4-D/5-D inputs and outputs in the module "
                        "handed back: as-imported (NCHW, default) or channels-last (NHWC / "
                        "NDHWC, torch's channels_last memory format: pass x.permute(0, 2, 3, "
                        "1), get NHWC back)")
    p.add_argument("--data-tiling", choices=["auto", "on", "off"], default="auto",
                   help="build the model with IREE's data tiling (packed mmt4d kernels for "
                        "its contractions; those dispatches are left to IREE): auto where "
                        "IREE's default build is clearly faster with it (default), on, off "
                        "(llvm-cpu)")
    p.add_argument("--pad-fusion", choices=["auto", "on", "off"], default="auto",
                   help="IREE's pad fusion (a padded conv reads its padding in place instead "
                        "of a dispatch copying its input; such dispatches are left to "
                        "IREE): auto builds the tuned model both ways at the end and keeps "
                        "the faster (default), on, off (llvm-cpu)")
    p.add_argument("--fold-transposes", choices=["auto", "on", "off"], default="auto",
                   help="IREE folds constant weights' transposes at compile time instead of "
                        "propagating them into the contractions (which then read the weight "
                        "across their vector lanes): auto where that leaves fewer such "
                        "reads (default), on, off (llvm-cpu)")
    p.add_argument("--propagate-transposes", choices=["auto", "on", "off"], default="auto",
                   help="IREE propagates activations' transposes into the contractions that "
                        "read them (which become generics) instead of forming dispatches of "
                        "their own: auto where that forms fewer dispatches and IREE's default "
                        "build is clearly faster with it (default), on, off (llvm-cpu; not with "
                        "folded weight transposes)")
    p.add_argument("--winograd", choices=["auto", "on", "off"], default="auto",
                   help="3x3 stride-1 f32 convolutions by Winograd F(6x6, 3x3), written "
                        "out in linalg (about 5x fewer multiplications; its transforms and "
                        "batch matmul are tuned): auto decides on the tuned forms end to end "
                        "(default), on, off (llvm-cpu)")
    p.add_argument("--split-borders", choices=["auto", "on", "off"], default="auto",
                   help="padded convolutions on small images split into interior and border "
                        "rows, each with the taps that meet the image (skips the "
                        "multiplications by the padding): auto decides on the tuned forms end "
                        "to end (default), on, off (llvm-cpu)")
    p.add_argument("--small-sizes", choices=["auto", "off"], default="auto",
                   help="a dynamic model's smallest sizes (1, 2, 4, ... up to 64) in static "
                        "branches whose contractions are padded to the branch's top: auto "
                        "where IREE's default build is clearly faster with them (default), "
                        "off (llvm-cpu)")
    p.add_argument("--kernel-seeds", action=argparse.BooleanOptionalAction, default=True,
                   help="start each task's search with the outer-product micro-kernel that "
                        "fits the target's vector registers (default; --no-kernel-seeds: "
                        "search from random programs alone)")
    p.add_argument("--iree-seeds", action="store_true",
                   help="start each task's search with the programs closest to IREE's own "
                        "tile sizes")
    return p.parse_args(argv)


def _gpu_without_runner(args: argparse.Namespace) -> bool:
    """A cuda target, and neither this machine nor a runner option can time it."""
    from mlir_ansor.targets import TargetError, get_target, host

    try:
        target = get_target(args.target)
    except TargetError:
        return False  # the driver's check names the problem
    return (target.backend == "cuda" and not args.ssh and not args.ray
            and target.device_kind != host().device_kind)


# What the first round of an offline batch takes from the command line (the rest is the
# search's, the layout choice's or the hand-back's, which an offline batch does not run).
_OFFLINE_OPTIONS = frozenset({"model", "target", "trials", "seed", "out"})


def _offline_batch(args: argparse.Namespace) -> None:
    """`--target cuda` on a machine with no GPU: the first round of the search as an offline
    batch (mlir_ansor/offline.py) to run where the GPU is, and what to do next."""
    from mlir_ansor import offline

    defaults = parse_args([])
    unsupported = (["several models"] if len(args.model) > 1 else []) + [
        "--" + k.replace("_", "-") for k, v in vars(args).items()
        if k not in _OFFLINE_OPTIONS and v != getattr(defaults, k)]
    if unsupported:
        raise UsageError(f"--target {args.target} with no GPU here writes an offline batch, "
                         f"which does not take {', '.join(unsupported)}")
    batch = offline.prepare(args.model[0], args.target, args.trials, args.out, args.seed)
    print(f"--target {args.target}: no GPU runner on this machine, nothing is timed here: "
          f"the search's first round is the offline batch {batch} (each candidate compiled "
          "to PTX with its strategy applied). Run it where the GPU is; `python -m "
          f"mlir_ansor.offline finish {args.out} --results FILE` then hands back "
          "tuned_library.mlir and build.sh (`offline prepare ... --wheel WHL` carries an "
          "IREE runtime wheel for the device's Python)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from mlir_ansor.tuner.driver import TuneOptions, run
    from mlir_ansor.tuner.procs import stop_children_on_signals

    stop_children_on_signals()
    if _gpu_without_runner(args):
        try:
            _offline_batch(args)
        except AnsorError as e:
            return print_error(e)
        except KeyboardInterrupt:
            print("error: interrupted; the batch is incomplete (run again)", file=sys.stderr)
            return INTERRUPTED_EXIT
        return 0
    try:
        run(TuneOptions(  # the console reporter prints the result tables
            model=args.model[0], models=tuple(args.model), trials=args.trials,
            target=args.target, out=args.out, seed=args.seed, batch=args.batch,
            policy=args.policy, scheduler=args.scheduler, reuse=tuple(args.reuse),
            layout_rewrite=not args.no_layout_rewrite, iree_seeds=args.iree_seeds,
            kernel_seeds=args.kernel_seeds, data_tiling=args.data_tiling,
            io_layout=args.io_layout, pad_fusion=args.pad_fusion,
            fold_transposes=args.fold_transposes,
            propagate_transposes=args.propagate_transposes, winograd=args.winograd,
            split_borders=args.split_borders,
            small_sizes=args.small_sizes,
            objective=args.objective, latency_requirement_s=args.latency_requirement_ms / 1e3,
            early_stop=args.early_stop, search_minutes=args.search_minutes,
            cost_model=args.cost_model,
            dynamic=tuple(args.dynamic), shape_weights=args.shape_weights,
            size_samples=args.size_samples, allow_unmeasured=args.allow_unmeasured,
            ray=args.ray, ssh=args.ssh, ssh_key=args.ssh_key, ssh_tools=args.ssh_tools,
            ssh_options=tuple(args.ssh_option), repeat=args.repeat,
            min_repeat_ms=args.min_repeat_ms, retime_rounds=args.retime_rounds,
            e2e_rounds=args.e2e_rounds))
    except AnsorError as e:
        return print_error(e)
    except KeyboardInterrupt:
        print("error: interrupted; records written so far are kept (run again to resume)",
              file=sys.stderr)
        return INTERRUPTED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
