"""User-facing errors. The CLI turns each into exit code 2 and one paragraph, no traceback."""


class TinyTrainError(Exception):
    """Base class: the message is written for the user, not for a debugger."""


class ModelError(TinyTrainError):
    """The model file cannot be read or uses something tinytrain does not support."""


class CompileError(TinyTrainError):
    """An internal consistency check failed while compiling."""


class DataError(TinyTrainError):
    """A data file does not match the model."""


class BuildError(TinyTrainError):
    """The C toolchain failed or the program does not fit the board."""


class FlashOverflow(BuildError):
    """The linker's verdict: the program does not fit the flash the checkpoint slots leave."""


class OptionError(TinyTrainError):
    """A command-line option has a value tinytrain cannot use."""


QUOTED = 8  # entries of a list an error message shows: a corrupt file's list must fit a screen


def quote_list(values: object, limit: int = QUOTED) -> str:
    """A list for an error message: whole when short, else its start and its length."""
    items = list(values)  # type: ignore[call-overload]
    if len(items) <= limit:
        return str(items)
    return "[" + ", ".join(map(str, items[:limit])) + f", ... ({len(items)} entries)]"
