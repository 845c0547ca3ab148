"""`build.sh` of a tuning output folder: rebuilds the tuned module with stock `iree-compile`.

    ./build.sh OUTPUT.vmfb [extra iree-compile flags]

It compiles the folder's `model_tuned.mlir` the way the tuner does (`e2e.compile_model`):
up to global optimization without the library, then the rest single-threaded with it (in
one step, or with threads, IREE 3.13 can deadlock on the library's loading lock). A library
that IREE cannot parse (e.g. a newer IREE) only makes it warn and build its default codegen
with exit status 0, so the script checks IREE's configuration dump: every `strategy_*` the
library defines must appear as `codegen_spec = @strategy_...`, or the build fails and leaves
no OUTPUT behind. Without a library (nothing beat IREE's default) it builds the model as is.
"""
from __future__ import annotations

import re
import shlex
import stat
from pathlib import Path
from typing import Sequence

BUILD_SCRIPT = "build.sh"

# What grep reads as a strategy symbol in the script; a written-in list must fit it too.
_SYMBOL = re.compile(r"strategy_[A-Za-z0-9_.]+")  # no $: written in unquoted

# The script's body; @TARGET_FLAGS@, @MODEL@ and @LIBRARY@ are filled in (shell-quoted),
# @STRATEGIES@ with symbols of _SYMBOL (no quoting needed).
_TEMPLATE = r"""#!/usr/bin/env bash
# Builds the tuned module of this folder with stock iree-compile (written by mlir-ansor).
#   ./build.sh OUTPUT.vmfb [extra iree-compile flags]
# iree-compile: $IREE_COMPILE when set, else the one on PATH. The extra flags go to every
# iree-compile call, after the target flags below (the last occurrence of a flag wins).
set -eu

usage="usage: $0 OUTPUT.vmfb [extra iree-compile flags]"
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "$usage" >&2
  exit 2
fi
out=$1
shift

here=$(cd "$(dirname "$0")" && pwd)
model="$here/"@MODEL@
library="$here/"@LIBRARY@
# The target the strategies were tuned for.
target_flags=(@TARGET_FLAGS@)

compiler=${IREE_COMPILE:-}
if [ -z "$compiler" ]; then
  compiler=$(command -v iree-compile || true)
fi
if [ -z "$compiler" ]; then
  echo "build.sh: iree-compile not found: set IREE_COMPILE or put iree-compile on PATH" >&2
  exit 2
fi
if [ ! -f "$model" ]; then
  echo "build.sh: model not found: $model" >&2
  exit 2
fi

# How the module was measured fastest (empty: IREE's default device, local-task).
note=@RUN_NOTE@
rm -f "$out"  # a failed build must not leave an older module looking like its result
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$library" ]; then
  # No tuned library: nothing beat IREE's default codegen.
  "$compiler" "$model" "${target_flags[@]}" "$@" -o "$out"
  [ -z "$note" ] || echo "build.sh: $note"
  exit 0
fi

# The strategies this model's dispatches must take. Written in when the tuner knew them
# (a library shared by several models also holds the others' strategies); otherwise read
# from the library at build time, so that a library replaced later (e.g. by a merged one)
# is checked against what it defines: with grep, not a parser, because a library IREE
# cannot parse must still name its strategies here. A library with none is an error.
expected=$(printf '%s\n' @STRATEGIES@ | LC_ALL=C sort -u)
if [ -z "$expected" ]; then
  expected=$(grep -oE 'named_sequence @strategy_[A-Za-z0-9_$.]+' "$library" |
    sed 's/.*@//' | LC_ALL=C sort -u || true)
fi
if [ -z "$expected" ]; then
  echo "build.sh: $library defines no strategy_* sequence (not a tuned library?)" >&2
  exit 1
fi

"$compiler" "$model" "${target_flags[@]}" "$@" --compile-to=global-optimization \
  -o "$tmp/global_opt.mlir"
"$compiler" "$tmp/global_opt.mlir" "${target_flags[@]}" "$@" \
  --compile-from=global-optimization --mlir-disable-threading \
  --iree-codegen-transform-dialect-library="$library" \
  --iree-hal-dump-executable-configurations-to="$tmp/configs" -o "$tmp/module.vmfb"

applied=$(cat "$tmp"/configs/*.mlir 2>/dev/null |
  grep -oE 'codegen_spec = @[A-Za-z0-9_$.]+' | sed 's/.*@//' | LC_ALL=C sort -u || true)
missing=$(LC_ALL=C comm -23 <(echo "$expected") <(echo "$applied") | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "build.sh: tuned strategies not applied: ${missing% }" >&2
  echo "build.sh: IREE built its default codegen for them (a library it cannot parse, e.g." \
    "from another IREE version, only gives a warning above; or the model differs from" \
    "the one tuned, or the library no longer defines them); no module written" >&2
  exit 1
fi
# A size dispatcher's strategy (strategy_<task>_b<i>) belongs on the dispatches of branch i
# only: their ops carry ansor_kernel = "b<i>".
for f in "$tmp"/configs/*.mlir; do
  for s in $(grep -oE 'codegen_spec = @strategy_[A-Za-z0-9_.]+_b[0-9]+' "$f" | sed 's/.*@//'); do
    if ! grep -q "ansor_kernel = \"${s##*_}\"" "$f"; then
      echo "build.sh: $s was applied to a dispatch of another size branch; no module written" >&2
      exit 1
    fi
  done
done
mv "$tmp/module.vmfb" "$out"
echo "build.sh: wrote $out ($(echo "$expected" | wc -l) tuned strategies applied)"
[ -z "$note" ] || echo "build.sh: $note"
"""


