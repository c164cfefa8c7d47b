"""The one registry style (agentrl.envs.plugins.Registry): names, run-time registration, entry points, errors."""

from __future__ import annotations

import pytest
from helpers import install_entry_point

from agentrl.envs.plugins import Registry, load_object


def test_builtins_registrations_and_entry_points_resolve_by_name(tmp_path, monkeypatch):
    reg = Registry("widget", "agentrl.test_widgets", {"json": "json:dumps"})
    reg.register("mine", len)
    install_entry_point(tmp_path, monkeypatch, "agentrl.test_widgets", "theirs", "textwrap:dedent")

    assert reg.names() == ["json", "mine", "theirs"] and "theirs" in reg
    import json
    import textwrap

    assert reg.get("json") is json.dumps and reg.get("mine") is len and reg.get("theirs") is textwrap.dedent


def test_an_unknown_name_lists_the_registered_ones_and_the_group():
    reg = Registry("widget", "agentrl.test_widgets", {"a": "json:dumps"})
    with pytest.raises(ValueError, match=r"unknown widget 'b'; choose one of \['a'\].*agentrl.test_widgets"):
        reg.get("b")
    with pytest.raises(ValueError, match="identifier"):
        reg.register("not a name", len)


def test_load_object_names_what_failed():
    assert load_object("json:dumps") is load_object("json.dumps")
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        load_object("no_such_module:x")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        load_object("json:nope")


def test_make_shares_one_instance_per_config_until_it_is_closed_and_copies_share_none():
    import copy
    import types

    reg = Registry("widget", "agentrl.test_widgets", {"ns": types.SimpleNamespace})
    a = reg.make("ns", shared=True, x=1)
    assert reg.make("ns", shared=True, x=1) is a and reg.make("ns", shared=True, x=2) is not a
    assert reg.make("ns", x=1) is not a  # not shared: a new instance
    a.closed = True
    assert reg.make("ns", shared=True, x=1) is not a
    twin = copy.deepcopy(reg)
    assert twin.names() == reg.names() and twin.make("ns", shared=True, x=1) is not reg.make("ns", shared=True, x=1)
