"""Compiling and measuring on other machines through Ray (optional extra: `pip install
.[ray]`).

`RayBuilder` sends each candidate to a Ray task on a node with a `builder` resource: the
module text and the library travel, the compiled module's bytes come back (no shared file
system). `RayRunner` measures on an actor placed on a node that offers the run's device kind
as a custom resource (`x86_64-avx512`, `aarch64-neon`, `cuda-sm80`, ...): the module,
inputs and expected outputs travel as bytes, the actor checks and times with IREE's tools
there, and says what device it is (a timing is only compared with timings of the same
kind). The driver alone writes records, one per candidate as before.

A lost worker (node gone, process killed) loses nothing: the candidate is sent once more
(a new actor, elsewhere if need be) and, if lost again, recorded as `run_error: worker
lost`. Ray's own retries are off (`max_retries=0`, `max_restarts=0`,
`max_task_retries=0`), so a result is never produced twice.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from mlir_ansor.errors import ToolchainError, UsageError
from mlir_ansor.tuner.builder import CANDIDATE_ARTIFACT, BuildInput, BuildResult, LocalBuilder
from mlir_ansor.tuner.runner import LocalRunner, RunInput, RunResult, Timing
from mlir_ansor.tuner.status import Status

if TYPE_CHECKING:  # measure imports the builders and runners
    from mlir_ansor.tuner.measure import MeasureConfig

BUILDER_RESOURCE = "builder"
WORKER_LOST = "worker lost"
RESEND = 1  # times a candidate is sent again after its worker was lost


def _ray():
    try:
        import ray
    except ImportError:
        raise ToolchainError("--ray needs Ray: pip install 'mlir-ansor[ray]'") from None
    return ray


def lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's exceptions for work whose worker, node or actor went away."""
    ex = _ray().exceptions
    return tuple(getattr(ex, n) for n in ("NodeDiedError", "WorkerCrashedError",
                                          "RayActorError", "ActorDiedError",
                                          "ObjectLostError", "OwnerDiedError",
                                          "ActorUnavailableError") if hasattr(ex, n))


def connect(address: str) -> bool:
    """Join the Ray cluster at `address` ("auto": the one this machine belongs to). True if
    this call connected (and `disconnect` should end it)."""
    ray = _ray()
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise UsageError(f"--ray {address}: cannot connect to a Ray cluster: {e}") from None
    return True


def disconnect() -> None:
    _ray().shutdown()


def _build_remote(source: str, suffix: str, library: str, kind, marker: str,
                  flags: tuple[str, ...], timeout_s: float, mem_bytes: int
                  ) -> tuple[Status, bytes | None, str, float, str]:
    """On a builder node: compile with that node's iree-compile; (status, module bytes,
    error, seconds, node id)."""
    import ray

    from mlir_ansor.tuner.toolchain import Toolchain

    with tempfile.TemporaryDirectory(prefix="ansor_build_") as tmp:
        src = Path(tmp) / f"task{suffix}"
        src.write_text(source)
        b = LocalBuilder(Toolchain.find().compile, 1, timeout_s, mem_bytes)
        res = b.build_one(BuildInput(src, library, kind, marker, Path(tmp) / "out", flags))
        data = res.artifact.read_bytes() if res.status == Status.OK else None
    return res.status, data, res.error, res.seconds, ray.get_runtime_context().get_node_id()


@dataclass
class RayBuilder:
    """Compiles on Ray tasks (one CPU each, on nodes with the `builder` resource)."""

    timeout_s: float = 10.0
    mem_bytes: int = 6 << 30
    resource: str = BUILDER_RESOURCE
    owns_connection: bool = False  # this run joined the cluster (and leaves it at the end)
    resent: int = 0  # candidates sent again after a lost worker (for the report and tests)
    lost: int = 0  # candidates recorded as lost
    _sources: dict = field(default_factory=dict)  # path -> (mtime, object ref of its text)
    _fn: object = None

    @classmethod
    def from_config(cls, cfg: MeasureConfig, owns_connection: bool = False) -> "RayBuilder":
        return cls(cfg.compile_timeout_s, cfg.compile_mem_bytes,
                   owns_connection=owns_connection)

    def _source(self, path: Path):
        ray = _ray()
        stamp = path.stat().st_mtime_ns
        if path not in self._sources or self._sources[path][0] != stamp:
            self._sources[path] = (stamp, ray.put(path.read_text()))
        return self._sources[path][1]

    def _submit(self, item: BuildInput):
        if self._fn is None:  # registered once per builder
            self._fn = _ray().remote(_build_remote).options(
                num_cpus=1, resources={self.resource: 1}, max_retries=0)
        return self._fn.remote(self._source(item.source), item.source.suffix, item.library,
                         item.kind, item.marker, item.flags, self.timeout_s, self.mem_bytes)

    def build(self, items: Sequence[BuildInput]) -> list[BuildResult]:
        ray = _ray()
        lost_types = lost_errors()
        results: list[BuildResult | None] = [None] * len(items)
        sent = [0] * len(items)
        pending = {self._submit(item): i for i, item in enumerate(items)}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ready[0])
            try:
                status, data, err, took, _ = ray.get(ready[0])
            except lost_types:
                if sent[i] < RESEND:
                    sent[i] += 1
                    self.resent += 1
                    pending[self._submit(items[i])] = i
                else:
                    self.lost += 1
                    results[i] = BuildResult(Status.RUN_ERROR, None, WORKER_LOST)
                continue
            artifact = None
            if data is not None:
                items[i].out_dir.mkdir(parents=True, exist_ok=True)
                artifact = items[i].out_dir / CANDIDATE_ARTIFACT
                artifact.write_bytes(data)
            results[i] = BuildResult(status, artifact, err, took)
        return [r for r in results if r is not None]


