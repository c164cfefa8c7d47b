"""What the ``agentrl`` commands that run a model share: the checks before a model loads (:func:`preflight`),
where its tokens are sampled (``--device``/``--dtype``, ``--policy``/``--policy-url``, ``--engine``:
:func:`add_engine_args`, :func:`policy_for`), and ``agentrl export-model`` (a model folder an engine loads)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from agentrl.algos import policy as policies
from agentrl.algos.models import DEFAULT_MODEL
from agentrl.algos.policy.engine import ENGINES, VLLM_PYTHON_ENV, VLLM_VENV

ENV_KWARGS_HELP = ("JSON object of environment keyword arguments, e.g. '{\"tools\": [\"my_tools:lookup\"], "
                   "\"dataset\": \"train.jsonl\", \"test_dataset\": \"test.jsonl\"}' (the env_kwargs key; "
                   "docs/own-tools.md)")


def preflight(envs: list[tuple[str, dict[str, Any]]], model: str, adapter: str | None = None) -> None:
    """Fail fast, before any model loads, with one line that says what to do: each ``(env id, env kwargs)`` is
    registered and its env comes up (:func:`~agentrl.algos.rollout.env_factory.preflight_env`: a wrong id
    names the closest, a code env without bubblewrap gives the install line), ``model`` can be loaded here
    without a network call (:func:`~agentrl.algos.models.check_model_available`) and ``adapter`` was trained on
    ``model`` (:func:`~agentrl.algos.models.lora.check_adapter_base`). Raises ``ValueError`` /
    ``FileNotFoundError``."""
    from agentrl.algos.models import check_model_available
    from agentrl.algos.models.lora import check_adapter_base, check_adapter_folder
    from agentrl.algos.rollout.env_factory import preflight_env

    for env_id, env_kwargs in envs:
        preflight_env(env_id, env_kwargs)
    if adapter:
        check_adapter_folder(adapter)
    check_model_available(model)
    if adapter:
        check_adapter_base(adapter, model)


def policy_for(args: argparse.Namespace, model: str, *, run_dir: Any = None, lora_rank: int = 16,
               record_dir: Any = None, placement: Any = None, trainer_on_gpu: bool | None = None) -> Any:
    """The policy backend ``--policy`` names (``POLICIES``; default ``openai`` with ``--policy-url``, else
    ``hf``).

    ``--engine vllm``: a vLLM server this process starts (:func:`agentrl.algos.policy.engine.start_engine_policy`,
    its log in ``run_dir``, adapters up to rank ``lora_rank``, placed by ``placement``: a run's ``engine.*``
    keys; ``trainer_on_gpu``: whether this process trains on CUDA devices beside it — False for ``eval``, None:
    CUDA is available); closing the policy stops it.
    ``hf``: None (the trainer or ``eval`` samples in process). Any other backend is a server reached at
    ``--policy-url`` through its class's ``connect(url, tokenizer, *, model, **server_options)`` with ``model``'s
    tokenizer: a running vLLM, SGLang or ``serve_policy`` server samples the episodes, and a trainer hot-swaps its
    LoRA adapter there after each optimizer step. ``record_dir`` (a run's folder, for ``train`` and ``main-job``):
    an :class:`~agentrl.algos.policy.openai.OpenAIPolicy` at ``--policy-url`` records the adapters it has loaded
    there, so the ``--resume`` of a killed run unloads what the killed process left on the server."""
    if getattr(args, "engine", None):
        if args.policy_url or args.policy not in (None, "openai"):
            raise ValueError("--engine starts its own server: pass --engine or --policy-url/--policy, not both")
        from agentrl.algos.policy.engine import start_engine_policy

        return start_engine_policy(model, engine=args.engine, run_dir=run_dir, lora_rank=lora_rank,
                                   dtype=args.dtype, python=args.engine_python, adapter_dir=args.adapter_dir,
                                   extra_args=shlex.split(args.engine_args or ""), record_dir=record_dir,
                                   placement=placement, trainer_on_gpu=trainer_on_gpu)
    name = args.policy or ("openai" if args.policy_url else "hf")
    if name == "hf":
        if args.policy_url:
            raise ValueError("--policy-url needs a server backend (--policy openai), not --policy hf")
        return None
    backend = policies.POLICIES.get(name)
    if not args.policy_url:
        raise ValueError(f"--policy {name} samples through a server: pass its --policy-url")
    if not callable(getattr(backend, "connect", None)):
        raise ValueError(f"--policy {name}: {backend.__name__} has no connect(url, tokenizer, ...) classmethod")
    from agentrl.algos.models import load_tokenizer

    try:
        from agentrl.algos.policy.openai import OpenAIPolicy, rank_url

        records = record_dir is not None and isinstance(backend, type) and issubclass(backend, OpenAIPolicy)
        extra = {"record_dir": record_dir} if records else {}
        return backend.connect(rank_url(args.policy_url), load_tokenizer(model), model=args.served_model,
                               lora_api=args.lora_api, adapter_dir=args.adapter_dir, **extra)
    except RuntimeError as e:
        raise ValueError(f"--policy-url: {e}") from e


def add_engine_args(p: argparse.ArgumentParser, *, device_default: str | None, dtype_default: str | None) -> None:
    """``--device``, ``--dtype`` and the inference-server options (``--policy-url`` ...) of a command."""
    p.add_argument("--device", default=device_default,
                   help="torch device: auto (CUDA when available, else CPU; the default), cpu, cuda, cuda:1")
    p.add_argument("--dtype", default=dtype_default,
                   help="auto (bf16 where the hardware has bf16 units, else fp32; the default), bf16, fp32, fp16")
    p.add_argument("--policy", choices=policies.POLICIES.names(),
                   help="policy backend (agentrl.algos.policy.POLICIES): hf in process (the default), or a "
                        "server at --policy-url (openai, the default with --policy-url)")
    p.add_argument("--policy-url", help="sample through this OpenAI-compatible server (vLLM, SGLang, serve_policy; a "
                   "list, one per node, or a {node_rank}/{local_rank}/{rank} template under torchrun) instead of "
                   "in-process; the LoRA adapter is hot-swapped after each step")
    p.add_argument("--served-model", help="the server's base model name (default: the first it lists)")
    p.add_argument("--lora-api", choices=["vllm", "sglang"], default="vllm", help="the server's runtime LoRA API")
    p.add_argument("--adapter-dir", help="where adapter versions are written for the server to read (a folder the "
                                         "server sees; default: a temporary folder)")
    p.add_argument("--engine", choices=ENGINES.names(), help="start this inference server (engine.ENGINES; on "
                   "127.0.0.1, log in the run folder) and sample through it, from an exported model (docs/engines.md)")
    p.add_argument("--engine-python", help=f"the engine's python (default ${VLLM_PYTHON_ENV}, else "
                                           f"./{VLLM_VENV}/bin/python, else a python that imports vllm: "
                                           "this one or the one beside `vllm` on PATH)")
    p.add_argument("--engine-args", help="more flags for the --engine server, one string (e.g. "
                                         "'--gpu-memory-utilization 0.4' on a GPU the trainer shares)")


# ---------------------------------------------------------------------------------------------- export-model


def cmd_export_model(args: argparse.Namespace) -> int:
    from agentrl.algos.models.export import export_model

    print(export_model(args.model, args.dir, dtype=args.dtype))
    return 0


def add_export_command(sub: Any) -> None:
    """``agentrl export-model DIR``."""
    p = sub.add_parser("export-model", help="write a model folder an inference engine (vLLM, SGLang) loads",
                       description="De-quantized weights, tokenizer and chat template of --model, saved to DIR.")
    p.add_argument("dir", help="the folder to write (must not exist or be empty)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model alias, hub id or path")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="weight dtype in the folder (fp32, the default, keeps de-quantized weights exact)")
    p.set_defaults(func=cmd_export_model)
