"""Plain helpers shared by several test modules (no fixtures: those are in conftest.py).

Test modules import these with ``from helpers import ...`` (pyproject.toml puts tests/ on ``sys.path``; Ray workers get
it through ``PYTHONPATH``, see tests/algos/integrations/test_ray.py).

- chat templates: ``TEMPLATES`` and ``make_template_tokenizer`` (ChatML, Llama-3-style, Qwen-style);
- collector drivers: ``ScriptedPolicy``, ``EchoEnv``, ``echo_tasks``, ``stop_biased_model``;
- trainer: ``ScoreEnv`` (registered as "Test/Score-v0" on import), ``tiny_train_model``, ``tiny_train_config``;
- benchmarks: ``load_benchmark`` (a script of benchmarks/ as a module; the learning harness is imported as
  ``harness.*``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium as gym
import torch

from agentrl.algos.models import tiny_model
from agentrl.algos.policy.base import GenerationResult, Policy
from agentrl.algos.rollout.chat import ChatFormat
from agentrl.algos.rollout.collector import CollectorConfig
from agentrl.envs.core import AnyText, TextEnv
from agentrl.envs.parsing import ParsedAction
from agentrl.envs.tool_use.env import ToolUseEnv
from agentrl.envs.tools import ToolSet

#: tests/ (on ``sys.path`` for every test: pyproject's ``pythonpath``) and the repository root
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

if TYPE_CHECKING:
    from agentrl.algos.training.config import TrainConfig

# ---------------------------------------------------------------------------------------------- chat templates

# A Llama-3-style template: header tokens, <|eot_id|>, tool output in the "ipython" role, tools in the system turn.
LLAMA3_TEMPLATE = (
    r"{{ bos_token }}"
    r"{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}"
    r"{% else %}{% set sys = '' %}{% endif %}"
    r"{{ '<|start_header_id|>system<|end_header_id|>\n\n' }}"
    r"{% if tools %}{{ 'Environment: ipython\nYou can call these functions (JSON schemas):\n' }}"
    r"{% for t in tools %}{{ t | tojson }}{{ '\n' }}{% endfor %}{{ '\n' }}{% endif %}"
    r"{{ sys | trim }}{{ '<|eot_id|>' }}"
    r"{% for m in messages %}{% if m['role'] != 'system' %}"
    r"{% if m['role'] == 'tool' %}{% set role = 'ipython' %}{% else %}{% set role = m['role'] %}{% endif %}"
    r"{{ '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + (m['content'] | trim) + '<|eot_id|>' }}"
    r"{% endif %}{% endfor %}"
    r"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# A Qwen-style template: ChatML markup, tools in a <tools> block of the system turn, tool output as a user turn.
QWEN_TEMPLATE = (
    r"{% if tools %}{{ '<|im_start|>system\n' }}"
    r"{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
    r"{% else %}{{ 'You are a helpful assistant.' }}{% endif %}"
    r"{{ '\n\n# Tools\n\nYou may call one of these functions:\n<tools>\n' }}"
    r"{% for t in tools %}{{ t | tojson }}{{ '\n' }}{% endfor %}"
    r"{{ '</tools>\n\nReturn each call as a JSON object inside <tool_call></tool_call> tags.<|im_end|>\n' }}"
    r"{% elif messages[0]['role'] == 'system' %}"
    r"{{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{% endif %}"
    r"{% for m in messages %}"
    r"{% if m['role'] == 'tool' %}"
    r"{{ '<|im_start|>user\n<tool_response>\n' + m['content'] + '\n</tool_response><|im_end|>\n' }}"
    r"{% elif m['role'] != 'system' %}"
    r"{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}"
    r"{% endfor %}"
    r"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: The published chat templates of the model families the collector must handle (tests/data/templates/README.md).
FAMILIES = ["qwen2_5", "qwen3", "llama3_1", "mistral"]
TEMPLATES = ["chatml", "llama3", "qwen", *FAMILIES]
TEMPLATE_DIR = TESTS / "data" / "templates"

# Each family's special tokens (and its added tokens that are not special), as its own tokenizer has them.
_FAMILY_TOKENS = {
    "qwen2_5": ({"eos_token": "<|im_end|>"}, ["<tool_call>", "</tool_call>"]),
    "qwen3": ({"eos_token": "<|im_end|>"}, ["<tool_call>", "</tool_call>", "<think>", "</think>",
                                            "<tool_response>", "</tool_response>"]),
    "llama3_1": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                  "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                                                "<|python_tag|>"]}, []),
    "mistral": ({"bos_token": "<s>", "eos_token": "</s>",
                 "additional_special_tokens": ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                                               "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]}, []),
}


def make_template_tokenizer(base, kind: str):
    """A copy of the SmolLM2 tokenizer carrying the named chat template (``chatml`` is SmolLM2's own); for a name
    in ``FAMILIES`` the published template from tests/data/templates with the family's special tokens."""
    if kind == "chatml":
        return base
    tok = copy.deepcopy(base)
    if kind == "llama3":
        tok.add_special_tokens({"bos_token": "<|begin_of_text|>",
                                "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>",
                                                              "<|eot_id|>"]})
        tok.chat_template = LLAMA3_TEMPLATE
    elif kind == "qwen":
        tok.chat_template = QWEN_TEMPLATE
    elif kind in _FAMILY_TOKENS:
        special, added = _FAMILY_TOKENS[kind]
        tok.add_special_tokens(special)
        if added:
            tok.add_tokens(added)
        tok.chat_template = (TEMPLATE_DIR / f"{kind}.jinja").read_text(encoding="utf-8")
    else:
        raise ValueError(kind)
    return tok


