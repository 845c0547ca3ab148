"""Errors the tool reports to the user: each names the problem in one line."""


class AnsorError(Exception):
    """Base class: anything the CLI turns into a one-line error message."""


class FrontendError(AnsorError):
    """The PyTorch model could not be loaded or imported."""


class UnsupportedDispatch(AnsorError):
    """A dispatch the tuner cannot take (left to IREE's default codegen)."""


class CompileError(AnsorError):
    """iree-compile failed on a module we produced."""


class StrategiesNotApplied(CompileError):
    """The model compiled, but some exported strategies matched no dispatch of it."""

    def __init__(self, missing: list[str]):
        super().__init__(f"tuned strategies not applied to the model: {sorted(missing)}")
        self.missing = sorted(missing)
