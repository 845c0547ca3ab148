"""Dynamic input dimensions: specs, their checks against a model, the sizes a module is
checked at, and a run whose one module serves every size."""
import json

import pytest
import torch

from mlir_ansor.dynamic import (DynamicDim, check_sizes, parse_dynamic, resolve, size_sets,
                                tune_sizes, with_sizes)
from mlir_ansor.errors import FrontendError, UsageError
from tests.conftest import DATA, QUICK_CLI, tune_cli


class Two(torch.nn.Module):
    def forward(self, x, ids):
        return x.sum(-1) + ids.float()


def two():
    return Two(), (torch.randn(4, 8, 16), torch.randint(0, 50, (4, 8)))


@pytest.mark.parametrize("spec, says", [
    ("x:0=1-8", "expected INPUT:DIM=LO..HI"),
    ("x=1..8", "expected INPUT:DIM=LO..HI"),
    ("x:0=9..2", "LO 9 > HI 2"),
    ("x:0=0..8", "sizes start at 1"),
])
def test_bad_specs(spec, says):
    with pytest.raises(UsageError, match=says):
        parse_dynamic(spec)


def test_a_spec_parses_with_a_shared_name():
    assert parse_dynamic("ids:1=2..512@seq") == DynamicDim("ids", 1, 2, 512, "seq")
    assert parse_dynamic("0:0=1..64").symbol == "0_0"


@pytest.mark.parametrize("spec, says", [
    ("nope:0=1..8", "no input named 'nope' \\(inputs: x, ids\\)"),
    ("2:0=1..8", "the model takes 2 inputs"),
    ("ids:2=1..8", "input 'ids' has 2 dimensions"),
    ("x:1=10..20", "the example's size 8 is outside 10..20"),
])
def test_specs_are_checked_against_the_model(spec, says):
    model, inputs = two()
    with pytest.raises(FrontendError, match=says):
        resolve(model, inputs, [parse_dynamic(spec)])


def test_an_example_of_size_one_is_refused():
    model, (x, ids) = two()
    with pytest.raises(FrontendError, match="torch.export specialises sizes 0 and 1"):
        resolve(model, (x[:1], ids[:1]), [parse_dynamic("x:0=1..8")])


def test_shared_symbols_and_resized_inputs():
    model, inputs = two()
    r = resolve(model, inputs, [parse_dynamic("x:1=2..64@seq"), parse_dynamic("1:1=1..32@seq")])
    assert r.symbols == ("seq",) and r.range_of("seq") == (2, 32)
    shapes = r.export_shapes()
    assert shapes["x"][1] is shapes["ids"][1]  # one Dim: the sizes stay equal
    x, ids = r.inputs_at(inputs, {"seq": 37})
    assert x.shape == (4, 37, 16) and ids.shape == (4, 37)
    assert ids.dtype == inputs[1].dtype and 0 <= int(ids.min()) and int(ids.max()) < 50
    assert [s["seq"] for s in size_sets(r)] == list(check_sizes(2, 32))


def test_an_input_given_by_position_is_named_by_its_argument():
    """A symbol becomes a torch.export Dim name, which must be an identifier ('1_1' is not)."""
    model, inputs = two()
    r = resolve(model, inputs, [parse_dynamic("1:1=2..32"), parse_dynamic("0:0=2..8")])
    assert r.symbols == ("ids_1", "x_0")
    shapes = r.export_shapes()
    assert shapes["ids"][1].__name__ == "ids_1" and shapes["x"][0].__name__ == "x_0"


def test_branch_ends_are_checked_with_every_symbol_set():
    """A size dispatcher cuts along one symbol; the sets checked at its branch ends give the
    other symbols a size too (the one of the nearest set), or resizing the inputs fails."""
    model, inputs = two()
    r = resolve(model, inputs, [parse_dynamic("x:1=2..64"), parse_dynamic("x:0=2..8")])
    sets = size_sets(r)
    more = with_sizes(sets, "x_1", [5, 63])
    assert more[:len(sets)] == sets and [s["x_1"] for s in more[len(sets):]] == [5, 63]
    for s in more[len(sets):]:
        near = min(sets, key=lambda t: abs(t["x_1"] - s["x_1"]))
        assert s["x_0"] == near["x_0"]
        x, _ = r.inputs_at(inputs, s)
        assert x.shape[:2] == (s["x_0"], s["x_1"])


def test_check_sizes_cover_the_ends_and_sizes_that_divide_no_tile():
    s = check_sizes(1, 1024)
    assert {1, 2, 37, 199, 1024} <= set(s) and len(s) <= 12 and list(s) == sorted(s)
    assert check_sizes(2, 6) == (2, 3, 4, 6)
    assert check_sizes(100, 120)[0] == 100 and check_sizes(100, 120)[-1] == 120


def test_one_module_serves_every_size(tmp_path):
    out = tmp_path / "o"
    res = tune_cli(f"{DATA / 'small_mlp.py'}:make", "--dynamic", "x:0=16..32", "--trials",
                   "4", "--batch", "2", "--size-samples", "2", "--out", str(out), *QUICK_CLI,
                   timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "tensor<?x64xf32>" in (out / "model.mlir").read_text()
    # Both dynamic dispatches were tuned: each candidate timed at every size sample.
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    ok = [r for r in recs if r["status"] == "ok"]
    assert len({r["task_key"] for r in ok}) == 2, [r["error"] for r in recs]
    assert all(set(r["by_size"]) == {str(n) for n in tune_sizes(16, 32, 2)} for r in ok)
    assert "Dynamic task t0" in res.stdout and "Dynamic task t1" in res.stdout
    e2e = next(iter(json.loads((out / "report.json").read_text())["e2e"].values()))
    checked = e2e["also_checked_at"]
    sizes = list(check_sizes(16, 32))
    # A dispatcher's branches are also checked at their ends (and so is the form with one
    # kernel per task it was measured against).
    plan = e2e["size_dispatcher"] or e2e["size_dispatcher_rejected"]
    if plan is not None:
        assert "Size dispatcher of" in res.stdout and len(e2e["dispatcher_speedups"]) == 2
        edges = [16, *plan["cuts"], 33]
        sizes += sorted({x for a, b in zip(edges, edges[1:]) for x in (a, b - 1)} - set(sizes))
    assert checked == [f"x_0={s}" for s in sizes]
    assert "dynamic x:0=16..32: also matched at x_0=16;" in res.stdout
    # ... and timed at the check sizes (not the branch ends): the handed-back module is
    # chosen over the spread of the range.
    assert [r["size"] for r in e2e["by_size"]] == [f"x_0={s}" for s in check_sizes(16, 32)]