# ---------------------------------------------------------------------------------------------- collector drivers


class ScriptedPolicy(Policy):
    """Replies with the demonstration actions of the task found in the prompt, one per turn, each + end token.

    Records every request so tests can check what the collector sent.
    """

    def __init__(self, tokenizer, tasks, *, end_token: bool = True, extra_tokens: int = 0):
        self.tokenizer = tokenizer
        self.fmt = ChatFormat(tokenizer)
        env = ToolUseEnv()
        self.actions = {t["query"]: env.demo_actions(t) for t in tasks}
        self.end_token = end_token
        self.extra_tokens = extra_tokens
        self.requests = []
        self.replies = []

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            self.requests.append(r)
            text = self.tokenizer.decode(r.prompt_ids, skip_special_tokens=False)
            query = next(q for q in self.actions if q in text)
            actions, pos, turn = self.actions[query], 0, 0
            while turn < len(actions) and (k := text.find(actions[turn], pos)) >= 0:
                pos, turn = k + len(actions[turn]), turn + 1
            ids = self.tokenizer(actions[turn], add_special_tokens=False)["input_ids"] + [17] * self.extra_tokens
            if self.end_token:
                ids = ids + [self.fmt.stop_token_ids[0]]
            finish = "stop" if self.end_token else "length"
            if len(ids) > r.max_new_tokens:
                ids, finish = ids[: r.max_new_tokens], "length"
            self.replies.append(ids)
            out.append(GenerationResult(ids, [-1.0] * len(ids), finish))
        return out


class EchoEnv(gym.Env):
    """A protocol-following env that answers every reply with a short tool message until ``turns`` replies."""

    def __init__(self, turns: int = 3, raise_on_step: int | None = None):
        self.observation_space = AnyText()
        self.action_space = AnyText()
        self.turns = turns
        self.raise_on_step = raise_on_step

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = (options or {})["task"]
        self.n = 0
        self.messages = [{"role": "system", "content": "Echo game."}, {"role": "user", "content": task["query"]}]
        return task["query"], {"messages": list(self.messages), "tools": [], "task_id": str(task.get("id", ""))}

    def step(self, action):
        self.n += 1
        if self.raise_on_step == self.n:
            raise RuntimeError("echo env exploded")
        done = self.n >= self.turns
        obs = "" if done else f"echo {self.n}: you wrote {len(action)} characters"
        self.messages.append({"role": "assistant", "content": action})
        if not done:
            self.messages.append({"role": "tool", "content": obs})
        info = {"parsed": {"kind": "tool_call"}, "obs_role": "tool", "metrics": {"turns": self.n},
                "messages": list(self.messages)}
        if done:
            info.update(correct=True, format_ok=True, termination="answered")
        return obs, (1.0 if done else 0.0), done, False, info


