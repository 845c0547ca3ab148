"""build.sh of an output folder: rebuilds the tuned module with stock iree-compile, and fails
(leaving no module) when a strategy of the library is not applied."""
from __future__ import annotations

import importlib.metadata
import os
import random
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.transform_scripts.build_script import write_build_script
from mlir_ansor.transform_scripts.library import TunedEntry, library_text
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain, target_flags
from tests.conftest import DATA
from tests.data.small_mlp import make


@dataclass(frozen=True)
class TunedFolder:
    """An output folder as a run leaves it: model.mlir, model_tuned.mlir, a library with a
    measured-valid strategy per matmul task of the small MLP, build.sh."""
    dir: Path
    entries: tuple[TunedEntry, ...]  # one per task, ids t0, t1
    inputs: tuple  # the model's example inputs (torch tensors)
    want: np.ndarray  # torch's output


def defined_strategies(library: str) -> list[str]:
    return re.findall(r"transform.named_sequence @(strategy_\w+)\(", library)


def make_tuned_folder(tools: Toolchain, work: Path) -> TunedFolder:
    """Built like the tuner's hand-back, but with the first program measured valid per task
    (a short tuning run may hand back no library when nothing beats IREE's default)."""
    model, inputs = make()
    out = work / "run"
    out.mkdir(parents=True)
    text = import_model(model, inputs)
    (out / "model.mlir").write_text(text)
    (out / "model_tuned.mlir").write_text(text)
    tasks = [t for t in extract_tasks(flow_source(out / "model.mlir", "llvm-cpu", tools, 300))
             if t.tunable]
    assert len(tasks) == 2, [t.name for t in tasks]
    entries = []
    rng = random.Random(0)
    for t in tasks:
        m = TaskMeasurer(t, work / "tasks", tools, MeasureConfig(repetitions=1, min_time_s=0.01))
        m.prepare()
        for i in range(8):
            prog = annotate(m.task.ops, m.task.sketches[i % len(m.task.sketches)], rng)
            if m.measure([prog])[0].ok:
                entries.append(TunedEntry(m.task.task_id, m.task.task_mlir, m.task.ops, prog,
                                          m.task.view_mlir))
                break
        else:
            pytest.fail(f"no valid program for {t.name} in 8 tries")
    (out / "tuned_library.mlir").write_text(library_text(entries))
    write_build_script(out, target_flags("llvm-cpu"))
    return TunedFolder(out, tuple(entries), inputs, model(*inputs).detach().numpy())


@pytest.fixture(scope="module")
def folder(tools, tmp_path_factory) -> TunedFolder:
    return make_tuned_folder(tools, tmp_path_factory.mktemp("build_sh"))


def build(script: Path, out: Path, *extra: str, env: dict | None = None,
          compiler: str | None = None) -> subprocess.CompletedProcess:
    if env is None:
        env = dict(os.environ, IREE_COMPILE=compiler or Toolchain.find().compile)
    return subprocess.run([str(script), str(out), *extra], env=env, capture_output=True,
                          text=True, timeout=600)


def run_module(vmfb: Path, inputs: tuple) -> np.ndarray:
    import iree.runtime as rt

    module = rt.load_vm_flatbuffer_file(str(vmfb), driver="local-task")
    return module.main(*[x.numpy() for x in inputs]).to_host()


def logging_compiler(tmp: Path, real: str) -> tuple[str, Path]:
    """An IREE_COMPILE that logs each call's arguments (one line a call), then runs `real`."""
    log = tmp / "calls.log"
    wrapper = tmp / "iree-compile-logged"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), log


def copy_folder(src: TunedFolder, dst: Path, library: str | None) -> Path:
    """A copy of the folder with `library` as its library text (None: no library)."""
    dst.mkdir()
    for name in ("model_tuned.mlir", "build.sh"):
        (dst / name).write_bytes((src.dir / name).read_bytes())
    (dst / "build.sh").chmod(0o755)
    if library is not None:
        (dst / "tuned_library.mlir").write_text(library)
    return dst / "build.sh"


