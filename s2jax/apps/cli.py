"""Command-line entry point.

python -m s2jax reproduce [example …|all] [--out DIR] [--horizon-scale X]
python -m s2jax double-pendulum [--out DIR]      (= reproduce 1)
python -m s2jax control [example …|all] [--out DIR]   (trajectory optimisation, 1 … 3)

Compiled programs are kept in JAX's persistent compilation cache (`s2jax.default_cache_dir()`,
`$S2JAX_CACHE_DIR` to move it), so a second run compiles little, and s2jax's own programs are kept
traced too (`exported/` in that folder, s2jax/_exported.py), so it traces little; `--no-cache`
turns both off.
"""

import argparse
import contextlib
import importlib.util
import pathlib
import sys

import jax

from .. import AdaptiveRungeKutta45, enable_compilation_cache
from .._exported import exported_programs
from . import control_examples
from .reproduce import EXAMPLES, reproduce


def _examples(words, examples=EXAMPLES):
    if not words or words == ["all"]:
        return sorted(examples)
    numbers = []
    for word in words:
        if not word.isdigit() or int(word) not in examples:
            raise argparse.ArgumentTypeError(
                f"unknown example {word!r}: choose from {sorted(examples)} or 'all'"
            )
        numbers.append(int(word))
    return numbers


def _missing_extras(command, numbers) -> str | None:
    """What `command` needs of the optional dependencies and this Python lacks, with the pip
    command that installs it; None if nothing is missing. Every command writes figures
    (matplotlib, Pillow: the `plot` extra); the examples with an RK45 baseline need diffrax
    (the `baselines` extra)."""
    needs = {"matplotlib": "plot", "PIL": "plot"}
    runs = [run for number in numbers for run in EXAMPLES[number].runs] if command == "reproduce" else []
    if any(isinstance(run.integrator, AdaptiveRungeKutta45) for run in runs):
        needs["diffrax"] = "baselines"
    missing = [module for module in needs if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    names = " and ".join("Pillow" if module == "PIL" else module for module in missing)
    extras = ",".join(dict.fromkeys(needs[module] for module in missing))
    return f"needs {names}: pip install 's2jax[{extras}]'"


def main(argv=None) -> int:
    """Parse `argv` (default: `sys.argv[1:]`) and run the command; return the exit status."""
    # The paper's examples run in float64; set here, not on import, so that importing the
    # apps leaves JAX's configuration alone.
    jax.config.update("jax_enable_x64", True)
    parser = argparse.ArgumentParser(
        prog="python -m s2jax",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--no-cache", action="store_true", help="do not use the persistent compilation cache")
    rp = commands.add_parser(
        "reproduce",
        parents=[common],
        help="002 §3.5 Examples 1–6: tables beside the paper's, Figs. 3.1–3.7, trajectories",
    )
    rp.add_argument("examples", nargs="*", metavar="example", help="1 … 6 or 'all' (default)")
    rp.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("out"), help="folder for figures, .npz"
    )
    rp.add_argument(
        "--horizon-scale",
        type=float,
        default=1.0,
        help="run this fraction of each horizon (for tests; 1 = the paper's)",
    )
    dp = commands.add_parser(
        "double-pendulum", parents=[common], help="002 Example 1 against RK45 (= reproduce 1)"
    )
    dp.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("out"), help="folder for figures"
    )
    cp = commands.add_parser(
        "control", parents=[common], help="trajectory optimisation examples 1–3 by iLQR, with figures"
    )
    cp.add_argument("examples", nargs="*", metavar="example", help="1 … 3 or 'all' (default)")
    cp.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out"), help="folder for figures")
    args = parser.parse_args(argv)
    if args.command in ("reproduce", "control"):
        try:
            numbers = _examples(args.examples, EXAMPLES if args.command == "reproduce" else control_examples.EXAMPLES)
        except argparse.ArgumentTypeError as error:
            parser.error(str(error))
        if args.command == "reproduce" and not args.horizon_scale > 0:
            parser.error(f"--horizon-scale must be positive; got {args.horizon_scale}")
    else:
        numbers = [1]  # double-pendulum
    command = "reproduce" if args.command == "double-pendulum" else args.command
    missing = _missing_extras(command, numbers)
    if missing is not None:
        print(f"python -m s2jax {args.command} {missing}", file=sys.stderr)
        return 1
    programs = contextlib.nullcontext()
    if not args.no_cache:
        folder = enable_compilation_cache()
        # s2jax's own programs, stored with their tracing (`_exported`): a second run skips it
        programs = exported_programs(folder / "exported", tag=f"python -m s2jax {args.command}")
    import matplotlib

    # Figures are written to files, never shown: no display needed.
    matplotlib.use("Agg")
    try:
        with programs:
            if args.command == "reproduce":
                reproduce(numbers, args.out, args.horizon_scale)
            elif args.command == "control":
                control_examples.run(numbers, args.out)
            else:
                reproduce([1], args.out)
    except OSError as error:
        # A file-system problem (an --out that is a file, no permission, a full disk) is the
        # user's to fix: one line, not a traceback. Files already written stay whole.
        where = f" {error.filename}" if error.filename else f" {args.out}"
        print(f"python -m s2jax: cannot write{where}: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0
