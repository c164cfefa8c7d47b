"""The policy backend registry (agentrl.algos.policy.POLICIES), the Policy contract and ``--policy NAME``."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
from helpers import run_with_plugin

from agentrl.algos import cli, cli_policy
from agentrl.algos.policy import POLICIES, register_policy
from agentrl.algos.policy.base import Policy

PLUGIN = '''
from agentrl.algos.policy.base import GenerationResult, Policy


class EchoPolicy(Policy):
    """A server backend: the CLI builds it with connect(url, tokenizer, *, model, **server_options)."""

    def __init__(self, url, tokenizer, **options):
        self.url, self.tokenizer, self.options = url, tokenizer, options

    @classmethod
    def connect(cls, url, tokenizer, *, model=None, **options):
        return cls(url, tokenizer, model=model, **options)

    def generate(self, requests, sampling):
        return [GenerationResult([0], [0.0], "length") for _ in requests]
'''


def test_builtins_are_lazy_and_subclass_the_contract():
    code = ("import sys\nfrom agentrl.algos.policy import POLICIES\n"
            "print(POLICIES.names(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['hf', 'openai'] False", out  # listing the backends imports no torch
    assert all(issubclass(POLICIES.get(n), Policy) for n in ["hf", "openai"])
    assert POLICIES.group == "agentrl.policies"


def test_a_policy_must_implement_generate():
    class NoGenerate(Policy):
        pass

    with pytest.raises(TypeError, match="generate"):
        NoGenerate()


def test_a_third_party_entry_point_is_picked_up(tmp_path, monkeypatch):
    """What ``pip install`` of a package declaring ``[project.entry-points."agentrl.policies"]`` leaves: a fresh
    process lists the backend and ``--policy echo`` is a valid choice."""
    code = ("from agentrl.algos import cli\nfrom agentrl.algos.policy import POLICIES\n"
            "from agentrl.algos.policy.base import Policy\n"
            "print(POLICIES.names(), issubclass(POLICIES.get('echo'), Policy))\n"
            "print(cli.build_parser().parse_args(['eval', '--policy', 'echo']).policy)")
    out = run_with_plugin(tmp_path, "agentrl.policies", "echo = echo_policy:EchoPolicy",
                          "echo_policy", PLUGIN, code)
    assert out.split("\n")[:2] == ["['hf', 'openai', 'echo'] True", "echo"], out


def test_policy_selects_the_backend_by_name(tmp_path, monkeypatch):
    from agentrl.algos import policy as package

    (tmp_path / "echo_policy.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = copy.deepcopy(POLICIES)  # the registration is undone with the copy
    monkeypatch.setattr(package, "POLICIES", registry)
    register_policy("echo", "echo_policy:EchoPolicy")
    parser = cli.build_parser()
    args = parser.parse_args(["eval", "--policy", "echo", "--policy-url", "http://h", "--lora-api", "sglang"])
    policy = cli_policy.policy_for(args, args.model)
    assert type(policy).__name__ == "EchoPolicy" and policy.url == "http://h" and policy.tokenizer is not None
    assert policy.options["lora_api"] == "sglang"
    assert cli_policy.policy_for(parser.parse_args(["eval"]), args.model) is None  # hf: in process
    with pytest.raises(ValueError, match="pass its --policy-url"):
        cli_policy.policy_for(parser.parse_args(["eval", "--policy", "echo"]), args.model)
    with pytest.raises(ValueError, match="--policy openai"):
        cli_policy.policy_for(parser.parse_args(["eval", "--policy", "hf", "--policy-url", "http://h"]), args.model)
    sys.modules.pop("echo_policy", None)