def test_build_sh_builds_the_tuned_module_that_matches_torch(folder, tools, tmp_path):
    vmfb = tmp_path / "tuned.vmfb"
    res = build(folder.dir / "build.sh", vmfb)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "2 tuned strategies applied" in res.stdout
    np.testing.assert_allclose(run_module(vmfb, folder.inputs), folder.want, rtol=1e-4,
                               atol=1e-4)


def test_library_names_the_iree_that_made_it(folder):
    text = (folder.dir / "tuned_library.mlir").read_text()
    version = importlib.metadata.version("iree-base-compiler")
    assert f'mlir_ansor.iree_version = "{version} (' in text
    assert defined_strategies(text) == ["strategy_t0", "strategy_t1"]


def test_unparsable_library_fails_and_leaves_no_module(folder, tmp_path):
    # IREE warns and builds its default codegen with exit 0 when the library does not
    # parse: build.sh must notice from the configuration dump.
    broken = (folder.dir / "tuned_library.mlir").read_text() + "\nthis is not mlir\n"
    script = copy_folder(folder, tmp_path / "run", broken)
    vmfb = tmp_path / "tuned.vmfb"
    vmfb.write_bytes(b"an older build")  # must not survive a failed build either
    res = build(script, vmfb)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()
    assert any("tuned strategies not applied: strategy_t0 strategy_t1" in l for l in last[-2:])
    assert not vmfb.exists()


def test_library_without_strategies_is_an_error(folder, tmp_path):
    script = copy_folder(folder, tmp_path / "run", "module {}\n")
    vmfb = tmp_path / "tuned.vmfb"
    res = build(script, vmfb)
    assert res.returncode != 0 and "defines no strategy_" in res.stderr
    assert not vmfb.exists()


def test_extra_flags_reach_every_call_and_iree_compile_is_honoured(folder, tools, tmp_path):
    compiler, log = logging_compiler(tmp_path, tools.compile)
    bins = tmp_path / "binaries"
    vmfb = tmp_path / "tuned.vmfb"
    flag = f"--iree-hal-dump-executable-binaries-to={bins}"
    res = build(folder.dir / "build.sh", vmfb, flag, compiler=compiler)
    assert res.returncode == 0, res.stderr[-2000:]
    calls = log.read_text().splitlines()  # the wrapper ran: $IREE_COMPILE was used
    assert len(calls) == 2
    assert "--compile-to=global-optimization" in calls[0]
    assert "--compile-from=global-optimization" in calls[1]
    assert "--iree-codegen-transform-dialect-library=" in calls[1]
    for call in calls:
        assert flag in call and " ".join(target_flags("llvm-cpu")) in call
        # after the target flags, so that a user's flag overrides ours
        assert call.index(flag) > call.index(target_flags("llvm-cpu")[-1])
    assert list(bins.glob("*.so")), "the flag took effect in the codegen step"
    # An unknown flag makes the first step fail: nothing is written.
    log.unlink()
    res = build(folder.dir / "build.sh", vmfb, "--no-such-iree-flag", compiler=compiler)
    assert res.returncode != 0 and "no-such-iree-flag" in res.stderr
    assert not vmfb.exists() and len(log.read_text().splitlines()) == 1


def test_without_library_the_model_is_built_as_is(folder, tools, tmp_path):
    script = copy_folder(folder, tmp_path / "run", None)
    compiler, log = logging_compiler(tmp_path, tools.compile)
    vmfb = tmp_path / "default.vmfb"
    res = build(script, vmfb, "--mlir-print-op-on-diagnostic=false", compiler=compiler)
    assert res.returncode == 0, res.stderr[-2000:]
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "transform-dialect-library" not in calls[0]
    assert "--mlir-print-op-on-diagnostic=false" in calls[0]
    np.testing.assert_allclose(run_module(vmfb, folder.inputs), folder.want, rtol=1e-4,
                               atol=1e-4)


