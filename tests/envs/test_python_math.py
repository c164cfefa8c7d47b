"""AgentRL/PythonMath-v0 (ReTool) and the math-verify worker pool."""

from __future__ import annotations

import json
import threading

import gymnasium as gym
import pytest

import agentrl.envs
from agentrl.envs.code_tool import recovered_from_error
from agentrl.envs.datasets import DatasetError
from agentrl.envs.python_math.env import PythonMathEnv, load_math_rows, strip_dapo_template
from agentrl.envs.python_math.tasks import DEFAULT_TIERS, FAMILIES, GENERATOR, TIERS, make_task, make_tasks
from agentrl.envs.verify import MathVerifier, wrap_latex

gym.register_envs(agentrl.envs)

def call(code: str) -> str:
    return f'<tool_call>\n{json.dumps({"name": "code_interpreter", "arguments": {"code": code}})}\n</tool_call>'


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(num_workers=1, timeout_s=5) as v:
        yield v


@pytest.fixture()
def env(sb, verifier):
    return PythonMathEnv(sandbox=sb, verifier=verifier, code_timeout_s=2, max_obs_chars=400)


# ---------------------------------------------------------------------------------------------- verifier


def test_wrap_latex():
    assert wrap_latex("1+x") == "$1+x$" and wrap_latex("$5$") == "$5$" and wrap_latex("\\boxed{3}") == "\\boxed{3}"


def test_verifier_equivalences_and_no_bare_string_false_positive(verifier):
    assert verifier.equal("0.5", "\\frac{1}{2}")
    assert verifier.equal("1+x", "x+1")
    assert verifier.equal("\\sqrt{9}", "3")
    assert verifier.equal("042", "42")
    assert not verifier.equal("1+x", "1")  # bare strings would say True here
    assert not verifier.equal("6", "5")
    assert not verifier.equal("", "5")


def test_verifier_kills_a_hanging_worker_and_carries_on():
    # math-verify's own timeout set far above the hard limit, so only the hard kill can end the comparison.
    with MathVerifier(num_workers=1, timeout_s=1.0, internal_timeout_s=60) as v:
        assert v.equal("\\frac{1}{2}", "0.5")  # positive control: the worker works
        pid_before = v._procs[0].proc.pid
        assert v.equal("9^{9^{9^{9}}}", "1") is False
        assert v.timeouts == 1
        assert v.equal("\\frac{3}{4}", "0.75")  # a fresh worker answers
        assert v._procs[0].proc.pid != pid_before


def test_verifier_is_usable_from_threads(verifier):
    pairs = [("\\frac{1}{2}", "0.5", True), ("2", "3", False), ("x^2", "x*x", True), ("\\pi", "3.14", False)] * 3
    results = [None] * len(pairs)

    def work(i):
        results[i] = verifier.equal(pairs[i][0], pairs[i][1])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [p[2] for p in pairs]


# ---------------------------------------------------------------------------------------------- generator & data


def test_generator_is_pure_and_splits_disjoint():
    assert make_task(7) == make_task(7)
    train, test = make_tasks(40, "train"), make_tasks(40, "test")
    assert not {t["id"] for t in train} & {t["id"] for t in test}
    assert {t["family"] for t in train + test} == set(FAMILIES)
    with pytest.raises(ValueError, match="unknown problem families"):
        make_task(0, ["nope"])


@pytest.mark.needs_bwrap
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_demo_reaches_max_reward(env, family):
    for index in range(2):
        task = make_task(index, [family])
        demo = env.demo(task)
        assert demo["reward"] == 1.0 and demo["correct"], (task, demo["messages"][-2:])
        tool_msg = demo["messages"][-2]
        assert tool_msg["role"] == "tool" and tool_msg["content"].strip() == task["answer"]


def test_dapo_and_qa_loaders(tmp_path):
    content = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
               "What is $1+1$?\n\nRemember to put your answer on its own line after \"Answer:\".")
    assert strip_dapo_template(content) == "What is $1+1$?"
    dapo = {"data_source": "math_dapo", "prompt": [{"role": "user", "content": content}],
            "reward_model": {"ground_truth": "2", "style": "rule"}, "extra_info": {"index": "abc"}}
    qa = {"question": "What is 2+3?", "answer": 5}
    path = tmp_path / "mix.jsonl"
    path.write_text(json.dumps(dapo) + "\n\n" + json.dumps(qa) + "\n")
    rows = load_math_rows(path)
    assert rows[0] == {"id": "abc", "question": "What is $1+1$?", "answer": "2", "data_source": "math_dapo"}
    assert rows[1]["question"] == "What is 2+3?" and rows[1]["answer"] == "5"
    env = PythonMathEnv(dataset=path)
    obs, info = env.reset(seed=0)
    assert obs in ("What is $1+1$?", "What is 2+3?")


