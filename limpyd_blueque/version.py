"""The version of limpyd-blueque, in one place: setup.py reads it without importing the
package, and `limpyd_blueque.__version__` shows it."""

__version__ = "0.2.0"
