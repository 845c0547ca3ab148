"""Runs an offline batch on the device (copied into the batch as `run_batch.py`).

    python run_batch.py [--tools DIR] [--install]

Needs Python 3 with numpy, and IREE's runtime tools of the batch's version: from `--tools
DIR`, else from an installed `iree-base-runtime` (`--install` installs the wheel the
batch carries in wheels/ with pip first), else on PATH. For every module of manifest.json:
run it on the inputs, check its outputs against the expected ones (the tuner's own rule,
batch_check.py), time it with iree-benchmark-module, and append one JSON line to
results.jsonl (flushed per module; a rerun skips the modules already there). The first
line says which device ran the batch: the tuner keys the timings by it."""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:  # in the package (tests, a device that has mlir-ansor)
    from mlir_ansor.tuner.validation import outputs_match
except ImportError:  # in a batch folder: the copy written beside this script
    from batch_check import outputs_match  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent


def cpu_kind(machine: str, cpuinfo: str) -> str:
    """The device kind of a CPU (mlir_ansor.targets: <arch>-<isa>)."""
    words: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            words.update(value.split())
    if machine in ("x86_64", "AMD64"):
        isa = "avx512" if "avx512f" in words else "avx2" if "avx2" in words else "sse"
        return f"x86_64-{isa}"
    if machine in ("aarch64", "arm64"):
        return "aarch64-" + ("sve" if "sve" in words else "neon")
    return f"{machine}-v128"


def device_kind(device: str) -> tuple[str, dict]:
    """(kind, description) of the device that runs the batch's modules."""
    if device == "cuda":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=60).stdout.strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            out = []
        if not out:
            sys.exit("run_batch: this batch is for a cuda GPU and nvidia-smi finds none")
        name, cap = (x.strip() for x in out[0].split(","))
        return "cuda-sm" + cap.replace(".", ""), {"gpu": name, "compute_cap": cap}
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                  if line.startswith(("model name", "CPU part"))), "")
    return cpu_kind(platform.machine(), info), {"cpu": model, "cores": os.cpu_count()}


def find_tools(tools: str | None) -> tuple[str, str]:
    names = ("iree-run-module", "iree-benchmark-module")
    if tools:
        return tuple(str(Path(tools) / n) for n in names)  # type: ignore[return-value]
    try:
        import iree.runtime

        libs = Path(iree.runtime.__file__).parent.parent / "_runtime_libs"
        if (libs / names[0]).exists():
            return tuple(str(libs / n) for n in names)  # type: ignore[return-value]
    except ImportError:
        pass
    found = [shutil.which(n) for n in names]
    if not all(found):
        sys.exit("run_batch: IREE's runtime tools not found: --tools DIR, --install, or pip "
                 "install iree-base-runtime of the version manifest.json names")
    return tuple(found)  # type: ignore[return-value]


def run_one(item: dict, tools: tuple[str, str], m: dict, out_dir: Path) -> dict:
    run_tool, bench_tool = tools
    module = str(HERE / item["module"])
    dev = f"--device={m['device']}"
    inputs = [f"--input=@{HERE / p}" for p in item["inputs"]]
    out_dir.mkdir(parents=True, exist_ok=True)
    outs = [out_dir / f"out{i}.npy" for i in range(len(item["reference"]))]
    for p in outs:
        p.unlink(missing_ok=True)
    try:
        res = subprocess.run([run_tool, f"--module={module}", dev, "--function=main", *inputs,
                              *[f"--output=@{p}" for p in outs]], capture_output=True,
                             text=True, timeout=m["timeout_s"])
    except subprocess.TimeoutExpired:
        return {"status": "run_timeout", "error": f"run exceeded {m['timeout_s']}s"}
    if res.returncode != 0 or not all(p.exists() for p in outs):
        return {"status": "run_error", "error": f"exit {res.returncode}: "
                                                f"{res.stderr.strip()[-300:]}"}
    got = [np.load(p) for p in outs]
    ref = [np.load(HERE / p) for p in item["reference"]]
    mag = [np.load(HERE / p) for p in item["magnitude"]] or None
    err = outputs_match(got, ref, mag, m["rtol"], m["atol"])
    if err:
        return {"status": "wrong_answer", "error": err}
    t = m["timing"]
    cmd = [bench_tool, f"--module={module}", dev, "--function=main", *inputs,
           "--benchmark_format=json", f"--benchmark_repetitions={t['repetitions']}",
           f"--benchmark_min_time={t['min_time_s']}s",
           f"--benchmark_min_warmup_time={t['warmup_s']}"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=m["timeout_s"])
    except subprocess.TimeoutExpired:
        return {"status": "run_timeout", "error": f"timing exceeded {m['timeout_s']}s"}
    if res.returncode != 0:
        return {"status": "run_error", "error": f"benchmark exit {res.returncode}: "
                                                f"{res.stderr.strip()[-300:]}"}
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    samples = [b["real_time"] * scale[b["time_unit"]] for b in json.loads(res.stdout)
               ["benchmarks"] if b.get("run_type") == "iteration"]
    return {"status": "ok", "samples_s": samples, "latency_s": statistics.median(samples)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tools", help="folder of iree-run-module and iree-benchmark-module")
    p.add_argument("--install", action="store_true",
                   help="pip install the IREE runtime wheel of wheels/ that fits this Python")
    p.add_argument("--results", default=str(HERE / "results.jsonl"))
    args = p.parse_args(argv)
    m = json.loads((HERE / "manifest.json").read_text())
    if args.install:
        wheels = sorted(glob.glob(str(HERE / "wheels" / "*.whl")))
        if not wheels:
            sys.exit("run_batch: --install, but the batch carries no wheel")
        # --no-index: a device behind a batch queue often has no route to an index, and
        # pip would spend minutes retrying one.
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-index", "--find-links", str(HERE / "wheels"),
                        f"iree-base-runtime=={m['iree_runtime']}"], check=True)
    tools = find_tools(args.tools)
    kind, desc = device_kind(m["device"])
    results = Path(args.results)
    done = set()
    if results.exists():
        for line in results.read_text().splitlines():
            rec = json.loads(line)
            if "name" in rec:
                done.add(rec["name"])
    with open(results, "a") as f:
        if not done:
            f.write(json.dumps({"batch": m["batch"], "device_kind": kind, "device": desc,
                                "started": time.time()}) + "\n")
            f.flush()
        for item in m["items"]:
            if item["name"] in done:
                continue
            res = run_one(item, tools, m, HERE / "outputs" / item["name"])
            res.update(name=item["name"], batch=m["batch"], device_kind=kind,
                       time=time.time())
            f.write(json.dumps(res) + "\n")
            f.flush()
            print(f"{item['name']}: {res['status']} {res.get('latency_s', '')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
