"""Ready-made models from the papers, one module each.

Every model module has `lagrangian(q, qdot, params)`, `paper_params()` and `paper_state()`;
those whose M has a structure for every params (chain, diagonal) also `system(force=None)`,
which declares it. See docs/api/models.md.
"""

from . import (
    chain_pendulum as chain_pendulum,
    coupled_spherical_pendula as coupled_spherical_pendula,
    double_spherical_pendulum as double_spherical_pendulum,
    elastic_rod as elastic_rod,
    ellipsoid_pendulum as ellipsoid_pendulum,
    lennard_jones_on_sphere as lennard_jones_on_sphere,
    magnetic_dipoles as magnetic_dipoles,
    monopole_particle as monopole_particle,
    n_body_on_sphere as n_body_on_sphere,
    rotating_spherical_pendulum as rotating_spherical_pendulum,
    spherical_pendulum as spherical_pendulum,
)
