"""Random annotation: fill a sketch's decisions (tile sizes, parallel loops, unroll).

The caps that encode machine facts (vector lanes, register tile) come from the target
(`AnnotationLimits.of`); `annotate`, `violations` and `sample_programs` take it as
`target=`, and without one use `targets.DEFAULT_CPU` (x86-64 AVX-512, where the caps were
tuned), so a seed gives the same programs on any machine. The other caps bound the search
space or follow IREE's limits, the same on every CPU.
"""
from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.gpu_annotation import annotate_gpu, gpu_violations, repair_gpu
from mlir_ansor.sketch_passes.loops import (column_read_loop, divisors, eligible_parallel,
                                            footprint, lane_loop, largest_divisor,
                                            op_by_name, reduction_tile, unit_loops,
                                            window_loops)
from mlir_ansor.sketch_passes.program import (BlockPeelStep, PackStep, ParallelStep, PeelStep,
                                              Program, SplitStep, UnrollStep, VectorizeStep,
                                              s1_peel_of)
from mlir_ansor.sketch_passes.rules.multi_level_tiling import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch, StructureStep
from mlir_ansor.targets import DEFAULT_CPU, Target, TargetError

# Innermost tile of a spatial loop other than the contiguous output dim, and the vector
# reduction tile without rfactor: a search-space cap (rows of the register tile, unrolled),
# not a machine fact; the register tile's size is capped by the target below.
MAX_OTHER_INNER = 16
UNROLL_CHOICES = (1, 2, 4, 8)  # search space
# Multiply-adds in the unrolled innermost block (register tile x innermost reduction tile x
# unroll factor), which LLVM schedules as one straight-line block. Past this its spills
# outgrew the 128 KiB stack of IREE's worker threads: of 1,837 valid programs and 5
# SIGSEGVs in six runs on the Zen 5 VM, 3 of the crashes and 12 valid programs were above
# it (a 57,344 one had a 253 KiB frame), and no task's best (at most 12,288).
MAX_UNROLLED_MACS = 16384
MAX_WORKGROUP_DIMS = 3  # IREE's workgroup ids x, y, z
STACK_LIMIT_BYTES = 32 << 10  # IREE's CPU limit on a dispatch's stack allocations
STACK_HEADROOM_BYTES = 1 << 10
# f32 elements of a local (stack) tile, with room for the strategy's small temporaries
# (a 32 KiB tile plus 64-1024 bytes of them failed to compile).
MAX_LOCAL_TILE = (STACK_LIMIT_BYTES - STACK_HEADROOM_BYTES) // 4
VECTORS_PER_ROW = 4  # innermost tile of the contiguous output dim, in vectors


def outer_product_registers(rows: int, vectors: int) -> int:
    """Vector registers of an outer-product register tile: rows x vectors accumulators,
    the row operand's vectors loaded per reduction step and one broadcast."""
    return rows * vectors + vectors + 1


def most_rows(vectors: int, registers: int) -> int:
    """The most rows an outer-product tile `vectors` wide may have in `registers`."""
    return (registers - vectors - 1) // vectors