class _DeviceActor:
    """On a device node: checks and times modules with that node's IREE tools."""

    def __init__(self, device_kind: str, timeout_s: float, mem_bytes: int | None,
                 timing: Timing, rtol: float, atol: float):
        from mlir_ansor.targets import host
        from mlir_ansor.tuner.toolchain import Toolchain

        here = host().device_kind
        if here != device_kind:  # a resource name that lies about the machine
            raise ToolchainError(f"the runner node offering {device_kind} is a {here}")
        tools = Toolchain.find()
        self.runner = LocalRunner(tools.run, tools.benchmark, timeout_s, mem_bytes, timing,
                                  rtol, atol)
        self.dir = Path(tempfile.mkdtemp(prefix="ansor_run_"))
        self.kind = here

    def device_kind(self) -> str:
        return self.kind

    def run(self, files: dict[str, bytes], item: RunInput) -> RunResult:
        """`files`: name -> bytes of every path `item` names (the names are unique)."""
        for name, data in files.items():
            (self.dir / name).write_bytes(data)

        def here(paths):
            return tuple(self.dir / Path(p).name for p in paths)

        # (replace: every other field of the run, e.g. its timing share, travels as is)
        return self.runner.run(replace(item, artifact=self.dir / Path(item.artifact).name,
                                       inputs=here(item.inputs), reference=here(item.reference),
                                       magnitude=here(item.magnitude)))


def _flat_names(item: RunInput) -> tuple[RunInput, dict[str, bytes]]:
    """The item with every file renamed uniquely for one flat folder, and their bytes."""
    files: dict[str, bytes] = {}
    names: dict[Path, str] = {}

    def name(p: Path) -> Path:
        p = Path(p)
        if p not in names:
            names[p] = f"{len(names)}_{p.name}"
            files[names[p]] = p.read_bytes()
        return Path(names[p])

    return replace(item, artifact=name(item.artifact), inputs=tuple(map(name, item.inputs)),
                   reference=tuple(map(name, item.reference)),
                   magnitude=tuple(map(name, item.magnitude))), files


@dataclass
class RayRunner:
    """Measures on one actor on a node offering `device_kind`; a lost actor is replaced
    (on the first node, by id, that still offers the kind) and the candidate sent again."""

    device_kind: str
    timeout_s: float = 60.0
    mem_bytes: int | None = 8 << 30
    timing: Timing = field(default_factory=Timing)
    rtol: float = 1e-4
    atol: float = 1e-5
    resent: int = 0
    lost: int = 0
    _actor: object = None

    @classmethod
    def from_config(cls, device_kind: str, cfg: MeasureConfig) -> "RayRunner":
        return cls(device_kind, cfg.run_timeout_s, cfg.run_mem_bytes, cfg.timing, cfg.rtol,
                   cfg.atol)

    def device_nodes(self) -> list[str]:
        """Ids of the alive nodes offering this device kind, in the order actors go there."""
        return sorted(n["NodeID"] for n in _ray().nodes()
                      if n.get("Alive") and n.get("Resources", {}).get(self.device_kind, 0) > 0)

    def actor(self):
        if self._actor is None:
            ray = _ray()
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            nodes = self.device_nodes()
            if not nodes:
                raise ToolchainError(f"no node of the Ray cluster offers the resource "
                                     f"{self.device_kind!r} (a runner for this device)")
            cls = ray.remote(_DeviceActor).options(
                num_cpus=0, resources={self.device_kind: 1}, max_restarts=0,
                max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[0], soft=False))
            self._actor = cls.remote(self.device_kind, self.timeout_s, self.mem_bytes,
                                     self.timing, self.rtol, self.atol)
        return self._actor

    def run(self, item: RunInput) -> RunResult:
        ray = _ray()
        flat, files = _flat_names(item)
        for attempt in range(RESEND + 1):
            try:
                # The actor's tools have their own timeouts; this one catches a hung actor.
                return ray.get(self.actor().run.remote(files, flat),
                               timeout=self.timeout_s * 3 + 60)
            except ray.exceptions.GetTimeoutError:
                self.close()
                return RunResult(Status.RUN_TIMEOUT, (), "the runner actor did not answer")
            except lost_errors():
                self._actor = None
                if attempt < RESEND:
                    self.resent += 1
        self.lost += 1
        return RunResult(Status.RUN_ERROR, (), WORKER_LOST)

    def close(self) -> None:
        if self._actor is not None:
            _ray().kill(self._actor)
            self._actor = None
