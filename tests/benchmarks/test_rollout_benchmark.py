"""``benchmarks/rollout_throughput.py``: the continuous-batching policy on a tiny model, the table, --sizes, --quick."""

from __future__ import annotations

import importlib.util
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.generation.continuous_batching")

from helpers import ROOT, stop_biased_model  # noqa: E402

from agentrl.algos.policy.base import GenerationRequest, SamplingParams  # noqa: E402
from agentrl.algos.rollout.chat import ChatFormat  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "rollout_throughput.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_rollout_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model(tokenizer):
    return stop_biased_model(tokenizer, seed=3)


def _prompts(tokenizer):
    texts = ["What is 3 + 4?", "Name a colour of the sky, please, in one word.", "Call the calculator tool."]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False) for t in texts]


def _forward_logprobs(model, prompt, tokens, temperature):
    """log_softmax(logits / T) of ``tokens`` after ``prompt``, by one plain forward pass."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def test_cb_policy_results_are_well_formed_with_the_models_logprobs(bench, model, tokenizer):
    stops = tuple(ChatFormat(tokenizer).stop_token_ids)
    prompts = _prompts(tokenizer)
    budgets = [12, 5, 20]
    policy = bench.ContinuousBatchingPolicy(model, tokenizer, page_size=16, num_blocks=64, max_batch_tokens=256)
    try:
        sampling = SamplingParams(temperature=0.7, stop_token_ids=stops)
        requests = [GenerationRequest(p, b, seed=i) for i, (p, b) in enumerate(zip(prompts, budgets, strict=True))]
        results = policy.generate(requests, sampling)
        again = policy.generate([GenerationRequest(prompts[0], 8)], sampling)  # the same manager, a second call
    finally:
        policy.close()
    assert len(results) == 3 and len(again) == 1
    for prompt, budget, res in zip(prompts + prompts[:1], budgets + [8], results + again, strict=True):
        assert 1 <= len(res.token_ids) <= budget
        assert len(res.logprobs) == len(res.token_ids)
        assert not set(res.token_ids[:-1]) & set(stops), "a stop token inside a completion"
        if res.finish_reason == "stop":
            assert res.token_ids[-1] in stops
        else:
            assert res.finish_reason == "length" and len(res.token_ids) == budget
        # each result is its own prompt's continuation, with log_softmax(logits / T) as logprobs
        expected = _forward_logprobs(model, prompt, res.token_ids, 0.7)
        assert torch.allclose(torch.tensor(res.logprobs), expected, atol=1e-4), (res.logprobs, expected)
    assert policy.stats["prompt_tokens"] == sum(map(len, prompts)) + len(prompts[0])
    assert 0 <= policy.stats["prefill_tokens"] <= policy.stats["prompt_tokens"]


def test_cb_policy_stops_at_any_stop_token_greedy(bench, model, tokenizer):
    """Greedy: CB's replies are the model's argmax continuation, cut at the first of the stop tokens given."""
    prompt = _prompts(tokenizer)[1]
    greedy = []
    with torch.no_grad():
        for _ in range(10):
            greedy.append(int(model(torch.tensor([prompt + greedy])).logits[0, -1].argmax()))
    firsts = [i for i in range(10) if greedy[i] not in greedy[:i]]  # positions of a token's first occurrence
    cut = firsts[min(2, len(firsts) - 1)]
    other = next(t for t in range(100, 200) if t not in greedy)
    stop_ids = (other, greedy[cut])
    policy = bench.ContinuousBatchingPolicy(model, tokenizer, page_size=16, num_blocks=32, max_batch_tokens=128)
    try:
        stopped, free = policy.generate([GenerationRequest(prompt, 10), GenerationRequest(prompt, 4)],
                                        SamplingParams(temperature=0.0, stop_token_ids=stop_ids))
        no_stop = policy.generate([GenerationRequest(prompt, 10)], SamplingParams(temperature=0.0))[0]
    finally:
        policy.close()
    assert stopped.token_ids == greedy[:cut + 1] and stopped.finish_reason == "stop"
    assert free.token_ids == greedy[:min(cut + 1, 4)]
    assert free.finish_reason == ("stop" if cut < 4 else "length")
    assert no_stop.token_ids == greedy and no_stop.finish_reason == "length"
    # greedy logprobs are those of temperature 1
    assert torch.allclose(torch.tensor(stopped.logprobs), _forward_logprobs(model, prompt, stopped.token_ids, 1.0),
                          atol=1e-4)


def test_cb_policy_drives_the_collector_and_restores_attention(bench, model, tokenizer):
    """Multi-turn episodes through the collector (which checks token-exactness each turn) with paged eager
    attention; closing gives the model back its attention implementation."""
    from agentrl.algos.rollout.collector import CollectorConfig, collect
    from agentrl.envs.tool_use.env import make_tasks

    before = model.config._attn_implementation
    policy = bench.ContinuousBatchingPolicy(model, tokenizer, page_size=32, num_blocks=200, max_batch_tokens=512,
                                            attn_implementation="paged|eager")
    cfg = CollectorConfig(max_turns=3, max_new_tokens=12, temperature=0.7, seed=0)
    try:
        trajs = collect(lambda: bench.KeepGoingToolUse(max_turns=3), policy, make_tasks(2, "train"), 2, config=cfg)
        assert model.config._attn_implementation == "paged|eager"
    finally:
        policy.close()
    assert model.config._attn_implementation == before
    assert len(trajs) == 4
    assert max(len(t.turns) for t in trajs) > 1, "no episode went past one turn"
    for t in trajs:
        assert len(t.logprobs) == len(t.token_ids) == len(t.loss_mask)
        sampled = [lp for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m]
        assert len(sampled) == t.num_action_tokens and all(lp <= 0 for lp in sampled)
    assert policy.stats["prefix_hit_tokens"] > 0, "later turns never reused a cached page of the earlier ones"


def test_table_divides_the_collector_by_each_row_per_size(bench):
    rows = [{"name": "collector", "size": 16, "tokens": 1000, "wall_s": 10.0, "tok_s": 100.0, "turns": 2.0,
             "prefill": 500},
            {"name": "naive generate", "size": 16, "tokens": 900, "wall_s": 36.0, "tok_s": 25.0, "turns": 2.0,
             "prefill": None},
            {"name": "collector", "size": 64, "tokens": 4000, "wall_s": 20.0, "tok_s": 200.0, "turns": 2.0,
             "prefill": 900},
            {"name": bench.CB_ROW, "size": 64, "tokens": 3000, "wall_s": 37.5, "tok_s": 80.0, "turns": 2.0,
             "prefill": 1200},
            {"name": "naive generate", "size": 64, "note": "not measured (--naive-max 16)"}]
    lines = bench.table(rows).splitlines()
    assert lines[0].startswith("| trajectories |") and len(lines) == 2 + len(rows)
    assert lines[3].endswith("| 25.0 | 4.00x |")  # 100 / 25 at 16
    assert lines[5].endswith("| 80.0 | 2.50x |")  # 200 / 80 at 64, not 100 / 80
    assert "not measured (--naive-max 16)" in lines[6]
    assert "| 1,200 |" in lines[5] and "| - |" in lines[3]


def test_parse_sizes_and_its_errors(bench):
    assert bench.parse_sizes("16,64", 4) == [16, 64]
    with pytest.raises(ValueError, match="--sizes"):
        bench.parse_sizes("16,62", 4)
    with pytest.raises(ValueError, match="--sizes"):
        bench.parse_sizes("sixteen", 4)
    assert bench.cb_num_blocks(16, 2048, 256) == 16 * 9


def test_quick_run_measures_every_row(bench):
    rows = bench.main(["--quick", "--sizes", "4,8", "--naive-max", "4"])
    names = {(r["size"], r["name"]) for r in rows if r.get("tok_s")}
    expected = {"collector", "collector, no reuse", bench.CB_ROW}
    expected |= {"collector, no cascade"} if bench.has_cascade() else set()
    for size in (4, 8):
        assert {(size, n) for n in expected} <= names
    assert (4, "naive generate") in names and (8, "naive generate") not in names
    assert any(r["name"] == "naive generate" and r["size"] == 8 and "--naive-max" in r["note"] for r in rows)


@pytest.mark.slow
def test_vllm_rows_sample_the_same_episodes_through_a_real_server(bench):
    """--vllm starts the real engine (.venv-vllm) on the tiny model and measures it like the in-process rows."""
    rows = bench.main(["--quick", "--vllm", "--skip-naive", "--skip-cb"])
    by_name = {r["name"]: r for r in rows}
    for name in ("vLLM server", "vLLM server, rounds"):
        assert by_name[name].get("tok_s"), by_name[name].get("note")
        assert by_name[name]["tokens"] > 0 and by_name[name]["size"] == by_name["collector"]["size"]
    assert "| vLLM server |" in bench.table(rows)
