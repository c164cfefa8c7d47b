"""Task rows from Hugging Face ``datasets``: Parquet/CSV files, in-memory Datasets and column mappings, used
through ``gym.make(..., dataset=...)``, with errors that name the file and row."""

import json
import subprocess
import sys

import gymnasium as gym
import pytest

import agentrl.envs  # noqa: F401  (registers the ids)
from agentrl.envs.datasets import DatasetError, TaskRows, located_rows

datasets = pytest.importorskip("datasets", reason="the datasets library is not installed")

QA = [{"question": "What is 2+3?", "gold": "5"}, {"question": "What is 6*7?", "gold": "42"}]
COLUMNS = {"query": "question", "answer": "gold"}


def _queries(env, n=12):
    """The queries ``reset`` draws over ``n`` seeds (each must be one of the dataset's rows)."""
    return {env.reset(seed=s)[0] for s in range(n)}


def _answers_right(env):
    """Reset, answer with the row's gold answer, and return the reward (1.0 when the row's answer was read)."""
    obs, _ = env.reset(seed=0)
    gold = {r["question"]: r["gold"] for r in QA}[obs]
    return env.step(f"Answer: {gold}")[1]


def test_import_envs_does_not_import_datasets():
    code = "import sys, agentrl.envs, agentrl.envs.datasets; print('datasets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_jsonl_with_column_mapping(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in QA))
    env = gym.make("AgentRL/ToolUse-v0", dataset=TaskRows(path, columns=COLUMNS))
    assert _queries(env) == {r["question"] for r in QA}
    assert _answers_right(env) == 1.0


def test_parquet_file(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "qa.parquet"
    pq.write_table(pa.table({"query": [r["question"] for r in QA], "answer": [r["gold"] for r in QA]}), path)
    env = gym.make("AgentRL/ToolUse-v0", dataset=str(path))  # a plain path: the env's keys need no mapping
    assert _queries(env) == {r["question"] for r in QA}
    mapped = tmp_path / "mapped.parquet"
    pq.write_table(pa.table({k: [r[k] for r in QA] for k in ("question", "gold")}), mapped)
    env = gym.make("AgentRL/ToolUse-v0", dataset=TaskRows(mapped, columns=COLUMNS))
    assert _answers_right(env) == 1.0


def test_csv_file_keeps_cells_as_text(tmp_path):
    path = tmp_path / "qa.csv"
    path.write_text("question,gold\nWhat is 2+3?,5\nWhich code?,007\n")
    rows = [row for _, row in located_rows(TaskRows(path, columns=COLUMNS))]
    assert rows == [{"query": "What is 2+3?", "answer": "5"}, {"query": "Which code?", "answer": "007"}]
    env = gym.make("AgentRL/ToolUse-v0", dataset=TaskRows(path, columns=COLUMNS))
    assert _queries(env) == {"What is 2+3?", "Which code?"}


def test_in_memory_dataset_and_dataset_dict():
    ds = datasets.Dataset.from_list(QA)
    env = gym.make("AgentRL/ToolUse-v0", dataset=TaskRows(ds, columns=COLUMNS))
    assert _answers_right(env) == 1.0
    dd = datasets.DatasetDict({"train": ds, "test": ds.select([0])})
    env = gym.make("AgentRL/ToolUse-v0", dataset=TaskRows(dd, columns=COLUMNS, split="test"))
    assert _queries(env) == {QA[0]["question"]}
    with pytest.raises(DatasetError, match=r"DatasetDict with splits \['train', 'test'\]"):
        gym.make("AgentRL/ToolUse-v0", dataset=dd)
    with pytest.raises(DatasetError, match=r"no split 'dev'; the splits are \['train', 'test'\]"):
        TaskRows(dd, split="dev").located()


def test_formatted_dataset_rows_are_plain_python():
    ds = datasets.Dataset.from_list(QA).with_format("numpy")
    rows = [row for _, row in located_rows(TaskRows(ds, columns=COLUMNS))]
    assert rows[1] == {"query": "What is 6*7?", "answer": "42"}
    assert type(rows[1]["answer"]) is str


def test_bad_rows_name_file_and_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"query": ["a", "b", "c"], "other": ["1", "2", "3"]}), path)
    with pytest.raises(DatasetError, match=r"bad\.parquet: row 0: missing key\(s\) \['answer'\]"):
        gym.make("AgentRL/ToolUse-v0", dataset=str(path))
    csv_path = tmp_path / "bad.csv"
    csv_path.write_text("question,gold\nq1,1\n")
    with pytest.raises(DatasetError, match=r"bad\.csv: row 0: no column\(s\) \['answer_text'\]"):
        gym.make("AgentRL/ToolUse-v0", dataset=TaskRows(csv_path, columns={"query": "question",
                                                                           "answer": "answer_text"}))
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(json.dumps(QA[0]) + "\n\n" + json.dumps({"question": "no gold"}) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:3: no column\(s\) \['gold'\]"):
        gym.make("AgentRL/ToolUse-v0", dataset=TaskRows(jsonl, columns=COLUMNS))
    ds = datasets.Dataset.from_list([{"query": "q", "answer": "1"}, {"query": "q2", "answer": None}])
    with pytest.raises(DatasetError, match=r"math dataset\[1\]: .*answer"):
        gym.make("AgentRL/PythonMath-v0", dataset=TaskRows(ds, columns={"question": "query"}))


def test_unreadable_file_is_a_dataset_error(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(DatasetError, match=r"broken\.parquet: could not be read as parquet"):
        located_rows(path)
    with pytest.raises(DatasetError, match=r"missing\.csv: no such file"):
        located_rows(tmp_path / "missing.csv")


def test_search_and_coding_accept_task_rows(tmp_path):
    ds = datasets.Dataset.from_list([{"q": "Who wrote Hamlet?", "gold": ["Shakespeare"]}])
    env = gym.make("AgentRL/Search-v0", dataset=TaskRows(ds, columns={"question": "q", "golden_answers": "gold"}))
    assert "Who wrote Hamlet?" in env.reset(seed=0)[0]
    tasks = datasets.Dataset.from_list([{"text": "Print the sum of two ints.",
                                         "cases": [{"input": "1 2\n", "output": "3\n"}]}])
    from agentrl.envs.coding.env import load_coding_tasks

    (task,) = load_coding_tasks(TaskRows(tasks, columns={"prompt": "text", "tests": "cases"}))
    assert task["prompt"] == "Print the sum of two ints." and task["tests"][0]["output"] == "3\n"