def test_loaders_name_file_and_line_of_bad_rows(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "ok?", "answer": "1"}) + "\n\n"
                   + json.dumps({"question": "no answer"}) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:3"):
        load_math_rows(bad)
    dapo_bad = tmp_path / "dapo.jsonl"
    dapo_bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "x"}], "reward_model": {}}) + "\n")
    with pytest.raises(DatasetError, match=r"dapo\.jsonl:1: .*ground_truth"):
        load_math_rows(dapo_bad)
    with pytest.raises(DatasetError, match=r"dataset\[0\]"):
        load_math_rows([{"question": ""}])


# ---------------------------------------------------------------------------------------------- protocol


def test_reset_info_and_tool_schema(env):
    obs, info = env.reset(seed=3)
    assert obs == info["messages"][1]["content"] and info["messages"][0]["role"] == "system"
    assert [t["function"]["name"] for t in info["tools"]] == ["code_interpreter"]
    assert "\\boxed{}" in info["messages"][0]["content"]
    assert info["task_id"].rsplit("-", 1)[0] in FAMILIES


@pytest.mark.needs_bwrap
def test_observation_rules(env):
    env.reset(options={"task": make_task(0)})
    obs, r, term, trunc, info = env.step(call("print(6 * 7)"))
    assert (obs, r, term, trunc, info["obs_role"]) == ("42\n", 0.0, False, False, "tool")
    obs, *_ = env.step(call("x = 1\nprint('partial')\nraise ValueError('bad value')"))
    assert obs.startswith("partial\nTraceback (most recent call last):")  # stdout so far, then the traceback
    assert obs.rstrip().endswith("ValueError: bad value")
    obs, *_ = env.step(call("print('started')\nwhile True:\n    pass"))
    assert obs == "started\nError: the code did not finish within 2 seconds and was stopped."
    obs, *_ = env.step(call("import sys\nfor i in range(2000):\n    print('frame', i, file=sys.stderr)\n"
                            "raise KeyError('the end')"))
    assert len(obs) <= 400 and obs.startswith("...[truncated]") and obs.rstrip().endswith("KeyError: 'the end'")
    m = info["metrics"] | env.metrics.as_dict()
    assert (m["code_calls"], m["exec_ok"], m["exec_error"], m["exec_timeout"]) == (4, 1, 2, 1)
    assert m["exec_latency_s"] > 0 and m["tool_errors"] == 3
    obs, *_ = env.step(call("import sys\nprint('checked', end='')\nsys.exit(3)"))
    assert obs == "checked\nError: the program exited with status 3."


@pytest.mark.needs_bwrap
def test_rewards_and_self_correction(env):
    task = {"id": "t", "question": "What is 1/2 + 1/4?", "answer": "\\frac{3}{4}"}
    env.reset(options={"task": task})
    env.step(call("print(1/2 + 1/4"))  # a syntax error first
    env.step(call("print(1/2 + 1/4)"))
    _, r, term, _, info = env.step("So the sum is \\boxed{0.75}")
    assert (r, term, info["correct"], info["metrics"]["self_correction"]) == (1.0, True, True, 1.0)

    env.reset(options={"task": task})
    env.step(call("print(1/0)"))
    env.step(call("print(0.7)"))
    _, r, _, _, info = env.step("\\boxed{0.7}")
    assert (r, info["correct"], info["metrics"]["self_correction"]) == (-1.0, False, 0.0)

    env.reset(options={"task": task})
    _, r, _, _, info = env.step("\\boxed{3/4}")
    assert (r, info["correct"], info["metrics"]["self_correction"]) == (1.0, True, 0.0)

    env.reset(options={"task": task})
    _, r, _, _, info = env.step("I think it is three quarters.")  # no boxed answer
    assert (r, info["termination"]) == (-1.0, "invalid")

    env.reset(options={"task": task})
    _, r, _, _, info = env.step("\\boxed{3/4}" + " and some more words" * 20)  # boxed not in the last 300 chars
    assert (r, info["termination"]) == (-1.0, "invalid")


