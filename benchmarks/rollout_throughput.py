"""Rollout throughput: our collector against other ways to roll out, in the same run, on multi-turn ToolUse-v0 episodes.

The same tasks (``--group-size`` trajectories per task, at each of ``--sizes`` trajectories in all) rolled out by:

* ``collector``           — :func:`agentrl.algos.rollout.collector.collect` with :class:`HFPolicy`: one batch for all
  live trajectories, the group prompt prefilled once, each trajectory's KV cache kept across turns;
* ``collector, rounds``   — the same with ``continuous=False``: every live trajectory's reply is sampled before any
  env steps (each round waits for its longest reply) instead of a trajectory's next turn joining the running
  batch; the row appears when ``CollectorConfig`` has ``continuous``;
* ``collector, no cascade`` — the same with ``HFPolicy(cascade=False)`` (shared-prefix cascade attention off); the row
  appears when ``HFPolicy`` has the ``cascade`` argument;
* ``collector, compiled decode (cold|warm)`` and ``collector, no cascade, compiled decode (cold|warm)``
  (``--compiled-decode``) — the "collector" and "no cascade" rows with ``HFPolicy(compile_decode="on")``
  (static-shape compiled decode steps), each run twice: cold (its wall time includes compiling, printed apart)
  and warm (the graphs reused);
* ``collector, no reuse`` — the same with ``reuse_cache=False`` (every turn re-encodes its whole prompt, still
  batched);
* ``transformers continuous batching`` — :class:`ContinuousBatchingPolicy`: every collector call hands all its
  requests, whole prompts, to transformers' own continuous-batching manager (what TRL's
  ``use_transformers_continuous_batching`` runs); settings printed with the row (``--cb-*``);
* ``naive generate``      — one ``model.generate`` per trajectory per turn with the whole context re-encoded (the
  from-scratch loop of ToolBrain); measured only at sizes <= ``--naive-max``.
* ``vLLM server``, ``vLLM server, rounds`` (``--vllm``) — the collector sampling through a real vLLM server
  (:class:`~agentrl.algos.policy.engine.VLLMEngine`, its own process, the build in ``.venv-vllm``: the CPU build
  here) over ``/v1/completions`` with token ids in and out, continuous and in rounds. The server starts after
  every in-process row has run (so it never competes with them for the cores), serves the same model at the same
  dtype, and is warmed up before it is measured; its startup time is printed, not counted.

All are driven by the same collector, so only generation differs. An untrained 135M model rarely writes a valid
tool call, so ToolUse-v0 would end most episodes after one reply. To measure *multi-turn* rollout the env here is
ToolUse-v0 with one change: an invalid reply gets an error observation and the episode continues (up to
``--max-turns``); prompts, tools and observations are the real ones.

    python benchmarks/rollout_throughput.py                       # smollm2-135m, 16 trajectories (4 tasks x 4)
    python benchmarks/rollout_throughput.py --sizes 16,64 --naive-max 16
    python benchmarks/rollout_throughput.py --quick               # CI-sized: a tiny random model, 4 trajectories
    python benchmarks/rollout_throughput.py --vllm --skip-naive --skip-cb   # our collector vs a vLLM server
    python benchmarks/rollout_throughput.py --compiled-decode --skip-naive --skip-cb   # compiled vs eager decode

Prints tokens/s (sampled tokens / wall time) for each row and a markdown table with the collector's tokens/s
divided by each row's; never asserts.
"""

from __future__ import annotations

import argparse
import inspect
import math
import time
from collections import Counter
from pathlib import Path

from agentrl.algos.policy.base import GenerationResult, Policy
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.rollout.collector import CollectorConfig, collect
from agentrl.envs.tool_use.env import ToolUseEnv, make_tasks

CB_ROW = "transformers continuous batching"


class KeepGoingToolUse(ToolUseEnv):
    """ToolUse-v0 where an invalid reply is answered with an error and the episode goes on (benchmark only)."""

    def _step(self, action):
        parsed = self.parser.parse(action if isinstance(action, str) else str(action))
        if parsed.kind != "invalid":
            return super()._step(action)
        self.metrics.turns += 1
        self.metrics.invalid_calls += 1
        self.messages.append({"role": "assistant", "content": action})
        obs = f"Invalid reply ({parsed.error}). Call one tool, or reply 'Answer: <answer>'."
        self.messages.append({"role": "tool", "content": obs})
        if self.metrics.turns >= self.budgets.max_turns:
            return self._finish(obs, parsed, reward=self.rewards.invalid, termination="budget", truncated=True,
                                obs_role="tool")
        return obs, 0.0, False, False, self._info(parsed, "tool")


