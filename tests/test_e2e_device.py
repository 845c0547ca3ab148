"""The end-to-end step's runtime-device choice (tuner/e2e.py): a small static model is also
timed on IREE's local-sync device and runs there when that is faster by the margin; its
outputs are checked there too. Timings are scripted here (the decision, not the machine)."""
import pytest
import torch

from mlir_ansor.tuner import e2e as E
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig


class AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


@pytest.fixture
def small(tmp_path):
    model, inputs = AddOne(), (torch.randn(64),)
    src = tmp_path / "model.mlir"
    src.write_text(import_model(model, inputs))
    return model, inputs, src


def run(small, tools, tmp_path, monkeypatch, task_s, sync_s, margin=1.03):
    calls = []

    def module_times(tools, vmfb, paths, cfg):
        calls.append(cfg.device)
        return [sync_s if cfg.device == "local-sync" else task_s] * 3

    monkeypatch.setattr(E, "module_times", module_times)
    monkeypatch.setattr(E, "torch_times", lambda model, xs, cfg: [1e-5] * 3)
    model, inputs, src = small
    res = E.end_to_end(tools, model, inputs, src, None, tmp_path / "e2e", MeasureConfig(),
                       [], rounds=3, sync_margin=margin)
    return res, calls


def test_a_small_model_runs_on_local_sync_where_that_is_faster(small, tools, tmp_path,
                                                                monkeypatch):
    res, calls = run(small, tools, tmp_path, monkeypatch, task_s=50e-6, sync_s=5e-6)
    assert res.device == "local-sync" and res.tuned_s == 5e-6 and res.tuned_task_s == 50e-6
    assert res.tuned_is_default  # (no library: IREE's own module, on another device)
    assert calls.count("local-sync") == 3  # once a round
    # Its outputs were checked on that device (a run of its own).
    assert (tmp_path / "e2e" / "sync" / "out0.npy").exists()


@pytest.mark.parametrize("task_s, sync_s, margin, timed", [
    (50e-6, 49e-6, 1.03, True),  # faster, but within the margin: local-task stays
    (50e-6, 5e-6, None, False),  # no choice asked for (another device, another target)
    (5e-3, 1e-3, 1.03, False),  # a model past the probe's bound is not tried there
])
def test_otherwise_the_module_stays_on_local_task(small, tools, tmp_path, monkeypatch,
                                                  task_s, sync_s, margin, timed):
    res, calls = run(small, tools, tmp_path, monkeypatch, task_s, sync_s, margin)
    assert res.device == "" and res.tuned_s == task_s
    assert ("local-sync" in calls) == timed


def test_further_sizes_are_timed_with_shorter_repetitions(small, tools, tmp_path, monkeypatch):
    """A static model's example gets the full timing in `rounds` rounds; a dynamic model's
    sizes (`checks`) and its example, one size of many, the lighter `size_timing` (fewer,
    shorter repetitions) in SIZE_ROUNDS rounds."""
    seen = []

    def module_times(tools, vmfb, paths, cfg):
        seen.append((str(paths[0].parent.name), cfg.repetitions, cfg.min_time_s))
        return [1e-4] * cfg.repetitions

    monkeypatch.setattr(E, "module_times", module_times)
    # (torch as fast as the modules: none leaves the race, `interleaved`)
    monkeypatch.setattr(E, "torch_times", lambda model, xs, cfg: [1e-4] * cfg.repetitions)
    model, inputs, src = small
    cfg = MeasureConfig()
    light = E.size_timing(cfg)
    assert light.repetitions < cfg.repetitions and light.min_time_s < cfg.min_time_s
    E.end_to_end(tools, model, inputs, src, None, tmp_path / "static", cfg, [], rounds=5)
    assert seen == [("static", cfg.repetitions, cfg.min_time_s)] * 5
    seen.clear()
    referenced = []
    reference = E.model_reference

    def model_reference(tools, vmfb, model, xs, paths, out_dir, cfg):
        referenced.append(out_dir.name)
        return reference(tools, vmfb, model, xs, paths, out_dir, cfg)

    monkeypatch.setattr(E, "model_reference", model_reference)
    res = E.end_to_end(tools, model, inputs, src, None, tmp_path / "e2e", cfg, [], rounds=5,
                       checks=[("x=64b", (torch.randn(64),))],
                       check_only=[("x=end", (torch.randn(64),))])
    at_example = [s for s in seen if s[0] == "e2e"]
    at_size = [s for s in seen if s[0] == "check0"]
    assert len(at_example) == len(at_size) == E.SIZE_ROUNDS
    assert all((r, t) == (light.repetitions, light.min_time_s)
               for _, r, t in at_example + at_size)
    # A branch end (`check_only`) is checked against torch, never timed.
    assert referenced == ["e2e", "check0", "check1"]
    assert not [s for s in seen if s[0] == "check1"]
    assert res.checked == ("x=64b", "x=end")
    assert [label for label, *_ in res.by_size] == ["x=64b"]
