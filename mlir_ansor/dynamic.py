"""Dynamic dimensions of a model's inputs (`--dynamic INPUT:DIM=LO..HI`).

A spec names a forward argument (by name or position), one of its dimensions and the range
of sizes the model must serve. Specs that name the same symbol (`@NAME`, e.g. a batch
shared by two inputs) are one torch.export `Dim`. torch.export specialises an example size
of 0 or 1, so the example must have at least 2 there; size 1 is still served and checked.
"""
from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, replace
from typing import Sequence

from mlir_ansor.errors import FrontendError, UsageError

_SPEC = re.compile(r"(?P<input>[A-Za-z_][A-Za-z_0-9]*|\d+):(?P<dim>\d+)="
                   r"(?P<lo>\d+)\.\.(?P<hi>\d+)(?:@(?P<name>[A-Za-z_][A-Za-z_0-9]*))?")


@dataclass(frozen=True)
class DynamicDim:
    input: str  # the forward argument's name, or its position as digits
    dim: int
    lo: int
    hi: int
    name: str = ""  # symbol shared by specs that must be equal ("" = its own)

    @property
    def symbol(self) -> str:
        return self.name or f"{self.input}_{self.dim}"

    def __str__(self) -> str:
        return f"{self.input}:{self.dim}={self.lo}..{self.hi}" + (
            f"@{self.name}" if self.name else "")


def parse_dynamic(spec: str) -> DynamicDim:
    """`INPUT:DIM=LO..HI[@NAME]`, or a UsageError naming what is wrong."""
    m = _SPEC.fullmatch(spec.strip())
    if not m:
        raise UsageError(f"--dynamic {spec!r}: expected INPUT:DIM=LO..HI (e.g. x:0=1..1024; "
                         "INPUT is the forward argument's name or position)")
    d = DynamicDim(m["input"], int(m["dim"]), int(m["lo"]), int(m["hi"]), m["name"] or "")
    if d.lo < 1:
        raise UsageError(f"--dynamic {spec}: sizes start at 1 (got {d.lo})")
    if d.lo > d.hi:
        raise UsageError(f"--dynamic {spec}: LO {d.lo} > HI {d.hi}")
    return d


