"""This machine's f32 FMA peak, measured (the roofline the report's GFLOP/s are read
against): `peak_gflops.c` built with the system's gcc for the host's widest vectors and
run on every core. Without gcc the peak is unknown (None): the report says so."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from mlir_ansor.tuner.procs import run_isolated

SOURCE = Path(__file__).with_name("peak_gflops.c")
# -O2 kept the accumulators in memory (a third of the peak); contraction makes a*b+c an FMA.
FLAGS = ("-O3", "-funroll-all-loops", "-march=native", "-ffp-contract=fast", "-fopenmp")


def measure_peak_gflops(cores: int | None = None, timeout_s: float = 120) -> float | None:
    """GFLOP/s of independent FMA chains on `cores` threads (default: all usable)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    with tempfile.TemporaryDirectory(prefix="peak_") as d:
        exe = Path(d) / "peak"
        built = run_isolated([gcc, *FLAGS, str(SOURCE), "-o", str(exe)], timeout_s)
        if built.returncode != 0:
            return None
        threads = cores or len(os.sched_getaffinity(0))
        ran = run_isolated(["env", f"OMP_NUM_THREADS={threads}", str(exe)], timeout_s)
        if ran.returncode != 0:
            return None
        return float(ran.stdout.strip())