def _run_note(device: str, channels_last_io: bool) -> str:
    notes = []
    if device:
        notes.append(f"run it on IREE's {device} device (--device={device} for "
                     f"iree-run-module, driver={device!r} in iree.runtime): measured faster "
                     "there")
    if channels_last_io:
        notes.append("its 4-D/5-D inputs and outputs are channels-last (NHWC / NDHWC; "
                     "--io-layout channels-last): pass x.permute(0, 2, 3, 1) of a "
                     "channels_last tensor, read y.permute(0, 3, 1, 2)")
    return "; ".join(notes)


def write_build_script(out_dir: Path, target_flags: Sequence[str],
                       model_file: str = "model_tuned.mlir",
                       library_file: str = "tuned_library.mlir",
                       strategies: Sequence[str] = (), device: str = "",
                       channels_last_io: bool = False) -> Path:
    """Write an executable `build.sh` into `out_dir`. `model_file` and `library_file` are
    relative to `out_dir` (e.g. "../tuned_library.mlir" for one model of several tuned
    together); `target_flags` are the iree-compile flags of the tuned target; `strategies`
    the symbols this model must take when the library holds others too (empty: every
    strategy the library defines when build.sh runs); `device` the IREE runtime device the
    module was measured fastest on, printed after a build ("": the default);
    `channels_last_io`: the model was tuned with --io-layout channels-last, which the printed
    note says (its 4-D/5-D inputs and outputs are NHWC / NDHWC)."""
    for f in (model_file, library_file):
        if Path(f).is_absolute():
            raise ValueError(f"build.sh paths are relative to its folder, got {f}")
    for sym in strategies:
        if not _SYMBOL.fullmatch(sym):
            raise ValueError(f"not a strategy symbol: {sym!r}")
    text = (_TEMPLATE.replace("@TARGET_FLAGS@", " ".join(shlex.quote(f) for f in target_flags))
            .replace("@MODEL@", shlex.quote(model_file))
            .replace("@LIBRARY@", shlex.quote(library_file))
            .replace("@STRATEGIES@", " ".join(sorted(set(strategies))))
            .replace("@RUN_NOTE@", shlex.quote(_run_note(device, channels_last_io))))
    path = Path(out_dir) / BUILD_SCRIPT
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
