"""The OpenAI-compatible backend: :class:`OpenAIPolicy`, a ``/v1/completions`` client with LoRA hot-swap."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from agentrl.algos.models.lora import check_adapter_folder, is_peft, save_adapter
from agentrl.algos.policy.adapter_group import Exchange, ServerGroup, server_key
from agentrl.algos.policy.base import GenerationRequest, GenerationResult, Policy, SamplingParams, Session

logger = logging.getLogger(__name__)

#: The placeholders of a ``--policy-url`` template and the launcher's variables that fill them (torchrun sets
#: ``GROUP_RANK`` for the node, ``LOCAL_RANK`` within it and ``RANK`` overall; each is 0 without a launcher).
URL_PLACEHOLDERS = {"node_rank": "GROUP_RANK", "local_rank": "LOCAL_RANK", "rank": "RANK"}


def rank_url(url: str, environ: dict[str, str] | None = None) -> str:
    """This rank's server among the ones ``url`` names, for data-parallel ranks sharing servers users run: a
    comma-separated list picks entry ``node_rank % len(list)`` (one server per node), and ``{node_rank}``,
    ``{local_rank}`` or ``{rank}`` are filled from the launcher (``http://node{node_rank}:8000``). A plain URL is
    returned as it is.

    Raises:
        ValueError: a placeholder other than these, naming the accepted ones.
    """
    env = os.environ if environ is None else environ
    ranks = {key: int(env.get(var, "0") or 0) for key, var in URL_PLACEHOLDERS.items()}
    urls = [u.strip() for u in url.split(",") if u.strip()]
    chosen = urls[ranks["node_rank"] % len(urls)] if urls else url
    try:
        return chosen.format(**ranks)
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"--policy-url {url!r}: a placeholder must be one of "
                         f"{', '.join('{' + k + '}' for k in URL_PLACEHOLDERS)} ({type(e).__name__}: {e})") from None


class OpenAIPolicy(Policy):
    """A policy served by an OpenAI-compatible ``/v1/completions`` endpoint (vLLM, SGLang, :func:`serve_policy`).

    Each request is sent as its own HTTP call with the prompt as a list of token ids, concurrently (the server
    batches them); in a collector's session (:meth:`session`) a trajectory's next turn is posted as soon as its env
    answered, while the others' replies are still being sampled. The server must return the sampled token ids —
    ``choices[i].token_ids`` (vLLM's ``return_token_ids``) or ``logprobs.tokens`` as ``"token_id:<id>"`` (vLLM's
    ``return_tokens_as_token_ids``) — and ``logprobs.token_logprobs``. See docs/collector.md for the server flags.

    Sampling: every request states the whole distribution (:class:`SamplingParams`: temperature, top-k as -1 when
    off, top-p) and the neutral values of what :class:`SamplingParams` does not have (``min_p`` 0, ``repetition_
    penalty`` 1, presence and frequency penalties 0), so the sampling defaults a server reads from the model's
    ``generation_config.json`` (Qwen2.5: ``top_k`` 20, ``repetition_penalty`` 1.05) never apply silently. A
    temperature in (0, 1e-5) is refused: vLLM samples greedily below 1e-5, which is not that distribution.

    LoRA weight sync (:meth:`update_weights`): a trainer's PEFT adapter is saved to a new versioned folder under
    ``adapter_dir`` and loaded on the server under a new name through the server's runtime LoRA endpoint; from then
    on requests name that adapter, and the previous one is unloaded. Names are
    ``f"{adapter_prefix}-{run_id}-r{rank}-v{N}"``: ``run_id`` is random per policy object (a new one for every
    ``agentrl eval``, ``train`` and ``--resume``), ``rank`` the data-parallel rank (``RANK``), so runs and resumed
    runs never load a name twice (vLLM answers HTTP 400 "has already been loaded"). Data-parallel ranks sharing one
    server load each version there once, as ``f"{adapter_prefix}-{run_id}-v{N}"`` of their lowest rank
    (:meth:`join_group`, :mod:`~agentrl.algos.policy.adapter_group`). vLLM
    must be started with ``--enable-lora --max-lora-rank R`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; SGLang
    with ``--enable-lora --max-lora-rank R --lora-target-modules ...`` (see docs/collector.md). The server reads
    the adapter from ``adapter_dir``, so that folder must be on a file system the server sees.

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
        adapter_prefix: the first part of adapter names (default ``model``).
        run_id: the part that tells this policy's adapters from every other's (default: 8 random hex digits).
        rank: the data-parallel rank in adapter names (default: the ``RANK`` environment variable, else 0).
        record_dir: when set, ``record_dir/served-adapters-r{rank}.txt`` lists the adapters this policy has loaded on
            the server and not unloaded yet (deleted by :meth:`close`). A process killed before :meth:`close` leaves
            it behind; the next policy given the same folder (``agentrl train --resume`` of that run) unloads the
            adapters it names before it loads its first, so a killed run does not leave them on the server. The
            adapters this policy saves go to ``record_dir/served-adapters-r{rank}/`` (unless ``adapter_dir`` is
            given) rather than a temporary folder, so a killed run's are deleted by the next policy too.
    """

    def __init__(self, base_url: str, model: str, tokenizer, *, max_concurrency: int = 64, timeout_s: float = 600.0,
                 api_key: str | None = None, adapter_dir: str | None = None, lora_api: str = "vllm",
                 adapter_prefix: str | None = None, run_id: str | None = None, rank: int | None = None,
                 record_dir: str | os.PathLike | None = None):
        if lora_api not in ("vllm", "sglang"):
            raise ValueError(f"lora_api must be 'vllm' or 'sglang', got {lora_api!r}")
        if rank is None:
            rank = int(os.environ.get("RANK", "0") or 0)
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
        self.run_id = run_id or secrets.token_hex(4)
        self.adapter_prefix = f"{adapter_prefix or model}-{self.run_id}-r{rank}"
        """Adapter names are ``f"{adapter_prefix}-v{N}"``: unique to this policy object (run and rank), or to the
        publisher of its :attr:`group` (no rank: one name for the ranks sharing a server)."""
        self._shared_prefix = f"{adapter_prefix or model}-{self.run_id}"
        self.group: ServerGroup | None = None
        """The data-parallel ranks sharing this policy's server (:meth:`join_group`; None: this policy alone)."""
        self.adapter_name: str | None = None
        """The adapter requests are sampled with (None: the base model)."""
        self._loaded_here = False  # whether this policy loaded adapter_name (and so unloads it)
        self.raw_logprobs: bool | None = None  # raw logprobs? (:meth:`check_logprobs_mode`; None: not checked)
        self._adapter_path: str | None = None
        # the file listing the adapters this policy has loaded and not unloaded (None: not recorded)
        self.record_path = Path(record_dir) / f"served-adapters-r{rank}.txt" if record_dir is not None else None
        self._recorded_dir = self.record_path.with_suffix("") if self.record_path is not None else None
        if self.adapter_dir is None and self._recorded_dir is not None:
            self.adapter_dir = str(self._recorded_dir)
        self._left_over = self._read_record()
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="openai-policy")

    # ---------------------------------------------------------------- LoRA weight sync
    def _lora_url(self, action: str) -> str:
        root = self.base_url if self.lora_api == "vllm" else self.base_url[: -len("/v1")]
        return f"{root}/{action}_lora_adapter"

    def _lora_call(self, action: str, body: dict[str, Any]):
        return self._post_json(self._lora_url(action), body)

    @classmethod
    def connect(cls, base_url: str, tokenizer, *, model: str | None = None, check_logprobs: bool = True,
                **kwargs: Any) -> OpenAIPolicy:
        """An :class:`OpenAIPolicy` for the server at ``base_url``; ``model`` None means the first base model the
        server lists (``GET /v1/models``, entries without a ``parent``). Other keyword arguments go to the
        constructor. Raises ``RuntimeError`` when the server cannot be reached or lists no model.

        ``check_logprobs``: ask the server which logprobs it returns (:meth:`check_logprobs_mode`) and log a
        one-line warning naming vLLM's ``--logprobs-mode processed_logprobs`` when they are raw."""
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
        policy = cls(base_url, model, tokenizer, **kwargs)
        if check_logprobs:
            policy.check_logprobs_mode()
        return policy

    # ---------------------------------------------------------------- which logprobs the server returns
    #: Prompts of the probe (:meth:`logprobs_mode`); the second is tried when the first is inconclusive.
    PROBE_TEXTS = ("The", "Once upon a time, there was a")
    #: A top-k-1 token's logprob below this is a full-vocabulary (raw) one; a processed one is 0 up to rounding.
    RAW_LOGPROB_BELOW = -1e-3
    #: Seconds the probe waits for each answer.
    PROBE_TIMEOUT_S = 60.0

    def logprobs_mode(self) -> str | None:
        """Which logprobs the server returns: ``"processed"`` (of the distribution it samples from, after
        temperature and top-k/top-p: vLLM's ``--logprobs-mode processed_logprobs``,
        :func:`~agentrl.algos.policy.server.serve_policy`'s), ``"raw"`` (of the model's logits before them: vLLM's
        default ``raw_logprobs``), or None when the server gives the probe no usable answer.

        The probe samples one token at temperature 1 with top-k 1: the sampled distribution is that one token,
        whose processed logprob is 0, while its raw logprob is its probability under the whole vocabulary."""
        import requests

        sampling = SamplingParams(temperature=1.0, top_k=1)
        for text in self.PROBE_TEXTS:
            try:
                ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) or [0]
                body = self._payload(GenerationRequest(prompt_ids=ids, max_new_tokens=1), sampling)
                body["model"] = self.base_model_name
                body.pop("lora_path", None)
                r = self._post_json(f"{self.base_url}/completions", body, timeout_s=self.PROBE_TIMEOUT_S)
                if r.status_code != 200:
                    logger.info("%s/completions answered HTTP %d to the logprobs probe: not checked", self.base_url,
                                r.status_code)
                    return None
                logprobs = self.parse_choice(r.json()["choices"][0], ()).logprobs
            except (requests.RequestException, RuntimeError, ValueError, KeyError, IndexError, TypeError) as e:
                logger.info("the logprobs probe of %s failed (%s): not checked", self.base_url, e)
                return None
            if not logprobs:
                return None
            if logprobs[0] < self.RAW_LOGPROB_BELOW:
                return "raw"
        return "processed"  # (a raw server whose model gives every probe's next token probability ~1 reads so too)

    def check_logprobs_mode(self) -> str | None:
        """:meth:`logprobs_mode`, with a one-line warning when the server returns raw logprobs: at a temperature
        other than 1, or with top-k/top-p, they are not the logprobs of the sampled distribution, so the rollout
        correction's weights (and ``train/logprob_gap``) are skewed. Sets :attr:`raw_logprobs`."""
        mode = self.logprobs_mode()
        self.raw_logprobs = mode == "raw"
        if self.raw_logprobs:
            logger.warning("%s returns raw logprobs (before temperature and top-k/top-p): at a temperature other "
                           "than 1 or with top-k/top-p the rollout correction is skewed; start vLLM with "
                           "--logprobs-mode processed_logprobs", self.base_url)
        return mode

    def update_weights(self, source_model) -> None:
        """Sync ``source_model``'s LoRA adapter to the server and sample with it from now on.

        Saves the adapter (PEFT format) to ``adapter_dir/<name>``, loads it on the server under ``<name>``
        (:attr:`adapter_prefix` ``-v<N>``), switches requests to it, then unloads the previous version and deletes
        its folder. Only the adapter travels (megabytes), never the base weights. In a :attr:`group` of ranks
        sharing the server only its publisher saves and loads; every rank of the run calls this at once
        (:class:`~agentrl.algos.policy.adapter_group.ServerGroup`). Raises ``TypeError`` for a model without a
        PEFT adapter and ``RuntimeError`` (with the server's answer and the flags it needs) when the server
        refuses the load."""
        if not is_peft(source_model):
            raise TypeError("OpenAIPolicy syncs LoRA adapters only: pass a PEFT model (full-weight sync to a "
                            "server is not supported)")
        name = self._next_name()

        def saved() -> Path:
            if self.adapter_dir is None:
                self.adapter_dir = tempfile.mkdtemp(prefix="agentrl-lora-")
            path = Path(self.adapter_dir).resolve() / name.replace("/", "--")
            save_adapter(source_model, path)
            return path
        self._switch_adapter(name, saved, owned=True)

    def use_adapter(self, path: str | Path) -> None:
        """Sample with the PEFT adapter folder ``path`` (e.g. ``runs/x/adapter``) from now on; the folder is read
        by the server and never deleted. Raises like :meth:`update_weights`."""
        folder = Path(path).resolve()

        def checked() -> Path:
            check_adapter_folder(folder)
            return folder
        self._switch_adapter(self._next_name(), checked, owned=False)

    def _next_name(self) -> str:
        """The server-side name of the next adapter version."""
        return f"{self.adapter_prefix}-v{self.version + 1}"

    def server_key(self) -> dict[str, Any]:
        """What :meth:`join_group` needs from every rank: this policy's server and its adapter prefix."""
        return {"server": server_key(self.base_url), "prefix": self._shared_prefix}

    def join_group(self, everyone: Sequence[dict[str, Any]], rank: int, exchange: Exchange) -> None:
        """Share the server with the data-parallel ranks whose :meth:`server_key` names the same one (``everyone``:
        each rank's, in rank order; ``exchange``: an all-gather over the run): from now on each adapter version is
        loaded there once, by the lowest of them, under a name without a rank
        (:func:`~agentrl.algos.training.distributed.share_servers` calls it)."""
        self.group = ServerGroup.build(everyone, rank, exchange)
        self.adapter_prefix = self.group.prefix
        logger.info("rank %d samples through %s with ranks %s; rank %d publishes each adapter version there", rank,
                    self.base_url, list(self.group.members), self.group.publisher)

    # ---------------------------------------------------------------- the record of loaded adapters
    def _read_record(self) -> list[str]:
        if self.record_path is None or not self.record_path.is_file():
            return []
        return [line.strip() for line in self.record_path.read_text().splitlines() if line.strip()]

    def _write_record(self, names: list[str]) -> None:
        if self.record_path is None:
            return
        if not names:
            self.record_path.unlink(missing_ok=True)
            return
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.record_path.with_name(self.record_path.name + ".tmp")
        tmp.write_text("".join(f"{n}\n" for n in names))
        tmp.replace(self.record_path)

    def _unload_left_over(self) -> None:
        """Unload the adapters a killed predecessor recorded (an adapter the server no longer has is skipped)."""
        left, self._left_over = self._left_over, []
        for name in left:
            try:
                r = self._lora_call("unload", {"lora_name": name})
            except Exception as e:  # noqa: BLE001 - best effort: the server may be another one by now
                logger.warning("could not unload adapter %s left by a killed run: %s", name, e)
                continue
            if r.status_code == 200:
                logger.info("unloaded adapter %s, left on %s by a killed run", name, self.base_url)
        if self._recorded_dir is not None:  # their folders, saved by the killed run's policy
            for name in left:
                shutil.rmtree(self._recorded_dir / name.replace("/", "--"), ignore_errors=True)
        self._write_record([])

    def _switch_adapter(self, name: str, produce: Callable[[], Path], *, owned: bool) -> None:
        """Load adapter ``name`` from the folder ``produce`` returns, sample with it, unload the previous one (and
        delete its folder when this policy wrote it); in a :attr:`group`, together with its other ranks."""
        if self.group is not None:
            self.group.switch(self, name, produce, owned=owned)
            return
        path = produce()
        self._load(name, path, owned=owned)
        self._unload(*self._take(name, str(path) if owned else None, loaded_here=True))

    def _load(self, name: str, path: Path, *, owned: bool) -> None:
        """Load adapter ``name`` from ``path`` on the server (recorded first), without sampling with it yet."""
        if self._left_over:
            self._unload_left_over()
        # recorded before the load: a kill between the two leaves a name to unload, never a loaded one unrecorded
        self._write_record([n for n in (self._recorded_name, name) if n is not None])
        r = self._lora_call("load", {"lora_name": name, "lora_path": str(path)})
        if r.status_code != 200:
            self._write_record([self._recorded_name] if self._recorded_name is not None else [])
            if owned:
                shutil.rmtree(path, ignore_errors=True)
            hint = ""
            if r.status_code in (404, 405):
                hint = (" (no runtime LoRA endpoint: start vLLM with --enable-lora --max-lora-rank R and "
                        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or SGLang with --enable-lora and lora_api='sglang')")
            raise RuntimeError(f"{self._lora_url('load')} answered HTTP {r.status_code}{hint}: {r.text[:500]}")

    @property
    def _recorded_name(self) -> str | None:
        """The adapter this policy loaded and samples with (None: none, or its group's publisher loaded it)."""
        return self.adapter_name if self._loaded_here else None

    def _take(self, name: str, path: str | None, *, loaded_here: bool) -> tuple[str | None, str | None]:
        """Sample with adapter ``name`` from now on (``path``: its folder when this policy wrote it); the previous
        ``(name, folder)`` when this policy loaded it (else Nones: not this policy's to unload)."""
        old = (self.adapter_name, self._adapter_path) if self._loaded_here else (None, None)
        self.adapter_name, self._adapter_path, self._loaded_here = name, path, loaded_here
        if self.lora_api == "vllm":
            self.model_name = name
        self.version += 1
        logger.info("server %s samples with adapter %s", self.base_url, name)
        return old

    def _unload(self, name: str | None, path: str | None) -> None:
        """Unload adapter ``name`` (None: nothing) and delete ``path`` (a folder this policy wrote)."""
        if name is not None:
            r = self._lora_call("unload", {"lora_name": name})
            if r.status_code != 200:
                logger.warning("could not unload adapter %s from %s: HTTP %d %s", name, self.base_url,
                               r.status_code, r.text[:200])
        if path:
            shutil.rmtree(path, ignore_errors=True)
        self._write_record([self._recorded_name] if self._recorded_name is not None else [])

    #: Below this temperature vLLM samples greedily (its ``_SAMPLING_EPS``).
    MIN_TEMPERATURE = 1e-5

    def _payload(self, req: GenerationRequest, sampling: SamplingParams) -> dict[str, Any]:
        if 0 < sampling.temperature < self.MIN_TEMPERATURE:
            raise ValueError(f"temperature {sampling.temperature} is greedy on vLLM (below {self.MIN_TEMPERATURE}) "
                             "but a sampled distribution in process; use temperature=0 for greedy")
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": list(req.prompt_ids),
            "max_tokens": req.max_new_tokens,
            # The whole distribution, always: a server fills an omitted setting from the model's
            # generation_config.json (vLLM's default --generation-config auto), e.g. Qwen2.5's top_k 20.
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "logprobs": 0,
            "stop_token_ids": list(sampling.stop_token_ids),
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if req.seed is not None:
            body["seed"] = int(req.seed)
        if self.lora_api == "sglang" and self.adapter_name is not None:
            body["lora_path"] = self.adapter_name
        return body

    def _post_json(self, url: str, body: dict[str, Any], timeout_s: float | None = None):
        """POST ``body`` as JSON to ``url`` (with the bearer token when an ``api_key`` is set); the response."""
        import requests

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return requests.post(url, json=body, headers=headers, timeout=timeout_s or self.timeout_s)

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
        """Unload the adapter this policy last loaded (a server you run keeps serving only what it served before),
        delete its folder when this policy wrote it, and stop the request threads. Idempotent; a server that is
        gone is logged, not raised."""
        import requests

        if getattr(self, "_closed", False):
            return
        self._closed = True
        name, path = self._recorded_name, self._adapter_path  # adapter_name stays: the last one sampled with
        self._adapter_path = None
        if name is not None:  # (a group's adapters are unloaded by its publisher)
            try:
                r = self._lora_call("unload", {"lora_name": name})
                if r.status_code != 200:
                    logger.warning("could not unload adapter %s from %s: HTTP %d %s", name, self.base_url,
                                   r.status_code, r.text[:200])
            except requests.RequestException as e:
                logger.warning("could not unload adapter %s from %s: %s", name, self.base_url, e)
        if path:
            shutil.rmtree(path, ignore_errors=True)
        if self._left_over:  # a predecessor's adapters, when this policy never loaded one
            self._unload_left_over()
        self._write_record([])
        if self._recorded_dir is not None:  # this rank's adapter folders: none is loaded any more
            shutil.rmtree(self._recorded_dir, ignore_errors=True)
        self._pool.shutdown(wait=False)


class _Posted(Session):
    """:class:`OpenAIPolicy`'s session: requests in flight as HTTP calls; the server decides the batches."""

    policy: OpenAIPolicy

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