class NaiveGeneratePolicy(Policy):
    """One ``model.generate`` call per request, whole prompt re-encoded, nothing kept between calls."""

    def __init__(self, model, tokenizer):
        self.model = model
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        import torch

        out = []
        for req in requests:
            ids = torch.tensor([req.prompt_ids], device=self.model.device)
            kwargs = dict(do_sample=sampling.temperature > 0, max_new_tokens=req.max_new_tokens,
                          eos_token_id=list(sampling.stop_token_ids), pad_token_id=self.tokenizer.pad_token_id,
                          output_scores=True, return_dict_in_generate=True)
            if sampling.temperature > 0:
                kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
            if req.seed is not None:
                torch.manual_seed(req.seed)
            with torch.inference_mode():
                gen = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
            new = gen.sequences[0, ids.shape[1]:].tolist()
            lps = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(gen.scores, new, strict=False)]
            finish = "stop" if new and new[-1] in sampling.stop_token_ids else "length"
            out.append(GenerationResult(new, lps, finish))
        return out


class ContinuousBatchingPolicy(Policy):
    """transformers' own continuous batching (``model.init_continuous_batching``) as the policy.

    Each :meth:`generate` call adds all its requests, each with its whole prompt, to one
    ``ContinuousBatchingManager`` that is started on the first call and kept running across calls (as a server
    keeps it; ``model.generate_batch``, which TRL calls, builds and stops a manager per call: about 0.45 s of
    shutdown per call on this CPU, measured with a tiny model), and waits for all of them. Nothing per trajectory is
    kept on our side (``key`` and :meth:`release` are ignored); transformers' own prefix cache
    (``allow_block_sharing``, on by default) may reuse the keys/values of full ``page_size``-token pages of an earlier
    prompt or reply, within a call and across calls. ``stats["prefill_tokens"]`` counts the prompt tokens handed
    over minus those prefix-cache hits (counted by wrapping the cache's ``search_prefix_match``; a request evicted
    and prefilled again would not be counted).

    Sampling: temperature, top-p and top-k of the :class:`SamplingParams` go into the manager's ``GenerationConfig``
    (the manager is rebuilt when they change); the stop tokens are each request's ``eos_token_id`` and its
    ``max_new_tokens`` its budget. Logprobs come from ``return_logprobs=True``: the log of the *processed*
    distribution at the sampled token, renormalised over the tokens top-p/top-k keep, as :class:`HFPolicy`'s are
    (``log_softmax(logits / T)`` when ``top_p == 1`` and ``top_k == 0``, the benchmark's sampling; temperature-1
    logprobs when greedy). Per-request seeds are not supported by the
    manager: one ``seed`` seeds it, and a request's tokens depend on what it was batched with.

    Args:
        page_size: tokens per cache page (transformers' default 256).
        num_blocks: cache capacity in pages (None: transformers sizes it from memory, 60% of free RAM on CPU).
        max_batch_tokens: tokens per forward pass (None: transformers' default 8192).
        attn_implementation: set on the model while the manager runs (None: keep the model's and let transformers
            switch to flash attention when available); on CPU ``"sdpa"`` and ``"paged|eager"`` work.
        block_sharing: transformers' prefix cache (``allow_block_sharing``).
    """

    def __init__(self, model, tokenizer, *, page_size: int = 256, num_blocks: int | None = None,
                 max_batch_tokens: int | None = None, attn_implementation: str | None = "sdpa",
                 block_sharing: bool = True, seed: int = 0):
        self.model = model
        self.tokenizer = tokenizer
        self.settings = dict(page_size=page_size, num_blocks=num_blocks, max_batch_tokens=max_batch_tokens,
                             allow_block_sharing=block_sharing, seed=seed)
        self.attn_implementation = attn_implementation
        self.stats = {"prompt_tokens": 0, "prefix_hit_tokens": 0, "prefill_tokens": 0, "generated_tokens": 0}
        self._manager = None
        self._sampling_key = None
        self._restore_attn = None

    def describe(self) -> str:
        """The settings, as the manager resolved them once it exists."""
        cfg = self._manager.continuous_batching_config if self._manager is not None else None
        get = (lambda k: getattr(cfg, k)) if cfg is not None else self.settings.get
        return (f"page_size={get('page_size')}, num_blocks={get('num_blocks')}, "
                f"max_batch_tokens={get('max_batch_tokens')}, attn={self.model.config._attn_implementation}, "
                f"block sharing={'on' if get('allow_block_sharing') else 'off'}, return_logprobs, seed "
                f"{get('seed')}, one manager kept across calls")

    def _start(self, sampling):
        import torch
        from transformers import GenerationConfig
        from transformers.generation import ContinuousBatchingConfig

        key = (sampling.temperature, sampling.top_p, sampling.top_k)
        if self._manager is not None and key == self._sampling_key:
            return self._manager
        self.close()
        if self.attn_implementation and self.model.config._attn_implementation != self.attn_implementation:
            self._restore_attn = self.model.config._attn_implementation
            self.model.set_attn_implementation(self.attn_implementation)
        sample = sampling.temperature > 0
        gen = GenerationConfig(do_sample=sample, eos_token_id=list(sampling.stop_token_ids) or None,
                               pad_token_id=self.tokenizer.pad_token_id,
                               **(dict(temperature=sampling.temperature, top_p=sampling.top_p,
                                       top_k=sampling.top_k) if sample else {}))
        cb = ContinuousBatchingConfig(return_logprobs=True, auto_switch_to_flash=self.attn_implementation is None,
                                      **self.settings)
        manager = self.model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
        manager.warmup()  # builds the paged cache now (no CUDA graphs on a CPU: nothing else to warm up)
        self._count_prefix_hits(manager)
        with torch.inference_mode():  # the generation thread runs in the caller's inference mode
            manager.start()
        self._manager, self._sampling_key = manager, key
        return manager

    def _count_prefix_hits(self, manager) -> None:
        cache = getattr(getattr(manager, "batch_processor", None), "cache", None)
        search = getattr(cache, "search_prefix_match", None)
        if search is None:
            return

        def counted(request_id, prompt_ids):
            hit = search(request_id, prompt_ids)
            self.stats["prefix_hit_tokens"] += hit
            self.stats["prefill_tokens"] -= hit
            return hit

        cache.search_prefix_match = counted

    def generate(self, requests, sampling):
        manager = self._start(sampling)
        stops = list(sampling.stop_token_ids) or -1
        ids = []
        for req in requests:
            ids.append(manager.add_request(list(req.prompt_ids), max_new_tokens=req.max_new_tokens,
                                           eos_token_id=stops))
            self.stats["prompt_tokens"] += len(req.prompt_ids)
            self.stats["prefill_tokens"] += len(req.prompt_ids)
        if any(i is None for i in ids):
            raise RuntimeError("transformers' continuous batching manager refused a request (see its warning)")
        done = {}
        while len(done) < len(ids):
            out = manager.get_result(timeout=1.0)
            if out is not None and out.is_finished():
                done[out.request_id] = out
            elif out is None and not manager.is_running():
                fatal = manager.background_thread_status.fatal_error
                raise RuntimeError(f"transformers' continuous batching stopped with {len(ids) - len(done)} requests "
                                   f"unfinished: {fatal!r}")
        results = []
        for rid in ids:
            out = done[rid]
            if out.error is not None:
                raise RuntimeError(f"transformers' continuous batching failed request {rid}: {out.error}")
            tokens, lps = list(out.generated_tokens), [float(x) for x in out.logprobs]
            if len(lps) != len(tokens):
                raise RuntimeError(f"request {rid}: {len(tokens)} tokens but {len(lps)} logprobs")
            self.stats["generated_tokens"] += len(tokens)
            results.append(GenerationResult(tokens, lps, "stop" if tokens and tokens[-1] in sampling.stop_token_ids
                                            else "length"))
        return results

    def close(self) -> None:
        """Stop the manager's thread, free its cache and give the model back its attention implementation."""
        if self._manager is not None:
            self._manager.stop(block=True, timeout=30)
            self._manager.destroy()
            self._manager = None
        if self._restore_attn is not None:
            self.model.set_attn_implementation(self._restore_attn)
            self._restore_attn = None


