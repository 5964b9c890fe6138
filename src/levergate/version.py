"""The package's version, as pyproject.toml states it (a test pins the two together): its own
module so that any module can import it without importing the whole package first."""

__version__ = "0.1.0"
