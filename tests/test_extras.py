"""Optional dependencies and import side effects: `import s2jax` works without the `baselines`
(diffrax) and `plot` (matplotlib, Pillow) extras, a feature whose extra is missing says which to
install, and importing s2jax leaves equinox's classes alone.

Each check runs in a fresh interpreter in which the hidden packages cannot be imported
(`sys.modules[name] = None`), as if they were not installed.
"""

import subprocess
import sys
import textwrap

_PRELUDE = """
import sys
for name in {hide!r}:
    sys.modules[name] = None
import jax
jax.config.update("jax_enable_x64", True)
"""


def _run(code: str, hide=()) -> str:
    """Run `code` in a fresh Python with the packages `hide` made unimportable; its stdout."""
    script = _PRELUDE.format(hide=tuple(hide)) + textwrap.dedent(code)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_import_needs_no_extra():
    out = _run(
        """
        import s2jax, s2jax.plot, s2jax.apps.cli
        s2jax.AdaptiveRungeKutta45(rtol=1e-6)  # constructing it needs no diffrax
        hidden = ("diffrax", "matplotlib", "PIL")
        print([m for m, v in sys.modules.items() if v is not None and m.split(".")[0] in hidden])
        """,
        hide=("diffrax", "matplotlib", "PIL"),
    )
    assert out.strip() == "[]"


def test_adaptive_rk45_without_diffrax_names_the_baselines_extra():
    out = _run(
        """
        import s2jax as s2
        model = s2.models.double_spherical_pendulum
        q0, omega0 = model.paper_state()
        try:
            s2.simulate(model.lagrangian, q0, omega0, model.paper_params(), dt=0.01, num_steps=4,
                        integrator=s2.AdaptiveRungeKutta45())
        except ImportError as error:
            print(error)
        """,
        hide=("diffrax",),
    )
    assert out.strip() == "AdaptiveRungeKutta45 needs diffrax: pip install 's2jax[baselines]'"


def test_plot_without_matplotlib_names_the_plot_extra():
    out = _run(
        """
        import numpy as np
        import s2jax
        q = np.tile([0.0, 0.0, 1.0], (3, 1, 1))
        calls = {
            "sphere_paths": lambda: s2jax.plot.sphere_paths(q),
            "animate": lambda: s2jax.plot.animate(q, "never.gif"),
            "plot_energy_and_unit_length": lambda: s2jax.plot.plot_energy_and_unit_length({}, "never.png", ""),
        }
        for name, call in calls.items():
            try:
                call()
            except ImportError as error:
                print(error)
        """,
        hide=("matplotlib",),
    )
    assert out.splitlines() == [
        f"s2jax.plot.{name} needs matplotlib: pip install 's2jax[plot]'"
        for name in ("sphere_paths", "animate", "plot_energy_and_unit_length")
    ]


def test_animate_without_pillow_names_the_plot_extra():
    out = _run(
        """
        import numpy as np
        import s2jax
        try:
            s2jax.plot.animate(np.tile([0.0, 0.0, 1.0], (3, 1, 1)), "never.gif")
        except ImportError as error:
            print(error)
        """,
        hide=("PIL",),
    )
    assert out.strip() == "s2jax.plot.animate needs Pillow: pip install 's2jax[plot]'"


def test_command_line_without_extras_says_what_to_install(tmp_path):
    out = _run(
        f"""
        import contextlib, io
        from s2jax.apps import cli
        for argv in (["double-pendulum"], ["reproduce", "2"], ["control", "1"]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                status = cli.main([*argv, "--out", {str(tmp_path)!r}])
            print(status, err.getvalue().strip())
        """,
        hide=("diffrax", "matplotlib", "PIL"),
    )
    assert out.splitlines() == [
        "1 python -m s2jax double-pendulum needs matplotlib and Pillow and diffrax: "
        "pip install 's2jax[plot,baselines]'",
        "1 python -m s2jax reproduce needs matplotlib and Pillow: pip install 's2jax[plot]'",
        "1 python -m s2jax control needs matplotlib and Pillow: pip install 's2jax[plot]'",
    ]
    assert list(tmp_path.iterdir()) == []


_REPRS = """
import equinox as eqx

class Colour(eqx.Enumeration):
    red = "a colour"

def reprs():
    return eqx.Module.__repr__, type(Colour.red).__repr__, repr(Colour.red)

before = reprs()
import s2jax
after = reprs()
print([a is b or a == b for a, b in zip(before, after)])
"""


def test_import_leaves_equinox_module_repr_alone():
    module, _, _ = eval(_run(_REPRS))
    assert module


def test_import_leaves_equinox_enumeration_item_repr_alone():
    # Every eqx.Enumeration (optimistix's, a user's) shares one item class: s2jax names its RESULTS
    # codes where it prints them itself (`repr(Solution)`, `Solution.summary()`) and leaves that
    # class's `__repr__`, and so the repr of every item, as equinox made them.
    _, item_repr, item_text = eval(_run(_REPRS))
    assert item_repr and item_text
