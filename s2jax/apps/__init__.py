"""Applications built on the public API of s2jax, as a user would write them.

- `reproduce`: the six examples of Lee–Leok–McClamroch 2009 (002) §3.5, with tables beside
  the paper's, its figures and the trajectories;
- `cli`: the command line, `python -m s2jax`.
"""

from . import cli as cli, reproduce as reproduce
