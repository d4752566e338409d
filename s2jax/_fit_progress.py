"""`fit(progress=True)`: what the fit is doing, on stderr, from the host loop that runs it.

Every iteration of `fit` returns to Python (Levenberg–Marquardt and the Gauss–Newton refinement
call one compiled program per iterate; an optax optimiser, one per step), so progress needs no
callback inside a compiled program, and turning it on or off compiles nothing again.
"""

import sys
import time

# Within a stage, a line at most this often (seconds); every stage's first and last iterate
# are always reported.
INTERVAL_S = 1.0


class FitProgress:
    """Reports stages and their iterates; `enabled=False` makes every call a no-op."""

    def __init__(self, enabled: bool, num_stages: int):
        self.enabled = enabled
        self.num_stages = num_stages
        self.start = time.perf_counter()
        self.last_line = -float("inf")
        self.stage_name = ""
        self.count = 0
        self.count_reported = 0
        self.value = float("nan")

    def _print(self, text: str):
        print(f"s2jax.fit: {text} ({time.perf_counter() - self.start:.1f} s)", file=sys.stderr, flush=True)
        self.last_line = time.perf_counter()

    def stage(self, name: str):
        """A new stage begins; the first iterate of a fit also pays for compiling."""
        self.flush()
        self.stage_name, self.count, self.count_reported = name, 0, 0
        if self.enabled:
            self._print(f"{name}: starting")

    def __call__(self, value: float):
        """The loss at a new iterate of the current stage."""
        self.count += 1
        self.value = value
        if self.enabled and time.perf_counter() - self.last_line >= INTERVAL_S:
            self._print(f"{self.stage_name}: iterate {self.count}, loss {value:.6g}")
            self.count_reported = self.count

    def flush(self):
        """Report the stage's last iterate, if the last line did not."""
        if self.enabled and self.count and self.count_reported != self.count:
            self._print(f"{self.stage_name}: iterate {self.count}, loss {self.value:.6g}")
            self.count_reported = self.count

    def done(self, converged: bool):
        self.flush()
        if self.enabled:
            self._print(f"done, loss {self.value:.6g}, {'converged' if converged else 'not converged'}")
