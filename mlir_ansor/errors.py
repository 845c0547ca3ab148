"""Errors the tool reports to the user: each names the problem in one line."""


class AnsorError(Exception):
    """Base class: anything the CLI turns into a one-line error message."""


class FrontendError(AnsorError):
    """The PyTorch model could not be loaded or imported."""


class UnsupportedDispatch(AnsorError):
    """A dispatch the tuner cannot take (left to IREE's default codegen)."""


class CompileError(AnsorError):
    """iree-compile failed on a module we produced."""
