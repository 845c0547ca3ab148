"""Times PyTorch eager on a device for bundled models: the vendor-library anchor of a run
measured elsewhere (an offline batch on a GPU machine, docs/devices.md).

    python tools/torch_device_times.py MODEL... [--device cuda] [--out FILE]

Needs torch only (and this checkout on PYTHONPATH for the bundled models), so it runs on a
device machine without IREE's compiler. Per model: the median of `--repeats` calls, each a
forward pass and a device synchronisation timed on the host clock (what
iree-benchmark-module measures of a module: submit and wait), and the median of CUDA-event
times (the device's own time, no host overhead). One JSON line per model."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mlir_ansor.examples import EXAMPLES  # noqa: E402


def time_model(name: str, device: str, repeats: int, warmup: int) -> dict:
    model, inputs = EXAMPLES[name]()
    model = model.to(device)
    inputs = tuple(x.to(device) for x in inputs)
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        sync()
        host = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(*inputs)
            sync()
            host.append(time.perf_counter() - t0)
        events = []
        if cuda:
            for _ in range(repeats):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                model(*inputs)
                b.record()
                b.synchronize()
                events.append(a.elapsed_time(b) * 1e-3)
    out = {"model": name, "device": device, "torch": torch.__version__,
           "host_sync_s": statistics.median(host), "repeats": repeats}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name()
        out["events_s"] = statistics.median(events)
        out["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    unknown = [m for m in args.models if m not in EXAMPLES]
    if unknown:
        p.error(f"unknown bundled model(s): {unknown}")
    for name in args.models:
        line = json.dumps(time_model(name, args.device, args.repeats, args.warmup))
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
