"""The package version, kept in one place so the CLI and packaging agree."""

__version__ = "0.1.0"
