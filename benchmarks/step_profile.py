"""Where one GRPO step's time goes: a profile per phase of one step of the main job's shape (issue 62).

One :meth:`Trainer.step` of the main job's GRPO stage (``algos/recipes/main_job.py``: its env, 8 tasks x 8
samples, replies of at most 96 tokens, 4 turns, LoRA, lr, memory budget; the embedded SmolLM2-135M, or a tiny
random Llama with ``--tiny``) runs under ``torch.profiler`` (CPU activities), after a warm-up step of 1 task x 2
samples x 8 tokens (env creation, first kernels). Nothing in the library is edited: the phases are timed by
wrappers this script puts around the library's calls for the profiled step (each also a ``record_function``
range ``phase/<name>`` in the profiler's trace, ``--trace``), and each second goes to the innermost phase running:

* **decode**: the policy's decode steps (``session().step()``: sampling, the one-token forward passes, cache
  bookkeeping), less the prefill inside them;
* **prefill**: ``HFPolicy._prefill`` and ``_compute_prefix`` (new prompt tokens into the KV cache);
* **env**: env creation, resets, and the rollout loop's waits for env steps (they run in threads while other
  replies decode; their own busy time is reported apart, not in the sum);
* **forward**: the update's passes (``token_logprobs``, ``prefix_pass``: decoder and chunked LM-head logprobs);
* **recompute**: activation checkpointing's replay of the decoder layers inside the backward pass (0 when off);
* **backward**: ``torch.autograd.backward`` less the recompute;
* **optimizer**: gradient clipping, ``optimizer.step``, ``zero_grad``;
* **LoRA refresh**: ``policy.update_weights`` (LoRA merged into the sampler's copy);
* **other**: the rest of the step's wall time (Python: the collector's bookkeeping, ``algo.prepare``, collation,
  the loss, metrics).

FLOPs (matmuls only, counted by hooks on the decoder layers as they run): a pass over T tokens costs ``2 x P_layers x
T`` (P_layers: every decoder layer's parameters, the LoRA factors included; embedding lookups and attention's score
products QK^T and AV, ~4 x context x hidden per token and layer, are left out: the FLOPs and the percentages are lower
bounds), plus the LM head, ``2 x H x V`` per position it runs on (the update's chunked head forms the hidden-state
gradient in its forward pass too: ``4 x H x V`` per loss token there). Backward: ``2 x P_layers x T`` of the forward's
T (with LoRA the frozen weights get no gradient: one matmul per weight, for the activations' gradient; full
fine-tuning would double it). Each phase's FLOPs over its seconds are set against this machine's matmul rate, measured
in the same run (``torch.matmul`` of [4096, H] x [H, H], H the model's hidden size; bf16 where the CPU has bf16 units
(avx512_bf16 / amx_bf16) and fp32). "over ideal" is a phase's seconds less its FLOPs at the rate of the model's dtype
(all of its seconds where it has no FLOPs); the largest is marked as the largest gap. The profiler's ops with the most
self time are listed per phase (an op counts in the innermost phase around it).

Every group trains, as with the edge-of-competence sampler: before ``algo.prepare`` each reward gets a tie-break of
1e-3 x its sample index, so no group is dropped for equal rewards (``--keep-skips``: not). The sampler's refill rounds
are off (one rollout round). Prints a markdown table; ``--out`` writes it as JSON. Never asserts.

    python benchmarks/step_profile.py --out /tmp/profile.json      # the main job's shape (minutes on 2 cores)
    python benchmarks/step_profile.py --tasks 4                    # fewer tasks per step
    python benchmarks/step_profile.py --compile on                 # the update's passes compiled (before: off)
    python benchmarks/step_profile.py --memory-budget auto         # the plan from the free memory (before: 1.5)
    python benchmarks/step_profile.py --tiny --tasks 1 --group-size 2 --max-new-tokens 8   # seconds
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

#: The phases, in the table's order.
PHASES = ("decode", "prefill", "env", "forward", "recompute", "backward", "optimizer", "LoRA refresh", "other")
#: The phases whose FLOPs are counted (the matmul-bound ones, and decode for reference).
FLOP_PHASES = ("decode", "prefill", "forward", "recompute", "backward")


class Phases:
    """Exclusive wall seconds per phase: a stack of running phases; a phase's time less its children's goes to it.
    Each phase is also a ``record_function`` range of the profiler. Main thread only."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.stack: list[list] = []  # [name, seconds of children]

    @property
    def current(self) -> str | None:
        return self.stack[-1][0] if self.stack else None

    @contextlib.contextmanager
    def __call__(self, name: str):
        import torch

        with torch.profiler.record_function(f"phase/{name}"):
            t0 = time.perf_counter()
            self.stack.append([name, 0.0])
            try:
                yield
            finally:
                elapsed = time.perf_counter() - t0
                _, children = self.stack.pop()
                self.seconds[name] += elapsed - children
                self.calls[name] += 1
                if self.stack:
                    self.stack[-1][1] += elapsed

    def wrap(self, name: str, fn):
        def timed(*a, **k):
            with self(name):
                return fn(*a, **k)
        return timed


