"""The package's architecture, as the code states it: every subpackage has its place in
the layers of `.importlinter` (which `lint-imports` checks in CI), the parts of the worker
never import `Worker`, and the documented paths of moved modules still import."""

import ast
import configparser
import importlib
from pathlib import Path

import pytest

import limpyd_blueque

PACKAGE = Path(limpyd_blueque.__file__).parent
ROOT = PACKAGE.parent


def contracts():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config


def layer_names():
    layers = contracts()["importlinter:contract:layers"]["layers"]
    return {name.strip() for line in layers.split("\n") for name in line.split("|")
            if name.strip()}


def imported_modules(path):
    """The modules of the package a file imports, at any depth of its code (inside
    functions and under TYPE_CHECKING too), as dotted names."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module[:-9]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.update(f"{name}.{alias.name}" for alias in node.names)
            found.add(name)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("limpyd_blueque")}


def test_every_subpackage_and_module_has_its_place_in_the_layers():
    config = contracts()["importlinter:contract:layers"]
    assert config["exhaustive"].strip() == "true"
    ignored = set(config["exhaustive_ignores"].split())
    children = {path.stem for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    children |= {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert children - ignored == layer_names()
    for subpackage in ("protocol", "connection", "models", "upkeep", "worker",
                       "operations", "cli"):
        assert subpackage in layer_names()


def test_the_parts_of_the_worker_never_import_worker():
    for path in (PACKAGE / "worker").glob("*.py"):
        if path.name in ("worker.py", "__init__.py"):
            continue
        imports = imported_modules(path)
        assert "limpyd_blueque.worker.worker" not in imports, path.name
        assert "limpyd_blueque.worker.worker.Worker" not in imports, path.name


@pytest.mark.parametrize("alias", sorted(
    line.strip() for line in contracts()["importlinter:contract:layers"]
    ["exhaustive_ignores"].split()))
def test_a_documented_path_kept_for_users_reexports_the_module_that_moved(alias):
    module = importlib.import_module(f"limpyd_blueque.{alias}")
    assert module.__all__
    for name in module.__all__:
        value = getattr(module, name)
        home = getattr(value, "__module__", None)
        if home is not None and home.startswith("limpyd_blueque"):
            assert home != module.__name__  # defined elsewhere: re-exported only
