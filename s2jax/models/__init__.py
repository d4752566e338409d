"""Ready-made models from the papers, one module each.

Every model module has `lagrangian(q, qdot, params)`, `paper_params()` and `paper_state()`.
"""

from . import (
    chain_pendulum as chain_pendulum,
    coupled_spherical_pendula as coupled_spherical_pendula,
    double_spherical_pendulum as double_spherical_pendulum,
    elastic_rod as elastic_rod,
    lennard_jones_on_sphere as lennard_jones_on_sphere,
    magnetic_dipoles as magnetic_dipoles,
    n_body_on_sphere as n_body_on_sphere,
    spherical_pendulum as spherical_pendulum,
)
