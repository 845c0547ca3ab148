"""`python -m mlir_ansor.merge_libraries LIB1 LIB2 ... -o OUT` — merge tuned libraries.

Writes one transform library for `--iree-codegen-transform-dialect-library` holding the
strategies of every LIB: clashing names are renamed, a dispatch tuned in several libraries
keeps the strategy of the first one listed. Notes go to stdout; a bad input ends with one
`error:` line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlir_ansor.transform_scripts.merge import LibraryMergeError, merge_libraries


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m mlir_ansor.merge_libraries", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("libraries", nargs="+", type=Path, metavar="LIB",
                   help="tuned_library.mlir files of tuning runs")
    p.add_argument("-o", "--output", type=Path, required=True, help="merged library to write")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    texts = []
    for lib in args.libraries:
        try:
            texts.append(lib.read_text())
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: cannot read {lib}: {getattr(e, 'strerror', None) or e}",
                  file=sys.stderr)
            return 2
    try:
        result = merge_libraries(texts, [str(p) for p in args.libraries])
    except LibraryMergeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        args.output.write_text(result.text)
    except OSError as e:
        print(f"error: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    for note in result.notes:
        print(f"note: {note}")
    print(f"wrote {args.output} ({len(args.libraries)} libraries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
