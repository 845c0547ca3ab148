"""Stage 6: the report: per-task table (trials, failures by status, share, default and tuned
times), layout decisions, end-to-end tables, the tuning-curve plot; report.txt and
report.json in the output folder."""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace

from mlir_ansor.tuner.e2e import SIZE_ROUNDS, torch_threads
from mlir_ansor.tuner.layouts import (FOLD_TRANSPOSES_FLAGS, PAD_FUSION_FLAGS,
                                      PROPAGATE_TRANSPOSES_FLAGS, form_name)
from mlir_ansor.tuner.mca import CLOCK_HZ
from mlir_ansor.tuner.peak import measure_peak_gflops
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.report_plot import plot_tuning_curve
from mlir_ansor.tuner.reporters import Reported
from mlir_ansor.tuner.size_plan import describe
from mlir_ansor.tuner.stages.state import RunState
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.tasks import Task
from mlir_ansor.tuner.wall_time import PARTS


def fmt_ms(s: float | None) -> str:
    return f"{s * 1e3:.3f}" if s else "-"


def table(headers: list[str], rows: list[list]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def failures(records: list[Record]) -> dict[str, int]:
    """Failed measurements per status (internal errors included: bugs of ours)."""
    return dict(sorted(Counter(r.status.value for r in records if r.status != Status.OK)
                       .items()))


def roofline(flops: int, seconds: float | None, peak: float | None) -> tuple[str, str]:
    """(achieved GFLOP/s, share of the measured peak) of a task as it runs."""
    if not flops or not seconds:
        return "-", "-"
    g = flops / seconds / 1e9
    return f"{g:.1f}", (f"{100 * g / peak:.0f}%" if peak else "-")


STATUS_WIDTH = 40  # the table's status column


def short_status(status: str, width: int = STATUS_WIDTH) -> str:
    """The table's form of a status: whole when it fits, else its first clause (before
    " (" or ": "), else cut at a word with an ellipsis; the full text is listed below."""
    if len(status) <= width:
        return status
    head = status.split(" (")[0].split(": ")[0]
    if len(head) <= width:
        return head
    return status[:width - 1].rsplit(" ", 1)[0] + "\u2026"


def task_rows(state: RunState, peak: float | None = None) -> tuple[list[str], list[list], dict]:
    hb = state.handback
    tuned_keys = set(hb.entry_key.values())
    in_model = set().union(*hb.present.values())
    runs_s = hb.runs_s(state.defaults)
    kept = {t.key: runs_s(t.key) for t in state.tasks}
    for t in state.tasks:  # only what the handed-back models run counts
        if t.key not in in_model:
            kept[t.key] = None
    total = sum(t.weight * kept[t.key] for t in state.tasks if kept[t.key]) or 1.0
    rows, fails = [], {}
    for t in state.tasks:
        d, b = hb.timed.get(t.key, (state.defaults.get(t.key), None))
        mine = [r for r in state.records if r.task_key == t.key]
        fails[t.task_id] = failures(mine)
        # (A dispatched model's task has one entry per branch: `t3_b0`, `t3_b1`, ...)
        dropped = hb.dropped.get(t.task_id) or next(
            (why for i, why in hb.dropped.items() if i.startswith(f"{t.task_id}_b")), "")
        status = "tuned" if t.key in tuned_keys else (
            dropped or t.skip_reason
            or ("withheld: unmeasured (--allow-unmeasured)" if t.task_id in hb.withheld
                else "default kept"))
        if t.key not in in_model:
            status = absent_why(state, t)
        elif t.layout_of:
            status = f"packed {t.layout_of}: {status}"
        elif t.form:
            status = f"{t.form} form: {status}"
        if t.tunable and t.key not in hb.timed:
            status = "not tuned (no trials left)" if not mine else "no valid program"
        speed = f"{d / b:.2f}x" if (b and d) else "-"
        share = f"{100 * t.weight * kept[t.key] / total:.1f}%" if kept[t.key] else "-"
        failed = ",".join(f"{k}:{n}" for k, n in fails[t.task_id].items()) or "-"
        op, torch_s = hb.torch.get(t.key, ("", None))
        vs_torch = f"{torch_s / kept[t.key]:.2f}x" if (torch_s and kept[t.key]) else "-"
        row = [t.task_id, t.name[:40], t.weight, f"{t.flops / 1e6:.1f}", len(mine), failed,
               share, fmt_ms(d), fmt_ms(b), speed, *roofline(t.flops, kept[t.key], peak),
               fmt_ms(torch_s), *roofline(t.flops, torch_s, None)[:1], vs_torch, status]
        if not state.single:
            row.insert(3, ",".join(m.name for m in state.models if m.name in state.usage[t.key]))
        rows.append(row)
    headers = ["task", "dispatch", "weight", "MFLOP", "trials", "failed", "share",
               "default ms", "tuned ms", "speedup", "GFLOP/s", "of peak", "torch ms",
               "torch GFLOP/s", "vs torch", "status"]
    if not state.single:
        headers.insert(3, "models")
    return headers, rows, fails


def absent_why(state: RunState, t: Task) -> str:
    """Why task `t` is not in the form handed back."""
    for f in state.forms.values():
        if f.other is None:
            continue
        choice = f.choice(f.other.flips)
        if not choice.speedups:  # (not decided end to end)
            continue
        other = form_name(f.other.flips, not choice.on)
        if t.key in {k for k, _ in f.other.alternative.added}:
            return f"only in the {other} form: not handed back"
        if t.key in {p.key for p in f.other.forms.packed_tasks}:
            # (the other form is built without packed weights: layout_choice.other_form)
            return f"packed {t.layout_of}, in the {other} form only: not handed back"
    if t.layout_of:
        return f"packed {t.layout_of}: not used"
    if t.form:
        return f"only in the {t.form} form: not handed back"
    return "replaced by a packed layout"


def layout_parts(state: RunState) -> list[str]:
    hb, parts = state.handback, []
    ids = {t.key: t.task_id for t in state.tasks}

    # (an unchosen site's packed tasks are in no library: the times it lost on)
    runs_s = hb.decided_s(state.defaults)

    def cost(pairs) -> float | None:
        ms = [runs_s(k) for k, _ in pairs]
        return None if None in ms else sum(m * n for m, (_, n) in zip(ms, pairs))

    lrows = []
    for name, f in state.forms.items():
        for a in f.alternatives:
            old, new = cost(a.removed), cost(a.added)
            lrows.append([",".join(str(s.index) for s in a.sites), a.sites[0].op_name,
                          ",".join(ids[k] for k, _ in a.removed),
                          ",".join(ids[k] for k, _ in a.added), fmt_ms(old), fmt_ms(new),
                          f"{old / new:.2f}x" if old and new else "-",
                          "yes" if a.sites[0] in hb.sites[name] else "no"]
                         + ([] if state.single else [name]))
    if lrows:
        parts.append("Layout rewrite of constant weights (per site, the times it was chosen "
                     "on: each task's re-timed best where it beat IREE's default, else the "
                     "default; packed sites are in model_tuned.mlir):\n" +
                     table(["sites", "op", "plain tasks", "packed tasks", "plain ms",
                            "packed ms", "speedup", "packed"]
                           + ([] if state.single else ["model"]), lrows))
        for name, f in state.forms.items():
            if f.packing is not None:
                with_, without = f.packing.speedups
                parts.append(f"Packed weight sites of {name}, decided end to end (the tuned "
                             f"model over IREE's default): with them {with_:.2f}x, without "
                             f"{without:.2f}x: " + ("packed" if f.packing.on else
                                                    "none packed"))
    if state.opts.io_layout == "channels-last":
        parts.append("Inputs and outputs (--io-layout channels-last): the 4-D/5-D tensors "
                     "are NHWC / NDHWC, torch's channels_last memory format; torch eager "
                     "and every check ran on them too")
    for m in state.models:
        if m.bf16_as_f32:
            parts.append(f"bf16 at the boundary of {m.name} ({', '.join(m.bf16_as_f32)}): "
                         "exchanged as f32 (numpy and IREE's tools have no bf16 files); the "
                         "model computes in bf16 inside, and the module handed back takes "
                         "and returns f32 there")
    for name, f in state.forms.items():
        a = f.activation
        if a is None:
            continue
        cl_ms = fmt_ms(a.channels_last_s) if a.channels_last_s else "-"
        parts.append(f"Activation layout of {name} (IREE's default builds, side by side): as "
                     f"imported {fmt_ms(a.plain_s)} ms, channels-last {cl_ms} ms: tuned "
                     + ("channels-last (model_tuned.mlir)" if a.channels_last
                        else f"as imported ({a.why})"))
    for name, f in state.forms.items():
        c = f.transposes
        if c is None:
            continue
        reads = (f"contractions reading a weight across their vector lanes "
                 f"{c.strided_mflop[0]:.1f} MFLOP propagated, {c.strided_mflop[1]:.1f} folded"
                 if c.strided_mflop else "")
        parts.append(f"Weight transposes of {name} ({reads}): "
                     + ("folded at compile time, every build passes "
                        + " ".join(FOLD_TRANSPOSES_FLAGS) if c.on
                        else f"propagated into the contractions (IREE's default): {c.why}"))
    for name, f in state.forms.items():
        c = f.propagation
        if c is None:
            continue
        counts = (f"{c.dispatches[0]} dispatches without, {c.dispatches[1]} with"
                  if c.dispatches else "")
        if c.default_s:
            counts += (f"; IREE's default builds side by side: without "
                       f"{fmt_ms(c.default_s[0])} ms, with {fmt_ms(c.default_s[1])} ms")
        parts.append(f"Activation transposes of {name} ({counts}): "
                     + ("propagated into the contractions that read them, every build passes "
                        + " ".join(PROPAGATE_TRANSPOSES_FLAGS) if c.on
                        else f"left to IREE's default propagation: {c.why}"))
    for name, f in state.forms.items():
        w = f.winograd
        if w is None:
            continue
        timed = (f"IREE's default builds side by side: direct {fmt_ms(w.plain_s)} ms, "
                 f"Winograd {fmt_ms(w.winograd_s)} ms: " if w.plain_s and w.winograd_s else "")
        timed += _tuned_pair(w.speedups, "direct", "Winograd")
        left = f"; left direct: {'; '.join(w.left)}" if w.left else ""
        parts.append(f"Winograd F(6x6, 3x3) of {name} ({timed}"
                     + (f"on for {len(w.sites)} convolutions" + (f" ({w.why})" if w.why
                                                                   else "")
                        + ": their transforms and batch matmuls are tasks"
                        if w.on else f"off: {w.why}")
                     + left + ")")
    for name, b in ((n, f.borders) for n, f in state.forms.items() if f.borders):
        parts.append(f"Border split of {name}'s padded convolutions ("
                     + _tuned_pair(b.speedups, "padded", "split")
                     + (f"on for {len(b.sites)} convolutions, skipping "
                        f"{100 * b.saved:.0f}% of their taps ({b.why}): their interiors "
                        "and border rows are tasks" if b.on else f"off: {b.why}") + ")")
    for name, f in state.forms.items():
        p = f.pad_fusion
        if p is None:
            continue
        timed = (f"the tuned model end to end: {p.speedups[0]:.2f}x IREE's default without, "
                 f"{p.speedups[1]:.2f}x with: " if p.speedups else "")
        parts.append(f"IREE pad fusion of {name} ({timed}"
                     + ("on" + (f" ({p.why})" if p.why else "") + ": each padded op "
                        "reads its input's padding in place, every build "
                        "passes " + " ".join(PAD_FUSION_FLAGS) + ")" if p.on
                        else f"off: {p.why})"))
    for name, f in state.forms.items():
        d = f.data_tiling
        if d is None:
            continue
        timed = (f"IREE's default builds side by side: without {fmt_ms(d.plain_s)} ms, with "
                 f"{fmt_ms(d.tiled_s)} ms: " if d.plain_s and d.tiled_s else "")
        if d.speedups:
            timed += (f"the tuned model end to end: without {d.speedups[0]:.2f}x, with "
                      f"{d.speedups[1]:.2f}x IREE's default: ")
        parts.append(f"IREE data tiling of {name} ({timed}"
                     + (f"on for {len(d.sites)} contractions" + (f" ({d.why})" if d.why
                                                                   else "")
                        + ": they are left to IREE's mmt4d kernels, every build passes "
                        "--iree-dispatch-creation-data-tiling)"
                        if d.on else f"off: {d.why})")
                     + "".join(f"\n  not data-tiled: {x}" for x in d.left))
    for name, f in state.forms.items():
        c = f.small_sizes
        if c is None:
            continue
        rows = "".join(f"\n  size {n} (branch up to {top}): without {fmt_ms(a)} ms, with "
                       f"{fmt_ms(b)} ms ({a / b:.2f}x)" for n, top, a, b in c.timed)
        parts.append(f"Static branches for the small sizes of {name} (IREE's default builds "
                     "side by side): " + (
                         f"sizes up to {', '.join(map(str, c.small.tops))} each run a "
                         "static copy of the model's padded contractions; above them the "
                         "dynamic model" if c.small else f"none ({c.why})") + rows)
    return parts


def dynamic_parts(state: RunState) -> list[str]:
    """Per dynamic task: the best candidate's micro-kernel and its time at each size sample
    (the search's joint objective is their weighted mean)."""
    parts = []
    for t in state.tasks:
        ok = [r for r in state.records if r.task_key == t.key and r.ok and r.by_size]
        if not t.dynamic or not ok:
            continue
        best = min(ok, key=lambda r: r.latency_s)
        prog = best.to_program()
        kernel = micro_kernel(prog)
        rows = [[label, fmt_ms(sec)] for label, sec in sorted(
            best.by_size.items(), key=lambda kv: [int(x) for x in kv[0].split(",")])]
        parts.append(f"Dynamic task {t.task_id} ({t.name[:40]}): its best single micro-kernel "
                     f"({prog.sketch.name}; {kernel or 'rows of one'}); its time at the "
                     f"size samples (mean {fmt_ms(best.latency_s)} ms, IREE's default "
                     f"{fmt_ms(state.defaults.get(t.key))} ms):\n"
                     + table(["size", "best ms"], rows))
    hb = state.handback
    names = {t.key: t.task_id for t in state.tasks}
    for m in state.models:
        plan = hb.plans.get(m.name) or hb.rejected_plans.get(m.name)
        if plan is None:
            continue
        lo, hi = m.dynamic.range_of(plan.symbol)
        if m.name in hb.dispatcher_speedups:
            a, b = hb.dispatcher_speedups[m.name]
            verdict = (f"; end to end over the sizes {a:.2f}x IREE's default with it, {b:.2f}x "
                       "with one kernel per task: " + (
                           "one kernel per task is the tuned form"
                           if m.name in hb.rejected_plans else "it is the tuned form"))
        else:
            verdict = ""
        kernels = {p.key: f"{p.key[:6]}: {p.sketch.name}; {micro_kernel(p) or 'rows of one'}"
                   for progs in plan.choices.values() for p in progs if p is not None}
        parts.append(f"Size dispatcher of {m.name} (on {plan.symbol}: argument {plan.arg}, "
                     f"dim {plan.dim}; cuts at {', '.join(map(str, plan.cuts))}; one tagged "
                     "copy of the model's dynamic work per range" + verdict
                     + ("" if hb.wins[m.name] else "; not handed back: the tuned module "
                        "lost end to end") + "):\n"
                     + table(["task", "sizes", "runs"], describe(plan, lo, hi, names, kernels)))
    return parts


def micro_kernel(prog) -> str:
    """How a dynamic loop is cut: workgroups of k*c rows, kernels of c rows."""
    root = prog.sketch.root or prog.sketch.anchor
    return ", ".join(f"loop {l}: workgroups of {s.lengths[0]}x{s.lengths[-1]} rows, "
                     f"kernels of {s.lengths[-1]} rows" for l in sorted(prog.peeled(root))
                     for s in [prog.split(root, l)])


def e2e_parts(state: RunState) -> list[str]:
    hb, parts = state.handback, []
    for m in state.models:
        e = hb.e2e[m.name]
        changed = hb.changed[m.name]
        if not e.measured:
            match = (f"outputs match IREE's default, not torch: {e.default_differs}"
                     if e.default_differs else "outputs match torch")
            how = "by llvm-mca" if state.proxied else "by the device's timings"
            kept = ((f"tuned module handed back, its strategies ranked {how}; the whole "
                     "model is UNMEASURED" + (" (--allow-unmeasured)" if state.proxied else ""))
                    if hb.wins[m.name] else
                    f"IREE's default handed back: {len(hb.withheld)} unmeasured strategies "
                    "withheld (--allow-unmeasured hands them back)" if hb.withheld
                    else f"no strategy beat IREE's default {how}: tuned = default module")
            parts.append(f"End to end (model {m.name}): run under qemu, {match}, max abs "
                         f"error {e.max_error:.2e}, {len(e.applied)} strategies applied; "
                         f"not timed (emulated time says nothing of the device); {kept}")
            continue
        rows = [["latency ms", fmt_ms(e.torch_s), fmt_ms(e.default_s), fmt_ms(e.tuned_s)],
                ["speedup vs IREE default", f"{e.default_s / e.torch_s:.2f}x", "1.00x",
                 f"{e.default_s / e.tuned_s:.2f}x"]]
        same = "" if changed else " (no strategy beat IREE's default: tuned = default module)"
        if changed and not hb.wins[m.name]:
            same = (" (the tuned module is slower end to end: IREE's default module is the "
                    "one handed back)")
        sizes = (f"; dynamic {', '.join(map(str, m.dynamic.dims))}: also matched at "
                 f"{'; '.join(e.checked)}" if e.checked else "")
        match = (f"outputs match IREE's default, not torch: {e.default_differs}"
                 if e.default_differs else "outputs match torch")
        device = (f"\ntuned: on IREE's {e.device} device (the caller's thread alone), "
                  f"faster than on local-task ({fmt_ms(e.tuned_task_s)} ms) for this small "
                  f"model: build.sh and the API run it there" if e.device else "")
        parts.append(f"End to end (model {m.name}, {match}, max abs error "
                     f"{e.max_error:.2e}{sizes}){same}:\n"
                     + table(["", f"torch eager ({torch_threads()} threads)",
                             "IREE default", "tuned"], rows) + device)
        if e.by_size:
            srows = [[label, fmt_ms(t), fmt_ms(d), fmt_ms(u), f"{d / u:.2f}x", f"{t / u:.2f}x"]
                     for label, t, d, u in e.by_size]
            parts.append(f"End to end of {m.name} at each checked size (lower quartile of "
                         f"{SIZE_ROUNDS} interleaved rounds; geometric mean with the example "
                         f"size: {e.speedup:.2f}x IREE default, which decides the module "
                         "handed back):\n" + table(["size", "torch ms", "IREE default ms",
                                                    "tuned ms", "vs IREE", "vs torch"], srows))
    return parts


def _plan_json(plan) -> dict | None:
    if plan is None:
        return None
    return {"symbol": plan.symbol, "argument": plan.arg, "dim": plan.dim,
            "cuts": list(plan.cuts),
            "choices": {k: [p.key if p is not None else None for p in progs]
                        for k, progs in plan.choices.items()}}


def _tuned_pair(speedups: tuple[float, float] | None, without: str, with_: str) -> str:
    """What both tuned forms of a model ran end to end (without, with a choice), if both ran."""
    if not speedups:
        return ""
    return (f"the tuned model end to end: {without} {speedups[0]:.2f}x, {with_} "
            f"{speedups[1]:.2f}x IREE's default: ")


def _speedups(choice) -> list[float] | None:
    """A decision's tuned speedups end to end (Winograd, data tiling), None if not made."""
    return list(choice.speedups) if choice is not None and choice.speedups else None


def _winograd_default_s(f) -> list[float] | None:
    w = f.winograd
    return [w.plain_s, w.winograd_s] if w is not None and w.plain_s and w.winograd_s else None


def _num(x: float) -> float | None:
    """JSON has no NaN: an untimed figure is null."""
    return None if math.isnan(x) else x


def write_report(state: RunState) -> RunState:
    hb, out = state.handback, state.out
    if state.proxied:  # the times are llvm-mca's proxy: this machine's peak is moot
        peak = None
        peak_line = (f"UNMEASURED: ms and GFLOP/s are llvm-mca estimates of the hot loop at "
                     f"{CLOCK_HZ / 1e9:.1f} GHz (tuner/mca.py), outputs checked under qemu")
    else:
        peak = measure_peak_gflops()  # in this run: machines and their load change
        peak_line = (f"f32 FMA peak measured now: {peak:.1f} GFLOP/s" if peak else
                     "f32 FMA peak not measured (no gcc)")
    headers, rows, fails = task_rows(state, peak)
    shown = [[*r[:-1], short_status(r[-1])] for r in rows]
    parts = [f"Per task ({state.opts.target}, {state.context.device_kind}; GFLOP/s of what "
             f"runs, tuned or IREE's default; {peak_line}):\n{table(headers, shown)}"]
    cut = [f"{r[0]}: {r[-1]}" for r, s in zip(rows, shown) if s[-1] != r[-1]]
    if cut:
        parts[0] += "\nstatus in full:\n" + "\n".join(cut)
    if hb.torch:
        parts[0] += (f"\ntorch ms: torch eager ({torch_threads()} threads) running the one "
                     "op that computes the task's contraction (its bias or activation not "
                     "included), at its better memory format, timed in this run; vs torch = "
                     "torch ms / what runs; '-': no single torch op computes the task")
    parts.append(f"Search wall time: {state.clock.line()}")
    if state.clock.stages:
        parts.append(f"Run wall time by stage: {state.clock.stage_line()}")
    internal = sum(f.get(Status.INTERNAL_ERROR.value, 0) for f in fails.values())
    if internal:
        parts.append(f"{internal} internal errors (bugs of mlir-ansor, not of the candidates: "
                     "please report them with records.jsonl)")
    parts += layout_parts(state) + dynamic_parts(state) + e2e_parts(state)
    measured = {}
    for m in state.models:
        e, tag = hb.e2e[m.name], ("" if state.single else f" {m.name}")
        if e.measured:
            measured.update({f"IREE default{tag}": e.default_s, f"tuned{tag}": e.tuned_s,
                             f"torch eager{tag}": e.torch_s})
    names = [m.name for m in state.models]
    plot_tuning_curve(out / "tuning_curve.png", list(state.records),
                      {t.key: t.weight for t in state.tunable},
                      {k: v for k, v in state.defaults.items() if v}, measured,
                      f"{'+'.join(names)}: {len(state.records)} measurements")
    parts += list(state.notes)
    parts.append(f"Artifacts in {out}: records.jsonl, model.mlir, model_tuned.mlir, "
                 f"{'tuned_library.mlir, ' if hb.library else ''}build.sh, e2e/tuned.vmfb, "
                 "report.json, tuning_curve.png")
    summary = "\n\n".join(parts)
    (out / "report.txt").write_text(summary + "\n")
    (out / "report.json").write_text(json.dumps({
        "models": names, "target": state.opts.target,
        "device_kind": state.context.device_kind, "peak_gflops": peak,
        "wall_time_s": {p: getattr(state.clock, p) for p in PARTS},
        "stage_s": dict(state.clock.stages),  # all but the report stage itself
        "tasks": [dict(zip([h.replace(" ", "_") for h in headers], r),
                       failures=fails[r[0]], torch_op=hb.torch.get(t.key, ("",))[0] or None)
                  for r, t in zip(rows, state.tasks)],  # the status in full
        "unmeasured": state.proxied,
        "e2e": {m.name: {"torch_s": _num(e.torch_s), "default_s": _num(e.default_s),
                         "tuned_s": _num(e.tuned_s), "measured": e.measured,
                         "applied": list(e.applied),
                         "max_abs_error": e.max_error, "also_checked_at": list(e.checked),
                         "default_differs_from_torch": e.default_differs,
                         "by_size": [dict(zip(("size", "torch_s", "default_s", "tuned_s"), r))
                                     for r in e.by_size],
                         "packed_sites": [s.index for s in hb.sites[m.name]],
                         "packing_speedups": (list(state.forms[m.name].packing.speedups)
                                              if state.forms[m.name].packing else None),
                         "channels_last": state.forms[m.name].channels_last,
                         "io_layout": state.opts.io_layout,
                         "bf16_as_f32": list(m.bf16_as_f32),
                         "data_tiling": state.forms[m.name].tiled,
                         # (without, with): the tuned model's speedups over IREE's
                         # default where both forms were tuned (layout_choice.other_form)
                         "data_tiling_speedups": _speedups(state.forms[m.name].data_tiling),
                         "pad_fusion": state.forms[m.name].fused,
                         "fold_transposes": state.forms[m.name].folded,
                         "propagate_transposes": state.forms[m.name].propagated,
                         "winograd_sites": list(state.forms[m.name].winograd_sites),
                         # (direct, Winograd): IREE's default builds' seconds, which
                         # chose the form tuned first; both forms tuned, their speedups
                         "winograd_default_s": _winograd_default_s(state.forms[m.name]),
                         "winograd_speedups": _speedups(state.forms[m.name].winograd),
                         "border_sites": list(state.forms[m.name].border_sites),
                         # (padded, split): both forms tuned, their speedups end to end
                         "border_speedups": _speedups(state.forms[m.name].borders),
                         "small_size_branches": list(state.forms[m.name].small.tops)
                         if state.forms[m.name].small else None,
                         "handed_back": "tuned" if hb.wins[m.name] else "default",
                         # IREE's runtime device of the tuned module ("": local-task)
                         "device": e.device if hb.wins[m.name] else "",
                         "size_dispatcher": _plan_json(hb.plans.get(m.name)),
                         "size_dispatcher_rejected": _plan_json(hb.rejected_plans.get(m.name)),
                         "dispatcher_speedups": hb.dispatcher_speedups.get(m.name)}
                for m in state.models for e in [hb.e2e[m.name]]}}, indent=2))
    state.report(Reported(summary, out))
    return replace(state, summary=summary)