@dataclass(frozen=True)
class Resolved:
    """The specs checked against one model: argument positions and torch.export's form."""

    dims: tuple[DynamicDim, ...]
    positions: tuple[int, ...]  # per spec, the input's position among the example inputs
    arg_names: tuple[str, ...]  # the forward's argument names, in order

    def range_of(self, symbol: str) -> tuple[int, int]:
        ds = [d for d in self.dims if d.symbol == symbol]
        return max(d.lo for d in ds), min(d.hi for d in ds)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.symbol for d in self.dims))

    def export_shapes(self) -> dict:
        """torch.export `dynamic_shapes`: {argument: {dim: Dim}} (None for static ones)."""
        import torch

        made = {s: torch.export.Dim(s, min=lo, max=hi)
                for s in self.symbols for lo, hi in [self.range_of(s)]}
        shapes: dict = {name: None for name in self.arg_names}
        for d, pos in zip(self.dims, self.positions):
            name = self.arg_names[pos]
            shapes[name] = {**(shapes[name] or {}), d.dim: made[d.symbol]}
        return shapes

    def inputs_at(self, inputs: tuple, sizes: dict[str, int], seed: int = 0) -> tuple:
        """The example inputs resized: the symbols' dimensions set to `sizes`; new float
        data drawn like randn, integer data within the example's range."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        out = list(inputs)
        for pos in sorted(set(self.positions)):
            x = inputs[pos]
            shape = list(x.shape)
            for d, p in zip(self.dims, self.positions):
                if p == pos:
                    shape[d.dim] = sizes[d.symbol]
            if x.is_floating_point():
                out[pos] = torch.randn(shape, generator=gen, dtype=x.dtype)
            else:
                lo, hi = int(x.min()), int(x.max())
                out[pos] = torch.randint(lo, hi + 1, shape, generator=gen, dtype=x.dtype)
        return tuple(out)


def resolve(model, inputs: Sequence, dims: Sequence[DynamicDim]) -> Resolved:
    """Check the specs against the model's forward and its example inputs."""
    forward = getattr(model, "forward", model)
    try:
        params = [p for p in inspect.signature(forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = tuple(p.name for p in params[:len(inputs)])
    if len(names) < len(inputs):
        names = tuple(f"arg{i}" for i in range(len(inputs)))
    positions, named = [], []
    for d in dims:
        if d.input.isdigit():
            pos = int(d.input)
            if pos >= len(inputs):
                raise FrontendError(f"--dynamic {d}: the model takes {len(inputs)} inputs")
        elif d.input in names:
            pos = names.index(d.input)
        else:
            raise FrontendError(f"--dynamic {d}: no input named '{d.input}' (inputs: "
                                f"{', '.join(names)})")
        if d.input.isdigit():  # named by its argument from here on (symbols, labels)
            d = replace(d, input=names[pos])
        x = inputs[pos]
        if d.dim >= x.dim():
            raise FrontendError(f"--dynamic {d}: input '{names[pos]}' has {x.dim()} "
                                f"dimensions (shape {tuple(x.shape)})")
        size = int(x.shape[d.dim])
        if size < 2:
            raise FrontendError(f"--dynamic {d}: the example has size {size} there; torch."
                                "export specialises sizes 0 and 1: give an example of at "
                                "least 2 (size 1 is still served and checked)")
        if not d.lo <= size <= d.hi:
            raise FrontendError(f"--dynamic {d}: the example's size {size} is outside "
                                f"{d.lo}..{d.hi}")
        positions.append(pos)
        named.append(d)
    return Resolved(tuple(named), tuple(positions), names)


def check_sizes(lo: int, hi: int, most: int = 12) -> tuple[int, ...]:
    """The sizes every module is checked at: the ends, 1 and 2 when in range, sizes that
    divide no power-of-two tile (3, 37, 199), the middle, and powers of two between (thinned
    to `most` sizes in all), sorted."""
    must = {s for s in (lo, hi, 1, 2, 3, 37, 199, (lo + hi) // 2) if lo <= s <= hi}
    extra = sorted(p for p in (1 << k for k in range(2, 31)) if lo < p < hi and p not in must)
    room = max(most - len(must), 0)
    if room and extra:
        step = math.ceil(len(extra) / room)
        must |= set(extra[::step])
    return tuple(sorted(must))


def size_sets(resolved: Resolved) -> list[dict[str, int]]:
    """The sizes to check a model at: one value per symbol in each set; with several
    symbols their check sizes are walked side by side (ends together)."""
    return _side_by_side({s: check_sizes(*resolved.range_of(s)) for s in resolved.symbols})


def with_sizes(sets: list[dict[str, int]], symbol: str, values: Sequence[int]
               ) -> list[dict[str, int]]:
    """`sets` and one more per value of `symbol`, its other symbols as in the set nearest
    along `symbol` (a size dispatcher's branch ends are checked with every symbol set)."""
    return sets + [{**min(sets, key=lambda s: abs(s[symbol] - x)), symbol: x} for x in values]


def _side_by_side(per: dict[str, tuple[int, ...]]) -> list[dict[str, int]]:
    """Size sets from each symbol's sizes walked together (ends together), as many sets as
    the longest list."""
    n = max(len(v) for v in per.values())
    return [{s: v[min(i * len(v) // n, len(v) - 1)] for s, v in per.items()} for i in range(n)]


def tune_sizes(lo: int, hi: int, most: int = 5) -> tuple[int, ...]:
    """The sizes a dynamic task is measured at while tuning (its joint objective): the
    ends and sizes spread geometrically between them, odd ones (a tile divides none of
    them, as most sizes a model sees). Disjoint from `check_sizes` where the range allows,
    so the hand-back is checked at sizes the search never saw."""
    if hi - lo + 1 <= most:
        return tuple(range(lo, hi + 1))
    out = {lo, hi}
    for i in range(1, most - 1):
        x = round(lo * (hi / lo) ** (i / (most - 1)))
        x |= 1  # odd
        while x in out or x in (37, 199) or x >= hi:
            x += 2 if x + 2 < hi else -2
        out.add(max(x, lo))
    return tuple(sorted(out))


def tune_samples(resolved: Resolved, most: int = 5) -> list[tuple[tuple[tuple[int, int], int], ...]]:
    """The size samples of a model: per sample, ((input position, dim), size) for every
    --dynamic spec; several symbols walk their sizes side by side (ends together)."""
    sets = _side_by_side({s: tune_sizes(*resolved.range_of(s), most)
                          for s in resolved.symbols})
    return [tuple(((pos, d.dim), at[d.symbol]) for d, pos in zip(resolved.dims,
                                                                  resolved.positions))
            for at in sets]


def read_shape_weights(path: str) -> dict[tuple[int, ...], float]:
    """`--shape-weights FILE`: the sizes a model sees and how often. One line per observed
    size: `SIZE COUNT` (several dynamic symbols: `SIZE,SIZE,... COUNT`, in the order the
    --dynamic specs name them); `#` starts a comment. A UsageError names a bad line."""
    try:
        text = open(path).read()
    except OSError as e:
        raise UsageError(f"--shape-weights {path}: cannot read it ({e.strerror})") from e
    out: dict[tuple[int, ...], float] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            sizes = tuple(int(x) for x in parts[0].split(","))
            count = float(parts[1])
        except ValueError:
            raise UsageError(f"--shape-weights {path}, line {n}: expected 'SIZE COUNT' "
                             f"(got {line!r})") from None
        if count < 0 or any(x < 1 for x in sizes):
            raise UsageError(f"--shape-weights {path}, line {n}: sizes start at 1 and counts "
                             "are not negative")
        out[sizes] = out.get(sizes, 0.0) + count
    if not out or not sum(out.values()):
        raise UsageError(f"--shape-weights {path}: no size with a positive count")
    return out


def sample_weights(resolved: Resolved, samples: list[tuple], observed: dict[tuple[int, ...],
                   float]) -> list[float]:
    """Weight of each size sample (`tune_samples`): the counts of the observed sizes nearest
    to it (log distance over the symbols). An observed size outside the --dynamic ranges is
    a UsageError."""
    symbols = resolved.symbols
    for sizes in observed:
        if len(sizes) != len(symbols):
            raise UsageError(f"--shape-weights: {','.join(map(str, sizes))} gives "
                             f"{len(sizes)} sizes for {len(symbols)} dynamic symbols "
                             f"({', '.join(symbols)})")
        for sym, x in zip(symbols, sizes):
            lo, hi = resolved.range_of(sym)
            if not lo <= x <= hi:
                raise UsageError(f"--shape-weights: size {x} of {sym} is outside {lo}..{hi}")
    first = {d.symbol: (pos, d.dim) for d, pos in zip(resolved.dims, resolved.positions)}
    points = [tuple(dict(s)[first[sym]] for sym in symbols) for s in samples]
    weights = [0.0] * len(points)
    for sizes, count in observed.items():
        near = min(range(len(points)), key=lambda i: sum(
            abs(math.log(a) - math.log(b)) for a, b in zip(points[i], sizes)))
        weights[near] += count
    return weights
