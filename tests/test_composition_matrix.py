"""The composition matrix of the docs (docs/composition.md), kept true by this test.

The integrator table is generated from the registry (`s2jax._integrators.REGISTRY`) and must
appear in the page verbatim (`python tests/test_composition_matrix.py` prints it); every cell of
the capability matrix that says "tested" names a test that exists.
"""

import ast
import pathlib
import re

import s2jax as s2
from s2jax._integrators import REGISTRY

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "composition.md"

_KINDS = {
    s2.LagrangianSystem: "(2.2) Lagrangian",
    s2.GeneralLagrangianSystem: "general Lagrangian",
    s2.HamiltonianSystem: "HamiltonianSystem",
    s2.AbstractSystem: "any system",
}


def _label(integrator) -> str:
    inner = getattr(integrator, "integrator", None)
    if inner is None:
        return f"`{type(integrator).__name__}`"
    if isinstance(integrator, s2.Substeps):
        return f"`Substeps({type(inner).__name__}(), {integrator.count})`"
    return f"`Composition({type(inner).__name__}(), order={integrator.order}, method=\"{integrator.method}\")`"


def integrator_table() -> str:
    """One row per registered integrator: what it integrates and what it declares."""
    rows = [
        "| integrator | integrates | order | symmetric (`ReversibleAdjoint`) | ω-dependent forces | needs diagonal M |",
        "|---|---|---|---|---|---|",
    ]
    for integrator in REGISTRY:
        yes = {True: "yes", False: "no"}
        rows.append(
            f"| {_label(integrator)} | {_KINDS[integrator.system_type]} | {integrator.order} | "
            f"{yes[integrator.is_symmetric]} | {yes[integrator.velocity_dependent_forces]} | "
            f"{yes[integrator.requires_diagonal_inertia]} |"
        )
    return "\n".join(rows)


def _test_names() -> set[str]:
    names = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.add(f"{path.stem}::{node.name}")
    return names


def test_the_page_shows_the_registry():
    assert integrator_table() in PAGE.read_text(), "rewrite it with `python tests/test_composition_matrix.py`"


def test_every_tested_cell_names_an_existing_test():
    cited = re.findall(r"`(test_\w+::test_\w+)`", PAGE.read_text())
    assert len(cited) >= 10
    missing = sorted(set(cited) - _test_names())
    assert not missing, missing


def write_integrator_table() -> None:
    """Put `integrator_table()` in place of the page's table (the lines from its header row on)."""
    text = PAGE.read_text()
    start = text.index("| integrator | integrates |")
    end = text.find("\n\n", start)
    PAGE.write_text(text[:start] + integrator_table() + (text[end:] if end >= 0 else "\n"))


if __name__ == "__main__":
    write_integrator_table()
    print(f"wrote the integrator table of {PAGE}")
