"""Layout rewrite of constant weights: which contractions get a packed weight, that the packed
model computes what torch does, and when the export packs a site."""
import json
from dataclasses import asdict

import numpy as np
import pytest
import torch

from mlir_ansor.dialect_helpers.layout_rewrite import (LayoutRewriteError, PackSite, find_sites,
                                                       rewrite)
from mlir_ansor.tuner.e2e import compile_model
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.layouts import (Alternative, ModelLayout, choose_sites, initial_latency,
                                      load_layout, save_layout)
from mlir_ansor.tuner.measure import MeasureConfig, run_outputs
from mlir_ansor.tuner.toolchain import Toolchain


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def _text(model, *inputs):
    torch.manual_seed(0)
    return import_model(model.eval(), inputs)


def test_linear_weight_is_packed_along_its_output_features():
    text = _text(torch.nn.Linear(64, 48), torch.randn(8, 64))
    sites = find_sites(text)
    # nn.Linear is x @ W^T: loop 1 (n) indexes the output's innermost dim and W's first dim;
    # the packed weight puts the n blocks first: [n / 16, k, 16].
    assert [(s.op_name, s.operand, s.loop, s.tile, s.outer_perm) for s in sites] == \
        [("linalg.matmul", 1, 1, 16, (1, 0))]


def test_no_site_without_a_constant_weight_or_whole_tiles():
    assert find_sites(_text(MatMul(), torch.randn(8, 32), torch.randn(32, 64))) == []
    # NCHW conv: the output's innermost loop is the width, which the weight does not index.
    assert find_sites(_text(torch.nn.Conv2d(16, 32, 3), torch.randn(1, 16, 12, 12))) == []
    odd = _text(torch.nn.Linear(64, 20), torch.randn(8, 64))  # 20 features: no 16-lane tile
    assert find_sites(odd) == []
    assert [s.tile for s in find_sites(odd, tile=4)] == [4]


