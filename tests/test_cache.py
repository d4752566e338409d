"""`s2jax.enable_compilation_cache`: a program compiled in one process is loaded in the next."""

import json
import os
import subprocess
import sys

import pytest

import s2jax as s2

_RUN = """
import json, jax
jax.config.update("jax_enable_x64", True)
import pytest

import s2jax as s2
from s2jax.models import double_spherical_pendulum as model
hits = []
jax.monitoring.register_event_listener(lambda event, **kw: hits.append(event))
folder = s2.enable_compilation_cache(min_compile_time=0.0)
s2.simulate(model.lagrangian, *model.paper_state(), model.paper_params(), dt=0.01, num_steps=5)
print(json.dumps({"folder": str(folder), "misses": hits.count("/jax/compilation_cache/cache_misses")}))
"""


def _run(environment):
    done = subprocess.run([sys.executable, "-c", _RUN], env=environment, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    environment = {**os.environ, "S2JAX_CACHE_DIR": str(tmp_path / "cache")}
    environment.pop("JAX_COMPILATION_CACHE_DIR", None)
    first = _run(environment)
    assert first["folder"] == str(tmp_path / "cache") and first["misses"] >= 1
    stored = sorted(os.listdir(tmp_path / "cache"))
    assert any("integrate" in name for name in stored), stored
    second = _run(environment)
    assert second["misses"] == 0  # every program loaded, none compiled
    assert sorted(os.listdir(tmp_path / "cache")) == stored  # nothing new to store


def test_default_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("S2JAX_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert s2.default_cache_dir() == tmp_path / "s2jax" / "jax"
    monkeypatch.setenv("S2JAX_CACHE_DIR", str(tmp_path / "here"))
    assert s2.default_cache_dir() == tmp_path / "here"
