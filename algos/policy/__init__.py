"""Policy backends: one small interface from token prompts to sampled tokens with their log-probabilities.

A backend implements :class:`Policy`::

    class MyPolicy(Policy):
        tokenizer = ...                                   # the chat template lives here
        def generate(self, requests, sampling):           # list[GenerationRequest] -> list[GenerationResult]
            ...

Each :class:`GenerationRequest` carries the *whole* prompt of a turn as token ids (token-in), a per-request
token budget and seed, and an optional ``key`` naming the trajectory. The result holds the sampled ids
(token-out, never text), the log-probability of each under the distribution it was drawn from (after
temperature, top-k and top-p: :class:`~agentrl.algos.policy.base.SamplingParams`), and ``finish_reason``
(``"stop"``: a stop token was sampled and is included; ``"length"``: the budget ran out). A backend may keep
state per ``key`` (the KV cache of the trajectory so far) and must drop it on :meth:`Policy.release`; a request
whose prompt does not extend what a key cached is still answered correctly (the cache is cut back to the common
prefix). ``Policy.version`` counts the weight updates the policy has seen; the collector records it in each
trajectory.

Backends are named in :data:`POLICIES` (``--policy NAME``); add one with :func:`register_policy` or an entry
point in the group ``agentrl.policies``. Built in:

* :class:`HFPolicy` — transformers, CPU or GPU: requests decoded together in one batch that new requests join
  while it runs (:meth:`Policy.session`), identical prompts prefilled once, each key's KV cache kept across turns
  so a turn prefills only its new tokens.
* :class:`OpenAIPolicy` — an OpenAI-compatible ``/v1/completions`` server that takes token-id prompts and returns
  token ids and log-probabilities (vLLM, SGLang). :func:`serve_policy` serves any :class:`Policy` that way.

The files: ``base.py`` (the interface and its types, and :class:`Session`, the open generation the collector
drives), ``sampling.py`` (:func:`sample_tokens`, the sampling kernel), ``hf.py`` (:class:`HFPolicy`),
``_decoding.py`` (its decoding session: the batch that requests join), ``_cascade.py`` (its shared-prefix
attention), ``_kv_cache.py`` (its shim over transformers' cache internals), ``openai.py`` (:class:`OpenAIPolicy`),
``server.py`` (:func:`serve_policy`, :class:`PolicyServer`). LoRA merging (:func:`merged_state_dict`) lives in
:mod:`agentrl.algos.models.lora`. Importing this package loads neither torch nor transformers.
"""

from __future__ import annotations

from agentrl.algos.policy.base import Policy
from agentrl.envs.plugins import Registry

__all__ = ["POLICIES", "register_policy"]

#: name -> a :class:`~agentrl.algos.policy.base.Policy` subclass or its "module:Class" path (group
#: ``agentrl.policies``). ``hf`` samples in process; any other name is a server the CLI reaches at ``--policy-url``
#: through the class's ``connect(url, tokenizer, *, model, **server_options)`` (as :class:`OpenAIPolicy` has).
#: The contract: a :class:`Policy` subclass that implements ``generate``.
POLICIES: Registry[type[Policy]] = Registry("policy backend", "agentrl.policies", {
    "hf": "agentrl.algos.policy.hf:HFPolicy",
    "openai": "agentrl.algos.policy.openai:OpenAIPolicy",
}, contract=Policy)


def register_policy(name: str, entry: str | type[Policy]) -> None:
    """Make ``name`` a valid ``--policy``: ``entry`` is a :class:`Policy` subclass or its ``"module:Class"`` path."""
    POLICIES.register(name, entry)