def echo_tasks(n):
    return [{"id": f"e{i}", "query": f"Echo task number {i}: say something."} for i in range(n)]


def stop_biased_model(tokenizer, seed=0):
    """A tiny random model whose replies end after a few tokens now and then, so episodes run several turns.

    Default-init tiny models give near-uniform logits (replies never end); with weights of std 0.2 the logits
    depend on the context, and pushing the end-of-turn rows along the mean final hidden state makes that token
    likely in some contexts and not others.
    """
    model = tiny_model(tokenizer, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2, generator=g)
        hidden = model.model(torch.randint(0, len(tokenizer), (1, 200), generator=g)).last_hidden_state[0]
        u = hidden.mean(0)
        w = model.get_output_embeddings().weight
        for stop in ChatFormat(tokenizer).stop_token_ids:
            w[stop] += 3.5 * u / u.norm()
    return model


# ---------------------------------------------------------------------------------------------- trainer


class _WholeReplyIsTheAnswer:
    """A parser that reads any reply as a final answer (so a random model gets a graded reward)."""

    def parse(self, text: str) -> ParsedAction:
        return ParsedAction(kind="answer", answer=text)

    def format_instructions(self) -> str:
        return "Reply with anything."

    def describe_tools(self, schemas) -> str:
        return ""


class ScoreEnv(TextEnv):
    """One-turn env with a graded reward: the fraction of the reply's characters that are the letter 'e'.

    Random replies get different rewards, so every group has a non-zero advantage (tests of the update
    mechanics). ``constant`` makes every reply score the same (zero-advantage groups).
    """

    def __init__(self, constant: float | None = None):
        super().__init__(tools=ToolSet([]), parser=_WholeReplyIsTheAnswer())
        self.constant = constant

    def sample_task(self, rng):
        return {"id": str(int(rng.integers(1000))), "query": f"Say something ({int(rng.integers(1000))})."}

    def score(self, answer, task):
        if self.constant is not None:
            return self.constant, False
        return (answer.count("e") / max(1, len(answer))), False


# Registered on import: every test module that trains on "Test/Score-v0" imports from this module.
if "Test/Score-v0" not in gym.registry:
    gym.register("Test/Score-v0", entry_point=ScoreEnv)


def tiny_train_model(tokenizer, seed=0, stop_scale=5.0):
    """A tiny random Llama whose end-of-turn token is likely enough that replies end on their own.

    (With 49k near-uniform logits a random model would almost never sample ``<|im_end|>``, every reply would
    hit the token budget and every reward would be the same.) ``stop_scale`` 5 gives replies of varied
    length; 8 makes every reply end at once.
    """
    return tiny_model(tokenizer, hidden_size=32, seed=seed, end_scale=stop_scale)


def tiny_train_config(tmp_path, **kw) -> TrainConfig:
    """A one-step GRPO config on "Test/Score-v0" with tiny groups and replies; ``kw`` overrides any field."""
    from agentrl.algos.training.config import TrainConfig

    base = dict(env="Test/Score-v0", algo="grpo", steps=1, tasks_per_step=2, group_size=4, out=str(tmp_path / "run"),
                save_every=0, progress=False, report_to=["none"], lr=1e-2,
                collector=CollectorConfig(max_new_tokens=8, max_turns=1))
    base.update(kw)
    return TrainConfig(**base)


def kill_in_step(trainer, step: int) -> None:
    """Make ``trainer`` raise ``KeyboardInterrupt`` inside its update once ``trainer.global_step == step`` (a
    simulated kill in the middle of step ``step + 1``, after its rollout)."""
    real_update = trainer.apply_update_rows

    def dies(units, temperature):
        if trainer.global_step == step:
            raise KeyboardInterrupt(f"simulated kill in the middle of step {step + 1}")
        return real_update(units, temperature)

    trainer.apply_update_rows = dies


