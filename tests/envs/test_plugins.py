"""The one registry style (agentrl.envs.plugins.Registry): names, run-time registration, entry points, errors,
and the contract each registry checks."""

from __future__ import annotations

import abc
from typing import Protocol, runtime_checkable

import pytest
from helpers import install_entry_point

from agentrl.envs.plugins import Registry, class_or_factory, contract_violation, load_object


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


# ---------------------------------------------------------------------------------------------- contracts

#: Every registry of agentrl ("module:NAME") and the contract its entries honour.
REGISTRIES = ["agentrl.envs.search.registry:BACKENDS", "agentrl.envs.sandbox.registry:SANDBOXES",
              "agentrl.envs.parsing:CALL_FORMATS", "agentrl.envs.parsing:ANSWER_FORMATS",
              "agentrl.algos.objectives:ALGORITHMS", "agentrl.algos.policy:POLICIES",
              "agentrl.algos.policy.engine:ENGINES", "agentrl.algos.rollout.env_factory:EXECUTORS",
              "agentrl.algos.evaluation.trackers:TRACKERS"]


@pytest.mark.parametrize("path", REGISTRIES)
def test_every_registry_has_a_contract_and_every_builtin_honours_it(path):
    import copy

    registry = copy.deepcopy(load_object(path))  # a copy: no plugin of this process is read into the real one
    assert registry.contract is not None, path
    for name in registry.names():
        if registry.origin(name).startswith("built in"):
            registry.get(name)  # raises TypeError for an entry that breaks the contract
            assert contract_violation(registry.get(name), registry.contract) is None, name


class Base(abc.ABC):
    @abc.abstractmethod
    def run(self): ...


class Good(Base):
    def run(self):
        return 1


class Half(Base):
    pass


@runtime_checkable
class Runner(Protocol):
    limit: int

    def run(self): ...

    def close(self): ...


def test_a_class_contract_wants_a_subclass_with_no_abstract_method_left():
    assert contract_violation(Good, Base) is None and contract_violation(Good(), Base) is None
    assert contract_violation(Half, Base) == "Half leaves run of Base unimplemented"
    assert contract_violation(dict, Base) == "dict is not a Base subclass"
    assert contract_violation(len, Base) == ("a builtin_function_or_method, neither a subclass nor an "
                                             "instance of Base")


def test_a_protocol_contract_wants_its_methods_on_a_class_and_everything_on_an_instance():
    class Full:
        def run(self): ...

        def close(self): ...

    assert contract_violation(Full, Runner) is None  # data attributes are set per instance
    assert contract_violation(Good, Runner) == "lacks close of the Runner protocol"
    assert contract_violation(Full(), Runner) == "lacks limit of the Runner protocol"
    factory = class_or_factory(Runner)
    assert factory(Full) is None and factory(lambda: Full()) is None
    assert factory(Good) == "lacks close of the Runner protocol"
    assert "neither a class nor a factory" in factory(3)


def test_a_registration_that_breaks_the_contract_is_refused_with_its_origin(tmp_path, monkeypatch):
    install_entry_point(tmp_path, monkeypatch, "agentrl.test_runners", "theirs", "textwrap:dedent")
    reg = Registry("runner", "agentrl.test_runners", {"good": Good, "half": f"{__name__}:Half"},
                   contract=Base)
    assert reg.get("good") is Good and reg.origin("good") == f"built in: {__name__}:Good"
    with pytest.raises(TypeError, match=rf"^runner 'half' \(built in: {__name__}:Half\) breaks the runner "
                                        "contract: Half leaves run of Base unimplemented$"):
        reg.get("half")  # a lazy entry: checked when first loaded
    with pytest.raises(TypeError, match=rf"^runner 'mine' \(registered at run time: {__name__}:Half\) "):
        reg.register("mine", Half)  # an object: checked at once
    assert "mine" not in reg
    reg.register("later", "json:dumps")  # a path: checked on first use
    with pytest.raises(TypeError, match=r"'later' \(registered at run time: json:dumps\) .*neither a "
                                        "subclass nor an instance of Base"):
        reg.get("later")
    with pytest.raises(TypeError, match=r"^runner 'theirs' \(entry point of the package "
                                        r"agentrl-plugin-theirs in agentrl.test_runners: textwrap:dedent\) "
                                        "breaks the runner contract"):
        reg.get("theirs")
    reg.register("nowhere", "no_such_module:Thing")
    with pytest.raises(ValueError, match=r"^runner 'nowhere' \(registered at run time: "
                                         r"no_such_module:Thing\): "
                                         "cannot import 'no_such_module'"):
        reg.get("nowhere")


def test_a_check_function_is_a_contract():
    reg = Registry("number", "agentrl.test_numbers", {"one": 1, "word": "json:dumps"},
                   contract=lambda e: None if isinstance(e, int) else "not an int")
    assert reg.get("one") == 1
    with pytest.raises(TypeError, match="breaks the number contract: not an int"):
        reg.get("word")


def test_unknown_keywords_names_only_the_bad_keys_from_the_signature():
    from agentrl.envs.plugins import unknown_keywords

    def make(dataset=None, *, families=None, split="train"):
        return None

    assert unknown_keywords(make, {"dataset": 1, "split": "test"}) is None
    assert unknown_keywords(make, {"dataset": 1, "datset": 2}) == (
        "unknown keyword 'datset' (did you mean 'dataset'?); it accepts dataset, families, split")
    assert unknown_keywords(make, {"qqq": 1}, also=["max_episode_steps"]) == (
        "unknown keyword 'qqq'; it accepts dataset, families, max_episode_steps, split")
    assert unknown_keywords(lambda **kwargs: None, {"anything": 1}) is None  # only the call can tell


def test_env_kwargs_problem_reads_the_registered_envs_class():
    import gymnasium as gym

    import agentrl.envs
    from agentrl.envs.plugins import env_kwargs_problem

    gym.register_envs(agentrl.envs)
    assert env_kwargs_problem("AgentRL/ToolUse-v0", {"families": ["add"], "max_episode_steps": 3}) is None
    assert env_kwargs_problem("AgentRL/ToolUse-v0", {"famlies": ["add"]}).startswith(
        "unknown keyword 'famlies' (did you mean 'families'?); it accepts ")
    assert env_kwargs_problem("AgentRL/NoSuchEnv-v0", {"x": 1}) is None  # make names the unknown id itself