@pytest.mark.needs_bwrap
def test_budgets(sb, verifier):
    env = PythonMathEnv(sandbox=sb, verifier=verifier, max_code_calls=2, max_turns=8)
    env.reset(seed=0)
    env.step(call("print(1)"))
    env.step(call("print(2)"))
    _, r, term, trunc, info = env.step(call("print(3)"))
    assert (r, term, trunc, info["termination"]) == (-1.0, False, True, "budget")
    assert info["metrics"]["code_calls"] == 2
    env = PythonMathEnv(sandbox=sb, verifier=verifier, max_turns=2)
    env.reset(seed=0)
    env.step(call("print(1)"))
    _, r, term, trunc, info = env.step(call("print(2)"))
    assert (r, trunc, info["termination"]) == (-1.0, True, "budget")


@pytest.mark.needs_bwrap
def test_bad_tool_arguments_and_fenced_format(sb, verifier):
    env = PythonMathEnv(sandbox=sb, verifier=verifier)
    env.reset(seed=0)
    obs, r, term, _, info = env.step('<tool_call>\n{"name": "code_interpreter", "arguments": {"src": "1"}}\n'
                                     '</tool_call>')
    assert obs.startswith("Error:") and not term and info["metrics"]["invalid_calls"] == 1
    assert info["metrics"]["code_calls"] == 0
    env = PythonMathEnv(sandbox=sb, verifier=verifier, call_format="fenced")
    env.reset(options={"task": make_task(1)})
    obs, *_ = env.step("Let me compute.\n```python\nprint(2 ** 10)\n```")
    assert obs == "1024\n"
    with pytest.raises(ValueError, match="call_format"):
        PythonMathEnv(call_format="xml")


def test_recovered_from_error():
    assert recovered_from_error(["error", "ok"]) and recovered_from_error(["ok", "timeout", "error", "ok"])
    assert (not recovered_from_error(["ok", "error"]) and not recovered_from_error(["ok"])
            and not recovered_from_error([]))




@pytest.mark.parametrize("kwargs", [{}, {"families": ["modpow", "primes"]}, {"families": None}])
def test_test_tasks_are_what_the_pipeline_used_to_take(kwargs):
    """make_tasks(n, split="test"), with families only when given (the old rule of algos' test_tasks)."""
    old = make_tasks(6, split="test", **({"families": kwargs["families"]} if kwargs.get("families") else {}))
    assert gym.make("AgentRL/PythonMath-v0", **kwargs).unwrapped.test_tasks(6, seed=10_007) == old


# ---------------------------------------------------------------------------------------------- tiers


def test_every_tier_has_families_and_the_default_distribution_draws_all_tiers_evenly():
    assert set(TIERS) == set(FAMILIES) and {FAMILIES[f].tier for f in FAMILIES} == set(DEFAULT_TIERS) == {1, 2, 3}
    tasks = make_tasks(600, "train")
    counts = {t: sum(task["tier"] == t for task in tasks) for t in DEFAULT_TIERS}
    assert all(160 <= c <= 240 for c in counts.values()), counts  # a third each (binomial sd ~12)
    assert {task["family"] for task in tasks} == set(FAMILIES)
    assert all(task["tier"] == TIERS[task["family"]] for task in tasks)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_generates_valid_deterministic_tasks_on_both_splits(family):
    for split in ("train", "test"):
        tasks = make_tasks(6, split, [family])
        assert tasks == make_tasks(6, split, [family])  # a pure function of the index
        for t in tasks:
            assert t["family"] == family and t["tier"] == TIERS[family] and t["question"].strip()
            assert (t["answer"].lstrip("-").isdigit()
                    and t["solution_code"].rstrip().splitlines()[-1].startswith("print("))
    questions = {t["question"] for t in make_tasks(20, "train", [family]) + make_tasks(20, "test", [family])}
    # parameters vary; tiers 1-2 have large question spaces (some tier-3 families have ~30 questions in all)
    assert len(questions) >= (38 if TIERS[family] < 3 else 10), len(questions)


