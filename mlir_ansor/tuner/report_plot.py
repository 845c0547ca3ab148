"""The report's tuning-curve plot: estimated and measured end-to-end latency."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from mlir_ansor.tuner.records import Record


def estimated_curve(records: Sequence[Record], weights: Mapping[str, int],
                    defaults: Mapping[str, float]) -> list[float]:
    """After each measurement: sum over tasks of weight x min(default, best so far)
    (the tasks with a default time; others add nothing)."""
    best = dict(defaults)
    total = sum(weights[k] * best[k] for k in best)
    out = []
    for r in records:
        k = r.task_key
        if r.ok and k in best and r.latency_s < best[k]:
            total -= weights[k] * (best[k] - r.latency_s)
            best[k] = r.latency_s
        out.append(total)
    return out


def plot_tuning_curve(path: Path, records: Sequence[Record], weights: Mapping[str, int],
                      defaults: Mapping[str, float], measured: Mapping[str, float],
                      title: str) -> None:
    """`measured`: end-to-end latencies (label -> seconds) drawn as horizontal lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = estimated_curve([r for r in records if r.task_key in defaults], weights, defaults)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(1, len(curve) + 1), [c * 1e3 for c in curve],
            label="estimated (sum of task latencies x weight)")
    for (label, t), style in zip(measured.items(), ("--", ":", "-.", "--")):
        ax.axhline(t * 1e3, linestyle=style, color="gray" if "default" in label else None,
                   label=f"measured: {label}")
    ax.set_xlabel("measurements")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
