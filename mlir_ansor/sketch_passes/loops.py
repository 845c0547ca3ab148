"""Loop facts of an op that the annotation, the mutations, the seeds and the emitter share:
divisors, window and batch loops, the loops a workgroup level can parallelize."""
from __future__ import annotations

import functools
import math
from typing import Callable, Collection, Sequence, TypeVar

from mlir_ansor.dialect_helpers.linalg_info import OpInfo, OperandInfo
from mlir_ansor.sketch_passes.analysis import strided_window_loops
from mlir_ansor.sketch_passes.program import Program

T = TypeVar("T")


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of `n`, ascending (cached: the search asks for the same few extents
    hundreds of thousands of times)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of `n` that is at most `limit` (1 when `limit` < 1)."""
    return max(d for d in divisors(n) if d <= max(limit, 1))


def span(terms: tuple[tuple[int, int], ...], tile: dict[int, int]) -> int:
    """Elements one tensor dim covers when each loop d runs over tile[d] values."""
    n = 1
    for d, c in terms:
        n += (tile.get(d, 1) - 1) * abs(c)
    return n


def footprint_shape(o: OperandInfo, tile: dict[int, int]) -> tuple[int, ...]:
    """The slice of operand `o` a loop tile reads (per tensor dim)."""
    return tuple(min(size, span(terms, tile)) if size else 1
                 for size, terms in zip(o.shape, o.map_results))


def footprint(o: OperandInfo, tile: dict[int, int]) -> int:
    """Elements of operand `o` a loop tile reads (footprint_shape's product, written out:
    the cost model's features call it for every buffer at every level)."""
    get = tile.get
    n = 1
    for size, terms in zip(o.shape, o.map_results):
        if size:
            s = 1
            for d, c in terms:
                s += (get(d, 1) - 1) * abs(c)
            n *= s if s < size else size
    return n


def op_fact(fn: Callable[..., T]) -> Callable[..., T]:
    """Memoize a loop fact of an op (and hashable extra arguments) in the op's `memo`: an
    OpInfo never changes, and the search derives the same facts for every candidate."""
    name = fn.__qualname__

    @functools.wraps(fn)
    def cached(op: OpInfo, *args):
        key = (name, *args)
        memo = op.memo
        if key not in memo:
            memo[key] = fn(op, *args)
        return memo[key]
    return cached


def op_by_name(ops: Sequence[OpInfo], name: str) -> OpInfo:
    for o in ops:
        if o.name == name:
            return o
    raise KeyError(f"no op named {name}")


@op_fact
def window_loops(op: OpInfo) -> frozenset[int] | None:
    """Loops that appear in a compound (window) index expression; None if there is none."""
    loops = frozenset(d for o in op.operands for t in o.map_results if len(t) > 1
                      for d, _ in t)
    return loops or None


@op_fact
def window_rows(op: OpInfo) -> frozenset[int]:
    """Output loops of all window expressions but the last (e.g. the output row of a 2-D
    convolution): their innermost tile is 1 so the convolution decomposes to 1-D."""
    rows: list[int] = []
    for o in op.operands:
        for t in o.map_results:
            if len(t) > 1:
                par = [d for d, _ in t if op.iterators[d] == "parallel"]
                rows.extend(par[:1])
    return frozenset(rows[:-1])


@op_fact
def batch_loops(op: OpInfo) -> frozenset[int]:
    """Parallel loops every operand is indexed by (the batch of a batch matmul)."""
    used = [{d for t in o.map_results for d, _ in t} for o in op.operands if o.shape]
    return frozenset(l for l in op.parallel_dims if all(l in u for u in used)) if used \
        else frozenset()


@op_fact
def unit_loops(op: OpInfo) -> frozenset[int]:
    """Loops whose register tile is 1: window rows (see window_rows) and, for ops with a
    reduction, batch loops (a batch dim in the register tile turns the vector contraction
    into one the outer-product lowering unrolls for minutes), and loops read with a stride
    by a folded window op (see strided_window_loops)."""
    batch = batch_loops(op) if op.reduction_dims else frozenset()
    if window_loops(op) is not None:
        # A depthwise conv's channel is in every operand but is the output's contiguous
        # dim: its lanes are the vector (IREE vectorizes it too); as a unit loop nothing
        # filled a vector (DEP ran at 5% of the peak).
        batch -= {lane_loop(op)}
    return window_rows(op) | strided_window_loops(op) | batch


@op_fact
def lane_loop(op: OpInfo) -> int | None:
    """The parallel loop that indexes the output's contiguous (last) dim: the vector lanes."""
    last = len(op.output.shape) - 1
    return next((l for l in op.parallel_dims if op.output_dim_of_loop(l) == last), None)


# The transposed register tile (lanes x reduction, f32) the emitter lowers with a shuffle
# network (vector.transpose's 16x16 lowering); any other shape moves element by element.
SQUARE_TRANSPOSE = 16


@op_fact
def transposed_inputs(op: OpInfo) -> tuple[tuple[int, int], ...]:
    """(operand index, reduction loop) of each input the vector lanes' loop indexes whose
    contiguous dim is that reduction loop (nn.Linear's weight read [n, k]; attention's keys
    read [j, d] once their transpose is propagated into the scores): each register tile of
    one is transposed for the outer products."""
    lane = lane_loop(op)
    if lane is None:
        return ()
    out = []
    for i, o in enumerate(op.operands):
        if o.is_output or not o.map_results:
            continue
        inner = o.map_results[-1]
        loops = {d for t in o.map_results for d, _ in t}
        if len(inner) == 1 and op.iterators[inner[0][0]] == "reduction" and lane in loops:
            out.append((i, inner[0][0]))
    return tuple(out)


@op_fact
def panel_loop(op: OpInfo) -> int | None:
    """The loop that picks the panel of a panel-packed operand (a weight packed to [n / 16,
    k, 16]: its n / 16 loop): parallel, no unit loop, indexing the output's dim just outside
    the lanes, and every input the lanes index holds it and the lanes as dims of their own
    (one loop each, the lanes innermost) around a reduction dim; no other input holds it.
    Like wider lanes, its register tile adds whole row vectors (one per panel) that every
    broadcast element feeds. None where no loop does: an unpacked matmul (its lane loop is
    the whole output row), an NCHW conv (its rows and lanes are window dims), or no input
    broadcast across the lanes."""
    lane = lane_loop(op)
    if lane is None or len(op.output.shape) < 2 or not op.reduction_dims:
        return None
    ins = [o.loops for o in op.operands
           if not o.is_output and o.shape]
    lane_ins = [o for o, loops in zip(op.operands, ins) if lane in loops]
    if not lane_ins or len(lane_ins) == len(ins):
        return None
    outer = len(op.output.shape) - 2
    cands = [l for l in op.parallel_dims if l != lane and l not in unit_loops(op)
             and op.output_dim_of_loop(l) == outer]
    if len(cands) != 1:
        return None
    panel = cands[0]

    def paneled(o: OperandInfo) -> bool:
        dims = [tuple(l for l, _ in t) for t in o.map_results]
        if dims[-1] != (lane,) or (panel,) not in dims[:-1]:
            return False
        between = dims[dims.index((panel,)) + 1:-1]
        return (sum(panel in d or lane in d for d in dims) == 2 and
                any(len(d) == 1 and d[0] in op.reduction_dims for d in between))
    if not all(paneled(o) for o in lane_ins):
        return None
    if any(panel in loops for loops in ins if lane not in loops):
        return None
    return panel


@op_fact
def column_read_loop(op: OpInfo) -> int | None:
    """The row loop of a contraction whose broadcast operand (the input the lane loop does
    not index) is read reduction-major, A[k][m], with another row loop beside it: its
    contiguous dim is that row loop (a 1x1 conv reading a channels-first input into a
    channels-last output whose h and w stay apart). None for the usual A[m][k], for a
    plain transposed-A matmul (one row loop: the vector contraction lowers to outer
    products as it is), for a column indexed through a window (a 3x3 conv from a
    channels-first input: its own fold path, not covered here) and for ops without lanes."""
    lane = lane_loop(op)
    rows = reuse_rows(op, lane) if lane is not None and op.reduction_dims else ()
    if len(rows) < 2:
        return None
    for o in op.operands:
        loops = o.loops
        if o.is_output or not o.map_results or lane in loops:
            continue
        inner = o.map_results[-1]
        if len(inner) == 1 and inner[0][0] in rows and \
                any(op.iterators[l] == "reduction" for l in loops):
            return inner[0][0]
    return None


@op_fact
def reuse_rows(op: OpInfo, lane: int | None) -> tuple[int, ...]:
    """Parallel loops whose iterations reuse the vectors loaded along `lane` (rows of an
    outer-product register tile): not `lane`, not `unit_loops`, indexing no input that
    `lane` indexes; [] when every input varies along the lanes (a depthwise conv: each row
    loads its own input vector)."""
    ins = [o.loops for o in op.operands
           if not o.is_output and o.shape]
    vec = [x for x in ins if lane in x]
    if len(vec) == len(ins):
        return ()
    unit = unit_loops(op)
    return tuple(l for l in op.parallel_dims
                 if l != lane and l not in unit and not any(l in x for x in vec))


def parallel_tiles(op: OpInfo, prog: Program, loop: int,
                   distributed: bool) -> tuple[int, int, int, int]:
    """(workgroup tile, S1 tile, register tiles per S1 tile, register tile) of parallel loop
    `loop` of `op` (the workgroup tile is the extent when the loop is not `distributed`):
    split (a, b, c): a*b*c, b*c, b, c (shorter splits padded with outer 1s); blocked
    (a, 1, c): a*block, block, ceil(block / c), c; peeled: whole above S2, ceil(ext / c)
    register tiles (the outer of two peeled loops: whole at S0, S1 tiles of c)."""
    ext, step = op.extents[loop], prog.split(op.name, loop)
    lengths = step.lengths if step else ()
    blocks = prog.blocks(op.name)
    if loop in blocks:
        a, c, block = lengths[0], lengths[-1], blocks[loop]
        return (a * block if distributed else ext), block, -(-block // c), c
    if loop == prog.s1_peeled(op.name):
        return ext, lengths[-1], 1, lengths[-1]
    if loop in prog.peeled(op.name):
        c = lengths[-1]
        return ext, ext, -(-ext // c), c
    if not prog.sketch.root and loop in op.dynamic_loops and len(lengths) == 2:
        w, v = lengths  # a dynamic row without a root: W per workgroup, chunks of V
        return (w if distributed else ext), w, -(-w // v), v
    a, b, c = ((1,) * (3 - len(lengths)) + tuple(lengths))[-3:]
    return (a * b * c if distributed else ext), b * c, b, c


def eligible_parallel(op: OpInfo, prog: Program, *, rows: Collection[int]) -> list[int]:
    """Parallel loops whose outermost (workgroup) level has more than one iteration (a
    peeled loop stays whole there, and so do `rows`, loops a producer reduces)."""
    out = []
    whole = prog.peeled(op.name) - set(prog.blocks(op.name))
    for l in op.parallel_dims:
        if prog.split(op.name, l) is None or l in rows:
            continue
        # A dynamic loop always may have several workgroups (its extent is no extent);
        # first, so that a parallel step of any depth keeps it.
        if l in op.dynamic_loops:
            out.insert(0, l)
        elif l not in whole and op.extents[l] // parallel_tiles(op, prog, l, True)[0] > 1:
            out.append(l)
    return out


def reduction_tile(op: OpInfo, prog: Program) -> dict[int, int]:
    """Per loop of a multi-level-tiled root, the tile one reduction step (R0) works on: the
    S1 tile of each parallel loop (a peeled loop is whole there) and the R0 chunk of each
    reduction loop. A PackStep copies an operand's slice of this tile."""
    tile = {}
    for l, ext in enumerate(op.extents):
        s = prog.split(op.name, l)
        if s is None:
            tile[l] = ext
        elif op.iterators[l] == "reduction":
            tile[l] = s.lengths[0]
        else:
            tile[l] = parallel_tiles(op, prog, l, False)[1]
    return tile