@dataclass(frozen=True)
class AnnotationLimits:
    """The caps of a CPU target's search space that follow from its machine facts."""

    vector_lanes: int  # innermost tile of the contiguous output dim (and rfactor lanes)
    f32_lanes: int  # lanes of one vector register
    vector_registers: int  # the register file the register tile is kept in

    @staticmethod
    def of(target: Target) -> "AnnotationLimits":
        if target.backend != "llvm-cpu":
            raise TargetError(f"CPU annotation needs an llvm-cpu target, not {target.name} "
                              f"({target.backend})")
        return AnnotationLimits(vector_lanes=VECTORS_PER_ROW * target.f32_lanes,
                                f32_lanes=target.f32_lanes,
                                vector_registers=target.vector_registers)

    def registers(self, op: OpInfo, inner: dict[int, int]) -> int:
        """Vector registers an outer-product register tile of `op` holds (its innermost
        parallel tiles `inner`, by loop): rows x v accumulators, the v vectors of the row
        operand loaded per reduction step and one broadcast (v = vectors per output row).
        On AVX2 (16 registers) that admits 6x16 (12 accumulators, the classic BLAS kernel)
        and 14x8, which half the register file (the cap before) did not."""
        last = len(op.output.shape) - 1
        v, rows = 1, 1
        for l, c in inner.items():
            if op.output_dim_of_loop(l) == last:
                v = -(-c // self.f32_lanes)
            else:
                rows *= c
        return outer_product_registers(rows, v)

    def register_tile_fits(self, op: OpInfo, inner: dict[int, int]) -> bool:
        return self.registers(op, inner) <= self.vector_registers


DEFAULT_LIMITS = AnnotationLimits.of(DEFAULT_CPU)


@functools.lru_cache(maxsize=None)
def _limits_of(target: Target) -> AnnotationLimits:
    return AnnotationLimits.of(target)


def annotation_limits(target: Target | None = None) -> AnnotationLimits:
    """The limits of `target` (DEFAULT_CPU's when None)."""
    return DEFAULT_LIMITS if target is None else _limits_of(target)


def whole_row_loops(ops: Sequence[OpInfo], sketch: Sketch) -> set[int]:
    """Plain sketches whose fused producers reduce rows (softmax, layer norm): the anchor's
    last loop stays whole in a workgroup, else every workgroup recomputes the rows."""
    if sketch.root:
        return set()
    anchor = op_by_name(ops, sketch.anchor)
    if not anchor.parallel_dims or not any(o.reduction_dims for o in ops
                                           if o is not anchor and o.is_linalg):
        return set()
    return {anchor.parallel_dims[-1]}


def inner_reduction_range(sketch: Sketch, *, target: Target | None = None) -> tuple[int, int]:
    """(fewest, most) elements of the root's innermost reduction tiles: a structure step
    may ask for its own (rfactor: at least two partial sums, up to a wide vector)."""
    lanes = annotation_limits(target).vector_lanes
    asked = [r for r in (s.inner_reduction_lanes(lanes) for s in sketch.structure)
             if r is not None]
    return asked[0] if asked else (1, MAX_OTHER_INNER)


def inner_limit(op: OpInfo, loop: int, *, target: Target | None = None) -> int:
    """Largest innermost tile of parallel loop `loop` of `op`: vector lanes along the
    output's contiguous dim, MAX_OTHER_INNER along the others. A contraction reading its
    broadcast operand by columns (`column_read_loop`) takes one vector of lanes and rows
    along that column only: its vectorized form broadcasts the column across the lanes and
    transposes it, which LLVM turns into broadcasts for one vector but into element moves
    for wider tiles or a second row loop (ShuffleNet's 1x1 conv, 28x28x58x58: 7 rows x 16
    lanes 0.063 ms, x 32 lanes 0.45, x 48 lanes 0.75, 3 x 2 rows x 58 lanes 0.41)."""
    limits = annotation_limits(target)
    lane = op.output_dim_of_loop(loop) == len(op.output.shape) - 1
    column = column_read_loop(op)
    if lane:
        return limits.vector_lanes if column is None else limits.f32_lanes
    if column is not None and loop != column:
        return 1
    return MAX_OTHER_INNER




def _sample_levels(rng: random.Random, extent: int, levels: int, inner_max: int,
                   inner_min: int = 1) -> tuple[int, ...]:
    """Inner level extents (innermost last, within [inner_min, inner_max]) whose product
    divides `extent`."""
    out: list[int] = []
    remaining = extent
    for lvl in range(levels):
        innermost = lvl == 0
        cands = [d for d in divisors(remaining)
                 if not innermost or inner_min <= d <= inner_max]
        d = rng.choice(cands)
        out.append(d)
        remaining //= d
    return tuple(reversed(out))


def _may_peel(root: OpInfo, sketch: Sketch) -> bool:
    """Whether any loop of `root` may peel a partial register tile: not for window ops (their
    1-D kernels need exact rows) nor with partial sums (rfactor: one kernel copy)."""
    return window_loops(root) is None and not any(
        type(s).partial_sum_loop is not StructureStep.partial_sum_loop
        for s in sketch.structure)


def peel_candidates(root: OpInfo, sketch: Sketch, *,
                    target: Target | None = None) -> list[int]:
    """Parallel loops of a root that may be micro-kernel loops (PeelStep): their extent has
    no good register tile (its largest divisor within the inner limit is under half of it,
    e.g. 197 tokens), or, along the output's contiguous dim, no tile of whole vectors (58
    channels: a 58-lane tile carries a partial vector through the whole kernel, 16-lane
    kernels and a peeled partial one do not), of a root that may peel (`_may_peel`)."""
    if not _may_peel(root, sketch):
        return []
    unit_rows = unit_loops(root)
    lanes, vloop = annotation_limits(target).f32_lanes, lane_loop(root)
    out = []
    for l in root.parallel_dims:
        lim, ext = inner_limit(root, l, target=target), root.extents[l]
        no_whole_vectors = l == vloop and ext > lanes and not any(
            d % lanes == 0 for d in divisors(ext) if d <= lim)
        if l in root.dynamic_loops or (l not in unit_rows and (
                no_whole_vectors or ext > lim and largest_divisor(ext, lim) < lim // 2)):
            out.append(l)
    return out


def peel_sizes(extent: int, limit: int, dynamic: bool = False) -> list[int]:
    """Register tiles of a peeled loop: those that leave a partial last tile; on a dynamic
    extent every tile up to `limit` (one row too: the kernel of the smallest sizes)."""
    if dynamic:
        return list(range(1, limit + 1))
    return [c for c in range(2, min(limit, extent - 1) + 1) if extent % c]


# Register tiles per workgroup along a dynamic loop (its workgroup tile is k*c rows).
DYNAMIC_WORKGROUP_KERNELS = (1, 2, 4, 8, 16)


def dynamic_temp_fits(ops: Sequence[OpInfo], sketch: Sketch, root: OpInfo,
                      splits: dict[int, tuple[int, ...]],
                      parallel: Sequence[int] | None = None) -> bool:
    """With a dynamic loop, an unfused consumer reads the root's workgroup tile from a
    stack buffer (bounded by the fixed workgroup tile): within IREE's stack limit.
    `parallel`: the distributed loops (None: every loop whose tile leaves more than one
    workgroup, as `annotate` distributes them)."""
    if not root.dynamic_loops or sketch.anchor == root.name:
        return True
    tile = 1
    for l in root.parallel_dims:
        t = math.prod(splits[l])
        whole = (t >= root.extents[l]) if parallel is None else l not in parallel
        tile *= t if l in root.dynamic_loops or not whole else root.extents[l]
    return tile * root.output.elem_bytes + STACK_HEADROOM_BYTES <= STACK_LIMIT_BYTES


def dynamic_peelable(ops: Sequence[OpInfo], sketch: Sketch, *,
                     target: Target | None = None) -> bool:
    """Whether `sketch` can serve every size of its dynamic loops: a root's dynamic loop is
    its one micro-kernel loop (peeled); without a root, dynamic loops are cut to rows of
    one, so none may be the vectorized last loop."""
    if sketch.gpu:
        return False
    base = op_by_name(ops, sketch.root or sketch.anchor)
    dyn = set(base.dynamic_loops)
    if sketch.root:
        # A dynamic reduction (a contraction's, or a row's of a fused op) has no kernel here.
        if op_by_name(ops, sketch.anchor).map_stored or any(
                l in o.reduction_dims for o in ops for l in o.dynamic_loops):
            return False
        return len(dyn) <= 1 and dyn <= set(peel_candidates(base, sketch, target=target))
    # Without a root every op is cut to rows: a dynamic loop may be a row loop of any op, or
    # an op's innermost loop (chunks of full vectors, the partial last chunk peeled) when
    # that is its output's contiguous dim or its innermost reduction.
    for o in ops:
        if not o.is_linalg or not o.extents:
            continue
        inner = len(o.extents) - 1
        for l in o.dynamic_loops:
            if o.iterators[l] == "reduction" and l != inner:
                return False
            if l == inner and o.iterators[l] == "parallel" and \
                    o.output_dim_of_loop(l) != len(o.output.shape) - 1:
                return False
    # The chunk is chosen on the anchor's contiguous dim: a dynamic reduction needs that to
    # be dynamic too (a sum over dynamic rows alone has no chunk to take; not served yet).
    anchor = op_by_name(ops, sketch.anchor)
    chunked = any(anchor.output_dim_of_loop(l) == len(anchor.output.shape) - 1
                  for l in anchor.dynamic_loops)
    return chunked or not any(l in o.reduction_dims for o in ops for l in o.dynamic_loops)


# A dynamic loop without a root: k rows per workgroup (each op then runs them one by one;
# 16 rows ran a 12 x 512 x 512 softmax in 1.66 ms against 2.5-2.7 with one), except the
# anchor's contiguous dim, cut into chunks of V = f32 lanes x m elements (full vectors; the partial last chunk
# peeled to single elements) with W = V x w elements per workgroup, or kept whole in the
# workgroup when producers reduce it (softmax, layer norm: (extent, V)).
DYNAMIC_CHUNK_VECTORS = (1, 2, 4)
DYNAMIC_CHUNKS_PER_WORKGROUP = (4, 16, 64)


def dynamic_row_splits(op: OpInfo, loop: int, whole: set[int], *,
                       target: Target | None = None) -> list[tuple[int, ...]]:
    """The splits a sketch without a root may give dynamic loop `loop` of its anchor."""
    if op.output_dim_of_loop(loop) != len(op.output.shape) - 1:
        return [(k,) for k in DYNAMIC_WORKGROUP_KERNELS]
    chunks = [annotation_limits(target).f32_lanes * m for m in DYNAMIC_CHUNK_VECTORS]
    if loop in whole:
        return [(op.extents[loop], v) for v in chunks]
    return [(v * w, v) for v in chunks for w in DYNAMIC_CHUNKS_PER_WORKGROUP]


def _s1_tiles(root: OpInfo, splits: dict[int, tuple[int, ...]], peeled: set[int],
              blocks: dict[int, int] | None = None) -> int:
    """Elements of the root's S1 tile buffers (a peeled loop stays whole there, a blocked
    one is one block, the outer of two peeled ones its register tile: that peel copies the
    S1 tile's buffers, one for the full tiles and one for the partial, counted twice)."""
    blocks = blocks or {}
    s1_peel = s1_peel_of(peeled, blocks)
    return (2 if s1_peel is not None else 1) * math.prod(
        blocks[l] if l in blocks else s[-1] if l == s1_peel else
        root.extents[l] if l in peeled else s[-1] * s[-2] for l, s in splits.items())


# Packed panels share the stack with tiles this check does not see (a fused producer's tile:
# the padded input of a conv; 4 of 44 conv programs with 24 KiB filter panels overflowed
# it in the ResNet block): at most half of it, unless the panel is alone on the stack
# (`stack_alone`).
MAX_PACK_BYTES = STACK_LIMIT_BYTES // 2

# Share of programs that cut a blocked loop's register tile free of the block's divisors.
BLOCK_PEEL_SHARE = 0.3

# Share of peeling programs that peel two loops where two static ones have no good register
# tile (attention scores over 197 tokens: with one peeled, the other's tile is one row).
TWO_PEEL_SHARE = 0.5


def block_candidates(root: OpInfo, sketch: Sketch, *,
                     target: Target | None = None) -> list[int]:
    """Parallel loops of a root that a BlockPeelStep may cut: static row loops (not the
    output's contiguous dim, whose partial tile would be a partial vector, nor unit-tile
    rows), of a root that may peel at all (see peel_candidates) and whose extent has good
    register tiles (otherwise the loop is a plain peel candidate)."""
    if not _may_peel(root, sketch):
        return []
    last = len(root.output.shape) - 1
    plain = set(peel_candidates(root, sketch, target=target))
    unit_rows = unit_loops(root)
    return [l for l in root.parallel_dims
            if l not in root.dynamic_loops and l not in unit_rows and l not in plain and
            root.output_dim_of_loop(l) != last and root.extents[l] >= 4 and
            block_tiles(root.extents[l], inner_limit(root, l, target=target))]


def block_choices(extent: int, c: int) -> list[int]:
    """Blocks a register tile of `c` rows leaves a partial last tile in: divisors of the
    extent above c that c does not divide."""
    return [d for d in divisors(extent) if d > c and d % c]


def block_tiles(extent: int, limit: int) -> list[int]:
    """Register tiles of a blocked loop: those some block leaves a partial tile for."""
    return [c for c in range(2, min(limit, extent - 1) + 1) if block_choices(extent, c)]


def pack_candidates(root: OpInfo, sketch: Sketch) -> list[int]:
    """Operands of a root a PackStep may copy: inputs read along a reduction loop that some
    parallel loop does not index (the copy is reused across that loop's register tiles),
    none indexed by a dynamic loop (its slice has no static size) nor through a window
    (a convolution's input: its copied window failed to vectorize in the 1-D conv kernel)."""
    if sketch.gpu or not root.reduction_dims:
        return []
    out = []
    for i, o in enumerate(root.operands):
        used = {d for t in o.map_results for d, _ in t}
        if o.is_output or len(o.shape) < 2 or not used & set(root.reduction_dims) or \
                used & set(root.dynamic_loops) or not set(root.parallel_dims) - used or \
                any(len(t) > 1 for t in o.map_results):
            continue
        out.append(i)
    return out


def pack_bytes(root: OpInfo, prog: Program, operand: int) -> int:
    """Bytes of the local buffer a PackStep of `operand` copies into."""
    o = root.operands[operand]
    return footprint(o, reduction_tile(root, prog)) * o.elem_bytes


def stack_alone(ops: Sequence[OpInfo], prog: Program, root: OpInfo) -> bool:
    """Whether a packed panel of `root` would be the program's only stack buffer: a plain
    multi-level tiling (no cache write's local tile, no rfactor's partial sums), no loop
    peeled at S1, no map_store's staged tiles, and no op in the dispatch but the root and
    fills (a fused producer or consumer keeps a tile of its own there)."""
    return (all(isinstance(s, MultiLevelTile) for s in prog.sketch.structure) and
            prog.s1_peeled(root.name) is None and not any(o.map_stored for o in ops) and
            all(o.name == root.name or o.op_name == "linalg.fill" for o in ops))


def packs_fit(ops: Sequence[OpInfo], prog: Program, root: OpInfo,
              packed: Sequence[int]) -> bool:
    """The packed buffers fit IREE's stack limit (larger buffers need a compile flag; over
    64 KiB they overflow the worker stack at run time). A panel alone on the stack
    (`stack_alone`) may fill it: the 1024^3 matmul's 128 x 64 panel of B, 32 KiB under
    256 x 64 S1 blocks, compiled without the flag and ran 10.2 ms against 11.2 for the
    search's best with a smaller panel (Zen 4, 2026-12-07; docs/results.md). Beside other
    buffers the panels take at most MAX_PACK_BYTES and, with the local accumulator tile of
    a cache write, leave room for the strategy's small temporaries (a 32 KiB buffer
    compiled for one matmul and not for another); a loop peeled at S1 copies them all (the
    full S1 tiles' and the partial one's)."""
    total = sum(pack_bytes(root, prog, i) for i in packed)
    if stack_alone(ops, prog, root):
        return total <= STACK_LIMIT_BYTES
    if total > MAX_PACK_BYTES:
        return False
    if prog.sketch.local_tile:  # the S1 output tile
        tile = reduction_tile(root, prog)
        total += math.prod(tile[l] for l in root.parallel_dims) * root.output.elem_bytes
    if prog.s1_peeled(root.name) is not None:
        total *= 2
    return total + STACK_HEADROOM_BYTES <= STACK_LIMIT_BYTES


def full_vector_tile(op: OpInfo, loop: int, *, target: Target | None = None) -> int:
    """The least innermost tile `annotate(full_vectors=True)` gives parallel loop `loop` of
    `op`: one vector along the output's contiguous dim where whole vectors divide it, else 1."""
    lanes = annotation_limits(target).f32_lanes
    last = len(op.output.shape) - 1
    return lanes if op.output_dim_of_loop(loop) == last and op.extents[loop] % lanes == 0 \
        else 1


def annotate(ops: Sequence[OpInfo], sketch: Sketch, rng: random.Random, *,
             target: Target | None = None, full_vectors: bool = False) -> Program:
    """One random complete program of `sketch` for `target` (see the module docstring).
    `full_vectors`: the register tile's contiguous loop is drawn from whole vectors only
    where they divide it (`full_vector_tile`; a peeled one from multiples of the vector
    width), as if the others were drawn and rejected:
    the pruning rule vector-not-filled flags them, and the search's random sampling, which
    rejects flagged programs, drew most of its candidates in vain."""
    if sketch.gpu:
        return annotate_gpu(ops, sketch, rng, target=target)
    lim = annotation_limits(target)
    prog = Program(sketch)
    if sketch.root:
        root = op_by_name(ops, sketch.root)
        unit_rows = unit_loops(root)
        # (Not under a map_store: its stack check assumes dividing workgroup tiles.)
        peelable = [] if op_by_name(ops, sketch.anchor).map_stored else \
            peel_candidates(root, sketch, target=target)
        blockable = [] if op_by_name(ops, sketch.anchor).map_stored else \
            block_candidates(root, sketch, target=target)
        for _ in range(100):  # resample until the register tile fits
            splits = {l: _sample_levels(rng, root.extents[l], 3,
                                        1 if l in unit_rows else
                                        inner_limit(root, l, target=target),
                                        full_vector_tile(root, l, target=target)
                                        if full_vectors and l not in unit_rows else 1)
                      for l in root.parallel_dims}
            peeled: set[int] = set()
            # A dynamic loop is always the micro-kernel loop; otherwise half the programs
            # peel one.
            blocks: dict[int, int] = {}
            if root.dynamic_loops or (peelable and rng.random() < 0.5):
                if root.dynamic_loops:
                    peeled = {root.dynamic_loops[0]}
                elif len(peelable) > 1 and rng.random() < TWO_PEEL_SHARE:
                    peeled = set(rng.sample(peelable, 2))
                else:
                    peeled = {rng.choice(peelable)}
                for l in sorted(peeled):
                    sizes = peel_sizes(root.extents[l], inner_limit(root, l, target=target),
                                       l in root.dynamic_loops)
                    if full_vectors and l not in root.dynamic_loops and l == lane_loop(root):
                        # The output's contiguous loop: every full kernel in whole vectors
                        # (the search drew 31-, 43- and 54-wide tiles on 197 tokens).
                        sizes = [c for c in sizes if c % lim.f32_lanes == 0] or sizes
                    c = rng.choice(sizes)
                    # A dynamic loop is also cut into workgroups of a fixed k*c rows.
                    k = rng.choice(DYNAMIC_WORKGROUP_KERNELS) \
                        if l in root.dynamic_loops else 1
                    splits[l] = (k, 1, c)
            elif blockable and rng.random() < BLOCK_PEEL_SHARE:
                l = rng.choice(blockable)
                ext = root.extents[l]
                c = rng.choice(block_tiles(ext, inner_limit(root, l, target=target)))
                block = rng.choice(block_choices(ext, c))
                peeled, blocks = {l}, {l: block}
                splits[l] = (rng.choice(divisors(ext // block)), 1, c)
            local = _s1_tiles(root, splits, peeled, blocks)
            if lim.register_tile_fits(root, {l: s[-1] for l, s in splits.items()}) and \
                    dynamic_temp_fits(ops, sketch, root, splits) and (
                    not sketch.local_tile or local <= MAX_LOCAL_TILE) and \
                    map_store_fits(ops, sketch, root, splits):
                break
        for l in root.parallel_dims:
            prog = prog.with_step(SplitStep(root.name, l, splits[l]))
        for l in sorted(peeled):
            prog = prog.with_step(BlockPeelStep(root.name, l, blocks[l]) if l in blocks
                                  else PeelStep(root.name, l))
        window = window_loops(root)
        for l in root.reduction_dims:
            r1 = rng.choice(divisors(root.extents[l]))
            if window is not None and l in window:
                prog = prog.with_step(SplitStep(root.name, l, (r1,)))
            else:
                # A vector reduction in the innermost tile: for window ops (input channels)
                # it stays a contraction once unit window dims fold away; for contractions
                # it lets a weight read along k (nn.Linear) load contiguous rows. With
                # rfactor it is the number of partial sums (vector lanes).
                fewest, most = inner_reduction_range(sketch, target=target)
                lanes = [d for d in divisors(r1) if d <= most]
                if l == root.reduction_dims[-1] and any(d >= fewest for d in lanes):
                    lanes = [d for d in lanes if d >= fewest]
                v = rng.choice(lanes)
                prog = prog.with_step(SplitStep(root.name, l, (r1, v)))
        outer = eligible_parallel(root, prog, rows=())
        prog = prog.with_step(ParallelStep(root.name, tuple(outer[:MAX_WORKGROUP_DIMS])))
        factor = rng.choice(unroll_choices(root, prog))
        prog = prog.with_step(UnrollStep(root.name, factor))
        # Half the programs pack one operand, where one fits the stack.
        packable = [i for i in pack_candidates(root, sketch) if packs_fit(ops, prog, root, [i])]
        if packable and rng.random() < 0.5:
            prog = prog.with_step(PackStep(root.name, rng.choice(packable)))
        prog = prog.with_step(VectorizeStep(root.name))
    else:
        anchor = op_by_name(ops, sketch.anchor)
        whole = whole_row_loops(ops, sketch)
        for _ in range(100):  # resample until a map_store's workgroup tile fits the stack
            splits = {l: rng.choice(dynamic_row_splits(anchor, l, whole, target=target))
                      if l in anchor.dynamic_loops else (anchor.extents[l],) if l in whole
                      else _sample_levels(rng, anchor.extents[l], 1,
                                          inner_limit(anchor, l, target=target))
                      for l in anchor.parallel_dims}
            if map_store_fits(ops, sketch, anchor, splits):
                break
        for l in anchor.parallel_dims:
            prog = prog.with_step(SplitStep(anchor.name, l, splits[l]))
        outer = eligible_parallel(anchor, prog, rows=whole)
        prog = prog.with_step(ParallelStep(anchor.name, tuple(outer[:MAX_WORKGROUP_DIMS])))
        prog = prog.with_step(VectorizeStep(anchor.name))
    return prog


def sample_unmeasured(sample: Callable[[], Program], n: int, measured: set[str], tries: int,
                      keep: Callable[[Program], bool] = lambda p: True) -> list[Program]:
    """Up to `n` distinct programs from `sample()` whose keys are not in `measured` and that
    `keep` accepts, drawing at most `n * tries` times."""
    out: list[Program] = []
    seen = set(measured)
    for _ in range(n * tries):
        if len(out) == n:
            break
        p = sample()
        if p.key not in seen and keep(p):
            seen.add(p.key)
            out.append(p)
    return out


def sample_programs(ops: Sequence[OpInfo], sketches: Sequence[Sketch], n: int,
                    rng: random.Random, *, target: Target | None = None) -> list[Program]:
    """`n` random programs, sketches taken in turn."""
    return [annotate(ops, sketches[i % len(sketches)], rng, target=target)
            for i in range(n)] if sketches else []


def unrolled_block_macs(op: OpInfo, prog: Program) -> int:
    """Multiply-adds of one innermost reduction step before unrolling: the register tile
    (innermost parallel tiles) times the innermost reduction tile (a window loop steps by
    one)."""
    n = 1
    for l in range(len(op.extents)):
        s = prog.split(op.name, l)
        if s is None:
            continue
        if l in op.reduction_dims:
            n *= s.lengths[1] if len(s.lengths) > 1 else 1
        else:
            n *= s.lengths[-1]
    return n


def unroll_choices(op: OpInfo, prog: Program) -> list[int]:
    """Unroll factors that divide the trip count of the innermost reduction loop and keep
    the unrolled block within MAX_UNROLLED_MACS (not unrolling is always a choice)."""
    last = [prog.split(op.name, l).lengths for l in op.reduction_dims
            if prog.split(op.name, l) is not None]
    last = [ls for ls in last if ls[0] > (ls[1] if len(ls) > 1 else 1)]
    trip = (last[-1][0] // (last[-1][1] if len(last[-1]) > 1 else 1)) if last else 1
    step = unrolled_block_macs(op, prog)
    return [f for f in UNROLL_CHOICES
            if trip % f == 0 and (f == 1 or step * f <= MAX_UNROLLED_MACS)]


def map_store_fits(ops: Sequence[OpInfo], sketch: Sketch, root: OpInfo,
                    splits: dict[int, tuple[int, ...]],
                    parallel: Sequence[int] | None = None) -> bool:
    """An output written through a map_store leaves the workgroup tile of the anchor and of
    its accumulator (or producer) as two stack buffers: together within IREE's 32 KiB stack
    limit, with room for the strategy's small temporaries (64-1024 bytes seen). `root`:
    the op whose split steps give the tiles (root, or anchor of a plain sketch)."""
    anchor = op_by_name(ops, sketch.anchor)
    if not anchor.map_stored:
        return True
    if parallel is None:  # as annotate picks them
        outer = [l for l in root.parallel_dims if root.extents[l] // math.prod(splits[l]) > 1]
        parallel = outer[:MAX_WORKGROUP_DIMS]
    par = set(parallel)
    tile = math.prod(math.prod(splits[l]) if l in par else root.extents[l]
                     for l in root.parallel_dims)
    return 2 * tile * anchor.output.elem_bytes + STACK_HEADROOM_BYTES <= STACK_LIMIT_BYTES


def violations(ops: Sequence[OpInfo], prog: Program, *,
               target: Target | None = None) -> list[str]:
    """Why `prog` is not a program `annotate` could have produced for `target` ([] =
    valid). Mutation and crossover results are checked with this before they are scored or
    measured."""
    sk = prog.sketch
    if sk.gpu:
        return gpu_violations(ops, prog, target=target)
    lim = annotation_limits(target)
    base = op_by_name(ops, sk.root or sk.anchor)
    errs: list[str] = []
    levels = 3 if sk.root else 1
    unit_rows = unit_loops(base) if sk.root else set()
    window = window_loops(base)
    whole = whole_row_loops(ops, sk)
    peeled, blocks = prog.peeled(base.name), prog.blocks(base.name)
    if peeled:
        may = sk.root and not op_by_name(ops, sk.anchor).map_stored
        plain = set(peel_candidates(base, sk, target=target)) if may else set()
        blockable = set(block_candidates(base, sk, target=target)) if may else set()
        # Two peeled loops: both plain and static (one kernel copy per pair of partial
        # tiles); a dynamic or blocked one is the only peeled loop.
        two = len(peeled) == 2 and not blocks and not peeled & set(base.dynamic_loops)
        if (len(peeled) > 1 and not two) or not (peeled - set(blocks)) <= plain or \
                not set(blocks) <= blockable:
            errs.append(f"loops {sorted(peeled)}: one peeled loop (or two static ones) with "
                        "no good register tile, or one blocked row loop, of a root without "
                        "partial sums or windows")
    if sk.root and not set(base.dynamic_loops) <= peeled:
        errs.append(f"dynamic loops {list(base.dynamic_loops)} must be the peeled loop")
    for l in base.parallel_dims:
        s = prog.split(base.name, l)
        if not sk.root and l in base.dynamic_loops:
            if s is None or s.lengths not in dynamic_row_splits(base, l, whole, target=target):
                errs.append(f"loop {l}: a dynamic loop without a root is cut to k rows, "
                            "or the contiguous one to chunks of full vectors")
            continue
        if s is None or len(s.lengths) != levels:
            errs.append(f"loop {l}: needs {levels} split levels")
            continue
        if l in whole:
            if s.lengths != (base.extents[l],):
                errs.append(f"loop {l}: rows reduced by a producer stay whole")
            continue
        if l in peeled and l in base.dynamic_loops:
            if s.lengths[0] not in DYNAMIC_WORKGROUP_KERNELS or s.lengths[1] != 1 or \
                    s.lengths[-1] not in peel_sizes(0, inner_limit(base, l, target=target),
                                                    True):
                errs.append(f"loop {l}: a dynamic loop is (k, 1, c): k kernels of c rows")
        elif l in blocks:
            ext, (a, one, c), block = base.extents[l], s.lengths, blocks[l]
            if one != 1 or block not in block_choices(ext, c) or (ext // block) % a:
                errs.append(f"loop {l}: a blocked loop is (a, 1, c): workgroups of a blocks "
                            f"of {block} rows (dividing {ext}), c not dividing the block")
        elif l in peeled:
            ext = base.extents[l]
            if s.lengths[:2] != (1, 1) or s.lengths[-1] not in peel_sizes(
                    ext, inner_limit(base, l, target=target)):
                errs.append(f"loop {l}: a peeled loop is (1, 1, c) with c not dividing {ext}")
        elif base.extents[l] % math.prod(s.lengths):
            errs.append(f"loop {l}: {s.lengths} does not divide {base.extents[l]}")
        limit = 1 if l in unit_rows else inner_limit(base, l, target=target)
        if s.lengths[-1] > limit:
            errs.append(f"loop {l}: innermost tile {s.lengths[-1]} > {limit}")
    if errs:
        return errs
    if sk.root:
        inner = [prog.split(base.name, l).lengths for l in base.parallel_dims]
        if not lim.register_tile_fits(base, {l: s[-1] for l, s in zip(base.parallel_dims,
                                                                        inner)}):
            errs.append("register tile too large")
        par_step = prog.find(ParallelStep, base.name)
        if not dynamic_temp_fits(ops, sk, base, dict(zip(base.parallel_dims, inner)),
                                 par_step.loops if par_step else ()):
            errs.append("the dynamic workgroup tile's temporary exceeds the stack")
        if sk.local_tile and _s1_tiles(base, dict(zip(base.parallel_dims, inner)),
                                       peeled, blocks) > MAX_LOCAL_TILE:
            errs.append("local tile too large")
        fewest, most = inner_reduction_range(sk, target=target)
        for l in base.reduction_dims:
            s = prog.split(base.name, l)
            want = 1 if window is not None and l in window else 2
            if s is None or len(s.lengths) != want:
                errs.append(f"reduction loop {l}: needs {want} split levels")
            elif base.extents[l] % s.lengths[0]:
                errs.append(f"reduction loop {l}: {s.lengths[0]} does not divide extent")
            elif want == 2 and (s.lengths[0] % s.lengths[1] or s.lengths[1] > most):
                errs.append(f"reduction loop {l}: bad vector length {s.lengths[1]}")
            elif want == 2 and l == base.reduction_dims[-1] and s.lengths[1] < fewest and \
                    any(d >= fewest for d in divisors(s.lengths[0]) if d <= most):
                errs.append(f"reduction loop {l}: innermost tile {s.lengths[1]} < {fewest}")
        u = prog.find(UnrollStep, base.name)
        if u is None or u.factor not in unroll_choices(base, prog):
            errs.append("unroll factor does not divide the reduction trip count")
        packed = prog.packed(base.name)
        if len(packed) > 1 or not set(packed) <= set(pack_candidates(base, sk)):
            errs.append(f"packed operands {list(packed)}: at most one, an input read along "
                        "a reduction and reused across a parallel loop")
        elif packed and not packs_fit(ops, prog, base, packed):
            errs.append("the packed operand's buffer exceeds the stack")
    elif prog.packed(base.name):
        errs.append("only a multi-level-tiled root packs operands")
    par = prog.find(ParallelStep, base.name)
    if not map_store_fits(ops, sk, base, {l: prog.split(base.name, l).lengths
                                           for l in base.parallel_dims},
                           par.loops if par else None):
        errs.append("workgroup tile too large for a map_store output")
    eligible = eligible_parallel(base, prog, rows=whole)
    if par is None or len(par.loops) > MAX_WORKGROUP_DIMS or \
            any(l not in eligible for l in par.loops):
        errs.append("parallel loops must have an outer extent > 1 (at most 3)")
    elif sk.root and any(l not in par.loops for l in base.dynamic_loops):
        errs.append("a dynamic loop is always distributed over workgroups")
    return errs


def repair(ops: Sequence[OpInfo], prog: Program) -> Program:
    """Re-derive the steps that depend on the tile sizes after an edit: the parallel loops
    (same granularity where possible) and the unroll factor (largest valid one not above
    the old factor)."""
    sk = prog.sketch
    base = op_by_name(ops, sk.root or sk.anchor)
    if sk.gpu:
        return repair_gpu(ops, prog)
    eligible = eligible_parallel(base, prog, rows=whole_row_loops(ops, sk))
    steps = []
    for s in prog.steps:
        if isinstance(s, ParallelStep) and s.op == base.name:
            k = min(max(len(s.loops), 1), len(eligible), MAX_WORKGROUP_DIMS)
            s = ParallelStep(s.op, tuple(eligible[:k]))
        elif isinstance(s, UnrollStep) and s.op == base.name:
            ok = [f for f in unroll_choices(base, prog) if f <= s.factor]
            s = UnrollStep(s.op, max(ok) if ok else 1)
        steps.append(s)
    return Program(prog.sketch, tuple(steps))
