"""Report: the estimated end-to-end curve and its plot."""
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.report_plot import estimated_curve, plot_tuning_curve


def rec(task, latency):
    return Record(task, {}, f"{task}{latency}", "ok" if latency else "compile_error", latency)


def test_estimated_curve_takes_the_best_so_far_per_task():
    weights, defaults = {"a": 2, "b": 1}, {"a": 1.0, "b": 3.0}
    recs = [rec("a", 2.0), rec("a", 0.5), rec("b", None), rec("b", 1.0), rec("a", 0.7)]
    assert estimated_curve(recs, weights, defaults) == [5.0, 4.0, 4.0, 2.0, 2.0]


def test_plot_is_written(tmp_path):
    path = tmp_path / "curve.png"
    plot_tuning_curve(path, [rec("a", 0.5)], {"a": 1}, {"a": 1.0},
                      {"IREE default": 1.0, "tuned": 0.5}, "m")
    assert path.read_bytes()[:4] == b"\x89PNG"
