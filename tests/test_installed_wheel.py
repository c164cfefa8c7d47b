"""The package as a user gets it: the sdist of this checkout, the wheel built from that sdist (not the editable
install), installed into a fresh virtualenv and run from a folder outside the checkout.

One virtualenv serves the module (built once, about 30 s): the sdist and the wheel hold every package file;
every registered env makes, resets and plays its demonstration; ``agentrl eval`` evaluates a model folder on a few
tasks of a fixed held-out set and writes only into the folder it is given; ``agentrl-env serve --openenv`` answers
a reset over HTTP on 127.0.0.1 and ``AgentRL/OpenEnv-v0`` plays it. Around each run nothing is written into the
installed package (its venv), the checkout or the working directory (the library finds no checkout).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT, free_port

pytestmark = pytest.mark.slow

#: Registered ids whose env plays a running server: made against ``agentrl-env serve`` below instead.
NEEDS_SERVER = ("AgentRL/OpenEnv-v0",)
#: Keyword arguments that keep an env's make fast (as tests/envs/test_env_contract.py's FUZZ_KWARGS).
FAST_KWARGS = {"AgentRL/Search-v0": {"split": "dev"}}


@dataclass
class Installed:
    venv: Path
    python: Path
    sdist: Path
    wheel: Path
    work: Path  # the working directory of every run: outside the checkout, must stay empty
    env: dict[str, str]  # the environment of every run: no PYTHONPATH into the checkout

    def run(self, args: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout,
                              **kwargs)


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` -> (size, mtime in ns); bytecode caches, .git and the checkout's own
    virtualenvs (.venv-vllm, .venv-verifiers: the engine tests' interpreters) aside."""
    out = {}
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".pytest_cache", ".git") and not d.startswith(".venv")]
        for name in files:
            stat = os.stat(os.path.join(top, name))
            out[os.path.relpath(os.path.join(top, name), folder)] = (stat.st_size, stat.st_mtime_ns)
    return out