def test_packed_model_matches_torch(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 48)).eval()
    x = torch.randn(8, 64)
    text = import_model(model, (x,))
    sites = find_sites(text)
    assert len(sites) == 2
    packed = rewrite(text, sites)
    assert packed.count("linalg.pack") == 2 and "linalg.unpack" not in packed
    tools, cfg = Toolchain.find(), MeasureConfig()
    src = tmp_path / "packed.mlir"
    src.write_text(packed)
    compile_model(tools, src, tmp_path / "packed.vmfb", cfg, None)
    np.save(tmp_path / "x.npy", x.numpy())
    outs, err = run_outputs(tools, tmp_path / "packed.vmfb", [tmp_path / "x.npy"], 1, tmp_path,
                            cfg)
    assert outs is not None, err
    np.testing.assert_allclose(outs[0], model(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_rewrite_rejects_a_site_of_another_model():
    text = _text(torch.nn.Linear(64, 48), torch.randn(8, 64))
    with pytest.raises(LayoutRewriteError, match="not in this model"):
        rewrite(text, [PackSite(7, "linalg.matmul", 3, 1, 1, 16, (1, 0))])


SITE = PackSite(2, "linalg.matmul", 3, 1, 1, 16, (1, 0))


def test_a_site_is_packed_only_where_its_dispatches_run_faster():
    alt = Alternative((SITE,), removed=(("plain", 1),), added=(("packed", 1), ("bias", 1)))
    lat = {"plain": 1.0, "packed": 0.5, "bias": 0.1}
    assert choose_sites([alt], lat.get, 1.03) == [SITE]
    lat["packed"] = 0.9  # 1.0 vs 1.0 * 1.03: within the margin
    assert choose_sites([alt], lat.get, 1.03) == []
    del lat["bias"]  # an added dispatch never timed: keep the plain layout
    lat["packed"] = 0.1
    assert choose_sites([alt], lat.get, 1.03) == []


def test_an_unchosen_site_is_reported_at_the_times_it_lost_on():
    """A packed task that beat IREE's default is in no library when its site lost: what
    runs is the default, but the site table shows the time the site was chosen on."""
    from mlir_ansor.tuner.stages.state import HandBack
    hb = HandBack(timed={"packed": (6.0, 0.8), "plain": (1.0, 0.9)}, entries=(),
                  entry_key={"t1": "plain"}, sites={}, present={}, library=None, e2e={},
                  dropped={}, wins={}, winners=frozenset({"packed", "plain"}))
    assert hb.runs_s({})("packed") == 6.0 and hb.decided_s({})("packed") == 0.8
    assert hb.runs_s({})("plain") == hb.decided_s({})("plain") == 0.9
    assert hb.decided_s({"bias": 0.1})("bias") == 0.1  # never re-timed: as first measured


def test_scheduler_start_of_a_packed_task_is_capped_by_what_it_replaces():
    alt = Alternative((SITE,), removed=(("plain", 2),), added=(("packed", 2),))
    assert initial_latency([alt], {"plain": 1.0, "packed": 9.0}) == {"packed": 1.0}
    # What a dispatch left to IREE costs is not known (no task, no default): no cap, where a
    # sum over the known ones would start the added task far too low.
    tiled = Alternative((), removed=(("encoded", 1), ("plain", 1)), added=(("mm", 1),))
    assert initial_latency([tiled], {"plain": 1e-5, "mm": 9.0}) == {}


def test_sites_round_trip_and_a_corrupt_file_is_named(tmp_path):
    path = tmp_path / "layout.json"
    layout = ModelLayout(channels_last=True, sites=(SITE,))
    save_layout(path, layout)
    assert load_layout(path) == layout
    assert load_layout(tmp_path / "none.json") == ModelLayout()
    path.write_text(json.dumps([asdict(SITE)]))  # an earlier version's list of sites
    assert load_layout(path) == ModelLayout(sites=(SITE,))
    path.write_text('[{"index": 1}]')
    with pytest.raises(LayoutRewriteError, match="corrupt layout file"):
        load_layout(path)


def test_load_packs_the_sites_of_a_run(tmp_path):
    """api.load re-applies the packed sites a run recorded (layout.json) before compiling."""
    from mlir_ansor import api
    from tests.data.small_mlp import make

    model, inputs = make()
    sites = find_sites(import_model(model, inputs))
    assert len(sites) == 2  # both nn.Linear layers (128 and 64 output features)
    save_layout(tmp_path / "layout.json", ModelLayout(sites=tuple(sites)))
    (tmp_path / "report.json").write_text('{"e2e": {"m": {"handed_back": "tuned"}}}')
    tuned = api.load(model, inputs, tmp_path)
    np.testing.assert_allclose(tuned(*inputs), model(*inputs).detach().numpy(),
                               rtol=1e-4, atol=1e-4)
    assert (tmp_path / "api" / "model.mlir").read_text().count("linalg.pack") == 2


def test_sites_of_one_signature_are_one_alternative(tools, tmp_path):
    """Three nn.Linear(64, 64) layers and one 64 -> 32: two signatures, so two whole-model
    dispatch formations; the repeated layer's three sites are packed (and chosen) together."""
    from mlir_ansor.dialect_helpers.layout_rewrite import site_signatures
    from mlir_ansor.tuner.layouts import alternatives
    from mlir_ansor.tuner.tasks import flow_source

    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 64) for _ in range(3)] + [torch.nn.Linear(64, 32)]
    text = _text(torch.nn.Sequential(*layers), torch.randn(8, 64))
    sites = find_sites(text)
    sigs = site_signatures(text, sites)
    assert len(sites) == 4 and len(set(sigs)) == 2 and sigs[0] == sigs[1] == sigs[2]
    src = tmp_path / "m.mlir"
    src.write_text(text)
    alts, tasks = alternatives(text, flow_source(src, "llvm-cpu", tools, 300), tmp_path,
                               "llvm-cpu", tools, 300, 16)
    assert [len(a.sites) for a in alts] == [3, 1]
    assert all(t.layout_of.startswith("site ") for t in tasks) and tasks
    fast = {k: 0.1 for a in alts for k, _ in a.added}
    slow = {k: 1.0 for a in alts for k, _ in a.removed}
    assert choose_sites(alts, {**fast, **slow}.get, 1.03) == sites


def test_packed_sites_slower_end_to_end_than_none_are_not_handed_back(tmp_path, monkeypatch):
    """Sites are chosen by their tasks' timings, but a packed layout changes the dispatches
    around a site too: the model without packed sites is built, checked and timed at the
    hand-back, and taken where it is faster. Here every site is forced packed and the form
    without them timed ten times faster than it ran: it takes the folder's place."""
    from dataclasses import replace

    from mlir_ansor import tune
    from mlir_ansor.tuner.stages import hand_back
    from tests.conftest import DATA, QUICK_CLI

    real_e2e = hand_back.model_e2e

    def faster_unpacked(state, ex, m, sizes_of=None, repairs=None):
        e = real_e2e(state, ex, m, sizes_of, repairs)
        return replace(e, tuned_s=e.tuned_s / 10) if m.dir.name == hand_back.WITHOUT_PACKING \
            else e

    monkeypatch.setattr(hand_back, "choose_sites",
                        lambda alts, latency, margin: [s for a in alts for s in a.sites])
    monkeypatch.setattr(hand_back, "model_e2e", faster_unpacked)
    out = tmp_path / "o"
    rc = tune.main([f"{DATA / 'small_mlp.py'}:make", "--trials", "4", "--batch", "2",
                    "--out", str(out), *QUICK_CLI])
    assert rc == 0
    (e2e,) = json.loads((out / "report.json").read_text())["e2e"].values()
    with_them, without = e2e["packing_speedups"]
    assert without > with_them and e2e["packed_sites"] == []
    assert "linalg.pack" not in (out / "model_tuned.mlir").read_text()
    assert load_layout(out / "layout.json").sites == ()
    assert not (out / hand_back.WITHOUT_PACKING).exists()  # the side build is cleaned up
    assert "none packed" in (out / "report.txt").read_text()