def native_scripted_policy(tokenizer, tasks, **kwargs) -> ScriptedPolicy:
    """A :class:`ScriptedPolicy` whose replies call the tools in the call format of ``tokenizer``'s chat template
    (the format the collector makes the env read)."""
    policy = ScriptedPolicy(tokenizer, tasks, **kwargs)
    env = ToolUseEnv()
    env.use_call_format(policy.fmt.call_format)
    policy.actions = {t["query"]: env.demo_actions(t) for t in tasks}
    return policy


BENCHMARKS = ROOT / "benchmarks"


def load_benchmark(name: str):
    """The script ``benchmarks/<name>.py`` imported as module ``bench_<name>`` (its own ``harness`` imports resolve
    through pytest's ``pythonpath``, which lists benchmarks/; the harness's modules are imported as ``harness.*``)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _write_dist_info(site: Path, group: str, name: str, value: str) -> None:
    """The ``.dist-info`` folder, in ``site``, of a distribution declaring ``name = value`` in ``group``."""
    dist = site / f"agentrl_plugin_{name}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: agentrl-plugin-{name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{name} = {value}\n")


def install_entry_point(tmp_path: Path, monkeypatch, group: str, name: str, value: str) -> None:
    """Make ``importlib.metadata`` see an installed distribution that declares ``name = value`` in the entry-point
    group ``group`` — what ``pip install`` of a third-party package with that ``pyproject.toml`` entry leaves —
    by writing its ``.dist-info`` folder on ``sys.path``."""
    _write_dist_info(tmp_path / "site", group, name, value)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def tiny_llama(vocab: int = 256, seed: int = 0, tie: bool = False):
    """A 2-layer random-init Llama (hidden 32) over ``vocab`` ids: for loss, batching and LoRA tests that need no
    tokenizer. Seeded, so two calls with one ``seed`` give the same weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie)
    return LlamaForCausalLM(cfg)


def save_model_dir(path: Path, model, tokenizer) -> Path:
    """``model`` and ``tokenizer`` saved as a model folder (what ``--model DIR`` and ``load_model(DIR)`` read)."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def run_with_plugin(tmp_path: Path, group: str, entry: str, module: str, source: str, code: str) -> str:
    """Run ``code`` in a fresh Python process that sees a third-party plugin as ``pip install`` would leave it:
    ``source`` saved as ``module.py`` and an installed distribution declaring ``entry`` (``"name = module:Attr"``)
    in the entry-point group ``group``. Registries read entry points once per process, hence the fresh one.
    Returns its stdout (asserting it exited 0). This process never sees the plugin: a registry that reads its
    entry points later in the run (in another order of the tests) must not find it."""
    import os
    import subprocess
    import sys

    (tmp_path / f"{module}.py").write_text(source)
    name, _, value = (part.strip() for part in entry.partition("="))
    _write_dist_info(tmp_path / "site", group, name, value)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(tmp_path)])}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


class StockTask:
    """One ToolUse task a tiny model can learn in a few steps (SFT, then GRPO on top): "How many units of item t7
    are in stock?", whose demonstration answers at once, with a tiny model given an untied, larger output head.

    A random model's logits are nearly flat and LoRA cannot rescale the (frozen) head, so the head is the input
    embeddings x 16 (the distribution can become peaked) with a random ``<|im_end|>`` row (the pad token's
    embedding row, all zeros, would never end a reply). :meth:`mean_reward` samples 32 episodes."""

    def __init__(self, tmp_path: Path, tokenizer):
        import json

        from agentrl.algos.models import tiny_model
        from agentrl.envs.tool_use.env import INVENTORY, stock

        self.tokenizer = tokenizer
        self.row = {"id": "t7", "query": "How many units of item t7 are in stock?", "answer": str(INVENTORY["t7"]),
                    "calls": []}  # the demonstration answers at once: "Answer: 85"
        data = tmp_path / "task.jsonl"
        data.write_text(json.dumps(self.row) + "\n")
        self.env_kwargs = {"tools": [stock], "dataset": str(data), "max_turns": 3}
        self.collector = CollectorConfig(max_new_tokens=12, max_turns=2)
        model = tiny_model(tokenizer, hidden_size=64, seed=0)
        model.config.tie_word_embeddings = False
        head = model.get_input_embeddings().weight.detach().clone() * 16.0
        stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        head[stop] = torch.randn(head.shape[1], generator=torch.Generator().manual_seed(0)) * head.std()
        model.lm_head.weight = torch.nn.Parameter(head)
        self.model = model

    def mean_reward(self, model, seed: int) -> float:
        import dataclasses

        from agentrl.algos.policy.hf import HFPolicy
        from agentrl.algos.rollout.collector import collect

        policy = HFPolicy(model, self.tokenizer)
        policy.update_weights(model)
        trajs = collect("AgentRL/ToolUse-v0", policy, [self.row], 32,
                        dataclasses.replace(self.collector, seed=seed), env_kwargs=self.env_kwargs)
        return sum(t.reward for t in trajs) / len(trajs)


def perturb_lora(model, seed: int):
    """Set every LoRA B matrix of ``model`` to seeded noise (std 0.3), so the adapter changes the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def peft_copy(base, seed: int):
    """A LoRA-wrapped (r=4) copy of ``base`` whose adapter changes the outputs (:func:`perturb_lora`)."""
    import copy

    from agentrl.algos.models.lora import LoRAConfig, apply_lora

    return perturb_lora(apply_lora(copy.deepcopy(base), LoRAConfig(r=4, alpha=8)), seed)


