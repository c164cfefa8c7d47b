"""``--policy-url`` for data-parallel ranks: a list picks one server per node, a template is filled from the
launcher's ranks, a plain URL is unchanged, an unknown placeholder is refused in one line."""

from __future__ import annotations

import pytest

from agentrl.algos.policy.openai import rank_url

NODE1_RANK3 = {"GROUP_RANK": "1", "LOCAL_RANK": "3", "RANK": "11"}


def test_a_plain_url_is_every_ranks():
    assert rank_url("http://127.0.0.1:8000", NODE1_RANK3) == "http://127.0.0.1:8000"
    assert rank_url("http://127.0.0.1:8000", {}) == "http://127.0.0.1:8000"


def test_a_list_gives_each_node_its_server():
    urls = "http://a:8000, http://b:8000"
    assert rank_url(urls, {"GROUP_RANK": "0"}) == "http://a:8000"
    assert rank_url(urls, NODE1_RANK3) == "http://b:8000"
    assert rank_url(urls, {"GROUP_RANK": "2"}) == "http://a:8000"  # more nodes than servers: round-robin


def test_a_template_is_filled_from_the_launcher():
    assert rank_url("http://node{node_rank}:8000/v{local_rank}/{rank}", NODE1_RANK3) == "http://node1:8000/v3/11"
    assert rank_url("http://127.0.0.1:{local_rank}0", {}) == "http://127.0.0.1:00"  # no launcher: rank 0


def test_an_unknown_placeholder_is_one_line_naming_the_accepted_ones():
    with pytest.raises(ValueError, match=r"^--policy-url 'http://n\{node\}:1': a placeholder must be one of "
                                         r"\{node_rank\}, \{local_rank\}, \{rank\}") as e:
        rank_url("http://n{node}:1", {})
    assert "\n" not in str(e.value)