def test_the_device_it_ran_fastest_on_is_printed(folder, tools, tmp_path):
    """A module measured faster on IREE's local-sync device: build.sh says so after the
    build, with and without a library; the module runs there."""
    import iree.runtime as rt

    for library in (None, (folder.dir / "tuned_library.mlir").read_text()):
        run = tmp_path / ("lib" if library else "none")
        script = copy_folder(folder, run, library)
        write_build_script(run, target_flags("llvm-cpu"), device="local-sync")
        vmfb = run / "m.vmfb"
        res = build(script, vmfb)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "build.sh: run it on IREE's local-sync device (--device=local-sync" in res.stdout
        module = rt.load_vm_flatbuffer_file(str(vmfb), driver="local-sync")
        got = module.main(*[x.numpy() for x in folder.inputs]).to_host()
        np.testing.assert_allclose(got, folder.want, rtol=1e-4, atol=1e-4)
    write_build_script(run, target_flags("llvm-cpu"))
    assert "local-sync" not in build(script, vmfb).stdout


def other_task_entry(tools: Toolchain, work: Path) -> TunedEntry:
    """A strategy for a dispatch the small MLP does not have (never applied to it)."""
    task = extract_tasks(flow_source(DATA / "mm_128x256x64.mlir", "llvm-cpu", tools, 300))[0]
    prog = annotate(task.ops, task.sketches[0], random.Random(0))
    return TunedEntry("t9", task.task_mlir, task.ops, prog)


def test_written_in_strategies_are_the_ones_checked(folder, tools, tmp_path):
    # A library shared with another model also holds a strategy no dispatch of this model
    # takes: checking every strategy of the library would fail; the tuner writes in the
    # ones this model takes.
    shared = library_text([*folder.entries, other_task_entry(tools, tmp_path)])
    script = copy_folder(folder, tmp_path / "run", shared)
    vmfb = tmp_path / "tuned.vmfb"
    res = build(script, vmfb)
    assert res.returncode != 0 and "tuned strategies not applied: strategy_t9" in res.stderr
    write_build_script(script.parent, target_flags("llvm-cpu"),
                       strategies=("strategy_t0", "strategy_t1"))
    res = build(script, vmfb)
    assert res.returncode == 0, res.stderr[-2000:]
    np.testing.assert_allclose(run_module(vmfb, folder.inputs), folder.want, rtol=1e-4,
                               atol=1e-4)
    # ... and a written-in strategy that is not applied still fails the build.
    write_build_script(script.parent, target_flags("llvm-cpu"),
                       strategies=("strategy_t0", "strategy_t1", "strategy_t9"))
    res = build(script, vmfb)
    assert res.returncode != 0 and "tuned strategies not applied: strategy_t9" in res.stderr
    assert not vmfb.exists()
    with pytest.raises(ValueError, match="not a strategy symbol"):
        write_build_script(script.parent, target_flags("llvm-cpu"), strategies=("$(rm x)",))


def test_missing_compiler_is_named(folder, tmp_path):
    assert not any(Path(d, "iree-compile").exists() for d in ("/usr/bin", "/bin"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no IREE_COMPILE
    res = build(folder.dir / "build.sh", tmp_path / "x.vmfb", env=env)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "build.sh: iree-compile not found: set IREE_COMPILE or put iree-compile on PATH")


def test_usage_without_output(folder):
    res = subprocess.run([str(folder.dir / "build.sh")], capture_output=True, text=True)
    assert res.returncode == 2 and "usage:" in res.stderr


def test_paths_are_relative_to_the_folder(tmp_path):
    with pytest.raises(ValueError, match="relative"):
        write_build_script(tmp_path, target_flags("llvm-cpu"), library_file="/abs/lib.mlir")
    # One model of several tuned together: the library is in the parent folder.
    script = write_build_script(tmp_path, target_flags("llvm-cpu"),
                                library_file="../tuned_library.mlir")
    assert 'library="$here/"../tuned_library.mlir' in script.read_text()
    assert os.access(script, os.X_OK)
