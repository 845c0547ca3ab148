"""Errors the tool reports to the user: each names the problem in one line, and its class
gives the CLI's exit code (docs/cli.md has the table)."""
import sys


class AnsorError(Exception):
    """Base class: anything the CLI turns into a one-line error message."""

    exit_code = 1


class UsageError(AnsorError):
    """A bad option value (negative trials, unknown objective, missing reuse file...)."""

    exit_code = 2


class FrontendError(AnsorError):
    """The PyTorch model could not be loaded or imported."""

    exit_code = 3


class OutputError(AnsorError):
    """The output folder cannot be written (permissions, full disk)."""

    exit_code = 4


class ToolchainError(AnsorError):
    """An IREE tool this run needs is missing."""

    exit_code = 5


class UnsupportedDispatch(AnsorError):
    """A dispatch the tuner cannot take (left to IREE's default codegen)."""


class CompileError(AnsorError):
    """iree-compile failed on a module we produced."""

    exit_code = 6


class DefaultModuleError(CompileError):
    """IREE's default build of a model failed or does not match torch: no strategy of ours
    is involved, so there is nothing to drop."""


class StrategiesNotApplied(CompileError):
    """The model compiled, but some exported strategies matched no dispatch of it."""

    def __init__(self, missing: list[str]):
        super().__init__(f"tuned strategies not applied to the model: {sorted(missing)}")
        self.missing = sorted(missing)


class StrategiesFailed(CompileError):
    """The model failed to compile in dispatches that took these strategies of ours (read
    from IREE's errors and its configuration dump): they can be dropped without a search
    for the culprit."""

    def __init__(self, message: str, strategies: list[str]):
        super().__init__(f"{message} (in the dispatches of {sorted(strategies)})")
        self.strategies = sorted(strategies)


# What an interrupted run (SIGINT/SIGTERM) exits with: 128 + SIGINT, as shells do.
INTERRUPTED_EXIT = 130


def print_error(e: "AnsorError") -> int:
    """What every command line of the package does with an AnsorError: the one-line
    message on stderr; returns the error's exit code."""
    print(f"error: {e}", file=sys.stderr)
    return e.exit_code
