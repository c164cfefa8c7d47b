"""A small OpenAI-compatible server over any :class:`~agentrl.algos.policy.Policy`: :func:`serve_policy`.

* :func:`serve_policy` starts it in a thread and returns a :class:`PolicyServer` (``url``, ``close()``).
* ``_BatchingWorker`` answers requests that arrive within a short window with one ``generate`` call.
* ``_Handler`` speaks the protocol: ``GET /v1/models``, ``POST /v1/completions`` (token-id prompts) and, with
  ``enable_lora``, vLLM's and SGLang's runtime LoRA endpoints; ``_Models`` is what the server answers for.
"""

from __future__ import annotations

import copy
import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentrl.algos.models.lora import is_peft, load_adapter
from agentrl.algos.policy.base import GenerationRequest, GenerationResult, Policy, SamplingParams
from agentrl.algos.policy.hf import HFPolicy

logger = logging.getLogger(__name__)


class PolicyServer:
    """A running :func:`serve_policy` server: ``url``, ``close()``; also a context manager."""

    def __init__(self, httpd, thread, worker):
        self.httpd = httpd
        self._thread = thread
        self._worker = worker
        host, port = httpd.server_address[:2]
        self.url = f"http://{host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._worker.stop()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass
class _Job:
    """One request waiting in the batching worker's queue; ``done`` is set once ``result`` or ``error`` is."""

    policy: Policy
    request: GenerationRequest
    sampling: SamplingParams
    done: threading.Event = field(default_factory=threading.Event)
    result: GenerationResult | None = None
    error: Exception | None = None