class Counts:
    """Matmul FLOPs and decoder tokens per phase (hooks add to the phase running when they fire)."""

    def __init__(self, phases: Phases):
        self.phases = phases
        self.flops: dict[str, float] = defaultdict(float)
        self.tokens: dict[str, int] = defaultdict(int)
        self.update_head = 0.0  # FLOPs of the update's LM head (counted in the forward's too)

    def add(self, flops: float, tokens: int = 0, phase: str | None = None) -> None:
        phase = phase or self.phases.current or "other"
        self.flops[phase] += flops
        self.tokens[phase] += tokens


class _Pool:
    """The collector's thread pool, its main-thread waits timed as env (and its threads' busy time summed)."""

    def __init__(self, pool, phases: Phases):
        self.pool, self.phases, self.busy, self.lock = pool, phases, 0.0, threading.Lock()

    def _busy(self, fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                with self.lock:
                    self.busy += time.perf_counter() - t0
        return run

    def map(self, fn, *iterables):
        with self.phases("env"):
            return list(self.pool.map(self._busy(fn), *iterables))

    def submit(self, fn, *a, **k):
        future, phases = self.pool.submit(self._busy(fn), *a, **k), self.phases

        class Waited:
            def result(self, timeout=None):
                with phases("env"):
                    return future.result(timeout)

            def __getattr__(self, name):
                return getattr(future, name)

        return Waited()

    def __getattr__(self, name):
        return getattr(self.pool, name)


def _decoder_layers(model) -> list:
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise RuntimeError(f"{type(model).__name__}: no transformers decoder layers found to count FLOPs on")
    return layers


def _tokens(args, kwargs) -> int:
    h = args[0] if args else kwargs.get("hidden_states")
    return int(h.shape[0] * h.shape[1])


def _patch(stack: contextlib.ExitStack, obj, name: str, make) -> None:
    """Replace ``obj.name`` by ``make(original)`` until ``stack`` closes (a clear error if the library moved it)."""
    if not hasattr(obj, name):
        raise RuntimeError(f"step_profile: {getattr(obj, '__name__', type(obj).__name__)}.{name} is gone; the "
                           "profile's phase wrappers need updating")
    own = name in getattr(obj, "__dict__", {})
    original = getattr(obj, name)
    setattr(obj, name, make(original))
    stack.callback(lambda: setattr(obj, name, original) if own else delattr(obj, name))


def instrument(trainer, phases: Phases, counts: Counts) -> tuple[contextlib.ExitStack, _Pool]:
    """Put the phase wrappers and FLOP hooks around ``trainer``'s step; closing the returned stack undoes them."""
    import torch

    from agentrl.algos.rollout.collector import Collector
    from agentrl.algos.training import update

    stack = contextlib.ExitStack()
    policy, model = trainer.policy, trainer.model
    if trainer._collector is None:
        trainer._collector = Collector(policy, trainer.config.collector)
    pool = _Pool(trainer._collector._pool, phases)
    _patch(stack, trainer._collector, "_pool", lambda _: pool)
    _patch(stack, trainer._collector, "_episode_envs", lambda f: phases.wrap("env", f))

    def session(orig):
        def wrapped(*a, **k):
            s = orig(*a, **k)
            s.step = phases.wrap("decode", s.step)
            return s
        return wrapped

    _patch(stack, policy, "session", session)
    for name in ("_prefill", "_compute_prefix"):
        _patch(stack, policy, name, lambda f: phases.wrap("prefill", f))
    _patch(stack, policy, "update_weights", lambda f: phases.wrap("LoRA refresh", f))

    head = (model.get_base_model() if hasattr(model, "get_base_model") else model).get_output_embeddings().weight
    vocab, hidden = head.shape

    def logprobs(f):
        def counted(mdl, input_ids, attention_mask=None, **k):
            want = torch.ones_like(input_ids[:, 1:], dtype=torch.bool)
            if attention_mask is not None:
                want &= attention_mask[:, 1:].bool()
            if k.get("positions") is not None:
                want &= k["positions"][:, 1:].bool()
            matmuls = 2 if torch.is_grad_enabled() else 1  # the frozen head's input gradient is formed in forward
            with phases("forward"):
                flops = matmuls * 2.0 * hidden * vocab * int(want.sum())
                counts.add(flops)
                counts.update_head += flops
                return f(mdl, input_ids, attention_mask, **k)
        return counted

    _patch(stack, update, "token_logprobs", logprobs)
    _patch(stack, update, "prefix_pass", lambda f: phases.wrap("forward", f))
    _patch(stack, torch.autograd, "backward", lambda f: phases.wrap("backward", f))
    _patch(stack, torch.nn.utils, "clip_grad_norm_", lambda f: phases.wrap("optimizer", f))
    for name in ("step", "zero_grad"):
        _patch(stack, trainer.optimizer, name, lambda f: phases.wrap("optimizer", f))

    seen: set[int] = set()
    for mdl in (model, policy.model):
        layers = [m for m in _decoder_layers(mdl) if id(m) not in seen]
        for i, layer in enumerate(layers):
            seen.add(id(layer))
            n_params = sum(p.numel() for p in layer.parameters())

            def pre_hook(_m, args, kwargs, n_params=n_params, first=i == 0):
                t = _tokens(args, kwargs)
                counts.add(2.0 * n_params * t, t if first else 0)

            stack.callback(layer.register_forward_pre_hook(pre_hook, with_kwargs=True).remove)
            if getattr(layer, "gradient_checkpointing", False):
                def replay(ckpt, n_params=n_params, first=i == 0):
                    def wrapped(fn, *args, **kwargs):
                        def run(*a, **k):  # the first call is the forward pass; one inside backward, the replay
                            if phases.current != "backward":
                                return fn(*a, **k)
                            with phases("recompute"):
                                t = _tokens(a, k)
                                counts.add(2.0 * n_params * t, t if first else 0)
                                return fn(*a, **k)
                        return ckpt(run, *args, **kwargs)
                    return wrapped
                _patch(stack, layer, "_gradient_checkpointing_func", replay)
        out_head = mdl.get_output_embeddings() if hasattr(mdl, "get_output_embeddings") else None
        if out_head is not None and id(out_head) not in seen:  # the sampler's head (the update's is counted above)
            seen.add(id(out_head))
            stack.callback(out_head.register_forward_pre_hook(
                lambda m, args: counts.add(2.0 * m.weight.numel() * args[0].numel() // args[0].shape[-1])).remove)
    return stack, pool


def matmul_rate(hidden: int, dtype, rows: int = 4096, repeats: int = 20) -> float:
    """FLOP/s of ``torch.matmul([rows, hidden], [hidden, hidden])`` in ``dtype``: the best of 3 timings of
    ``repeats`` products, after a warm-up."""
    import torch

    a, b = torch.randn(rows, hidden, dtype=dtype), torch.randn(hidden, hidden, dtype=dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(repeats):
            torch.matmul(a, b)
        best = min(best, (time.perf_counter() - t) / repeats)
    return 2.0 * rows * hidden * hidden / best


def ops_by_phase(events, top: int = 5) -> dict[str, list[dict]]:
    """Each phase's ``top`` ops by self CPU seconds: an op counts in the innermost ``phase/`` range around it."""
    found: dict[int, str] = {}
    totals: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for e in events:
        if e.name.startswith("phase/"):
            continue
        chain, parent, phase = [e], e.cpu_parent, "other"
        while parent is not None and id(parent) not in found and not parent.name.startswith("phase/"):
            chain.append(parent)
            parent = parent.cpu_parent
        if parent is not None:
            phase = found[id(parent)] if id(parent) in found else parent.name.removeprefix("phase/")
        found.update((id(c), phase) for c in chain)
        total = totals[phase][e.name]
        total[0] += e.self_cpu_time_total / 1e6
        total[1] += 1
    return {phase: [{"op": op, "self_s": t[0], "calls": t[1]}
                    for op, t in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]] for phase, ops in totals.items()}


def build(args, out: Path):
    """The trainer of the main job's GRPO stage at the shape ``args`` ask for, its model loaded."""
    from agentrl.algos.models import load_model, load_tokenizer, tiny_model
    from agentrl.algos.recipes import main_job
    from agentrl.algos.training.trainer import Trainer

    job = main_job.MainJobConfig(out=str(out))  # its RL stage, as the main job builds it
    rl = main_job.stage_config(job, "rl", out / "grpo")
    collector = dataclasses.replace(rl.collector, max_new_tokens=args.max_new_tokens or rl.collector.max_new_tokens,
                                    max_turns=args.max_turns or rl.collector.max_turns, seed=args.seed)
    ckpt = {"true": True, "false": False, "auto": "auto", None: rl.gradient_checkpointing}[args.gradient_checkpointing]
    cfg = dataclasses.replace(rl, steps=1, save_every=0, progress=False, report_to=["none"], collector=collector,
                              memory_budget_gb=args.memory_budget or rl.memory_budget_gb, gradient_checkpointing=ckpt,
                              tasks_per_step=args.tasks or rl.tasks_per_step, adapter=args.adapter or rl.adapter,
                              sampler=dataclasses.replace(rl.sampler, enabled=False), seed=args.seed,
                              group_size=args.group_size or rl.group_size, compile=args.compile or rl.compile)
    if args.tiny:
        tokenizer = load_tokenizer(cfg.model)
        model = tiny_model(tokenizer, hidden_size=64, seed=args.seed, end_scale=5.0)
        label = f"tiny random Llama (hidden 64, 2 layers) over {cfg.model}'s tokenizer"
    else:
        model, tokenizer = load_model(cfg.model, dtype=cfg.dtype, attn_implementation=cfg.attn_implementation)
        label = cfg.model + (f" + adapter {args.adapter}" if args.adapter else " (fresh LoRA: the base model)")
    return Trainer(cfg, model=model, tokenizer=tokenizer), label


def tie_break(trainer) -> None:
    """Every group trains: rewards get 1e-3 x the sample's index before ``algo.prepare`` (see the docstring)."""
    prepare = trainer.algo.prepare

    def prepared(trajs):
        index: dict[int, int] = defaultdict(int)
        for t in trajs:
            if t.termination != "error":
                t.reward += 1e-3 * index[t.group_id]
                index[t.group_id] += 1
        return prepare(trajs)

    trainer.algo.prepare = prepared


def warm_up(trainer) -> None:
    """One step of 1 task x 2 samples x 8 tokens, 1 turn: env creation, the first kernels, the optimizer state."""
    full = trainer.config
    trainer.config = dataclasses.replace(full, tasks_per_step=1, group_size=2, collector=dataclasses.replace(
        full.collector, max_new_tokens=8, max_turns=1))
    try:
        trainer.step()
    finally:
        trainer.config = full


def table(result: dict) -> list[str]:
    """The markdown table of a result (see :func:`main`)."""
    rates, dtype = result["matmul"], result["dtype"]
    names = ("bf16", "fp32") if rates.get("bf16") else ("fp32",)
    head = "| phase | s | share | decoder tokens | GFLOP | GFLOP/s | " + " | ".join(
        f"% of {n} matmul" for n in names) + " | s over ideal | |"
    lines = [head, "|---|" + "---:|" * (6 + len(names)) + "---|"]
    gap = result["largest_gap"]
    for name in PHASES:
        p = result["phases"][name]
        flops = p["flops"]
        rate = flops / p["seconds"] if flops and p["seconds"] > 0 else None
        cells = [name, f"{p['seconds']:.2f}", f"{p['share']:.1%}", f"{p['tokens']:,}" if p["tokens"] else "",
                 f"{flops / 1e9:,.1f}" if flops else "", f"{rate / 1e9:,.1f}" if rate else ""]
        cells += [f"{rate / rates[n]:.0%}" if rate else "" for n in names]
        cells += [f"{p['over_ideal']:.2f}", "**largest gap**" if name == gap else ""]
        lines.append("| " + " | ".join(cells) + " |")
    share = sum(p["share"] for p in result["phases"].values())
    cells = ["**step**", f"{result['wall_s']:.2f}", f"{share:.1%}", "", "", "", *([""] * len(names)), "", dtype]
    lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="a tiny random Llama (hidden 64, 2 layers) instead of 135M")
    ap.add_argument("--tasks", type=int, help="tasks per step (default: the main job's, 8)")
    ap.add_argument("--group-size", type=int, help="samples per task (default: the main job's, 8)")
    ap.add_argument("--max-new-tokens", type=int, help="tokens per reply (default: the main job's, 96)")
    ap.add_argument("--max-turns", type=int, help="replies per episode (default: the main job's, 4)")
    ap.add_argument("--gradient-checkpointing", choices=("auto", "true", "false"), help="default: the main job's")
    ap.add_argument("--memory-budget", type=lambda v: v if v == "auto" else float(v), help="GiB or auto")
    ap.add_argument("--adapter", help="a trained LoRA adapter folder to start from (e.g. a main job's sft/adapter)")
    ap.add_argument("--compile", choices=("off", "on", "auto"), help="TrainConfig compile (default: the main job's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-skips", action="store_true", help="no reward tie-break: equal-reward groups are skipped")
    ap.add_argument("--no-warmup", action="store_true", help="profile the first step (one-time costs included)")
    ap.add_argument("--no-profiler", action="store_true", help="phase timers only, without torch.profiler")
    ap.add_argument("--trace", help="write the profiler's Chrome trace here")
    ap.add_argument("--out", help="write the result as JSON here")
    args = ap.parse_args(argv)
    for key in ("tasks", "group_size", "max_new_tokens", "max_turns"):
        if (value := getattr(args, key)) is not None and value < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1, got {value}")

    import torch
    from harness.machine import cpu_info, machine

    header = machine()  # the load average and commit the run starts with
    with tempfile.TemporaryDirectory(prefix="step-profile-") as tmp:
        trainer, label = build(args, Path(tmp))
        if not args.keep_skips:
            tie_break(trainer)
        if not args.no_warmup:
            warm_up(trainer)
        counts = Counts(phases := Phases())
        patches, pool = instrument(trainer, phases, counts)
        profiler = (contextlib.nullcontext() if args.no_profiler else
                    torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]))
        with patches, profiler as prof:
            t0 = time.perf_counter()
            with phases("other"):
                metrics = trainer.step()
            wall = time.perf_counter() - t0
        trainer.close_collector()
        model, cfg, budget = trainer.model, trainer.config, trainer.memory_budget_gb
        checkpointing, micro_batch_tokens = trainer.checkpointing, trainer.micro_batch_tokens
    dtype = next(model.parameters()).dtype
    hidden = model.get_output_embeddings().weight.shape[1]
    cpu, flags = cpu_info()
    bf16_units = sorted({"avx512_bf16", "amx_bf16"} & flags)
    rates = {"fp32": matmul_rate(hidden, torch.float32),
             "bf16": matmul_rate(hidden, torch.bfloat16) if bf16_units else None}
    own_rate = rates["bf16"] if dtype == torch.bfloat16 and rates["bf16"] else rates["fp32"]
    # backward: the decoder's input gradients over the forward's tokens; the head's was formed in the forward
    counts.flops["backward"] = counts.flops.get("forward", 0.0) - counts.update_head
    counts.tokens["backward"] = counts.tokens.get("forward", 0)
    phases_out = {}
    for name in PHASES:
        s = phases.seconds.get(name, 0.0)
        flops = counts.flops.get(name, 0.0) if name in FLOP_PHASES else 0.0
        phases_out[name] = {"seconds": s, "share": s / wall if wall else 0.0, "calls": phases.calls.get(name, 0),
                            "tokens": counts.tokens.get(name, 0) if name in FLOP_PHASES else 0, "flops": flops,
                            "over_ideal": s - flops / own_rate}
    gap, update_s = max(PHASES, key=lambda n: phases_out[n]["over_ideal"]), metrics.get("time/train", 0.0)
    update_s -= metrics.get("time/compile", 0.0)  # compiling (--compile; mostly in the warm-up) is not the update
    update_flops = sum(counts.flops.get(n, 0.0) for n in ("forward", "recompute", "backward"))
    result = {
        "command": " ".join(["python benchmarks/step_profile.py", *(sys.argv[1:] if argv is None else argv)]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": header, "cpu": cpu, "bf16_units": bf16_units, "torch_threads": torch.get_num_threads(),
        "model": label, "dtype": str(dtype).removeprefix("torch."), "hidden_size": hidden,
        "shape": {"env": cfg.env, "tasks": cfg.tasks_per_step, "group_size": cfg.group_size,
                  "max_new_tokens": cfg.collector.max_new_tokens, "max_turns": cfg.collector.max_turns,
                  "gradient_checkpointing": checkpointing, "micro_batch_tokens": micro_batch_tokens,
                  "memory_budget_gb": budget, "every_group_trains": not args.keep_skips,
                  "warm_up": not args.no_warmup, "profiler": not args.no_profiler, "compile": cfg.compile},
        "matmul": {**rates, "shape": f"[4096, {hidden}] x [{hidden}, {hidden}]"},
        "phases": phases_out, "wall_s": wall, "trainer_step_s": metrics.get("time/step"), "largest_gap": gap,
        "env_busy_in_threads_s": pool.busy, "update": {"seconds": update_s, "flops": update_flops,
                   "of_matmul_rate": update_flops / update_s / own_rate if update_s else None},
        "step": {k: metrics[k] for k in ("time/rollout", "time/train", "time/compile", "perf/rollout_tokens_per_s",
                                         "train/real_tokens", "train/padded_tokens", "train/loss_tokens",
                                         "train/skipped_groups", "train/groups", "reward/mean", "rollout/turns",
                                         "rollout/response_length", "rollout/num_trajectories",
                                         "rollout/sequence_length", "rollout/truncated_rate") if k in metrics}}
    if prof is not None:
        ops = [e for e in prof.key_averages() if not e.key.startswith("phase/")]
        ops.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
        result["profiler_top_ops"] = [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "calls": e.count}
                                      for e in ops[:15]]
        result["ops_by_phase"] = ops_by_phase(prof.events())
        if args.trace:
            prof.export_chrome_trace(args.trace)
    print(f"one GRPO step, {label}, {result['dtype']}, {cfg.env}: {cfg.tasks_per_step} tasks x {cfg.group_size} "
          f"samples, replies <= {cfg.collector.max_new_tokens} tokens, <= {cfg.collector.max_turns} turns; budget "
          f"{budget:.2f} GiB ({cfg.memory_budget_gb}): checkpointing {checkpointing}, micro-batches of "
          f"{micro_batch_tokens} tokens; torch threads {torch.get_num_threads()}; {cpu}, bf16 units: "
          f"{', '.join(bf16_units) or 'none'}")
    step = result["step"]
    print(f"step: {step.get('rollout/num_trajectories', 0):.0f} episodes, {step.get('rollout/turns', 0):.2f} turns "
          f"and {step.get('rollout/response_length', 0):.0f} sampled tokens each (mean), "
          f"{step.get('train/real_tokens')} tokens trained ({step.get('train/groups')} groups); rollout "
          f"{step.get('time/rollout', 0):.2f} s, update {update_s:.2f} s; env busy in its threads {pool.busy:.2f} s "
          f"(overlapped with decoding, not in the sum); compiling {step.get('time/compile', 0):.2f} s apart")
    print("matmul rate: " + ", ".join(f"{n} {r / 1e9:,.1f} GFLOP/s" for n, r in rates.items() if r)
          + f" ({result['matmul']['shape']})")
    print("\n".join(table(result)))
    if update_s:
        print(f"update (forward + recompute + backward FLOPs over time/train): "
              f"{result['update']['of_matmul_rate']:.0%} of the {result['dtype']} matmul rate")
    print(f"largest gap: {gap} ({phases_out[gap]['over_ideal']:.2f} s over its ideal at the matmul rate)")
    if result.get("profiler_top_ops"):
        print("top ops by self CPU time: " + "; ".join(f"{o['op']} {o['self_s']:.2f} s"
                                                        for o in result["profiler_top_ops"][:8]))
        for phase in PHASES:
            top = result["ops_by_phase"].get(phase, [])[:4]
            if top:
                print(f"  {phase}: " + "; ".join(f"{o['op']} {o['self_s']:.2f} s" for o in top))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"written: {args.out}")
    return result


if __name__ == "__main__":
    main()
