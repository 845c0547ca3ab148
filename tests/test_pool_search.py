"""tools/pool_search.py reads a workload's task as the measurer does: on the payload IREE's
codegen hands the strategy, whose loops the records' programs were built on (an NCHW conv
of batch 1 keeps its unit batch loop there), not on the task module."""
import importlib.util
from pathlib import Path

from mlir_ansor.sketch_passes.loops import op_by_name
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer

ROOT = Path(__file__).resolve().parents[1]


def _pool_search():
    spec = importlib.util.spec_from_file_location("pool_search", ROOT / "tools" / "pool_search.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_pool_task_has_the_loops_of_the_codegen_view(conv_tasks, tools, tmp_path):
    task = next(t for t in conv_tasks if t.tunable)
    measurer = TaskMeasurer(task, tmp_path / "tasks", tools, MeasureConfig())
    measurer.prepare()
    (tmp_path / "task_key.txt").write_text(task.key + "\n")
    (tmp_path / "random").mkdir()
    (tmp_path / "random" / "records.jsonl").write_text("")

    pooled, records = _pool_search().pool_of(tmp_path)

    assert records == []
    root = task.sketches[0].root
    assert root and pooled.sketches[0].root == root
    # The loops the measurer tunes are the pool's, and they differ from the task module's
    # (else this test could not tell the two apart).
    measured = op_by_name(measurer.task.ops, root).extents
    assert op_by_name(pooled.ops, root).extents == measured
    assert op_by_name(task.ops, root).extents != measured
