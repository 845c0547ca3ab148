"""The fixed cost of one module call: IREE's default module against torch eager on
operations too small to take any time, timed the way every benchmark here times a module
(`iree-benchmark-module`, local-task, lower quartile of interleaved rounds) and torch in
this process (its default threads, one per core).

An operator whose whole run is close to IREE's floor cannot beat torch by a better kernel:
the operator suite's small rows are judged against these figures.

  python tools/call_floor.py [--rounds 5] [--out bench_out/call_floor]

Every module is checked against torch before it is timed (tools/module_check.py).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

from mlir_ansor.tuner.e2e import module_times, save_inputs, torch_reference, torch_times
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig, lower_quartile
from mlir_ansor.tuner.toolchain import Toolchain
from module_check import CheckFailed, build, check_outputs, report_failure, run_outputs


class AddOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


# (label, example input): one element (no work at all), a 64 KiB vector (one workgroup or
# a few), a ResNet activation (ReLU over 800 KB: workgroups on both cores).
WORKLOADS = {
    "x + 1, 1 element": (AddOne(), (torch.randn(1),)),
    "x + 1, 16K elements": (AddOne(), (torch.randn(16384),)),
    "relu, 1x64x56x56": (torch.nn.ReLU(), (torch.randn(1, 64, 56, 56),)),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench_out/call_floor"))
    args = ap.parse_args()
    tools, cfg = Toolchain.find(), MeasureConfig()
    rows = []
    for i, (label, (model, inputs)) in enumerate(WORKLOADS.items()):
        d = args.out / f"w{i}"
        d.mkdir(parents=True, exist_ok=True)
        src = d / "model.mlir"
        src.write_text(import_model(model, inputs))
        ins = save_inputs(inputs, d / "inputs")
        ref, mag = torch_reference(model, inputs)
        try:
            built = build(tools, cfg, "IREE default", src, d)
            check_outputs(label, run_outputs(tools, cfg, built, ins, len(ref)), ref, mag, cfg)
        except CheckFailed as e:
            report_failure(str(e))
            return 1
        rows.append((label, built.vmfb, ins, model, inputs))
    sync = replace(cfg, device="local-sync")  # the call on the caller's thread alone
    times: dict[str, dict[str, list[float]]] = {
        r[0]: {"iree": [], "sync": [], "torch": []} for r in rows}
    for r in range(args.rounds):
        for label, vmfb, ins, model, inputs in (rows if r % 2 == 0 else rows[::-1]):
            times[label]["iree"] += module_times(tools, vmfb, ins, cfg)
            times[label]["sync"] += module_times(tools, vmfb, ins, sync)
            times[label]["torch"] += torch_times(model, inputs, cfg)
    print(f"\nOne call, lower quartile of {args.rounds} interleaved rounds (us; IREE's "
          "default module on its local-task device, a worker per core, and on local-sync, "
          "the caller's thread alone):")
    print(f"{'workload':24s} {'local-task':>11s} {'local-sync':>11s} {'torch eager':>12s} "
          f"{'task / torch':>13s} {'sync / torch':>13s}")
    for label, t in times.items():
        iree, sy, tt = (lower_quartile(t[k]) for k in ("iree", "sync", "torch"))
        print(f"{label:24s} {iree * 1e6:11.1f} {sy * 1e6:11.1f} {tt * 1e6:12.1f} "
              f"{iree / tt:12.2f}x {sy / tt:12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
