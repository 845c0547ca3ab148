"""Micro-kernel loops against dividing tiles on one matmul whose row count has no good
register tile: N valid random programs of each kind, built, checked applied, validated and
timed by the task measurer; best and median of each, and IREE's default.

  python tools/bench_peel.py [--rows 197] [--k 256] [--n 384] [--programs 12]

Writes only under --out (default bench_out/peel, ignored by git).
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain


def payload(m: int, k: int, n: int) -> str:
    return f"""func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%a, %b : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) outs(%f : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=197)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--n", type=int, default=384)
    ap.add_argument("--programs", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("bench_out/peel"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tools = Toolchain.find()
    src = args.out / "m.mlir"
    src.write_text(payload(args.rows, args.k, args.n))
    task = [t for t in extract_tasks(flow_source(src, "llvm-cpu", tools, 300)) if t.tunable][0]
    m = TaskMeasurer(task, args.out / "tasks", tools, MeasureConfig())
    m.prepare()
    task = m.task
    root = task.ops[-1].name
    rng = random.Random(args.seed)
    groups: dict[str, list] = {"peeled": [], "dividing": []}
    while any(len(g) < args.programs for g in groups.values()):
        p = annotate(task.ops, task.sketches[rng.randrange(len(task.sketches))], rng)
        g = groups["peeled" if p.peeled(root) else "dividing"]
        if len(g) < args.programs and not violations(task.ops, p):
            g.append(p)
    default = m.time_default()
    print(f"{args.rows}x{args.k}x{args.n} f32 matmul; IREE default {default * 1e3:.3f} ms")
    for name, progs in groups.items():
        ok = sorted(r.latency_s for r in m.measure_iter(progs) if r.ok)
        if not ok:
            print(f"{name:9s} FAILED: none of {len(progs)} programs validated")
            continue
        print(f"{name:9s} {len(ok)} of {len(progs)} valid; best {ok[0] * 1e3:.3f} ms, median "
              f"{ok[len(ok) // 2] * 1e3:.3f} ms; best vs IREE default {default / ok[0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
