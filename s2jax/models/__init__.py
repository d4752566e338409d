"""Ready-made models from the papers, one module each.

Every model module has `lagrangian(q, qdot, params)`, `paper_params()` and `paper_state()`.
"""

from . import double_spherical_pendulum as double_spherical_pendulum
