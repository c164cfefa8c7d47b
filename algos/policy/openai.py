"""The OpenAI-compatible backend: :class:`OpenAIPolicy`, a ``/v1/completions`` client with LoRA hot-swap."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from agentrl.algos.models.lora import is_peft, save_adapter
from agentrl.algos.policy.base import GenerationRequest, GenerationResult, Policy, SamplingParams, Session

logger = logging.getLogger(__name__)


class OpenAIPolicy(Policy):
    """A policy served by an OpenAI-compatible ``/v1/completions`` endpoint (vLLM, SGLang, :func:`serve_policy`).

    Each request is sent as its own HTTP call with the prompt as a list of token ids, concurrently (the server
    batches them); in a collector's session (:meth:`session`) a trajectory's next turn is posted as soon as its env
    answered, while the others' replies are still being sampled. The server must return the sampled token ids —
    ``choices[i].token_ids`` (vLLM's ``return_token_ids``) or ``logprobs.tokens`` as ``"token_id:<id>"`` (vLLM's
    ``return_tokens_as_token_ids``) — and ``logprobs.token_logprobs``. See docs/collector.md for the server flags.

    LoRA weight sync (:meth:`update_weights`): a trainer's PEFT adapter is saved to a new versioned folder under
    ``adapter_dir`` and loaded on the server under a new name (``<model>-lora-v<N>``) through the server's runtime
    LoRA endpoint; from then on requests name that adapter, and the previous one is unloaded. vLLM must be
    started with ``--enable-lora --max-lora-rank R`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; SGLang with
    ``--enable-lora --max-lora-rank R --lora-target-modules ...`` (see docs/collector.md). The server reads the
    adapter from ``adapter_dir``, so that folder must be on a file system the server sees.

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000"`` (``/v1`` is added when missing).
        model: the served (base) model name.
        tokenizer: the served model's tokenizer (the collector renders the chat template with it).
        max_concurrency: HTTP requests in flight at once.
        timeout_s: per-request timeout.
        api_key: sent as a bearer token when given.
        adapter_dir: where :meth:`update_weights` writes adapter versions (default: a new temporary folder).
        lora_api: ``"vllm"`` (``POST /v1/load_lora_adapter``; requests name the adapter as ``model``) or
            ``"sglang"`` (``POST /load_lora_adapter``; requests keep the base ``model`` and name the adapter in
            ``lora_path``).
        adapter_prefix: adapter names are ``f"{adapter_prefix}-v{N}"`` (default ``f"{model}-lora"``); give each
            trainer sharing one server its own prefix.
    """

    def __init__(self, base_url: str, model: str, tokenizer, *, max_concurrency: int = 64, timeout_s: float = 600.0,
                 api_key: str | None = None, adapter_dir: str | None = None, lora_api: str = "vllm",
                 adapter_prefix: str | None = None):
        if lora_api not in ("vllm", "sglang"):
            raise ValueError(f"lora_api must be 'vllm' or 'sglang', got {lora_api!r}")
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model_name = model
        self.base_model_name = model
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.lora_api = lora_api
        self.adapter_dir = adapter_dir
        self.adapter_prefix = adapter_prefix or f"{model}-lora"
        self.adapter_name: str | None = None
        """The adapter requests are sampled with (None: the base model)."""
        self._adapter_path: str | None = None
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="openai-policy")

    # ---------------------------------------------------------------- LoRA weight sync
    def _lora_url(self, action: str) -> str:
        root = self.base_url if self.lora_api == "vllm" else self.base_url[: -len("/v1")]
        return f"{root}/{action}_lora_adapter"

    def _lora_call(self, action: str, body: dict[str, Any]):
        return self._post_json(self._lora_url(action), body)

    @classmethod
    def connect(cls, base_url: str, tokenizer, *, model: str | None = None, **kwargs: Any) -> OpenAIPolicy:
        """An :class:`OpenAIPolicy` for the server at ``base_url``; ``model`` None means the first base model the
        server lists (``GET /v1/models``, entries without a ``parent``). Other keyword arguments go to the
        constructor. Raises ``RuntimeError`` when the server cannot be reached or lists no model."""
        import requests

        if model is None:
            root = base_url.rstrip("/")
            url = (root if root.endswith("/v1") else root + "/v1") + "/models"
            key = kwargs.get("api_key")
            try:
                r = requests.get(url, headers={"Authorization": f"Bearer {key}"} if key else {},
                                 timeout=kwargs.get("timeout_s", 30.0))
                r.raise_for_status()
                models = [m["id"] for m in r.json().get("data", []) if not m.get("parent")]
            except (requests.RequestException, ValueError, KeyError, TypeError) as e:
                raise RuntimeError(f"cannot list the models of {url}: {e} (is the server running?)") from e
            if not models:
                raise RuntimeError(f"{url} lists no base model; pass the served model name")
            model = models[0]
        return cls(base_url, model, tokenizer, **kwargs)

    def update_weights(self, source_model) -> None:
        """Sync ``source_model``'s LoRA adapter to the server and sample with it from now on.

        Saves the adapter (PEFT format) to ``adapter_dir/<prefix>-v<N>``, loads it on the server under that name,
        switches requests to it, then unloads the previous version and deletes its folder. Only the adapter
        travels (megabytes), never the base weights. Raises ``TypeError`` for a model without a PEFT adapter and
        ``RuntimeError`` (with the server's answer and the flags it needs) when the server refuses the load.
        """
        if not is_peft(source_model):
            raise TypeError("OpenAIPolicy syncs LoRA adapters only: pass a PEFT model (full-weight sync to a "
                            "server is not supported)")
        if self.adapter_dir is None:
            self.adapter_dir = tempfile.mkdtemp(prefix="agentrl-lora-")
        name = f"{self.adapter_prefix}-v{self.version + 1}"
        path = Path(self.adapter_dir).resolve() / name
        save_adapter(source_model, path)
        self._switch_adapter(name, path, owned=True)

    def use_adapter(self, path: str | Path) -> None:
        """Sample with the PEFT adapter folder ``path`` (e.g. ``runs/x/adapter``) from now on; the folder is read
        by the server and never deleted. Raises like :meth:`update_weights`."""
        path = Path(path).resolve()
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{path} is not a PEFT adapter folder (no adapter_config.json)")
        self._switch_adapter(f"{self.adapter_prefix}-v{self.version + 1}", path, owned=False)

    def _switch_adapter(self, name: str, path: Path, *, owned: bool) -> None:
        """Load adapter ``name`` from ``path`` on the server, sample with it, unload the previous one (and delete
        its folder when this policy wrote it)."""
        r = self._lora_call("load", {"lora_name": name, "lora_path": str(path)})
        if r.status_code != 200:
            if owned:
                shutil.rmtree(path, ignore_errors=True)
            hint = ""
            if r.status_code in (404, 405):
                hint = (" (no runtime LoRA endpoint: start vLLM with --enable-lora --max-lora-rank R and "
                        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or SGLang with --enable-lora and lora_api='sglang')")
            raise RuntimeError(f"{self._lora_url('load')} answered HTTP {r.status_code}{hint}: {r.text[:500]}")
        old_name, old_path = self.adapter_name, self._adapter_path
        self.adapter_name, self._adapter_path = name, (str(path) if owned else None)
        if self.lora_api == "vllm":
            self.model_name = name
        self.version += 1
        logger.info("server %s samples with adapter %s (%s)", self.base_url, name, path)
        if old_name is not None:
            r = self._lora_call("unload", {"lora_name": old_name})
            if r.status_code != 200:
                logger.warning("could not unload adapter %s from %s: HTTP %d %s", old_name, self.base_url,
                               r.status_code, r.text[:200])
            if old_path:
                shutil.rmtree(old_path, ignore_errors=True)

    def _payload(self, req: GenerationRequest, sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": list(req.prompt_ids),
            "max_tokens": req.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "stop_token_ids": list(sampling.stop_token_ids),
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if req.seed is not None:
            body["seed"] = int(req.seed)
        if self.lora_api == "sglang" and self.adapter_name is not None:
            body["lora_path"] = self.adapter_name
        return body

    def _post_json(self, url: str, body: dict[str, Any]):
        """POST ``body`` as JSON to ``url`` (with the bearer token when an ``api_key`` is set); the response."""
        import requests

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return requests.post(url, json=body, headers=headers, timeout=self.timeout_s)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        r = self._post_json(f"{self.base_url}/completions", body)
        if r.status_code != 200:
            raise RuntimeError(f"{self.base_url}/completions answered HTTP {r.status_code}: {r.text[:500]}")
        return r.json()

    @staticmethod
    def parse_choice(choice: dict[str, Any], stop_token_ids: Sequence[int]) -> GenerationResult:
        """Read token ids and logprobs from one ``choices[i]`` of a completions response."""
        lp = choice.get("logprobs") or {}
        ids = choice.get("token_ids")
        if ids is None:
            tokens = lp.get("tokens") or []
            if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                raise RuntimeError("the server returned no token ids: start vLLM with --return-tokens-as-token-ids "
                                   "or use a version that honours return_token_ids")
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        logprobs = lp.get("token_logprobs")
        if logprobs is None or len(logprobs) != len(ids):
            raise RuntimeError(f"the server returned {0 if logprobs is None else len(logprobs)} logprobs for "
                               f"{len(ids)} tokens; request logprobs")
        finish = "stop" if ids and ids[-1] in set(stop_token_ids) else "length"
        if choice.get("finish_reason") == "stop" and finish == "length":
            finish = "stop"
        return GenerationResult(list(map(int, ids)), [float(x) for x in logprobs], finish)

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingParams) -> list[GenerationResult]:
        futures = [self._pool.submit(self._post, self._payload(r, sampling)) for r in requests]
        return [self.parse_choice(f.result()["choices"][0], sampling.stop_token_ids) for f in futures]

    def session(self, sampling: SamplingParams) -> Session:
        """Each request is posted when added and a step returns those the server has answered (at least one), so a
        trajectory's next turn goes out while the others are still being sampled (the server batches them)."""
        return _Posted(self, sampling)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


class _Posted(Session):
    """:class:`OpenAIPolicy`'s session: requests in flight as HTTP calls; the server decides the batches."""

    def __init__(self, policy: OpenAIPolicy, sampling: SamplingParams):
        super().__init__(policy, sampling)
        self._inflight: dict[int, Future] = {}

    def add(self, request: GenerationRequest) -> int:
        ticket = self._next_ticket()
        self._inflight[ticket] = self.policy._pool.submit(self.policy._post,
                                                          self.policy._payload(request, self.sampling))
        return ticket

    @property
    def pending(self) -> int:
        return len(self._inflight)

    def join_ready(self, incoming: int) -> bool:
        return True  # a request added now is posted at once

    def step(self) -> list[tuple[int, GenerationResult]]:
        if not self._inflight:
            return []
        wait(self._inflight.values(), return_when=FIRST_COMPLETED)
        answered = sorted(t for t, f in self._inflight.items() if f.done())
        return [(t, self.policy.parse_choice(self._inflight.pop(t).result()["choices"][0],
                                             self.sampling.stop_token_ids)) for t in answered]

    def close(self) -> None:
        for future in self._inflight.values():
            future.cancel()
        self._inflight = {}
