"""The package version, in a module of its own so that any stage can name it without importing
the package's public API (tinytrain/__init__.py)."""

__version__ = "0.1.0"
