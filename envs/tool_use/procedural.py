"""Procedural-tools families of ``AgentRL/ToolUse-v0``: every task brings its own freshly generated functions.

The default ToolUse-v0 tasks use six fixed mock tools, so a policy can learn them by heart. These opt-in families
(``gymnasium.make("AgentRL/ToolUse-v0", families=["procedural_single", ...])``; never drawn by default) teach
reading a tool schema instead: each task's functions are generated from its index with our own word lists —
snake_case ``verb_noun`` names, one to four parameters (string, integer, number, boolean, enum, array of strings;
required or optional with a default), descriptions — and its question states every value the call needs.

Shapes (one family each):

* ``procedural_single`` — one function, one call;
* ``procedural_choose`` — two to four functions that share a verb or a noun with the request; call the right one;
* ``procedural_parallel`` — two or three calls (of one function or of several) that may go in one reply;
* ``procedural_none`` — no function fits the request: answer in text without calling.

Grading (the row's ``calls``): the episode is correct when the calls it made, all replies together and in any
order, are exactly the reference calls — same function names, the values the question states, optional
parameters it does not state left out or given their default — and it ends with a final answer (whose text is not
graded). A wrong name or value, a missing call, an extra call, and a call the schema rejected all score 0. A call
returns a plausible generated result (a status and a reference code, a function of the call).

A row holds everything needed to play it (``family``, ``query``, ``tools``, ``calls``, ``answer``), so a fixed set
of these rows runs on a plain ToolUse-v0.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FAMILIES", "INSTRUCTIONS", "calls_made", "calls_match", "function_names", "is_procedural",
           "run_call"]

#: The system-prompt instructions of a procedural task.
INSTRUCTIONS = ("You are given a request and a set of functions. Call the functions the request needs, with "
                "exactly the values it states; leave out optional parameters it does not mention. Independent "
                "calls may go in one reply. After the results, give a short final answer. If no function fits "
                "the request, do not call any: say so in the final answer.")

# ---------------------------------------------------------------------------------------------- vocabulary

#: Verbs of the generated function names, with the past tense a result reports.
VERBS: dict[str, str] = {
    "archive": "archived", "register": "registered", "schedule": "scheduled", "reserve": "reserved",
    "approve": "approved", "renew": "renewed", "dispatch": "dispatched", "restock": "restocked",
    "audit": "audited", "publish": "published", "relabel": "relabelled", "retire": "retired",
    "quarantine": "quarantined", "catalogue": "catalogued", "appraise": "appraised", "enrol": "enrolled",
}

#: Nouns of the generated function names (what the function acts on).
NOUNS: tuple[str, ...] = (
    "parcel", "greenhouse", "locker", "voucher", "manuscript", "workshop", "ledger_entry", "seed_batch",
    "drone", "studio_slot", "lab_sample", "garden_plot", "ferry_pass", "museum_tour", "boat_slip",
    "choir_rehearsal", "bike_rack", "pottery_class", "kiln_firing", "herbarium_sheet",
)

_FIRST = ("Ada", "Bruno", "Chiara", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jonas", "Kemal", "Lena",
          "Mira", "Nils", "Oona", "Pavel", "Rosa", "Sami", "Tove", "Umar", "Vera", "Yara", "Zeno")
_LAST = ("Abbott", "Brandt", "Castell", "Drummond", "Eklund", "Falk", "Greer", "Holm", "Ivers", "Jansen", "Kovac",
         "Lind", "Marsh", "Novak", "Okafor", "Pryce", "Quist", "Rhee", "Soto", "Thorne", "Vance", "Wren")
_PLACES = ("Lisbon", "Tromso", "Bergamo", "Ghent", "Quito", "Hobart", "Sapporo", "Tartu", "Malmo", "Porto",
           "Cusco", "Dunedin", "Leipzig", "Tbilisi", "Galway", "Bremen", "Arequipa", "Krakow")
_WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper",
          "kestrel", "lagoon", "meadow", "nova", "onyx", "pine", "quartz", "raven", "sierra", "tundra", "willow")
_NOTES = ("leave at the side door", "call before noon", "fragile contents", "use the north entrance",
          "bring two copies", "ask for the night desk", "keep away from sunlight", "second floor only")
_ITEMS = ("clay", "twine", "lanterns", "chalk", "rope", "glazes", "seed trays", "canvas", "brushes", "hinges")


def _pick(r: np.random.Generator, pool: Sequence[Any]) -> Any:
    return pool[int(r.integers(len(pool)))]


def _name(r: np.random.Generator) -> str:
    return f"{_pick(r, _FIRST)} {_pick(r, _LAST)}"


def _email(r: np.random.Generator) -> str:
    return f"{_pick(r, _FIRST).lower()}.{_pick(r, _LAST).lower()}@example.org"


def _several(r: np.random.Generator, draw: Callable[[np.random.Generator], str]) -> list[str]:
    out: list[str] = []
    for _ in range(int(r.integers(2, 4))):
        v = draw(r)
        if v not in out:
            out.append(v)
    return out


@dataclass(frozen=True)
class Param:
    """A parameter the generator may give a function: its name, JSON type, how to draw a value, its default."""

    name: str
    kind: str  # string, integer, number, boolean, enum, array
    draw: Callable[[np.random.Generator], Any]
    default: Any
    choices: tuple[str, ...] = ()

    @property
    def words(self) -> str:
        return self.name.replace("_", " ")


def _int(lo: int, hi: int) -> Callable[[np.random.Generator], int]:
    return lambda r: int(r.integers(lo, hi + 1))


def _num(lo: float, hi: float, digits: int) -> Callable[[np.random.Generator], float]:
    return lambda r: round(float(r.uniform(lo, hi)), digits)


def _enum(name: str, choices: tuple[str, ...], default: str) -> Param:
    return Param(name, "enum", lambda r: _pick(r, choices), default, choices)


def _flag(name: str) -> Param:
    return Param(name, "boolean", lambda r: bool(r.integers(2)), False)


#: Every parameter a generated function may take.
PARAMS: tuple[Param, ...] = (
    Param("customer_name", "string", _name, "guest"),
    Param("city", "string", lambda r: _pick(r, _PLACES), "any"),
    Param("label", "string", lambda r: f"{_pick(r, _WORDS)}-{_pick(r, _WORDS)}", "none"),
    Param("title", "string", lambda r: f"{_pick(r, _WORDS).title()} {_pick(r, _WORDS).title()} "
                                       f"{_pick(r, ('Review', 'Plan', 'Notes', 'Digest'))}", "Untitled"),
    Param("contact_email", "string", _email, ""),
    Param("reference_code", "string", lambda r: f"{_pick(r, ('QX', 'LM', 'RT', 'VB'))}-{int(r.integers(100, 10000))}",
          ""),
    Param("note", "string", lambda r: _pick(r, _NOTES), ""),
    Param("owner", "string", _name, "unassigned"),
    Param("quantity", "integer", _int(2, 500), 1),
    Param("days", "integer", _int(2, 60), 7),
    Param("year", "integer", _int(1990, 2035), 2025),
    Param("max_results", "integer", _int(2, 100), 10),
    Param("floor", "integer", _int(2, 40), 1),
    Param("seats", "integer", _int(2, 12), 1),
    Param("duration_minutes", "integer", _int(5, 240), 30),
    Param("amount", "number", _num(1, 5000, 2), 0.0),
    Param("weight_kg", "number", _num(0.2, 80, 1), 1.0),
    Param("budget", "number", _num(50, 20000, 2), 0.0),
    Param("discount_rate", "number", _num(0.05, 0.6, 2), 0.0),
    Param("distance_km", "number", _num(0.5, 900, 1), 0.0),
    _flag("urgent"), _flag("notify_owner"), _flag("include_archived"), _flag("express_delivery"),
    _flag("gift_wrap"),
    _enum("priority", ("low", "normal", "high", "critical"), "normal"),
    _enum("file_format", ("pdf", "csv", "json", "txt"), "pdf"),
    _enum("size", ("small", "medium", "large"), "medium"),
    _enum("channel", ("email", "sms", "phone", "letter"), "email"),
    _enum("region", ("north", "south", "east", "west"), "north"),
    Param("tags", "array", lambda r: _several(r, lambda q: _pick(q, _WORDS)), []),
    Param("recipients", "array", lambda r: _several(r, _email), []),
    Param("attendees", "array", lambda r: _several(r, _name), []),
    Param("items", "array", lambda r: _several(r, lambda q: _pick(q, _ITEMS)), []),
)
_BY_NAME = {p.name: p for p in PARAMS}


def function_names() -> set[str]:
    """Every function name the generator can produce (``verb_noun``)."""
    return {f"{v}_{n}" for v in VERBS for n in NOUNS}


# ---------------------------------------------------------------------------------------------- functions


@dataclass
class Function:
    """A generated function: its name (``verb_noun``), parameters and which of them are required."""

    verb: str
    noun: str
    params: list[Param]
    required: list[str]
    description: str

    @property
    def name(self) -> str:
        return f"{self.verb}_{self.noun}"

    def schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        for k, p in enumerate(self.params):
            prop: dict[str, Any] = ({"type": "array", "items": {"type": "string"}} if p.kind == "array" else
                                    {"type": "string", "enum": list(p.choices)} if p.kind == "enum" else
                                    {"type": p.kind})
            text = (_DESCRIBE[(len(self.noun) + k) % len(_DESCRIBE)] if p.kind != "boolean" else
                    "whether {words} applies to the {noun}.").format(words=p.words, noun=_words(self.noun))
            text = text[0].upper() + text[1:]
            if p.name not in self.required:
                text += f" Optional, default {json.dumps(p.default)}."
                prop["default"] = p.default
            props[p.name] = {**prop, "description": text}
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": props, "required": list(self.required)}}}


_DESCRIBE = ("the {words} of the {noun}.", "{words} to use for this {noun}.", "which {words} the {noun} gets.")
_DESCRIPTIONS = ("{V} a {n}.", "{V} a {n} and return its reference code.", "Use this to {v} a {n}.",
                 "{V} one {n} by its details.")


def _words(snake: str) -> str:
    return snake.replace("_", " ")


def _function(r: np.random.Generator, verb: str, noun: str) -> Function:
    n = int(r.integers(1, 5))
    params = [PARAMS[int(i)] for i in r.choice(len(PARAMS), size=n, replace=False)]
    required = [p.name for p in params if r.random() < 0.6] or [params[0].name]
    text = _pick(r, _DESCRIPTIONS).format(V=verb.capitalize(), v=verb, n=_words(noun))
    return Function(verb, noun, params, [p.name for p in params if p.name in required], text)


def _other(r: np.random.Generator, pool: Sequence[str], avoid: Sequence[str]) -> str:
    choices = [x for x in pool if x not in avoid]
    return _pick(r, choices)


def _arguments(r: np.random.Generator, fn: Function) -> dict[str, Any]:
    """The values a call states: every required parameter, and each optional one with probability 1/2."""
    return {p.name: p.draw(r) for p in fn.params if p.name in fn.required or r.random() < 0.5}


def _state(r: np.random.Generator, p: Param, value: Any) -> str:
    """The words of a question that state ``value`` for ``p``."""
    w = p.words
    if p.kind == "boolean":
        return _pick(r, (f"{w} set to {json.dumps(value)}", f"{w} turned {'on' if value else 'off'}"))
    if p.kind == "array":
        quoted = [f'"{v}"' for v in value]
        return f"{w} " + (", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else quoted[0])
    if p.kind in ("string", "enum"):
        return _pick(r, (f'{w} "{value}"', f'"{value}" as the {w}'))
    return _pick(r, (f"{w} {value}", f"{w} of {value}", f"{value} as the {w}"))


def _request(r: np.random.Generator, verb: str, noun: str, args: dict[str, Any]) -> str:
    """One sentence asking to ``verb`` a ``noun`` with ``args`` (every value stated)."""
    parts = [_state(r, _BY_NAME[k], v) for k, v in args.items()]
    if any(isinstance(v, list) for v in args.values()):  # a list's own "and" must not read as the next value's
        values = "; ".join(parts)
    else:
        values = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    n = _words(noun)
    return _pick(r, (f"Please {verb} a {n} with {values}.", f"Could you {verb} a {n}? Use {values}.",
                     f"I need to {verb} a {n}: {values}.", f"{verb.capitalize()} a {n} for me, with {values}."))


# ---------------------------------------------------------------------------------------------- results


def run_call(name: str, arguments: dict[str, Any]) -> dict[str, str]:
    """The generated result of a call: ``{"status": <verb in the past>, "reference": <code>}``, a pure function
    of the name and the arguments (a wrong call gets a plausible result too)."""
    seed = zlib.crc32(json.dumps([name, arguments], sort_keys=True, ensure_ascii=False).encode())
    verb, _, noun = name.partition("_")
    prefix = "".join(w[0] for w in noun.split("_")).upper()[:2] or "RF"
    return {"status": VERBS.get(verb, "done"), "reference": f"{prefix:X<2}-{seed % 90000 + 10000}"}


def _answer(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "Done: " + "; ".join(f"{n} gave reference {run_call(n, a)['reference']}" for n, a in calls) + "."


# ---------------------------------------------------------------------------------------------- families


def _row(query: str, fns: list[Function], calls: list[tuple[str, dict[str, Any]]], answer: str) -> dict[str, Any]:
    return {"query": query, "answer": answer, "calls": [[n, a] for n, a in calls],
            "tools": [f.schema() for f in fns]}


def _single(r: np.random.Generator) -> dict[str, Any]:
    fn = _function(r, _pick(r, list(VERBS)), _pick(r, NOUNS))
    args = _arguments(r, fn)
    return _row(_request(r, fn.verb, fn.noun, args), [fn], [(fn.name, args)], _answer([(fn.name, args)]))


def _near(r: np.random.Generator, verb: str, noun: str, k: int) -> list[tuple[str, str]]:
    """``k`` other (verb, noun) pairs, each sharing the verb or the noun of ``(verb, noun)``."""
    pairs: list[tuple[str, str]] = []
    while len(pairs) < k:
        pair = ((verb, _other(r, NOUNS, [noun])) if r.random() < 0.5 else (_other(r, list(VERBS), [verb]), noun))
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def _share_params(r: np.random.Generator, model: Function, fns: list[Function]) -> None:
    """Give each function of ``fns`` other than ``model`` the parameters of ``model`` with probability 1/2, so only
    the name and description tell them apart."""
    for fn in fns:
        if fn is not model and r.random() < 0.5:
            fn.params, fn.required = list(model.params), list(model.required)


def _choose(r: np.random.Generator) -> dict[str, Any]:
    verb, noun = _pick(r, list(VERBS)), _pick(r, NOUNS)
    pairs = [(verb, noun), *_near(r, verb, noun, int(r.integers(1, 4)))]
    order = [int(i) for i in r.permutation(len(pairs))]
    fns = [_function(r, *pairs[i]) for i in order]
    target = fns[order.index(0)]
    _share_params(r, target, fns)
    args = _arguments(r, target)
    return _row(_request(r, verb, noun, args), fns, [(target.name, args)], _answer([(target.name, args)]))


def _parallel(r: np.random.Generator) -> dict[str, Any]:
    n_calls = int(r.integers(2, 4))
    n_fns = int(r.integers(1, n_calls + 1))
    verb, noun = _pick(r, list(VERBS)), _pick(r, NOUNS)
    fns = [_function(r, v, n) for v, n in [(verb, noun), *_near(r, verb, noun, n_fns - 1)]]
    calls: list[tuple[str, dict[str, Any]]] = []
    sentences = []
    for j in range(n_calls):
        fn = fns[j % n_fns]
        args = _arguments(r, fn)
        while any(c == (fn.name, args) for c in calls):
            args = _arguments(r, fn)
        calls.append((fn.name, args))
        sentences.append(_request(r, fn.verb, fn.noun, args))
    lead = _pick(r, ("I have several requests.", "Please handle all of these.", "A few things to do."))
    body = " ".join(f"{('Also' if j else 'First')}, {s if s.startswith('I ') else s[0].lower() + s[1:]}"
                    for j, s in enumerate(sentences))
    return _row(f"{lead} {body}", fns, calls, _answer(calls))


def _none(r: np.random.Generator) -> dict[str, Any]:
    verb, noun = _pick(r, list(VERBS)), _pick(r, NOUNS)
    fns = [_function(r, v, n) for v, n in _near(r, verb, noun, int(r.integers(1, 4)))]
    wanted = _function(r, verb, noun)  # the function the request would need: not offered
    _share_params(r, wanted, fns)
    args = _arguments(r, wanted)
    return _row(_request(r, verb, noun, args), fns, [],
                f"None of the available functions can {verb} a {_words(noun)}.")


#: The procedural families (``family(rng) -> row fields``); ToolUse-v0 draws them only when ``families=`` names them.
FAMILIES: dict[str, Callable[[np.random.Generator], dict[str, Any]]] = {
    "procedural_single": _single, "procedural_choose": _choose, "procedural_parallel": _parallel,
    "procedural_none": _none,
}


def is_procedural(task: dict[str, Any]) -> bool:
    """Whether ``task`` is a row of a procedural family (graded on its calls, its tools' calls generated)."""
    return task.get("family") in FAMILIES


# ---------------------------------------------------------------------------------------------- grading


def calls_made(messages: Sequence[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Every call of an episode's assistant turns, in order: ``(name, arguments)`` (arguments as the reply gave
    them, whether or not the schema accepted them)."""
    out = []
    for m in messages:
        for c in m.get("tool_calls") or []:
            try:
                args = json.loads(c["function"]["arguments"])
            except (TypeError, ValueError):
                args = c["function"]["arguments"]
            out.append((str(c["function"]["name"]), args))
    return out


def _same(schema: dict[str, Any], got: Any, want: Any) -> bool:
    kind = schema.get("type")
    if kind in ("integer", "number"):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (got, want))
        return numbers and math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9)
    if kind == "boolean":
        return isinstance(got, bool) and got is want
    if kind == "array":
        return (isinstance(got, list) and len(got) == len(want)
                and all(_same(schema.get("items", {}), g, w) for g, w in zip(got, want, strict=True)))
    return isinstance(got, str) and got == want


def _call_matches(tools: dict[str, dict[str, Any]], got: tuple[str, Any], want: tuple[str, dict[str, Any]]) -> bool:
    name, args = got
    if name != want[0] or not isinstance(args, dict) or name not in tools:
        return False
    params = tools[name]["parameters"]
    props, required = params.get("properties", {}), set(params.get("required", []))
    if set(args) - set(props):
        return False
    for key, schema in props.items():
        if key not in args and (key in required or key not in want[1]):
            if key in required:
                return False
            continue  # an optional value neither stated nor given
        default = schema.get("default")
        if not _same(schema, args.get(key, default), want[1].get(key, default)):
            return False  # a value other than the stated one (an unstated optional one: other than its default)
    return True


def calls_match(task: dict[str, Any], messages: Sequence[dict[str, Any]]) -> bool:
    """Whether the episode's calls (``messages``) are exactly ``task["calls"]``, in any order: each reference call
    made once, no other call (see the module docstring for how values compare)."""
    tools = {s["function"]["name"]: s["function"] for s in task.get("tools") or []}
    left = [(str(n), dict(a)) for n, a in task.get("calls") or []]
    for got in calls_made(messages):
        k = next((i for i, want in enumerate(left) if _call_matches(tools, got, want)), None)
        if k is None:
            return False
        left.pop(k)
    return not left
