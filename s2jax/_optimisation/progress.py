"""A heartbeat on stderr while a long compiled call runs: what it is doing (tracing, compiling,
running) and for how long, from a daemon thread and `jax.monitoring` events, so that the compiled
program holds no host callback (`control.solve(progress=True)`, `fit(progress=True)`).
"""

import sys
import threading
import time

import jax

# The heartbeat rewrites its line at most this often (seconds).
HEARTBEAT_SECONDS = 1.0
# jax.monitoring events: the end of tracing a top-level jitted function (lowering and XLA's
# compilation follow), the end of XLA's compilation (the program then runs, in the same call on
# CPU), and a program loaded from the persistent compilation cache.
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_COMPILED_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_heartbeats = {}  # thread id -> the `Heartbeat` of that thread's call in progress
_listening = False


class Heartbeat:
    """A status line on stderr, "<name>: compiling … 12 s", rewritten by a daemon
    thread every `HEARTBEAT_SECONDS` (none for a call that returns sooner) and cleared on exit.

    The calling thread names the phases (`phase`); "tracing" turns into "compiling" when JAX
    reports (`jax.monitoring`) that it has traced the function `program` (or one of a tuple of
    them), so the line shows where a first call spends its time, and "compiling" into `running`
    when XLA has compiled it. `durations` holds the seconds spent in each phase.
    """

    def __init__(self, name: str, program: str | tuple[str, ...], running: str = "solving"):
        self.name, self.running = name, running
        self.programs = (program,) if isinstance(program, str) else tuple(program)
        self.owner = threading.get_ident()
        self.durations: dict[str, float] = {}
        self.loaded = False  # the program came from JAX's persistent compilation cache
        self._label = "preparing"
        self._traced = False  # whether the current "tracing" phase saw its program traced
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"{name} progress", daemon=True)
        self._width = 0

    def __enter__(self) -> "Heartbeat":
        _listen()
        self._start = self._since = time.perf_counter()
        _heartbeats[self.owner] = self
        self._thread.start()
        return self

    def __exit__(self, *exception) -> None:
        del _heartbeats[self.owner]
        self._stop.set()
        self._thread.join()
        self.phase(None)
        if self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()

    def phase(self, label: str | None) -> None:
        """End the current phase and start `label`'s (None: the last one ends). A "tracing" phase
        in which no program was traced was a compiled program running (on CPU a call may run its
        program before it returns): its time counts as `running`'s."""
        with self._lock:
            now = time.perf_counter()
            ended = self.running if self._label == "tracing" and not self._traced else self._label
            self.durations[ended] = self.durations.get(ended, 0.0) + now - self._since
            self._label, self._since, self._traced = label, now, False

    def saw(self, event: str, fun_name: str | None) -> None:
        """A `jax.monitoring` event of the calling thread (`fun_name`: the function traced)."""
        if event == _TRACE_EVENT and self._label == "tracing" and fun_name in (None, *self.programs):
            self._traced = True
            self.phase("compiling")
        elif event == _CACHE_HIT_EVENT and self._label == "compiling":
            self.loaded = True
        elif event == _COMPILED_EVENT and self._label == "compiling":
            self.phase(self.running)  # XLA's compilation of the program ended: it runs next

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with self._lock:
                text = f"{self.name}: {self._label} … {time.perf_counter() - self._start:.0f} s"
            sys.stderr.write("\r" + text.ljust(self._width))
            sys.stderr.flush()
            self._width = max(self._width, len(text))


def _on_event(event: str, *_, fun_name: str | None = None, **__) -> None:
    """The `jax.monitoring` listener: forwards an event to the heartbeat of the thread it happens in."""
    heartbeat = _heartbeats.get(threading.get_ident())
    if heartbeat is not None:
        heartbeat.saw(event, fun_name)


def _listen() -> None:
    """Register `_on_event` with `jax.monitoring`, once per process (it is idle between calls)."""
    global _listening
    if not _listening:
        jax.monitoring.register_event_listener(_on_event)
        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _listening = True
