# Type stubs for the part of redis-limpyd 2.1 that limpyd-blueque uses (redis-limpyd ships
# no types). Checked against redis-limpyd 2.1.2; used by mypy only (mypy.ini: mypy_path).
# Private names appear here only where limpyd_blueque/compat.py uses them.

EXACT_VERSION: str
VERSION: tuple[int, ...]
