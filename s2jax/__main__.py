"""`python -m s2jax`: the command line of `s2jax.apps.cli`."""

import sys

from .apps.cli import main

if __name__ == "__main__":
    sys.exit(main())