class _BatchingWorker:
    """Collects concurrent HTTP requests for a few milliseconds and answers them with one ``generate`` call
    per (policy, sampling parameters)."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self.queue: queue.Queue[_Job] = queue.Queue()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="policy-server-batcher")
        self.thread.start()

    def submit(self, req: GenerationRequest, sampling: SamplingParams, policy: Policy) -> GenerationResult:
        """Answer ``req`` with ``policy``, batched with concurrent requests to it; raises what ``generate`` raised."""
        job = _Job(policy, req, sampling)
        self.queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None  # the worker sets result or error before done
        return job.result

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            jobs = [first]
            deadline = time.monotonic() + self.window_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    jobs.append(self.queue.get(timeout=left))
                except queue.Empty:
                    break
            groups: dict[tuple[int, str], list[_Job]] = {}
            for job in jobs:
                groups.setdefault((id(job.policy), repr(job.sampling)), []).append(job)
            for group in groups.values():
                try:
                    results = group[0].policy.generate([job.request for job in group], group[0].sampling)
                    for job, res in zip(group, results, strict=True):
                        job.result = res
                except Exception as e:  # answered as HTTP 500
                    for job in group:
                        job.error = e
                for job in group:
                    job.done.set()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)


def _adapter_policy(base: Policy, path: str) -> HFPolicy:
    """An :class:`HFPolicy` sampling ``base``'s model with the PEFT adapter at ``path`` merged in (fp32 merge)."""
    if not isinstance(base, HFPolicy):
        raise TypeError(f"LoRA adapters load into a served HFPolicy only, not into a {type(base).__name__}")
    if not (Path(path) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no PEFT adapter at {path} (no adapter_config.json)")
    # load_adapter injects LoRA layers into the model it is given: give it a copy, never the served base.
    peft_model = load_adapter(copy.deepcopy(base.model), path)
    return HFPolicy(peft_model, base.tokenizer, max_batch_size=base.max_batch_size,
                    max_batch_tokens=base.max_batch_tokens, compact_fraction=base.compact_fraction,
                    cascade=base.cascade, compile_decode=base.compile_decode)


class _Models:
    """What a server answers for: the base ``policy`` under ``model_name`` and loaded LoRA adapters by name."""

    def __init__(self, policy: Policy, model_name: str):
        self.policy = policy
        self.model_name = model_name
        self._adapters: dict[str, Policy] = {}
        self._lock = threading.Lock()

    def listing(self) -> list[dict[str, Any]]:
        """``GET /v1/models`` data: the base model, then each adapter with the base as its parent."""
        with self._lock:
            names = list(self._adapters)
        return [{"id": self.model_name, "object": "model"}] + [
            {"id": n, "object": "model", "parent": self.model_name} for n in names]

    def get(self, name: str) -> Policy | None:
        """The policy answering for ``name`` (None: no such model)."""
        with self._lock:
            return self.policy if name == self.model_name else self._adapters.get(name)

    def has_adapter(self, name: str) -> bool:
        with self._lock:
            return name in self._adapters

    def add_adapter(self, name: str, policy: Policy) -> None:
        with self._lock:
            self._adapters[name] = policy

    def remove_adapter(self, name: str) -> bool:
        """Forget adapter ``name``; False if it was not loaded."""
        with self._lock:
            return self._adapters.pop(name, None) is not None


class _PolicyHTTPServer(ThreadingHTTPServer):
    """The HTTP server; its handlers reach the served models and the batching worker through it."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], models: _Models, worker: _BatchingWorker, enable_lora: bool,
                 sampling_defaults: dict[str, float] | None = None):
        self.models = models
        self.worker = worker
        self.enable_lora = enable_lora
        self.sampling_defaults = dict(sampling_defaults or {})
        super().__init__(address, _Handler)


#: The sampling settings of a completion request and their neutral values (vLLM's defaults with
#: ``--generation-config vllm``); the last four shape the distribution in ways :class:`SamplingParams` cannot.
NEUTRAL_SAMPLING: dict[str, float] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                                      "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
_GREEDY_BELOW = 1e-5  # vLLM samples greedily below this temperature


def _read_completion_request(body: dict[str, Any],
                             defaults: dict[str, float] | None = None) -> tuple[GenerationRequest, SamplingParams]:
    """The generation request and sampling parameters of a ``/v1/completions`` body (token-id prompt).

    A sampling setting the body omits (or sends as null) takes its value from ``defaults`` (the server's, as vLLM
    reads them from the model's generation_config.json), else the neutral one. Raises ``ValueError`` for a
    setting this server cannot sample (a non-neutral ``min_p`` or penalty) rather than ignoring it.
    """
    prompt = body["prompt"]
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        raise ValueError("prompt must be a non-empty list of token ids")
    given = {k: (body[k] if body.get(k) is not None else (defaults or {}).get(k, v))
             for k, v in NEUTRAL_SAMPLING.items()}
    unsupported = {k: given[k] for k in ("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")
                   if float(given[k]) != NEUTRAL_SAMPLING[k]}
    if unsupported:
        raise ValueError(f"this server samples temperature, top_k and top_p only; it cannot honour "
                         f"{', '.join(f'{k}={v}' for k, v in unsupported.items())}")
    temperature = float(given["temperature"])
    sampling = SamplingParams(temperature=0.0 if temperature < _GREEDY_BELOW else temperature,
                              top_p=float(given["top_p"]), top_k=max(0, int(given["top_k"])),
                              stop_token_ids=tuple(body.get("stop_token_ids") or ()))
    return GenerationRequest(prompt, int(body.get("max_tokens", 16)), seed=body.get("seed")), sampling


def _completion_response(model: str, prompt: list[int], res: GenerationResult, text: str) -> dict[str, Any]:
    """A ``text_completion`` answer in the shape vLLM gives with ``return_token_ids`` and token-id logprobs."""
    return {
        "id": f"cmpl-{time.monotonic_ns()}", "object": "text_completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "token_ids": res.token_ids,
                     "finish_reason": res.finish_reason,
                     "logprobs": {"tokens": [f"token_id:{t}" for t in res.token_ids],
                                  "token_logprobs": res.logprobs}}],
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(res.token_ids),
                  "total_tokens": len(prompt) + len(res.token_ids)},
    }


_LORA_ROUTES = {"/v1/load_lora_adapter": "load", "/load_lora_adapter": "load",
                "/v1/unload_lora_adapter": "unload", "/unload_lora_adapter": "unload"}


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request: routes to the models listing, a completion, or a LoRA load/unload."""

    server: _PolicyHTTPServer

    def log_message(self, fmt, *args):  # quiet: logging, not stderr
        logger.debug("policy server: " + fmt, *args)

    # ---------------------------------------------------------------- replies
    def _reply(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, code: int, obj: dict[str, Any]) -> None:
        self._reply(code, json.dumps(obj).encode(), "application/json")

    def _send_text(self, code: int, text: str) -> None:
        self._reply(code, text.encode(), "text/plain; charset=utf-8")

    def _error(self, code: int, message: str, kind: str | None = None) -> None:
        error = {"message": message} if kind is None else {"message": message, "type": kind}
        self._send(code, {"error": error})

    def _body(self) -> dict[str, Any]:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    # ---------------------------------------------------------------- routes
    def do_GET(self):
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": self.server.models.listing()})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self):
        route = self.path.rstrip("/")
        if self.server.enable_lora and route in _LORA_ROUTES:
            self._lora(_LORA_ROUTES[route])
        elif route == "/v1/completions":
            self._complete()
        else:
            self._error(404, f"no route {self.path}")

    def _complete(self) -> None:
        models = self.server.models
        try:
            body = self._body()
            req, sampling = _read_completion_request(body, self.server.sampling_defaults)
        except (ValueError, KeyError, TypeError) as e:
            self._error(400, str(e), "invalid_request_error")
            return
        name = body.get("lora_path") or body.get("model") or models.model_name
        target = models.get(name)
        if target is None:
            self._error(404, f"The model `{name}` does not exist.", "NotFoundError")
            return
        try:
            res = self.server.worker.submit(req, sampling, target)
        except Exception as e:
            logger.exception("policy server: generation failed")
            self._error(500, f"{type(e).__name__}: {e}")
            return
        tokenizer = models.policy.tokenizer
        text = tokenizer.decode(res.token_ids) if tokenizer is not None else ""
        self._send(200, _completion_response(name, req.prompt_ids, res, text))

    def _lora(self, action: str) -> None:
        models = self.server.models
        try:
            body = self._body()
            name = body["lora_name"]
            if not isinstance(name, str) or not name or name == models.model_name:
                raise ValueError(f"invalid lora_name {name!r}")
        except (ValueError, KeyError, TypeError) as e:
            self._error(400, str(e), "invalid_request_error")
            return
        if action == "unload":
            if models.remove_adapter(name):
                self._send_text(200, f"Success: LoRA adapter '{name}' removed successfully.")
            else:
                self._error(404, f"The lora adapter '{name}' cannot be found.")
            return
        if models.has_adapter(name):
            self._error(400, f"The lora adapter '{name}' has already been loaded.")
            return
        try:
            loaded = _adapter_policy(models.policy, str(body.get("lora_path", "")))
        except Exception as e:
            logger.exception("policy server: loading adapter %s failed", name)
            self._error(400, f"loading {name} failed: {type(e).__name__}: {e}")
            return
        models.add_adapter(name, loaded)
        self._send_text(200, f"Success: LoRA adapter '{name}' added successfully.")


def serve_policy(policy: Policy, host: str = "127.0.0.1", port: int = 0, *, model_name: str = "agentrl",
                 batch_window_s: float = 0.01, enable_lora: bool = False,
                 sampling_defaults: dict[str, float] | None = None) -> PolicyServer:
    """Serve ``policy`` as an OpenAI-compatible ``/v1/completions`` endpoint (token-id prompts) in a thread.

    A small reference server for tests and for sharing one model between processes on a machine; at scale
    use vLLM or SGLang. Requests arriving within ``batch_window_s`` are decoded together. It answers with
    ``choices[0].token_ids``, ``logprobs.tokens`` (``"token_id:<id>"``), ``logprobs.token_logprobs`` and
    ``finish_reason``; ``port=0`` picks a free port (see ``server.url``). A request's ``model`` must be
    ``model_name`` (or a loaded adapter's name); an unknown name is answered 404, as vLLM does.

    ``enable_lora=True`` (``policy`` must be an :class:`HFPolicy` of a plain model) adds vLLM's runtime LoRA
    endpoints, ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` and ``POST /v1/unload_lora_adapter``
    ``{"lora_name"}`` (also under SGLang's paths, without ``/v1``): a loaded PEFT adapter is merged into its own
    merged copy of the base model and served under its name, chosen by a request's ``model`` (vLLM) or
    ``lora_path`` (SGLang). Loading an existing name is a 400 (vLLM's "has already been loaded"); unloading an
    unknown one a 404.

    Sampling as vLLM reads a request: ``temperature``, ``top_k`` (-1 or 0: off) and ``top_p``; a temperature below
    1e-5 is greedy. A setting the request omits takes its value from ``sampling_defaults`` (what vLLM's default
    ``--generation-config auto`` reads from the model's generation_config.json, e.g. ``{"top_k": 20}``), else
    the neutral one. A non-neutral ``min_p``, ``repetition_penalty``, ``presence_penalty`` or
    ``frequency_penalty`` (requested or default) is answered 400: this server cannot sample it.
    """
    if enable_lora and (not isinstance(policy, HFPolicy) or is_peft(policy.model)):
        raise TypeError("serve_policy(enable_lora=True) needs an HFPolicy of a plain (non-PEFT) model")
    unknown = set(sampling_defaults or {}) - set(NEUTRAL_SAMPLING)
    if unknown:
        raise ValueError(f"sampling_defaults: unknown settings {sorted(unknown)} (known: {list(NEUTRAL_SAMPLING)})")
    worker = _BatchingWorker(batch_window_s)
    httpd = _PolicyHTTPServer((host, port), _Models(policy, model_name), worker, enable_lora, sampling_defaults)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True, name="policy-server")
    thread.start()
    return PolicyServer(httpd, thread, worker)
