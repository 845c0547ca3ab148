"""What became of one measured candidate (TVM's MeasureErrorNo, as our own enum).

Records store the value string; records written before the enum (schema 1) used
"timeout" for both compile and run timeouts and "runtime_error" for run failures:
`Status.parse` maps them."""
from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    OK = "ok"
    NOT_APPLIED = "not_applied"  # compiled, but IREE did not take our strategy
    COMPILE_ERROR = "compile_error"
    COMPILE_TIMEOUT = "compile_timeout"
    RUN_ERROR = "run_error"
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"
    OUT_OF_MEMORY = "out_of_memory"  # compile or run hit the memory cap
    INTERNAL_ERROR = "internal_error"  # a bug in our own code, never the candidate's fault

    def __str__(self) -> str:
        return self.value

    @staticmethod
    def parse(value: str, error: str = "") -> "Status":
        """The status of a record line, schema 1 names included."""
        if value == "timeout":
            return Status.COMPILE_TIMEOUT if error.startswith("compile") else Status.RUN_TIMEOUT
        if value == "runtime_error":
            return Status.RUN_ERROR
        try:
            return Status(value)
        except ValueError:
            raise ValueError(f"unknown status {value!r}") from None


# Substrings by which a capped process says it ran out of memory (LLVM, libstdc++, IREE's
# runtime, glibc, the loader: iree-compile maps ~200 MB of libraries at start).
OOM_MARKERS = ("out of memory", "bad_alloc", "Cannot allocate memory", "RESOURCE_EXHAUSTED",
               "failed to map segment")


def is_out_of_memory(stderr: str) -> bool:
    return any(m in stderr for m in OOM_MARKERS)


# Internal errors seen in this process: the test suite fails on any it did not inject.
INTERNAL_ERRORS: list[str] = []


def internal_error(where: str, exc: BaseException) -> str:
    """Note a bug of ours caught so that the search goes on; returns the record's message."""
    import traceback

    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}" if frame else ""
    msg = f"{where}: {type(exc).__name__}: {exc}{at}"
    INTERNAL_ERRORS.append(msg)
    return msg
