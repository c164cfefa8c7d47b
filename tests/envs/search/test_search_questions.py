"""Question sets: the loaders, and the bundled offline set (answerable from the default corpus)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agentrl.envs.answers import normalize_answer
from agentrl.envs.datasets import DatasetError
from agentrl.envs.search.bm25 import LocalBackend
from agentrl.envs.search.build_questions import build, title_answers
from agentrl.envs.search.questions import DATA_SOURCES, bundled_path, load_bundled, load_questions, split_of


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "agentrl-cache"))


def write(path, rows, blank_lines=False):
    text = ""
    for r in rows:
        text += (json.dumps(r) if not isinstance(r, str) else r) + "\n" + ("\n" if blank_lines else "")
    path.write_text(text)
    return path


def test_search_r1_jsonl(tmp_path):
    path = write(tmp_path / "nq.jsonl", [
        {"id": "train_0", "question": "who wrote hamlet?", "golden_answers": ["William Shakespeare", "Shakespeare"],
         "data_source": "nq"},
        {"question": "capital of france", "golden_answers": "Paris", "data_source": "hotpotqa"},
    ])
    rows = load_questions(path)
    assert rows[0] == {"id": "train_0", "question": "who wrote hamlet?",
                       "golden_answers": ["William Shakespeare", "Shakespeare"], "data_source": "nq"}
    assert rows[1]["golden_answers"] == ["Paris"] and rows[1]["id"] == "1" and rows[1]["data_source"] == "hotpotqa"


def test_plain_jsonl_and_rows(tmp_path):
    path = write(tmp_path / "plain.jsonl",
                 [{"question": "2+2?", "answers": [4, "four"]}, {"question": "x", "answer": "y"}])
    rows = load_questions(path, default_source="mine")
    assert rows[0]["golden_answers"] == ["4", "four"] and rows[0]["data_source"] == "mine"
    assert rows[1]["golden_answers"] == ["y"]
    rows = load_questions([{"question": " q ", "answers": ["a"], "query": "kw"}])
    assert rows == [{"id": "0", "question": "q", "golden_answers": ["a"], "data_source": "unknown", "query": "kw"}]


@pytest.mark.parametrize("bad,message", [
    ({"question": "q"}, "missing the answers"),
    ({"answers": ["a"]}, "missing key"),
    ({"question": "q", "answers": []}, "answer list is empty"),
    ({"question": "q", "answers": [{"a": 1}]}, "answers must be strings"),
    ({"question": "", "answers": ["a"]}, "non-empty string"),
    ("[1, 2]", "expected a JSON object"),
    ("{oops", "not valid JSON"),
])
def test_bad_rows_name_file_and_line(tmp_path, bad, message):
    good = {"question": "q", "answers": ["a"]}
    path = write(tmp_path / "q.jsonl", [good, good, bad], blank_lines=True)  # the bad row is on line 5
    with pytest.raises(DatasetError, match=rf"q\.jsonl:5: .*{message}"):
        load_questions(path)


def test_bad_list_rows_name_the_index():
    with pytest.raises(DatasetError, match=r"questions\[1\]: missing the answers"):
        load_questions([{"question": "q", "answers": ["a"]}, {"question": "q"}])


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow is installed")
def test_parquet_without_pyarrow_says_what_to_do(tmp_path):
    with pytest.raises(ImportError, match="pip install pyarrow"):
        load_questions(tmp_path / "nq.parquet")


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="needs pyarrow")
def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"question": ["who?"], "golden_answers": [["him", "her"]], "data_source": ["nq"]})
    pq.write_table(table, tmp_path / "nq.parquet")
    assert load_questions(tmp_path / "nq.parquet")[0]["golden_answers"] == ["him", "her"]


def test_title_answers():
    assert title_answers("Mercury (planet)") == ["Mercury (planet)", "Mercury"]
    assert title_answers("Zambezi") == ["Zambezi"]


# ---------------------------------------------------------------------------------------------- the bundled set


@pytest.fixture(scope="module")
def bundled():
    return {s: load_bundled(s) for s in ("train", "dev")}


def test_bundled_splits_are_fixed_disjoint_and_small(bundled):
    train, dev = bundled["train"], bundled["dev"]
    assert len(train) > 1000 and len(dev) > 100
    assert not {r["id"] for r in train} & {r["id"] for r in dev}
    assert not {r["question"] for r in train} & {r["question"] for r in dev}
    for split, rows in bundled.items():
        assert all(split_of(r["id"]) == split for r in rows)
        assert {r["data_source"] for r in rows} == set(DATA_SOURCES)
    assert sum(bundled_path(s).stat().st_size for s in ("train", "dev")) < 2_000_000


def test_every_bundled_answer_is_in_the_corpus_and_found_by_its_query(bundled):
    backend = LocalBackend()
    docs = backend.index.docs
    by_title = {d["title"]: i for i, d in enumerate(docs)}
    rows = bundled["train"] + bundled["dev"]
    hits = backend.index.top_batch([r["query"] for r in rows], 3)
    for row, found in zip(rows, hits, strict=True):
        doc = docs[by_title[row["evidence"]]]
        text = normalize_answer(doc["title"] + " " + doc["text"])
        assert any(normalize_answer(g) in text for g in row["golden_answers"]), row
        assert by_title[row["evidence"]] in [i for i, _ in found], row


def test_the_builder_reproduces_the_bundled_files(tmp_path):
    counts = build(tmp_path)
    for split in ("train", "dev"):
        assert (tmp_path / f"search_{split}.jsonl").read_text() == bundled_path(split).read_text()
        assert sum(counts[split].values()) == len(load_bundled(split))