def served_models(url: str) -> list[str]:
    """The model names an OpenAI-compatible server at ``url`` lists (``GET /v1/models``): base and adapters."""
    import requests

    return [m["id"] for m in requests.get(f"{url}/v1/models", timeout=10).json()["data"]]


def two_prompts(tokenizer) -> list[list[int]]:
    """Two short token prompts of different lengths."""
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("one two", "three four five")]


def record_adapter_swaps(monkeypatch, url: str) -> list[tuple[str, list[str]]]:
    """Wrap ``OpenAIPolicy.update_weights`` so each call appends ``(adapter now sampled with, models the server at
    url lists)`` to the returned list."""
    from agentrl.algos.policy.openai import OpenAIPolicy

    swaps: list[tuple[str, list[str]]] = []
    real = OpenAIPolicy.update_weights

    def recorded(self, model):
        real(self, model)
        swaps.append((self.adapter_name, served_models(url)))

    monkeypatch.setattr(OpenAIPolicy, "update_weights", recorded)
    return swaps


def free_port() -> int:
    """A 127.0.0.1 port nothing listens on (just now): for a server a test starts, or a refused connection."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def adapter_loads(log_path: str | Path, start: int = 0) -> list[str]:
    """The adapter names a vLLM server loaded, in order, read from its log ``log_path`` from byte ``start`` on (its
    "Loaded new LoRA adapter: name '...'" lines): what several processes sharing one server loaded there."""
    import re

    with open(log_path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    return re.findall(r"Loaded new LoRA adapter: name '([^']+)'", text)


#: Another command holding a run folder (or one file of it) as the CLI does: says so, then runs until killed.
RUN_HOLDER = ("import sys, time\nfrom agentrl.algos.run_folder import claim_run\n"
              "run, writes = sys.argv[1], sys.argv[2]\nsys.argv = ['agentrl', 'main-job', '--out', run]\n"
              "with claim_run(run, writes=writes or None):\n    print('held', flush=True)\n    time.sleep(600)\n")


def hold_run(run: Path, writes: str = ""):
    """A live process holding ``run`` (or only its file ``writes``) as ``agentrl main-job --out RUN`` would, once
    it says so: a ``subprocess.Popen`` to kill."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.Popen([sys.executable, "-c", RUN_HOLDER, str(run), writes], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc
