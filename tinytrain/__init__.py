"""tinytrain: compile a trained model into a static C program that trains on a microcontroller."""

from tinytrain.version import __version__

__all__ = ["OnlineModel", "StepResult", "__version__", "connect"]
_ONLINE = ("OnlineModel", "StepResult", "connect")


def __getattr__(name: str) -> object:
    """The Python API (tinytrain.device.online) is imported on first use: the CLI does not need
    it."""
    if name in _ONLINE:
        from tinytrain.device import online

        return getattr(online, name)
    raise AttributeError(f"module 'tinytrain' has no attribute {name!r}")
