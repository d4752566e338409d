"""The benchmarks use s2jax's public API only (docs/layout.md): no `s2jax._…` module, no private
name of a public one, and not the apps (`s2jax.apps`), which are themselves built on that API.

A static check: every benchmarks/*.py is parsed with `ast`, never imported (importing one sets
JAX options for the whole process)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _private(name: str) -> bool:
    """Whether the dotted `name` is s2jax's but outside its public API."""
    parts = name.split(".")
    if parts[0] != "s2jax" or len(parts) == 1:
        return False
    private = any(part.startswith("_") and not (part.startswith("__") and part.endswith("__")) for part in parts[1:])
    return private or parts[1] == "apps"


def _is_module(name: str) -> bool:
    """Whether the dotted `name` is a module or package of this checkout's s2jax."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _dotted(node: ast.expr, modules: dict[str, str]) -> str | None:
    """`s2.models._x` as "s2jax.models._x" when `s2` names an s2jax module here, else None."""
    attributes = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in modules:
        return None
    return ".".join([modules[node.id], *reversed(attributes)])


def violations(source: str) -> list[tuple[int, str]]:
    """(line, what) for each use of s2jax outside its public API in `source`: imports (`import`,
    `from … import`, `importlib.import_module` / `__import__` of a literal name) and attribute
    access to a module's private name through a name bound to an s2jax module (`s2._x`,
    `s2.models._x`; not an object's, such as `s2.RESULTS.successful._value`)."""
    tree = ast.parse(source)
    # Names bound to s2jax modules by imports anywhere in the file: local name → module.
    modules = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, f"import {alias.name}"))
                if alias.name.split(".")[0] == "s2jax":
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules["s2jax"] = "s2jax"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _private(node.module):
                found.append((node.lineno, f"from {node.module} import …"))
            elif node.module.split(".")[0] == "s2jax":
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    if alias.name != "*" and _private(name):
                        found.append((node.lineno, f"from {node.module} import {alias.name}"))
                    # Possibly a module (`from s2jax import models`): attribute access is checked.
                    modules[alias.asname or alias.name] = name
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            name = node.args[0].value
            if called in ("import_module", "__import__") and isinstance(name, str) and _private(name):
                found.append((node.lineno, f"{called}({name!r})"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = _dotted(node, modules)
            # An attribute of a public module (`s2._x.y` is found once, at `s2._x`).
            parent = None if name is None else name.rsplit(".", 1)[0]
            if name is not None and _private(name) and _is_module(parent) and not _private(parent):
                found.append((node.lineno, name))
    return sorted(set(found))


def _scripts():
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert scripts, f"no benchmarks found in {BENCHMARKS}"
    return scripts


@pytest.mark.parametrize("script", _scripts(), ids=lambda path: path.name)
def test_benchmark_uses_the_public_api_only(script):
    found = violations(script.read_text(encoding="utf-8"))
    where = "\n".join(f"benchmarks/{script.name}:{line}: {what}" for line, what in found)
    assert not found, f"benchmarks must use s2jax's public API only (docs/layout.md):\n{where}"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from s2jax._newton import newton_root", [(1, "from s2jax._newton import …")]),
        ("import s2jax._newton", [(1, "import s2jax._newton")]),
        ("x = 1\nfrom s2jax import _newton", [(2, "from s2jax import _newton")]),
        ("from s2jax.apps.reproduce import EXAMPLES", [(1, "from s2jax.apps.reproduce import …")]),
        ("from s2jax import apps", [(1, "from s2jax import apps")]),
        ("import s2jax.apps.reproduce as r", [(1, "import s2jax.apps.reproduce")]),
        ("from s2jax.models import _private", [(1, "from s2jax.models import _private")]),
        ("import importlib\nimportlib.import_module('s2jax._newton')", [(2, "import_module('s2jax._newton')")]),
        ("import s2jax as s2\ns2._newton.newton_root", [(2, "s2jax._newton")]),
        ("import s2jax\nf = s2jax.apps.reproduce", [(2, "s2jax.apps")]),
        ("from s2jax import models\nmodels._x", [(2, "s2jax.models._x")]),
        # The public API, and other packages' private modules, pass.
        ("import s2jax as s2\nfrom s2jax.models import chain_pendulum\ns2.simulate\ns2.__version__", []),
        ("from s2jax import RESULTS\nimport s2jax as s2\nRESULTS.successful._value\ns2.RESULTS._x", []),
        ("from s2jax import check_lagrangian_form\nfrom _common import jit\nimport jax._src", []),
    ],
)
def test_the_check_finds_private_uses(source, expected):
    assert violations(source) == expected