def test_answers_computed_without_the_loop_equal_what_the_solution_code_counts():
    """odd_squares and count_divisible answer by a closed form, digit_count from a cache, not by running the
    solution code's loop per task (a held-out set's train scan generates 400,000 tasks): each equals the loop
    over the family's whole parameter range (count_divisible: every (a, b, c) at 40 values of n)."""
    import collections
    import itertools
    import random

    import numpy as np

    from agentrl.envs.python_math import tasks as generator

    odd_squares, total = {}, 0
    for k in range(1, 20_000):
        odd_squares[k + 1] = total = total + (k * k if k % 2 else 0)  # the odd squares below k + 1
    assert all(generator._odd_squares_below(n) == odd_squares[n] for n in range(1_000, 20_000))
    k = np.arange(1, 20_001)
    rng = random.Random(0)
    for a, b in itertools.permutations([3, 4, 5, 6, 7, 9, 11, 13], 2):
        for c in [2, 8, 10, 12, 15]:
            counted = np.cumsum(((k % a == 0) | (k % b == 0)) & (k % c != 0))  # counted[n - 1]: up to n
            for n in [500, 19_999, *rng.sample(range(500, 20_000), 38)]:
                assert generator._divisible_by_a_or_b_not_c(n, a, b, c) == counted[n - 1], (n, a, b, c)
    by_digits_and_sum = collections.Counter((len(str(x)), sum(map(int, str(x)))) for x in range(100, 100_000))
    for digits, s in itertools.product(range(3, 6), range(5, 25)):
        assert generator._digit_sum_count(digits, s) == by_digits_and_sum[digits, s]


def test_easy_tier_answers_are_not_guessable():
    """Tiers 1 and 2 are sized so mental arithmetic fails: the answers are large and spread out."""
    tasks = make_tasks(200, "train", tiers=[1, 2])
    answers = [int(t["answer"]) for t in tasks]
    assert len(set(answers)) >= 195
    assert sum(a >= 100 for a in answers) >= 190


def test_tiers_select_families_and_tier3_is_the_old_default():
    t12 = make_tasks(60, "test", tiers=[1, 2])
    assert {t["tier"] for t in t12} == {1, 2}
    assert make_tasks(10, "test", tiers=[2, 1, 2]) == make_tasks(10, "test", tiers=[1, 2])  # a set of tiers
    # tiers=[3] draws exactly what the generator drew for the tier-3 family list: the pre-tier default.
    tier3 = [f for f in FAMILIES if TIERS[f] == 3]
    assert make_tasks(30, "test", tiers=[3]) == make_tasks(30, "test", tier3)
    assert [GENERATOR.draw(i, tier3)[0] for i in range(30)] == [make_task(i, tiers=[3])["family"] for i in range(30)]
    assert make_tasks(30, "test") == make_tasks(30, "test", tiers=DEFAULT_TIERS)


def test_tier3_reproduces_tasks_of_the_generator_before_tiers():
    """Golden values: the first test-split tasks of the env's default before tiers (commit c42404d)."""
    old = [("no_consecutive_subsets-1", "1287"), ("sum_powers-3", "11816364"), ("modpow-5", "91"),
           ("no_consecutive_subsets-7", "364"), ("modpow-9", "4")]
    assert [(t["id"], t["answer"]) for t in make_tasks(5, "test", tiers=[3])] == old


@pytest.mark.parametrize("bad", [[4], [], [0, 1], "12", [True], 2, [1.5]])
def test_bad_tiers_name_the_key(bad):
    with pytest.raises(ValueError, match="tiers"):
        PythonMathEnv(tiers=bad)


def test_families_and_tiers_together():
    env = PythonMathEnv(families=["mul_sub"], tiers=[1, 2])
    assert {t["family"] for t in env.test_tasks(5)} == {"mul_sub"}
    with pytest.raises(ValueError, match=r"families \['modpow'\] are not in tiers \[1, 2\]"):
        PythonMathEnv(families=["modpow"], tiers=[1, 2])


def test_env_samples_and_holds_out_its_tier_selection():
    env = gym.make("AgentRL/PythonMath-v0", tiers=[1]).unwrapped
    seen = set()
    for seed in range(20):
        _, info = env.reset(seed=seed)
        seen.add(TIERS[info["task_id"].rsplit("-", 1)[0]])
        assert int(info["task_id"].rsplit("-", 1)[1]) % 2 == 0  # the train split
    assert seen == {1}
    assert env.test_tasks(8) == make_tasks(8, "test", tiers=[1])
    assert gym.make("AgentRL/PythonMath-v0").unwrapped.test_tasks(8) == make_tasks(8, "test", tiers=DEFAULT_TIERS)


@pytest.mark.needs_bwrap
@pytest.mark.parametrize("family", list(FAMILIES))
def test_reference_code_prints_the_answer_in_the_sandbox(sb, family):
    for t in make_tasks(3, "train", [family]) + make_tasks(3, "test", [family]):
        result = sb.run(t["solution_code"], timeout=5)
        assert result.status == "ok" and result.stdout.strip() == t["answer"], (t, result)