def _tracked_files() -> list[str]:
    """The checkout's files as a clone has them (tracked, and new files git does not ignore)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                         check=True, timeout=60).stdout.decode()
    return sorted(p for p in out.split("\0") if p and (ROOT / p).is_file())


def _see_this_interpreters_packages(python: Path) -> None:
    """Let the venv of ``python`` import what this interpreter has installed (its site-packages added after the
    venv's own, so the wheel's agentrl comes first). ``venv --system-site-packages`` is not the same thing: run from
    inside a virtualenv (as CI's README commands do) it gives the base interpreter's packages, not this one's."""
    import site
    import sysconfig

    theirs = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()])
    lines = [f"import site; site.addsitedir({d!r})" for d in ours if Path(d).is_dir()]
    (Path(theirs) / "_agentrl_test_outer_site.pth").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """sdist from a copy of the checkout's files (so the build writes nothing into the checkout), the wheel from
    that sdist, installed with ``--no-deps`` into a virtualenv that sees this interpreter's packages (torch,
    transformers, openenv-core: the extras) but has agentrl only from the wheel."""
    base = tmp_path_factory.mktemp("wheel")
    source, dist, wheels, venv, work = (base / n for n in ("source", "dist", "wheels", "venv", "work"))
    for rel in _tracked_files():  # the top-level files (pyproject.toml, README.md, LICENSE) and the packages
        if "/" in rel and rel.split("/")[0] not in ("envs", "algos"):
            continue
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, source / rel)
    dist.mkdir()
    work.mkdir()
    subprocess.run([sys.executable, "-c", "import sys, setuptools.build_meta as b; b.build_sdist(sys.argv[1])",
                    str(dist)], cwd=source, check=True, capture_output=True, timeout=300)
    [sdist] = dist.glob("agentrl_gym-*.tar.gz")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(sdist)], cwd=base, check=True, timeout=300)
    [wheel] = wheels.glob("agentrl_gym-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    _see_this_interpreters_packages(python)
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AGENTRL_VLLM_PYTHON")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(venv, python, sdist, wheel, work, env)


@contextlib.contextmanager
def writes_nothing(installed: Installed) -> Iterator[None]:
    """Around a run: the checkout, the venv (the installed package) and the working directory are unchanged."""
    checkout_before, venv_before = _snapshot(ROOT), _snapshot(installed.venv)
    yield
    assert _snapshot(installed.work) == {}, "the working directory got files"
    assert _snapshot(installed.venv) == venv_before, "the installed package (or its venv) got files"
    changed = sorted(k for k, v in _snapshot(ROOT).items() if checkout_before.get(k) != v)
    assert not changed, f"the checkout got files: {changed[:10]}"


def test_the_sdist_and_the_wheel_hold_every_package_file(installed):
    """Every file of envs/ and algos/ (code, data, py.typed) is in the sdist and, under agentrl/, in the wheel,
    with both commands; the wheel holds nothing else (no tests, no benchmarks)."""
    package_files = [p for p in _tracked_files() if p.split("/")[0] in ("envs", "algos")]
    with tarfile.open(installed.sdist) as sdist:
        in_sdist = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert not set(package_files) - in_sdist, sorted(set(package_files) - in_sdist)[:20]
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = wheel.read(entry_points).decode()
    missing = sorted(f"agentrl/{p}" for p in package_files if f"agentrl/{p}" not in names)
    assert not missing, f"package files not in the wheel: {missing[:20]}"
    assert {n.split("/")[0] for n in names} - {"agentrl"} == {entry_points.split("/")[0]}
    assert "agentrl = agentrl.algos.cli:main" in scripts and "agentrl-env = agentrl.envs.cli:main" in scripts
    assert (installed.venv / "bin" / "agentrl").is_file() and (installed.venv / "bin" / "agentrl-env").is_file()


def test_the_wheels_metadata_is_valid_and_bounds_torch_to_the_one_ci_runs(installed):
    """The wheel's METADATA parses under `packaging`'s strict validation (the parser pip and twine use), carries
    the classifiers, any project URL is absolute, and its `[train]` extra accepts the torch CI installs and no
    other minor release (what tests/test_packaging.py checks of pyproject.toml, here of the built artefact)."""
    from packaging.metadata import Metadata
    from packaging.version import Version
    from test_packaging import HEAVY, ci_torch

    with zipfile.ZipFile(installed.wheel) as wheel:
        [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        meta = Metadata.from_email(wheel.read(name), validate=True)  # raises on an invalid field
    assert meta.name == "agentrl-gym" and meta.requires_python and "Typing :: Typed" in (meta.classifiers or [])
    assert meta.description and meta.description_content_type == "text/markdown"
    assert all(url.startswith("https://") for url in (meta.project_urls or {}).values()), meta.project_urls
    requires = meta.requires_dist or []
    train = {r.name: r.specifier for r in requires if r.marker and r.marker.evaluate({"extra": "train"})}
    assert set(HEAVY) <= set(train), sorted(train)
    torch = Version(ci_torch())
    assert train["torch"].contains(torch) and not train["torch"].contains(f"{torch.major}.{torch.minor + 1}.0")
    base = {r.name for r in requires if r.marker is None}
    assert "torch" not in base and "transformers" not in base  # a plain install is the envs only


ENVS_SCRIPT = """
import json, sys
import gymnasium as gym
import agentrl.envs
from agentrl.envs import ENVS

gym.register_envs(agentrl.envs)
skip, fast = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for env_id in ENVS:
    if env_id in skip:
        continue
    env = gym.make(env_id, **fast.get(env_id, {}))
    obs, info = env.reset(seed=0)
    demo = env.unwrapped.demo(dict(env.unwrapped.task))
    out[env_id] = {"module": sys.modules[type(env.unwrapped).__module__].__file__, "obs": bool(obs),
                   "task_id": info["task_id"], "demo": demo and {"reward": demo["reward"], "correct": demo["correct"]}}
    env.close()
print(json.dumps({"envs": out, "torch": "torch" in sys.modules}))
"""


def test_every_registered_env_makes_resets_and_plays_its_demonstration(installed):
    with writes_nothing(installed):
        done = installed.run([str(installed.python), "-c", ENVS_SCRIPT, json.dumps(NEEDS_SERVER),
                              json.dumps(FAST_KWARGS)])
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    from agentrl.envs import ENVS

    assert sorted(result["envs"]) == sorted(i for i in ENVS if i not in NEEDS_SERVER)
    for env_id, got in result["envs"].items():
        assert Path(got["module"]).is_relative_to(installed.venv), (env_id, got["module"])
        assert got["obs"] and got["task_id"], (env_id, got)
        assert got["demo"] and got["demo"]["correct"] is True, (env_id, got["demo"])
    assert result["torch"] is False, "making the envs imported torch"


MODEL_SCRIPT = """
import sys
from agentrl.algos import load_tokenizer
from agentrl.algos.models import tiny_model

tokenizer = load_tokenizer()
tiny_model(tokenizer, hidden_size=32, end_scale=8.0).save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
"""


def test_agentrl_eval_on_a_fixed_set_writes_only_into_the_folder_it_is_given(installed, tmp_path):
    """``agentrl eval`` of a model folder on three tasks of a fixed held-out set (tasks the ledger knows by
    content): the episodes and their summary (with the file's lock and writers.jsonl) go into the folder ``--out``
    names and nothing anywhere else, not into the checkout's ledger either (no ``--ledger``: no row)."""
    model, out = tmp_path / "model", tmp_path / "given" / "episodes.jsonl"
    fixed_set = ROOT / "benchmarks" / "heldout" / "tooluse_v3.jsonl"
    with writes_nothing(installed):
        made = installed.run([str(installed.python), "-c", MODEL_SCRIPT, str(model)])
        assert made.returncode == 0, made.stderr[-3000:]
        done = installed.run(["agentrl", "eval", "--env", "AgentRL/ToolUse-v0", "--model", str(model),
                              "--tasks-file", str(fixed_set), "--tasks", "3", "--max-new-tokens", "8",
                              "--max-turns", "2", "--device", "cpu", "--dtype", "fp32", "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"episodes: {out}" in done.stdout, done.stdout[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all("reward" in r for r in rows), rows[:1]
    # beside them: the run lock of that one file (its holder's pid and command) and the record of who wrote it
    assert sorted(p.name for p in out.parent.iterdir()) == [".episodes.jsonl.lock", "episodes.jsonl",
                                                             "episodes.summary.json", "writers.jsonl"]
    summary = json.loads(out.with_name("episodes.summary.json").read_text())
    assert summary["num_samples"] == 3 and "ledger" not in summary.get("settings", {}), summary.get("settings")


OPENENV_SCRIPT = """
import json, sys
import gymnasium as gym
import agentrl.envs

env = gym.make("AgentRL/OpenEnv-v0", url=sys.argv[1])
obs, info = env.reset(seed=0)
print(json.dumps({"obs": obs, "task_id": info["task_id"], "tools": [t["function"]["name"] for t in info["tools"]]}))
env.close()
"""


def test_agentrl_env_serve_answers_a_reset_over_http(installed, tmp_path):
    """The installed ``agentrl-env`` serves ToolUse-v0 as an OpenEnv server on 127.0.0.1: a plain HTTP POST
    /reset gets its first observation, and the installed ``AgentRL/OpenEnv-v0`` plays the same server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with writes_nothing(installed):
        with open(tmp_path / "serve.log", "w") as log:
            server = subprocess.Popen(["agentrl-env", "serve", "AgentRL/ToolUse-v0", "--openenv", "--port", str(port)],
                                      cwd=installed.work, env=installed.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            from agentrl.envs.bridges.openenv import wait_until_serving

            try:
                wait_until_serving(url, server, timeout_s=120)
            except RuntimeError as e:
                pytest.fail(f"agentrl-env serve did not come up ({e}): {(tmp_path / 'serve.log').read_text()[-2000:]}")
            request = urllib.request.Request(f"{url}/reset", data=json.dumps({"seed": 0}).encode(),
                                             headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                reset = json.loads(response.read())
            played = installed.run([str(installed.python), "-c", OPENENV_SCRIPT, url])
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert reset["done"] is False and reset["observation"]["task_id"], reset
    assert played.returncode == 0, played.stderr[-3000:]
    got = json.loads(played.stdout.strip().splitlines()[-1])
    assert got["obs"] and got["task_id"] == reset["observation"]["task_id"] and "multiply" in got["tools"], got


def test_the_train_extra_admits_what_ci_installed_and_a_main_job_runs_from_the_wheel(installed, tmp_path, tiny_dir):
    """``pip install <wheel>[train]`` into the environment the README's test command made (the CPU torch among
    its packages) needs nothing from an index but the wheel itself: the extra's bounds hold what CI tests. Then
    ``agentrl main-job`` from the wheel installed in a fresh venv runs every stage of a tiny job and writes only
    into its ``--out``. (The dry run is this interpreter's: a fresh venv's own old setuptools would shadow the one
    torch needs, which an install with an index would simply upgrade.)"""
    dry = installed.run([sys.executable, "-m", "pip", "install", "--no-index", "--dry-run",
                         f"{installed.wheel}[train]"], timeout=300)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    would = dry.stdout.split("Would install", 1)[1].split() if "Would install" in dry.stdout else []
    assert all(w.startswith("agentrl-gym-") for w in would), would
    out = tmp_path / "main"
    with writes_nothing(installed):
        job = installed.run(["agentrl", "main-job", "--model", str(tiny_dir), "--out", str(out), "--device", "cpu",
                             "--dtype", "fp32", "--report-to", "none", "eval_tasks=1", "progress=false",
                             "stages.sft.steps=1", "stages.sft.sft.num_demos=2", "stages.sft.sft.batch_size=2",
                             "stages.rl.steps=1", "stages.rl.tasks_per_step=1", "stages.rl.group_size=2",
                             "stages.rl.collector.max_new_tokens=4", "stages.rl.collector.max_turns=2"], timeout=900)
    assert job.returncode == 0, job.stderr[-3000:]
    made = sorted(p.name for p in out.iterdir())
    assert (out / "grpo" / "adapter").is_dir() and (out / "sft" / "adapter").is_dir(), made
