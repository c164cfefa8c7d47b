"""The policy interface: :class:`Policy` and the request/result types every backend speaks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: :class:`~agentrl.algos.policy.hf.HFPolicy`'s default ``max_batch_tokens`` (here, torch-free, for the configs).
#: Measured on 128 Search-v0 dev questions (SmolLM2-135M, 2 cores): 5.74 GiB peak RSS and 122 s without a bound,
#: 4.05 GiB and 87 s with it; 64 ToolUse-v0 rows (~120 own tokens each beyond the shared prompt) stay one batch.
DEFAULT_MAX_BATCH_TOKENS = 32768


@dataclass
class SamplingParams:
    """How to sample; shared by every request of one :meth:`Policy.generate` call.

    The distribution a token is drawn from: the logits divided by ``temperature``, cut to the ``top_k`` most likely
    tokens, then to the ``top_p`` nucleus of what is left, renormalised (vLLM's order). Every backend samples that
    distribution and records its logprobs (:attr:`GenerationResult.logprobs`), or refuses a setting it cannot
    honour. Nothing else shapes it: no min-p, no repetition/presence/frequency penalty (:class:`OpenAIPolicy
    <agentrl.algos.policy.openai.OpenAIPolicy>` sends their neutral values so a server's defaults never apply).
    """

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (the argmax; its logprob is then that of temperature 1, untruncated)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches ``top_p`` (1 = off)."""
    top_k: int = 0
    """Keep the ``top_k`` most likely tokens (0 = off; -1, vLLM's and SGLang's "off", is read as 0)."""
    stop_token_ids: tuple[int, ...] = ()
    """Sampling one of these ends the completion (the token is included in the output)."""

    def __post_init__(self):
        if self.top_k == -1:
            self.top_k = 0
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k!r}")


@dataclass
class GenerationRequest:
    """One completion to sample."""

    prompt_ids: list[int]
    """The whole prompt, as token ids."""
    max_new_tokens: int
    """At most this many tokens are sampled (>= 1)."""
    seed: int | None = None
    """Seeds this request's sampling (the same request and seed give the same tokens whatever the batch)."""
    key: Hashable | None = None
    """Names the trajectory: a backend may keep its KV cache under this key until :meth:`Policy.release`."""


@dataclass
class GenerationResult:
    """What a backend sampled for one request."""

    token_ids: list[int]
    logprobs: list[float]
    """The log-probability of each sampled token under the distribution it was drawn from (fp32): after
    temperature, top-k and top-p (:class:`SamplingParams`), so ``log_softmax(logits / temperature)`` only when
    nothing is truncated; greedy: ``log_softmax(logits)`` at the argmax."""
    finish_reason: str = "stop"
    """``"stop"`` (a stop token was sampled; it is the last id) or ``"length"`` (``max_new_tokens`` reached)."""


class Session:
    """An open generation: requests go in with :meth:`add`; each :meth:`step` advances them and returns the finished.

    This default runs the requests added since the last step in one :meth:`Policy.generate` call (a *round*): every
    step returns every pending request. A backend that can admit requests into a batch that is already decoding
    (:class:`~agentrl.algos.policy.HFPolicy`) returns a session whose :meth:`step` is one decode step and whose
    :meth:`join_ready` says when new requests would be admitted; the collector then adds a trajectory's next turn
    as soon as that is true instead of waiting for the round (``CollectorConfig.continuous``).
    """

    def __init__(self, policy: Policy, sampling: SamplingParams):
        self.policy = policy
        self.sampling = sampling
        self._waiting: list[tuple[int, GenerationRequest]] = []
        self._tickets = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def add(self, request: GenerationRequest) -> int:
        """Queue ``request``; returns its ticket (the handle :meth:`step` returns its result under)."""
        ticket = self._next_ticket()
        self._waiting.append((ticket, request))
        return ticket

    def _next_ticket(self) -> int:
        self._tickets += 1
        return self._tickets - 1

    @property
    def pending(self) -> int:
        """Requests added whose results have not been returned yet."""
        return len(self._waiting)

    def join_ready(self, incoming: int) -> bool:
        """Whether ``incoming`` more requests added now would start at the next :meth:`step` rather than wait for
        the requests already running (a round: only when none is pending)."""
        return self.pending == 0

    def step(self) -> list[tuple[int, GenerationResult]]:
        """Advance the pending requests; returns ``(ticket, result)`` of those that finished (here: all of them)."""
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return []
        results = self.policy.generate([r for _, r in waiting], self.sampling)
        if len(results) != len(waiting):
            raise RuntimeError(f"{type(self.policy).__name__}.generate returned {len(results)} results for "
                               f"{len(waiting)} requests")
        return [(t, res) for (t, _), res in zip(waiting, results, strict=True)]

    def close(self) -> None:
        """Drop what is still pending."""
        self._waiting = []


class Policy(ABC):
    """The backend interface (the contract of :data:`~agentrl.algos.policy.POLICIES`). Subclasses set ``tokenizer``
    and implement :meth:`generate`."""

    tokenizer: Any = None
    """The served model's tokenizer; the collector renders the chat template with it."""
    version: int = 0
    """How many weight updates the policy has seen (0: the weights it started with). The collector records it
    in each trajectory; a backend whose :meth:`update_weights` changes the weights increments it."""

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        """Sample one completion per request (in request order)."""

    def session(self, sampling: SamplingParams) -> Session:
        """An open generation with ``sampling`` (use as a context manager); the default batches by rounds."""
        return Session(self, sampling)

    def release(self, keys: Iterable[Hashable]) -> None:
        """Forget the state kept for ``keys`` (their trajectories have ended). The default keeps none."""
        return None

    def update_weights(self, source_model) -> None:
        """Sample with ``source_model``'s current weights from now on (called by trainers after each step)."""
        raise NotImplementedError(f"{type(self).__name__} cannot take new weights")

    def close(self) -> None:
        """Release what the backend holds on a server or in other processes (idempotent); the default holds none."""
        return None