@pytest.mark.needs_bwrap
@pytest.mark.parametrize("call_format", ["hermes", "fenced"])
def test_demo_is_one_call_then_the_boxed_answer(sb, verifier, call_format):
    env = PythonMathEnv(sandbox=sb, verifier=verifier, call_format=call_format)
    for task in make_tasks(4, "train", tiers=[1, 2]):
        demo = env.demo(task)
        roles = [m["role"] for m in demo["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant"], roles
        assert demo["reward"] == 1.0 and demo["correct"]
        assert demo["messages"][3]["content"].strip() == task["answer"]
        assert demo["messages"][4]["content"].endswith(f"\\boxed{{{task['answer']}}}.")


def test_instructions_show_the_call_shape_in_the_envs_format_without_numbers_to_copy():
    task = make_task(0)
    hermes = PythonMathEnv().system_prompt(task)
    shape = '{"name": "code_interpreter", "arguments": {"code": "print(<the computation>)"}}'
    assert f"<tool_call>\n{shape}\n</tool_call>" in hermes
    instructions = hermes.split("\n\n")[0]
    assert not any(ch.isdigit() for ch in instructions)  # a number there got copied into answers (docs)
    fenced = PythonMathEnv(call_format="fenced").system_prompt(task)
    assert "```python\nprint(<the computation>)\n```" in fenced and "<tool_call>" not in fenced


@pytest.mark.needs_bwrap
def test_text_only_mode_offers_no_tool(sb, verifier):
    assert PythonMathEnv.supports_text_only
    env = PythonMathEnv(sandbox=sb, verifier=verifier, tools_enabled=False, tiers=[1])
    task = make_task(0, tiers=[1])
    obs, info = env.reset(options={"task": task})
    system = info["messages"][0]["content"]
    assert info["tools"] == [] and "code_interpreter" not in system and "\\boxed{}" in system
    obs, r, term, _, info = env.step(call("print(1)"))
    assert obs.startswith("Error: no tools are available") and not term and info["metrics"]["invalid_calls"] == 1
    assert info["metrics"]["code_calls"] == 0
    _, r, term, _, info = env.step(f"\\boxed{{{task['answer']}}}")
    assert (r, term, info["correct"]) == (1.0, True, True)
    demo = env.demo(task)
    assert [m["role"] for m in demo["messages"]] == ["system", "user", "assistant"] and demo["reward"] == 1.0
    tasks = gym.make("AgentRL/PythonMath-v0", tools_enabled=False, tiers=[1, 2]).unwrapped.test_tasks(4)
    assert tasks == make_tasks(4, "test", tiers=[1, 2])  # the same test tasks as the tool-using env


def test_easy_tier_demo_code_is_short_for_the_default_model(tokenizer):
    """A 135M model copies the demonstrations: tier-1/2 solution programs stay within 60 tokens."""
    longest = max(len(tokenizer(t["solution_code"])["input_ids"]) for t in make_tasks(100, "train", tiers=[1, 2]))
    assert 10 < longest <= 60


class CountingSandbox:
    """Counts the programs it is asked to run, and runs none."""

    def __init__(self):
        from agentrl.envs.sandbox.config import SandboxConfig

        self.config, self.runs = SandboxConfig(), 0

    def run(self, code, timeout=None, *, stdin=None):
        from agentrl.envs.sandbox.config import ExecResult

        self.runs += 1
        return ExecResult("24190225\n", "", "ok")

    def stats(self):
        return {}

    def close(self):
        pass


def test_the_answer_is_graded_as_text_and_never_run(verifier):
    # issue 60: the grade comes from the verifier on the trainer's side; code in the answer is not executed, so
    # an answer that would print the right number (or forge a verdict) when run is just wrong text
    sb = CountingSandbox()
    env = PythonMathEnv(sandbox=sb, verifier=verifier)
    task = make_task(0)  # 1068 squared plus 4801 squared = 24190225
    for forged in ("\\boxed{print(1068**2 + 4801**2)}", "\\boxed{__import__('os')._exit(0)}", "passed \\boxed{True}"):
        env.reset(options={"task": task})
        _, r, term, _, info = env.step(forged)
        assert term and r == env.rewards.wrong and not info["correct"], forged
    env.reset(options={"task": task})
    assert env.step("\\boxed{24190225}")[1] == 1.0
    assert sb.runs == 0
