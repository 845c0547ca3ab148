"""Offline batches: tuning for a device that has no route to the tuner (a GPU machine behind
a batch queue, a board without network).

A batch is a folder: compiled modules, their inputs and expected outputs, manifest.json,
and `run_batch.py` (tuner/batch_runner.py, with the tuner's output check beside it as
batch_check.py; needs Python, numpy and IREE's runtime of the same version, which the batch
can carry as a wheel built for the device's Python and architecture). It runs wherever the
device is and appends results.jsonl; importing that file turns it into records keyed by
the device the batch reports. Nothing is compared across device kinds.

Used by `python -m mlir_ansor.offline` (prepare / finish / report, mlir_ansor/offline.py).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mlir_ansor.errors import AnsorError
from mlir_ansor.tuner import batch_runner, validation
from mlir_ansor.tuner.records import Record, RecordStore
from mlir_ansor.tuner.runner import Timing
from mlir_ansor.tuner.status import Status

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"


class BatchError(AnsorError):
    """A batch folder or results file that cannot be used (names the file and line)."""

    exit_code = 2


@dataclass(frozen=True)
class BatchItem:
    name: str  # unique in the batch
    module: Path
    inputs: tuple[Path, ...]
    reference: tuple[Path, ...]
    magnitude: tuple[Path, ...] = ()
    task_key: str = ""  # "" for a whole model
    program: dict | None = None  # Program.to_json(); None: IREE's default
    program_key: str = ""


def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def write_batch(batch: Path, items: Sequence[BatchItem], *, target: str, device: str,
                iree_runtime: str, timing: Timing, rtol: float, atol: float,
                timeout_s: float = 120.0, wheels: Sequence[Path] = ()) -> str:
    """Write the batch folder (replacing an earlier one); returns its id. `device` is the
    IREE runtime device of the modules (`local-task`, `cuda`)."""
    names = [i.name for i in items]
    if len(set(names)) != len(names):
        raise ValueError(f"batch item names repeat: {names}")
    shutil.rmtree(batch, ignore_errors=True)
    (batch / "modules").mkdir(parents=True)
    (batch / "data").mkdir()
    h = hashlib.sha256()
    data: dict[Path, str] = {}

    def put(p: Path) -> str:
        if p not in data:  # by content: inputs shared between candidates travel once
            rel = f"data/{_digest(p)}{p.suffix}"
            if not (batch / rel).exists():
                shutil.copyfile(p, batch / rel)
            data[p] = rel
        return data[p]

    entries = []
    for it in items:
        mod = f"modules/{it.name}.vmfb"
        shutil.copyfile(it.module, batch / mod)
        h.update(_digest(it.module).encode())
        entries.append({"name": it.name, "module": mod,
                        "inputs": [put(p) for p in it.inputs],
                        "reference": [put(p) for p in it.reference],
                        "magnitude": [put(p) for p in it.magnitude],
                        "task_key": it.task_key, "program": it.program,
                        "program_key": it.program_key})
    batch_id = h.hexdigest()[:12]
    manifest = {"batch": batch_id, "target": target, "device": device,
                "iree_runtime": iree_runtime, "rtol": rtol, "atol": atol,
                "timeout_s": timeout_s,
                "timing": {"repetitions": timing.repetitions, "min_time_s": timing.min_time_s,
                           "warmup_s": timing.warmup_s},
                "items": entries}
    (batch / MANIFEST).write_text(json.dumps(manifest, indent=1))
    shutil.copyfile(inspect.getsourcefile(batch_runner), batch / "run_batch.py")
    (batch / "batch_check.py").write_text(
        '"""The tuner\'s output check (mlir_ansor.tuner.validation), copied."""\n'
        "import numpy as np\nfrom typing import Sequence\n\n\n"
        + inspect.getsource(validation.outputs_match))
    if wheels:
        (batch / "wheels").mkdir()
        for w in wheels:
            shutil.copyfile(w, batch / "wheels" / Path(w).name)
    (batch / "README.txt").write_text(
        f"mlir-ansor offline batch {batch_id}: {len(items)} modules for {target} "
        f"(IREE runtime {iree_runtime}, device {device}).\n"
        "On the device: python run_batch.py [--install | --tools DIR]\n"
        f"Then bring back {RESULTS} and import it on the tuner's machine.\n")
    return batch_id


@dataclass(frozen=True)
class BatchResults:
    batch_id: str
    device_kind: str
    device: dict
    items: dict  # name -> (manifest entry, result dict)


def read_results(batch: Path, results: Path | None = None) -> BatchResults:
    """The results of a batch run, checked against its manifest (a corrupt line or a
    results file of another batch is an error naming it)."""
    try:
        manifest = json.loads((batch / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise BatchError(f"{batch / MANIFEST}: not a batch manifest ({e})") from None
    results = results or batch / RESULTS
    try:
        lines = results.read_text().splitlines()
    except OSError as e:
        raise BatchError(f"cannot read {results}: {e.strerror}") from None
    entries = {e["name"]: e for e in manifest["items"]}
    head, got = None, {}
    for n, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError as e:
            raise BatchError(f"{results}:{n}: corrupt results line ({e})") from None
        if rec.get("batch") != manifest["batch"]:
            raise BatchError(f"{results}:{n}: a result of batch {rec.get('batch')!r}, this "
                             f"folder is batch {manifest['batch']!r}")
        if "name" not in rec:
            head = rec
            continue
        if rec["name"] not in entries:
            raise BatchError(f"{results}:{n}: unknown module {rec['name']!r}")
        if "status" not in rec:
            raise BatchError(f"{results}:{n}: no status")
        got[rec["name"]] = (entries[rec["name"]], rec)
    if head is None:
        raise BatchError(f"{results}: no device line (was it written by run_batch.py?)")
    return BatchResults(manifest["batch"], head["device_kind"], head.get("device", {}), got)


def import_records(res: BatchResults, store: RecordStore, target: str, iree: str
                   ) -> list[Record]:
    """Append the candidates' results as records (once: a result already in the store is
    not added again); returns the new ones."""
    seen = {(r.task_key, r.program_key, r.device_kind, r.time) for r in store.load()}
    new = []
    for name, (entry, r) in res.items.items():
        if entry["program"] is None or not entry["task_key"]:
            continue  # IREE's default or a whole model: not a program of the search
        rec = Record(task_key=entry["task_key"], program=entry["program"],
                     program_key=entry["program_key"], status=Status.parse(r["status"]),
                     latency_s=r.get("latency_s"), samples_s=tuple(r.get("samples_s", ())),
                     error=r.get("error", ""), target=target,
                     env={"iree": iree, "device": res.device, "batch": res.batch_id},
                     time=float(r.get("time", time.time())), device_kind=res.device_kind)
        if (rec.task_key, rec.program_key, rec.device_kind, rec.time) in seen:
            continue
        store.append(rec)
        new.append(rec)
    return new
