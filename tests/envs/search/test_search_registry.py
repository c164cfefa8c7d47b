"""The search backend registry: ``BACKENDS``, ``register_search_backend`` and the entry-point group
``agentrl.search_backends``; a backend is a ``SearchBackend`` subclass (the contract)."""

from __future__ import annotations

import copy

import pytest
from helpers import run_with_plugin

from agentrl.envs.search import registry
from agentrl.envs.search.bm25 import LocalBackend
from agentrl.envs.search.registry import BACKENDS, make_backend, register_search_backend
from agentrl.envs.search.types import SearchBackend, SearchItem

PLUGIN = '''
from agentrl.envs.search.types import SearchBackend, SearchItem


class EchoBackend(SearchBackend):
    name = "echo"

    def __init__(self, topk=3, prefix="echo"):
        super().__init__(topk)
        self.prefix = prefix

    def _search(self, query):
        return [SearchItem(title=self.prefix, text=query)]
'''


class EchoBackend(SearchBackend):
    name = "echo"

    def _search(self, query):
        return [SearchItem(title="echo", text=query)]


def test_builtin_backends_are_search_backends():
    assert BACKENDS.names()[:5] == ["local", "retriever", "wikipedia", "zhihu", "deepseek"]
    assert BACKENDS.group == "agentrl.search_backends"
    assert all(issubclass(BACKENDS.get(n), SearchBackend) for n in BACKENDS.names()[:5])
    assert BACKENDS.get("local") is LocalBackend


def test_register_search_backend_and_the_contract(monkeypatch):
    monkeypatch.setattr(registry, "BACKENDS", copy.deepcopy(BACKENDS))  # registrations are undone with the copy
    register_search_backend("echo", EchoBackend)
    backend = make_backend("echo", topk=2)
    assert isinstance(backend, EchoBackend) and backend.topk == 2 and make_backend("echo", topk=2) is backend
    assert backend.search("hello").items[0].text == "hello"
    register_search_backend("notabackend", "json:dumps")
    with pytest.raises(TypeError, match=r"'notabackend' \(registered at run time: json:dumps\) breaks "
                                        "the search backend contract: a function, neither a subclass nor an instance"):
        make_backend("notabackend")
    with pytest.raises(ValueError, match="unknown search backend 'bing'.*agentrl.search_backends"):
        make_backend("bing")


def test_a_third_party_entry_point_is_picked_up(tmp_path, monkeypatch):
    """A package declaring ``[project.entry-points."agentrl.search_backends"]``: Search-v0 takes its name."""
    code = ("import json, gymnasium as gym, agentrl.envs\n"
            "from agentrl.envs.search.registry import BACKENDS\nprint(BACKENDS.names())\n"
            "env = gym.make('AgentRL/Search-v0', backend='echo', backend_kwargs={'prefix': 'plug'})\n"
            "env.reset(seed=0)\n"
            "call = '<tool_call>' + json.dumps({'name': 'search', 'arguments': {'query': 'victoria falls'}})"
            " + '</tool_call>'\n"
            "obs, *_ = env.step(call)\nprint('plug' in obs and 'victoria falls' in obs)")
    out = run_with_plugin(tmp_path, "agentrl.search_backends", "echo = echo_backend:EchoBackend",
                          "echo_backend", PLUGIN, code)
    names = "['local', 'retriever', 'wikipedia', 'zhihu', 'deepseek', 'echo']"
    assert out.splitlines() == [names, "True"]
