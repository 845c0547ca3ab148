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


def test_roofline_of_a_task():
    from mlir_ansor.tuner.stages.reporting import roofline

    assert roofline(2_000_000_000, 0.01, 400.0) == ("200.0", "50%")
    assert roofline(2_000_000_000, 0.01, None) == ("200.0", "-")  # no peak measured
    assert roofline(0, 0.01, 400.0) == ("-", "-")  # a copy: no flops


def test_the_peak_is_measured_on_this_machine():
    import shutil

    from mlir_ansor.tuner.peak import measure_peak_gflops

    peak = measure_peak_gflops()
    if shutil.which("gcc") is None:
        assert peak is None
    else:  # any machine this runs on does at least a few GFLOP/s and not a petaflop
        assert 5 < peak < 100_000


def test_wall_time_accumulates_per_part():
    import time

    import pytest

    from mlir_ansor.tuner.wall_time import WallTime

    clock = WallTime()
    for _ in range(2):
        with clock.timing("compile"):
            time.sleep(0.01)
    assert clock.compile >= 0.02 and clock.measure == clock.train == clock.search == 0
    assert clock.line().startswith("compile 0.0 s (100%), measure 0.0 s (0%)")
    with pytest.raises(ValueError, match="unknown part"):
        with clock.timing("lunch"):
            pass


def test_stage_times_nest_under_their_stage():
    from mlir_ansor.tuner.wall_time import WallTime

    clock = WallTime()
    for name in ("import", "hand back", "hand back/re-time", "hand back/re-time"):
        with clock.stage(name):
            pass
    clock.stages.update({"import": 2.0, "hand back": 10.0, "hand back/re-time": 7.5})
    assert clock.stage_line() == "import 2.0 s, hand back 10.0 s (re-time 7.5 s), total 12.0 s"


def test_a_long_status_is_shortened_at_a_clause():
    from mlir_ansor.tuner.stages.reporting import short_status

    dt = ("left to IREE's data tiling (executable main_dispatch_0: encoded tensors, packed "
          "mmt4d kernels in codegen)")
    assert short_status(dt) == "left to IREE's data tiling"
    assert short_status("default kept") == "default kept"
    long_word = "a status without a clause that goes on well past the column width"
    assert short_status(long_word) == "a status without a clause that goes on\u2026"
    assert len(short_status(long_word)) <= 40
