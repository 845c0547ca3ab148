"""Merging tuned libraries: one library IREE applies, names that clash renamed, a dispatch
tuned twice keeps the first library's strategy."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from mlir_ansor.transform_scripts.library import library_text
from mlir_ansor.transform_scripts.merge import LibraryMergeError, merge_libraries
from tests.test_build_script import (TunedFolder, build, copy_folder, defined_strategies,
                                     make_tuned_folder, run_module)


@pytest.fixture(scope="module")
def folder(tools, tmp_path_factory) -> TunedFolder:
    return make_tuned_folder(tools, tmp_path_factory.mktemp("merge"))


def built_with(folder: TunedFolder, library: str, tmp_path) -> subprocess.CompletedProcess:
    """build.sh of the folder with `library` in place of its own; the module must match
    torch when it builds."""
    script = copy_folder(folder, tmp_path / "run", library)
    vmfb = tmp_path / "merged.vmfb"
    res = build(script, vmfb)
    if res.returncode == 0:
        np.testing.assert_allclose(run_module(vmfb, folder.inputs), folder.want, rtol=1e-4,
                                   atol=1e-4)
    return res


def test_libraries_of_two_tasks_merge_and_both_apply(folder, tmp_path):
    e0, e1 = folder.entries
    merged = merge_libraries([library_text([e0]), library_text([e1])])
    assert merged.notes == ()
    assert defined_strategies(merged.text) == ["strategy_t0", "strategy_t1"]
    # build.sh checks in IREE's configuration dump that both were applied.
    res = built_with(folder, merged.text, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "2 tuned strategies applied" in res.stdout


def test_clashing_names_are_renamed_and_still_apply(folder, tmp_path):
    # Two runs that each called their task t0: the second one's symbols are renamed, and
    # the codegen_spec inside its action's translation_info follows.
    e0, e1 = folder.entries
    merged = merge_libraries([library_text([e0]), library_text([replace(e1, task_id="t0")])],
                             ["a.mlir", "b.mlir"])
    assert defined_strategies(merged.text) == ["strategy_t0", "strategy_l1_t0"]
    assert "codegen_spec = @strategy_l1_t0>" in merged.text
    assert "@match_l1_t0 -> @apply_l1_t0" in merged.text
    assert merged.notes == ("b.mlir: 3 symbols renamed (prefix l1_), e.g. @strategy_t0 -> "
                            "@strategy_l1_t0",)
    res = built_with(folder, merged.text, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]


def test_a_dispatch_tuned_twice_keeps_the_first_strategy(folder):
    e0, e1 = folder.entries
    both = library_text([e0, e1])
    again = library_text([replace(e1, task_id="t5")])  # the same dispatch, another run
    merged = merge_libraries([both, again], ["first.mlir", "second.mlir"])
    assert defined_strategies(merged.text) == ["strategy_t0", "strategy_t1"]
    assert "t5" not in merged.text  # its matcher, action and strategy are all left out
    assert merged.notes == ("second.mlir: @match_t5 matches the same dispatch as @match_t1 "
                            "of first.mlir: kept @strategy_t1 of first.mlir, left out "
                            "@strategy_t5",)


def test_different_iree_versions_are_noted(folder):
    e0, e1 = folder.entries
    other = library_text([e1]).replace('mlir_ansor.iree_version = "',
                                       'mlir_ansor.iree_version = "9.9.9 (x), ', 1)
    merged = merge_libraries([library_text([e0]), other])
    assert any("different IREE versions" in n and "9.9.9" in n for n in merged.notes)
    assert 'mlir_ansor.iree_version = "' in merged.text


def test_unparsable_and_foreign_libraries_are_named(folder):
    good = library_text(folder.entries[:1])
    with pytest.raises(LibraryMergeError, match=r"cannot parse b.mlir:1:\d+: "):
        merge_libraries([good, "module { this is not mlir"], ["a.mlir", "b.mlir"])
    with pytest.raises(LibraryMergeError, match="a.mlir has no @__kernel_config"):
        merge_libraries(["module {}"], ["a.mlir"])


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlir_ansor.merge_libraries", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_merges_and_reports_bad_input_in_one_line(folder, tmp_path):
    e0, e1 = folder.entries
    a, b = tmp_path / "a.mlir", tmp_path / "b.mlir"
    a.write_text(library_text([e0]))
    b.write_text(library_text([e0, e1]))
    out = tmp_path / "merged.mlir"
    res = cli(str(a), str(b), "-o", str(out))
    assert res.returncode == 0, res.stderr
    # b's t0 is a's t0 again (left out); its t1 clashes with nothing and keeps its name.
    assert defined_strategies(out.read_text()) == ["strategy_t0", "strategy_t1"]
    assert "note: " in res.stdout and "left out @strategy_t0" in res.stdout
    bad = tmp_path / "bad.mlir"
    bad.write_text("module { this is not mlir")
    for args, message in (((str(a), str(tmp_path / "missing.mlir")), "cannot read"),
                          ((str(a), str(bad)), f"cannot parse {bad}:1:"),
                          ((str(a), str(tmp_path)), "cannot read"),
                          ((str(a),), "cannot write")):
        res = cli(*args, "-o", str(tmp_path / "nowhere" / "x.mlir"))
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert "Traceback" not in res.stderr and len(lines) == 1
        assert lines[0].startswith("error: ") and message in lines[0], lines