def run(name, policy, tasks, group_size, cfg, size=None):
    t0 = time.perf_counter()
    trajs = collect(lambda: KeepGoingToolUse(max_turns=cfg.max_turns), policy, tasks, group_size, config=cfg)
    wall = time.perf_counter() - t0
    tokens = sum(t.num_action_tokens for t in trajs)
    turns = sum(len(t.turns) for t in trajs) / len(trajs)
    ends = Counter(t.termination for t in trajs)
    stats = getattr(policy, "stats", {})
    row = {"name": name, "size": size or len(trajs), "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall,
           "turns": turns, "ends": dict(ends), "prefill": stats.get("prefill_tokens")}
    print(f"{name:<33} {tokens:>7} tok {wall:>8.1f} s {tokens / wall:>9.1f} tok/s  mean turns {turns:.2f}  "
          f"prefilled {row['prefill'] if row['prefill'] is not None else '-':>7}  ends {dict(ends)}", flush=True)
    return row


def table(rows: list[dict]) -> str:
    """A markdown table of ``rows`` with, per size, the collector's tokens/s divided by each row's.

    A row without ``tok_s`` is listed as not measured, with its ``note``.
    """
    lines = ["| trajectories | rollout | sampled tokens | mean turns | tokens prefilled | wall s | tokens/s | "
             "collector ÷ this |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    ours = {r["size"]: r["tok_s"] for r in rows if r["name"] == "collector" and r.get("tok_s")}
    for r in rows:
        if not r.get("tok_s"):
            lines.append(f"| {r['size']} | {r['name']} | | | | | {r.get('note', 'not measured')} | |")
            continue
        ratio = f"{ours[r['size']] / r['tok_s']:.2f}x" if r["size"] in ours else "-"
        prefill = f"{r['prefill']:,}" if r.get("prefill") is not None else "-"
        lines.append(f"| {r['size']} | {r['name']} | {r['tokens']:,} | {r['turns']:.2f} | {prefill} | "
                     f"{r['wall_s']:.1f} | {r['tok_s']:.1f} | {ratio} |")
    return "\n".join(lines)


def parse_sizes(text: str, group_size: int) -> list[int]:
    """``"16,64"`` -> ``[16, 64]``; each size a positive multiple of ``group_size`` (ValueError naming --sizes)."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--sizes must be comma-separated integers, got {text!r}") from None
    bad = [s for s in sizes if s < 1 or s % group_size]
    if not sizes or bad:
        raise ValueError(f"--sizes: each size must be a positive multiple of --group-size {group_size}, got {text!r}")
    return sizes


def cb_num_blocks(trajectories: int, context: int, page_size: int) -> int:
    """Pages for ``trajectories`` contexts of ``context`` tokens each (one spare page per trajectory for the page
    a reply ends in)."""
    return trajectories * (math.ceil(context / page_size) + 1)


def has_cascade() -> bool:
    """Whether :class:`HFPolicy` takes ``cascade`` (the "collector, no cascade" row runs only then)."""
    return "cascade" in inspect.signature(HFPolicy).parameters


def measure_size(model, tokenizer, args, n: int, cfg) -> list[dict]:
    """Every row at ``n`` trajectories (``n // group_size`` tasks)."""
    tasks = make_tasks(n // args.group_size, "train")
    rows = [run("collector", HFPolicy(model, tokenizer), tasks, args.group_size, cfg, n)]
    if "continuous" in CollectorConfig.__dataclass_fields__:
        rows.append(run("collector, rounds", HFPolicy(model, tokenizer), tasks, args.group_size,
                        CollectorConfig(**{**cfg.__dict__, "continuous": False}), n))
    if has_cascade():
        rows.append(run("collector, no cascade", HFPolicy(model, tokenizer, cascade=False), tasks, args.group_size,
                        cfg, n))
    for cascade, when in ([(True, "cold"), (True, "warm"), (False, "cold"), (False, "warm")]
                          if args.compiled_decode else []):  # cold compiles each bucket's graph; warm reuses them
        policy = HFPolicy(model, tokenizer, cascade=cascade, compile_decode="on")
        name = f"collector, {'' if cascade else 'no cascade, '}compiled decode ({when})"
        rows.append(run(name, policy, tasks, args.group_size, cfg, n))
        st = policy.stats
        print(f"  compiled decode: {st['compiled_decode_steps']} of {st['decode_steps']} steps compiled, "
              f"{st['compile_seconds']:.1f} s compiling, {st['decode_seconds']:.1f} s in decode steps", flush=True)
    rows.append(run("collector, no reuse", HFPolicy(model, tokenizer), tasks, args.group_size,
                    CollectorConfig(**{**cfg.__dict__, "reuse_cache": False}), n))
    if not args.skip_cb:
        rows.append(measure_cb(model, tokenizer, args, n, cfg, tasks))
    if args.skip_naive:
        pass
    elif args.naive_max is None or n <= args.naive_max:
        rows.append(run("naive generate", NaiveGeneratePolicy(model, tokenizer), tasks, args.group_size, cfg, n))
    else:
        rows.append({"name": "naive generate", "size": n, "note": f"not measured (--naive-max {args.naive_max})"})
    return rows


def measure_cb(model, tokenizer, args, n: int, cfg, tasks) -> dict:
    """The continuous-batching row: the manager is built and warmed on a task outside ``tasks`` (setup time
    printed, not counted), then measured, then closed. A failure becomes the row's note with the error text."""
    blocks = args.cb_num_blocks or cb_num_blocks(n, args.cb_context, args.cb_page_size)
    policy = ContinuousBatchingPolicy(model, tokenizer, page_size=args.cb_page_size, num_blocks=blocks,
                                      max_batch_tokens=args.cb_max_batch_tokens, attn_implementation=args.cb_attn,
                                      block_sharing=not args.cb_no_block_sharing, seed=cfg.seed)
    try:
        t0 = time.perf_counter()
        spare = make_tasks(len(tasks) + 1, "train")[-1:]
        collect(lambda: KeepGoingToolUse(max_turns=1), policy, spare, 1,
                config=CollectorConfig(**{**cfg.__dict__, "max_turns": 1, "max_new_tokens": 4}))
        print(f"CB setup + warm-up {time.perf_counter() - t0:.1f} s; settings: {policy.describe()}", flush=True)
        policy.stats.update(prompt_tokens=0, prefix_hit_tokens=0, prefill_tokens=0, generated_tokens=0)
        row = run(CB_ROW, policy, tasks, args.group_size, cfg, n)
        print(f"  CB prefix-cache hits: {policy.stats['prefix_hit_tokens']:,} of {policy.stats['prompt_tokens']:,} "
              "prompt tokens", flush=True)
        return row
    except Exception as exc:  # the row reports what transformers said
        print(f"{CB_ROW} failed: {type(exc).__name__}: {exc}", flush=True)
        return {"name": CB_ROW, "size": n, "note": f"failed: {type(exc).__name__}: {str(exc)[:200]}"}
    finally:
        policy.close()


def measure_vllm(model_name: str, model, tokenizer, args, sizes: list[int], cfg) -> list[dict]:
    """The vLLM rows at every size: a server for ``model`` (exported to a folder an engine loads) is started,
    warmed up on a task outside the measured ones, measured continuous and in rounds, and stopped. A server that
    does not start becomes the rows' note with what it said."""
    import tempfile

    from agentrl.algos.models.export import engine_model_dir
    from agentrl.algos.policy.engine import VLLMEngine
    from agentrl.algos.policy.openai import OpenAIPolicy

    if args.quick:  # the tiny random model: a folder of its own
        folder = Path(tempfile.mkdtemp(prefix="rollout-vllm-")) / "tiny"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    else:
        folder = engine_model_dir(model_name)
    dtype = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}.get(str(next(model.parameters()).dtype), "auto")
    server = VLLMEngine(folder, dtype=dtype, max_lora_rank=None, max_model_len=4096)
    try:
        t0 = time.perf_counter()
        server.start()
        print(f"vLLM server up in {time.perf_counter() - t0:.1f} s ({server.command()[0]}; log {server.log_path})",
              flush=True)
    except Exception as exc:  # noqa: BLE001 - the rows report what the server said
        print(f"vLLM server failed: {type(exc).__name__}: {exc}", flush=True)
        return [{"name": name, "size": n, "note": f"server failed: {type(exc).__name__}: {str(exc)[:160]}"}
                for n in sizes for name in ("vLLM server", "vLLM server, rounds")]
    try:
        policy = OpenAIPolicy.connect(server.url, tokenizer, model=server.served_model_name)
        run("vLLM warm-up", policy, make_tasks(max(sizes) // args.group_size + 1, "train")[-1:], 1,
            CollectorConfig(max_turns=1, max_new_tokens=4))
        rows = []
        for n in sizes:
            tasks = make_tasks(n // args.group_size, "train")
            rows.append(run("vLLM server", policy, tasks, args.group_size, cfg, n))
            if "continuous" in CollectorConfig.__dataclass_fields__:
                rows.append(run("vLLM server, rounds", policy, tasks, args.group_size,
                                CollectorConfig(**{**cfg.__dict__, "continuous": False}), n))
        return rows
    finally:
        server.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="model alias, hub id or path (default: smollm2-135m)")
    ap.add_argument("--dtype", default="auto", help="auto | bf16 | fp32")
    ap.add_argument("--tasks", type=int, default=4, help="tasks when --sizes is not given (default 4)")
    ap.add_argument("--group-size", type=int, default=4, help="trajectories per task (default 4: 16 in all)")
    ap.add_argument("--sizes", default=None,
                    help="comma-separated trajectory counts to measure in turn, e.g. 16,64 (default: tasks x group)")
    ap.add_argument("--max-turns", type=int, default=4, help="assistant turns per episode (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="tokens per reply (default 128)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--skip-naive", action="store_true", help="skip the slow naive baseline")
    ap.add_argument("--naive-max", type=int, default=None,
                    help="measure the naive baseline only at sizes <= this (default: every size)")
    ap.add_argument("--skip-cb", action="store_true", help="skip transformers' continuous batching")
    ap.add_argument("--cb-page-size", type=int, default=256, help="CB cache page size in tokens (default 256)")
    ap.add_argument("--cb-context", type=int, default=2048,
                    help="CB cache tokens per trajectory, for num_blocks (default 2048)")
    ap.add_argument("--cb-num-blocks", type=int, default=0, help="CB cache pages (0: trajectories x context)")
    ap.add_argument("--cb-max-batch-tokens", type=int, default=1024, help="CB tokens per forward pass (default 1024)")
    ap.add_argument("--cb-attn", default="sdpa", help="CB attention: sdpa | paged|eager | flash_attention_2 ...")
    ap.add_argument("--cb-no-block-sharing", action="store_true", help="turn off CB's prefix cache")
    ap.add_argument("--vllm", action="store_true",
                    help="add the vLLM server rows (needs .venv-vllm or $AGENTRL_VLLM_PYTHON; docs/engines.md)")
    ap.add_argument("--compiled-decode", action="store_true",
                    help="add the no-cascade collector with compiled decode steps, cold and warm (issue 62)")
    ap.add_argument("--quick", action="store_true", help="CI-sized: tiny random model, 2 tasks x 2, 16 tokens")
    args = ap.parse_args(argv)

    import torch

    from agentrl.algos.models import load_model, load_tokenizer, tiny_model

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        tokenizer = load_tokenizer(args.model)
        model = tiny_model(tokenizer, hidden_size=128 if args.vllm else 64)  # vLLM CPU attention: head size >= 32
        args.tasks, args.group_size, args.max_new_tokens, args.max_turns = 2, 2, 16, 2
        args.cb_context = min(args.cb_context, 1024)
    else:
        model, tokenizer = load_model(args.model, dtype=args.dtype)
    sizes = parse_sizes(args.sizes or str(args.tasks * args.group_size), args.group_size)
    cfg = CollectorConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, max_total_tokens=4096,
                          temperature=args.temperature, seed=0)
    naive = ("skipped" if args.skip_naive else "every size" if args.naive_max is None
             else f"sizes <= {args.naive_max} only (--naive-max)")
    print(f"model {args.model}{' (tiny random, --quick)' if args.quick else ''} {next(model.parameters()).dtype}, "
          f"sizes {sizes} trajectories ({args.group_size} per task), up to {args.max_turns} turns x "
          f"{args.max_new_tokens} tokens, T={args.temperature}, torch threads {torch.get_num_threads()}; "
          f"naive baseline: {naive}")

    run("warm-up", HFPolicy(model, tokenizer), make_tasks(1, "train"), 1,
        CollectorConfig(max_turns=1, max_new_tokens=4))
    rows = []
    for n in sizes:
        print(f"--- {n} trajectories", flush=True)
        rows += measure_size(model, tokenizer, args, n, cfg)
    if args.vllm:
        print("--- vLLM server", flush=True)
        rows += measure_vllm(args.model, model, tokenizer, args, sizes, cfg)
    print()
    print(table(rows))
    print("\ncollector ÷ this: the collector's tokens/s over the row's, at the same size (above 1: the collector is "
          "faster).")
    return rows


if __name__ == "__main__":
    main()
