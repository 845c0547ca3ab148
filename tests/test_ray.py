"""Tuning through a Ray cluster (tuner/distributed.py): a local cluster of two worker nodes
(custom resources, no dashboard) compiles and measures; a node removed in the middle of the
run loses no trial and duplicates none."""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is the [ray] extra; make test installs it")
from ray.cluster_utils import Cluster  # noqa: E402

from mlir_ansor.targets import host  # noqa: E402
from mlir_ansor.tuner import distributed  # noqa: E402
from mlir_ansor.tuner.driver import TuneOptions, run  # noqa: E402
from mlir_ansor.tuner.reporters import Measured, Silent  # noqa: E402
from mlir_ansor.tuner.runner import RunInput  # noqa: E402
from mlir_ansor.tuner.status import Status  # noqa: E402
from tests.conftest import QUICK

ROOT = Path(__file__).resolve().parents[1]
MLP = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"
KIND = host().device_kind


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0,
                                                      "include_dashboard": False})
    nodes = [c.add_node(num_cpus=1, resources={"builder": 1, KIND: 1}) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c, nodes
    ray.shutdown()
    c.shutdown()


class _RemoveNodeAfter(Silent):
    """Removes the node that hosts the runner actor after the n-th measurement."""

    def __init__(self, cluster, nodes, n: int):
        self.cluster, self.nodes, self.n, self.seen, self.removed = cluster, nodes, n, 0, None

    def __call__(self, event) -> None:
        if isinstance(event, Measured):
            self.seen += 1
            if self.seen == self.n:
                # The runner's actor sits on the first node (by id) offering the device.
                first = distributed.RayRunner(KIND).device_nodes()[0]
                node = next(nd for nd in self.nodes if nd.node_id == first)
                # From another thread, as a machine going away would: builds may be running.
                t = threading.Thread(target=self.cluster.remove_node, args=(node,))
                t.start()
                t.join()
                self.removed = first


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_runner_records_a_twice_lost_candidate(tmp_path, monkeypatch):
    """Lost on the first try and on the resend: recorded as run_error 'worker lost'."""
    runner = distributed.RayRunner(KIND)
    calls = []

    class Lost:
        class run:  # noqa: N801 - an actor's method handle
            @staticmethod
            def remote(files, item):
                calls.append(item)
                raise ray.exceptions.NodeDiedError("the node is gone")

    monkeypatch.setattr(runner, "actor", lambda: Lost())
    f = tmp_path / "m.vmfb"
    f.write_bytes(b"x")
    res = runner.run(RunInput(f, ()))
    assert res.status == Status.RUN_ERROR and res.error == distributed.WORKER_LOST
    assert len(calls) == 2 and runner.resent == 1 and runner.lost == 1


def test_no_runner_for_the_device_kind(cluster):
    with pytest.raises(Exception, match="no node of the Ray cluster offers the resource"):
        distributed.RayRunner("riscv64-v128").actor()


def test_tune_through_ray_survives_a_lost_node(cluster, tmp_path):
    c, nodes = cluster
    reporter = _RemoveNodeAfter(c, nodes, n=4)
    out = tmp_path / "out"
    res = run(TuneOptions(model=MLP, trials=8, batch=4, out=out, ray=c.address, top_k=1,
                          layout_rewrite=False, **QUICK),
              reporter=reporter)
    assert reporter.removed is not None
    recs = _records(out)
    # Every trial accounted for, none twice.
    assert len(recs) == 8
    assert len({(r["task_key"], r["program_key"]) for r in recs}) == 8
    assert all(r["device_kind"] == KIND for r in recs)
    # The actor went with its node: the next candidate was sent again to a new actor on
    # the surviving node and measured there.
    assert sum(r["status"] == "ok" for r in recs[4:]) >= 3
    resent = re.search(r"after a lost worker (\d+) sent again, (\d+) recorded", res.report)
    assert resent and int(resent.group(1)) >= 1, res.report[-800:]
    assert ray.is_initialized()  # the test's connection is the test's to close


def test_a_run_keeps_its_timing_share_through_the_actor(tmp_path, monkeypatch):
    """The driver flattens a run's files for the actor, and the actor rebuilds the run with
    its own folder: every other field (a dynamic task's timing share, the slow cutoff)
    must travel as it is (the flattening dropped the share: full budget on Ray)."""
    from mlir_ansor.tuner.runner import RunResult, Timing

    for name in ("m.vmfb", "in0.npy", "ref0.npy"):
        (tmp_path / name).write_bytes(name.encode())
    item = RunInput(tmp_path / "m.vmfb", (tmp_path / "in0.npy",), (tmp_path / "ref0.npy",),
                    (), True, 0.5, timing_share=0.25)
    flat, files = distributed._flat_names(item)
    actor = distributed._DeviceActor(host().device_kind, 10.0, None, Timing(), 1e-4, 1e-5)
    seen = []

    class Recorder:
        def run(self, it):
            seen.append(it)
            return RunResult(Status.OK, (1e-3,))

    monkeypatch.setattr(actor, "runner", Recorder())
    assert actor.run(files, flat).status == Status.OK
    (got,) = seen
    assert (got.timing_share, got.slow_cutoff_s, got.time) == (0.25, 0.5, True)
    assert got.artifact.parent == actor.dir and got.artifact.read_bytes() == b"m.vmfb"
    assert [p.read_bytes() for p in got.inputs + got.reference] == [b"in0.npy", b"ref0.npy"]
