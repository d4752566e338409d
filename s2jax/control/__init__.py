"""Trajectory optimisation through the forced variational integrator (001 (10); 002 (3.10)–(3.13)).

Define a `Problem` (dynamics, costs, bounds, terminal constraint) and call `solve` with a
solver: `SingleShooting`, `MultipleShooting` or `ILQR` (`solve_many` for many initial states or
guesses in one call, `multi_start` to keep the best of several guesses); `receding_horizon` closes the loop
(model predictive control, also by real-time iterations), `RealTimeController` runs those iterations
for a plant outside s2jax, and `feedback_policy` gives a solution's LQR tracking law for `simulate`.
"""

from ._feedback import FeedbackPolicy as FeedbackPolicy, feedback_policy as feedback_policy
from ._ilqr import ILQR as ILQR
from ._many import multi_start as multi_start, solve_many as solve_many
from ._mpc import RecedingHorizonSolution as RecedingHorizonSolution, receding_horizon as receding_horizon
from ._problem import ControlSolution as ControlSolution, Problem as Problem
from ._real_time import RealTimeController as RealTimeController, RealTimeState as RealTimeState
from ._shooting import MultipleShooting as MultipleShooting, SingleShooting as SingleShooting
from ._solve import solve as solve
from ._solver import AbstractControlSolver as AbstractControlSolver
