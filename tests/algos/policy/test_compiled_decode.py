"""The compiled decode step (HFPolicy(compile_decode="on"), agentrl.algos.policy._compiled_decode) against eager:
greedy tokens identical and fp32 per-token logprobs within 1e-5 over rows of different lengths, a request joining
a running batch, finished rows leaving it, and a second turn continuing each trajectory's cache; seeded samples
identical (the sampling code is shared: only the logits come from the compiled graph); graphs bounded by the
buckets; steps beyond the buckets and cascade batches eager; the fall-back when compiling fails; the config key.

Compiling on 2 CPU cores takes ~10-30 s per bucket: the compiled step is process-wide, so the tests share its
graphs (one model, few buckets). Run this file alone:
``python -m pytest -q tests/algos/policy/test_compiled_decode.py``.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from helpers import stop_biased_model
from torch._dynamo.utils import counters

from agentrl.algos.config import config_to_dict
from agentrl.algos.policy import _compiled_decode
from agentrl.algos.policy._compiled_decode import CompiledDecode
from agentrl.algos.policy.base import GenerationRequest, SamplingParams
from agentrl.algos.policy.hf import HFPolicy
from agentrl.algos.training.config import TrainConfig

LOGPROB_TOL = 2e-5  # fp32, absolute, per token (logprobs down to ~-6 here): ~1e-5 observed; the static path
# alone, uncompiled, differs by ~6e-6 (SDPA over the bucket's masked columns rounds otherwise), inductor adds ~4e-6


@pytest.fixture(scope="module")
def model(tokenizer):
    return stop_biased_model(tokenizer, seed=0)


def _sampling(tokenizer, temperature):
    return SamplingParams(temperature=temperature, top_k=20 if temperature else 0, top_p=0.95 if temperature else 1.0,
                          stop_token_ids=(tokenizer.convert_tokens_to_ids("<|im_end|>"),))


def _policy(model, tokenizer, mode, buckets=None, cascade=False, **kwargs):
    policy = HFPolicy(model, tokenizer, compile_decode=mode, cascade=cascade, **kwargs)
    if buckets is not None:
        policy._compiled_decode = CompiledDecode(policy.device, *buckets)
    return policy


def _two_turns(policy, sampling, new_tokens=10, system=()):
    """Three trajectories of different prompt lengths (the third joins the running batch after two steps), then a
    second turn of each continuing its cache with a few appended tokens; all results in order. ``system``: tokens
    every prompt starts with."""
    prompts = [list(system) + list(range(300, 300 + n)) for n in (5, 11, 19)]
    done = {}
    with policy.session(sampling) as s:
        tickets = [s.add(GenerationRequest(p, new_tokens, seed=i, key=i)) for i, p in enumerate(prompts[:2])]
        done.update(s.step())
        done.update(s.step())
        tickets.append(s.add(GenerationRequest(prompts[2], new_tokens, seed=2, key=2)))
        while s.pending:
            done.update(s.step())
    first = [done[t] for t in tickets]
    second = policy.generate([GenerationRequest(prompts[i] + first[i].token_ids + [400 + i, 401], new_tokens,
                                                seed=10 + i, key=i) for i in range(3)], sampling)
    return first + second


def _assert_same(compiled, eager, tol=LOGPROB_TOL):
    for c, e in zip(compiled, eager, strict=True):
        assert c.token_ids == e.token_ids
        assert c.finish_reason == e.finish_reason
        assert max(abs(a - b) for a, b in zip(c.logprobs, e.logprobs, strict=True)) <= tol


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_compiled_decode_gives_eagers_tokens_and_logprobs_over_turns(model, tokenizer, temperature):
    sampling = _sampling(tokenizer, temperature)
    eager_policy = _policy(model, tokenizer, "off")
    eager = _two_turns(eager_policy, sampling)
    policy = _policy(model, tokenizer, "on")
    compiled = _two_turns(policy, sampling)
    assert _compiled_decode.failure() is None
    _assert_same(compiled, eager)
    if not temperature:
        assert len({len(r.token_ids) for r in eager}) > 1, "the case should have rows finishing at different steps"
    assert policy.stats["compiled_decode_steps"] == policy.stats["decode_steps"] > 0  # every step compiled
    assert policy.stats["decode_steps"] == eager_policy.stats["decode_steps"]
    assert policy.stats["prefill_tokens"] == eager_policy.stats["prefill_tokens"]  # turn 2 continued the caches
    assert eager_policy.stats["compiled_decode_steps"] == 0 and eager_policy.stats["compile_seconds"] == 0
    assert policy.stats["decode_seconds"] > 0


def test_graphs_are_bounded_by_the_buckets_and_reused(model, tokenizer):
    sampling = _sampling(tokenizer, 0.0)
    buckets = ((2, 4), (32, 64))  # rows 2, 3, then fewer as rows finish; contexts crossing 32 columns
    before = counters["stats"]["unique_graphs"]
    warm = _policy(model, tokenizer, "on", buckets)
    for new_tokens in (16, 12):
        _two_turns(warm, sampling, new_tokens=new_tokens)
    graphs, frames = counters["stats"]["unique_graphs"], counters["stats"]["calls_captured"]
    assert 0 < graphs - before <= len(buckets[0]) * len(buckets[1])  # at most one graph per bucket
    assert warm.stats["compile_seconds"] > 0
    policy = _policy(model, tokenizer, "on", buckets)  # a new policy (new buffers): the same graphs
    for new_tokens in (16, 12):
        _two_turns(policy, sampling, new_tokens=new_tokens)
    assert _compiled_decode.failure() is None
    assert counters["stats"]["unique_graphs"] == graphs, "a bucket already seen compiled again"
    assert counters["stats"]["calls_captured"] == frames
    assert policy.stats["compile_seconds"] == 0
    assert policy.stats["compiled_decode_steps"] == policy.stats["decode_steps"]


def test_steps_beyond_the_buckets_run_eager_and_the_batch_moves_between_paths(model, tokenizer):
    """Rows beyond the largest rows bucket run eager until finished rows leave; contexts beyond the largest
    length bucket run eager: the cache moves between the slots and the eager buffers both ways."""
    sampling = _sampling(tokenizer, 0.0)
    eager = _two_turns(_policy(model, tokenizer, "off", compact_fraction=0.3), sampling, new_tokens=16)
    policy = _policy(model, tokenizer, "on", ((2,), (32,)), compact_fraction=0.3)
    compiled = _two_turns(policy, sampling, new_tokens=16)
    assert _compiled_decode.failure() is None
    _assert_same(compiled, eager)
    assert 0 < policy.stats["compiled_decode_steps"] < policy.stats["decode_steps"]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_batches_with_a_shared_cascade_prefix_decode_compiled_like_eager(model, tokenizer, temperature):
    sampling = _sampling(tokenizer, temperature)
    system = list(range(500, 540))  # 40 common tokens: the cascade path, the prefix reused by the second turn
    eager_policy = _policy(model, tokenizer, "off", cascade=True)
    eager = _two_turns(eager_policy, sampling, system=system)
    policy = _policy(model, tokenizer, "on", ((4,), (64,)), cascade=True)  # one bucket: one graph
    compiled = _two_turns(policy, sampling, system=system)
    assert _compiled_decode.failure() is None
    _assert_same(compiled, eager)
    assert policy.stats["shared_prefix_calls"] == eager_policy.stats["shared_prefix_calls"] == 2
    assert policy.stats["compiled_decode_steps"] == policy.stats["decode_steps"] == eager_policy.stats["decode_steps"]


def test_new_weights_reach_the_compiled_graphs(model, tokenizer):
    """The trainer refreshes the sampled copy in place after each step: the graphs read the weights as inputs,
    never as baked-in constants, so the second refresh decodes with the new weights without recompiling."""
    sampling = _sampling(tokenizer, 0.0)
    others = [stop_biased_model(tokenizer, seed=s) for s in (1, 2)]
    runs = {}
    for mode in ("off", "on"):
        policy = _policy(model, tokenizer, mode, ((4,), (64,)))
        runs[mode] = [_two_turns(policy, sampling, new_tokens=6)]
        for other in others:
            policy.update_weights(other)  # the first creates the policy's own copy, the second writes into it
            if other is others[1]:
                graphs = counters["stats"]["unique_graphs"]
            runs[mode].append(_two_turns(policy, sampling, new_tokens=6))
        assert mode == "off" or counters["stats"]["unique_graphs"] == graphs
    assert _compiled_decode.failure() is None
    for compiled, eager in zip(runs["on"], runs["off"], strict=True):
        _assert_same(compiled, eager)
    assert [r.token_ids for r in runs["off"][1]] != [r.token_ids for r in runs["off"][2]]  # the weights matter


@pytest.mark.skipif(not torch.ones(1, dtype=torch.bfloat16).add(1).eq(2).all(), reason="no bf16 on this CPU")
def test_bf16_compiled_is_as_close_to_fp32_as_eager_bf16_is(model, tokenizer):
    sampling = _sampling(tokenizer, 0.0)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    system = list(range(500, 540))
    reference = _two_turns(_policy(model, tokenizer, "off", cascade=True), sampling, 8, system)
    eager = _two_turns(_policy(bf16, tokenizer, "off", cascade=True), sampling, 8, system)
    compiled = _two_turns(_policy(bf16, tokenizer, "on", ((4,), (64,)), cascade=True), sampling, 8, system)
    assert _compiled_decode.failure() is None
    err_e = err_c = 0.0
    for i, (r, e, c) in enumerate(zip(reference, eager, compiled, strict=True)):
        if i >= 3 and not reference[i - 3].token_ids == eager[i - 3].token_ids == compiled[i - 3].token_ids:
            continue  # a second turn after different first replies: other prompts
        # up to where any of the three differ (bf16 flips near-ties: greedy tokens may differ)
        triples = zip(r.token_ids, e.token_ids, c.token_ids, strict=False)
        n = next((i for i, (a, b, d) in enumerate(triples) if not a == b == d),
                 min(len(r.token_ids), len(e.token_ids), len(c.token_ids)))
        err_e = max([err_e] + [abs(a - b) for a, b in zip(e.logprobs[:n], r.logprobs[:n], strict=True)])
        err_c = max([err_c] + [abs(a - b) for a, b in zip(c.logprobs[:n], r.logprobs[:n], strict=True)])
    # stated tolerance: within twice eager bf16's own rounding against fp32
    assert 0 < err_e and err_c <= 2 * err_e + 1e-2, (err_c, err_e)


def test_a_failing_compiler_logs_one_line_and_decoding_runs_eager(model, tokenizer, monkeypatch, caplog):
    def no_compiler(fn, **_kwargs):
        def call(*_args, **_kw):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")
        return call

    monkeypatch.setattr(_compiled_decode, "_STATE", {"failed": None})
    monkeypatch.setattr(_compiled_decode, "_COMPILED", {})
    monkeypatch.setattr(torch, "compile", no_compiler)
    sampling = _sampling(tokenizer, 0.7)
    eager = _two_turns(_policy(model, tokenizer, "off"), sampling)
    policy = _policy(model, tokenizer, "on")
    with caplog.at_level(logging.WARNING, logger=_compiled_decode.__name__):
        fell_back = _two_turns(policy, sampling)
        _two_turns(policy, sampling)
    lines = [r.getMessage() for r in caplog.records if r.name == _compiled_decode.__name__]
    assert len(lines) == 1 and "decoding runs eager" in lines[0] and "No working C++ compiler" in lines[0]
    assert _compiled_decode.failure() is not None
    assert policy.stats["compiled_decode_steps"] == 0
    _assert_same(fell_back, eager, tol=0.0)  # eager: the same numbers


def test_a_trainer_with_policy_compile_reports_decode_and_compile_seconds(tokenizer, tmp_path):
    from helpers import tiny_train_config, tiny_train_model

    from agentrl.algos.training.trainer import Trainer

    runs = {}
    for mode in ("off", "on"):
        cfg = tiny_train_config(tmp_path / mode, steps=2, policy_compile=mode, stop_without_signal=0,
                                tasks_per_step=4, lr=1e-4)
        runs[mode] = Trainer(cfg, model=tiny_train_model(tokenizer), tokenizer=tokenizer).train()
    assert _compiled_decode.failure() is None
    assert all("time/decode" not in m and "time/compile_decode" not in m for m in runs["off"])
    assert runs["on"][0]["time/compile_decode"] > 0  # the first step compiles its buckets' graphs
    assert all(m["time/decode"] > 0 for m in runs["on"])
    for e, c in zip(runs["off"], runs["on"], strict=True):  # seeded: the same rollouts, up to rounding
        assert c["reward/mean"] == e["reward/mean"]
        assert c["perf/rollout_tokens_per_s"] > 0 and e.keys() <= c.keys()


def test_the_policy_compile_key(model, tokenizer):
    with pytest.raises(ValueError, match="policy_compile must be"):
        TrainConfig(policy_compile="fast").validate()
    assert "policy_compile" not in config_to_dict(TrainConfig())  # 'off': configs recorded before the key
    assert config_to_dict(TrainConfig(policy_compile="auto"))["policy_compile"] == "auto"
    with pytest.raises(ValueError, match="compile_decode must be one of"):
        HFPolicy(model, tokenizer, compile_decode="yes")
    assert HFPolicy(model, tokenizer)._compiled_decode is None
    assert HFPolicy(model, tokenizer, compile_decode="auto")._compiled_decode is None  # a CPU model: eager
    assert HFPolicy(model, tokenizer, compile_decode="on")._compiled_decode is not None
    assert not _compiled_decode.wants_compile("auto", "cpu") and _compiled_decode.wants_compile("auto", "cuda")
