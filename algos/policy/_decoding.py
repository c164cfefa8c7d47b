"""The decoding session of :class:`~agentrl.algos.policy.HFPolicy`: one batch, decoded a token per step, that
requests join while it runs (continuous batching across a rollout's turns).

:class:`Decoding` decides what runs (admission, the batch's shared prefix, finished rows leaving); the policy
holds the model, the per-trajectory caches and the forward passes (``HFPolicy._prefill``, ``_forward``,
``_store``). Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrl.algos.policy.base import GenerationRequest, GenerationResult, SamplingParams, Session
from agentrl.algos.policy.sampling import sample_tokens

if TYPE_CHECKING:
    from agentrl.algos.policy.hf import HFPolicy


@dataclass
class Row:
    ticket: int
    request: GenerationRequest
    taken: tuple  # (prefix, kv, tokens) of the request's usable cache, from HFPolicy._take_cache
    generator: Any
    kv: list[tuple[Any, Any]] | None = None  # the cached keys/values it starts from (after the batch's prefix)
    cached: int = 0
    pending: list[int] = field(default_factory=list)  # prompt tokens to prefill
    offset: int = 0  # tokens before the row's own cache: the batch's shared prefix
    need: int = 0  # tokens it counts against max_batch_tokens
    out_ids: list[int] = field(default_factory=list)
    out_lp: list[float] = field(default_factory=list)
    done: bool = False


class Decoding(Session):
    """:class:`HFPolicy`'s session: one batch, decoded a token per :meth:`step`, that requests join as they come.

    A step (1) admits queued requests into the batch when the batch has no running row or at least
    ``compact_fraction`` of its running rows' count is queued: they are prefilled together and their caches, masks
    and logits stacked with the running rows' (left padding: columns no row attends are cut); (2) samples one token
    per row; a row that finishes stores its cache under its key at once (so its trajectory's next turn can take
    it) and its result is returned; (3) drops finished rows once they are ``compact_fraction`` of the batch;
    (4) runs the sampled tokens through the model for the next step's logits.

    When the batch starts, a prefix shared by every queued prompt becomes the batch's cascade prefix
    (``HFPolicy(cascade=...)``); a request that does not start with it waits until the batch is empty.
    ``max_batch_size`` and ``max_batch_tokens`` bound the running rows; requests beyond wait, in order (identical
    uncached prompts that follow each other, a group's samples, are admitted together under the token bound).
    """

    def __init__(self, policy: HFPolicy, sampling: SamplingParams):
        super().__init__(policy, sampling)
        self.stops = set(sampling.stop_token_ids)
        self.queue: list[Row] = []  # added, not yet in the batch
        self.rows: list[Row] = []  # the batch's lines; finished rows stay, fed padding, until the batch is cut
        self.cache = self.mask = self.positions = self.logits = None
        self.prefix = None  # the batch's _cascade.Prefix
        self._activation = contextlib.ExitStack()

    def add(self, request: GenerationRequest) -> int:
        if not request.prompt_ids:
            raise ValueError("a generation request needs a non-empty prompt")
        if request.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {request.max_new_tokens}")
        torch = self.policy._torch
        gen = torch.Generator(device="cpu")
        gen.manual_seed(request.seed if request.seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
        ticket = self._next_ticket()
        self.queue.append(Row(ticket, request, self.policy._take_cache(request), gen))
        return ticket

    @property
    def live(self) -> int:
        """Rows of the batch still decoding."""
        return sum(not r.done for r in self.rows)

    @property
    def pending(self) -> int:
        return len(self.queue) + self.live

    def _join_threshold(self) -> int:
        return max(1, int(self.policy.compact_fraction * self.live))

    def join_ready(self, incoming: int) -> bool:
        return self.live == 0 or len(self.queue) + incoming >= self._join_threshold()

    def step(self) -> list[tuple[int, GenerationResult]]:
        model = self.policy.model
        was_training = model.training  # a shared (trainer's) model may be in train mode: sample without dropout
        model.eval()
        try:
            with self.policy._torch.inference_mode():
                return self._step()
        finally:
            model.train(was_training)

    def close(self) -> None:
        self._end_batch()
        self.queue = []

    # ------------------------------------------------------------ one step
    def _step(self) -> list[tuple[int, GenerationResult]]:
        from agentrl.algos.policy._kv_cache import cache_arg, out_cache

        p, torch = self.policy, self.policy._torch
        if self.queue and self.join_ready(0):
            self._admit()
        if not self.rows:
            return []
        tokens, lps = sample_tokens(self.logits, self.sampling, [r.generator for r in self.rows])
        tokens_l, lps_l = tokens.tolist(), lps.tolist()
        finished = []
        for line, row in enumerate(self.rows):
            if row.done:
                continue
            row.out_ids.append(tokens_l[line])
            row.out_lp.append(lps_l[line])
            stopped = tokens_l[line] in self.stops
            if stopped or len(row.out_ids) >= row.request.max_new_tokens:
                row.done = True
                p._store(row, self.cache, self.mask, line, self.prefix)
                p.stats["generated_tokens"] += len(row.out_ids)
                finished.append((row.ticket, GenerationResult(row.out_ids, row.out_lp,
                                                              "stop" if stopped else "length")))
        live = [line for line, r in enumerate(self.rows) if not r.done]
        if not live:
            self._end_batch()
            return finished
        if len(self.rows) - len(live) >= max(1, int(p.compact_fraction * len(self.rows))):
            keep = torch.tensor(live)
            self.cache.batch_select_indices(keep.to(p.device))
            self.mask = self.mask.index_select(0, keep)
            self.positions = self.positions.index_select(0, keep)
            self.rows = [self.rows[line] for line in live]
        feed = torch.tensor([[r.out_ids[-1] if not r.done else p._pad_id] for r in self.rows])
        step_mask = torch.tensor([[0 if r.done else 1] for r in self.rows], dtype=self.mask.dtype)
        self.mask = torch.cat([self.mask, step_mask], dim=1)
        t0, compiled = time.perf_counter(), p._compiled_decode
        compiling = compiled.compile_seconds if compiled is not None else 0.0
        logits = None
        if compiled is not None:
            logits = compiled.step(p.model, self.cache, feed, self.mask, self.positions, p._pad_id,
                                   cache_arg(p.model), self.prefix)
            p.stats["compiled_decode_steps"] += logits is not None
        if logits is None:
            out = p._forward(feed.to(p.device), self.cache, self.mask.to(p.device),
                             self.positions[:, None].to(p.device))
            self.cache, logits = out_cache(out), out.logits[:, -1, :]
        compiling = (compiled.compile_seconds if compiled is not None else 0.0) - compiling
        p.stats["decode_seconds"] += time.perf_counter() - t0 - compiling
        p.stats["compile_seconds"] += compiling
        p.stats["decode_steps"] += 1
        self.logits = logits
        self.positions = self.positions + step_mask[:, 0]
        return finished

    # ------------------------------------------------------------ the batch
    def _start_batch(self) -> None:
        """Choose the new batch's shared prefix over every queued prompt and switch cascade attention on for it."""
        from agentrl.algos.policy import _cascade

        p = self.policy
        self.prefix = None
        if p.cascade and _cascade.supported(p.model):
            self.prefix = _cascade.choose_prefix([r.request.prompt_ids for r in self.queue],
                                                 [r.taken for r in self.queue], p._compute_prefix)
        if self.prefix is not None:
            p.stats["shared_prefix_calls"] += 1
            p._cascade_state = self._activation.enter_context(_cascade.activate(p.model, self.prefix))

    def _end_batch(self) -> None:
        self.rows = []
        self.cache = self.mask = self.positions = self.logits = None
        self._activation.close()
        self._activation = contextlib.ExitStack()
        self.policy._cascade_state = None
        self.prefix = None
        if self.policy._compiled_decode is not None:
            self.policy._compiled_decode.release()

    def _fits_prefix(self, row: Row) -> bool:
        if self.prefix is None:
            return True
        n = len(self.prefix)
        return len(row.request.prompt_ids) > n and tuple(row.request.prompt_ids[:n]) == self.prefix.tokens

    def _admit(self) -> None:
        """Prefill the queued requests that fit (in order) and stack them into the batch."""
        from agentrl.algos.policy import _cascade

        p, torch = self.policy, self.policy._torch
        running = [line for line, r in enumerate(self.rows) if not r.done]
        if not running:
            self._end_batch()
            self._start_batch()
        shared = len(self.prefix) if self.prefix is not None else 0
        size = p.max_batch_size or float("inf")
        used = sum(self.rows[line].need for line in running)
        admitted: list[Row] = []
        queue, i = self.queue, 0
        while i < len(queue) and len(running) + len(admitted) < size:
            # identical uncached prompts in a row (a group's samples) are prefilled once: admitted together
            unit = [queue[i]]
            while (queue[i].taken[2] == 0 and i + len(unit) < len(queue) and queue[i + len(unit)].taken[2] == 0
                   and queue[i + len(unit)].request.prompt_ids == queue[i].request.prompt_ids):
                unit.append(queue[i + len(unit)])
            if not self._fits_prefix(unit[0]):
                break
            for row in unit:
                row.need = len(row.request.prompt_ids) - shared + row.request.max_new_tokens
            need = sum(row.need for row in unit)
            if (running or admitted) and p.max_batch_tokens is not None and used + need > p.max_batch_tokens:
                break
            take = unit[: int(min(len(unit), size - len(running) - len(admitted)))]
            admitted += take
            used += sum(row.need for row in take)
            i += len(take)
        if not admitted:
            if not running:  # cannot happen: the prefix is chosen over every queued prompt
                raise RuntimeError("internal error: no queued request fits the new batch's shared prefix")
            return
        self.queue = self.queue[len(admitted):]
        for row in admitted:
            row.kv, row.cached, row.offset = _cascade.row_state(self.prefix, row.taken)
            row.taken = None
            row.pending = list(row.request.prompt_ids[row.offset + row.cached:])
        cache, mask, positions, logits = p._prefill(admitted)
        for row in admitted:
            row.kv = None  # now in the batch cache
        if not running:
            self.rows, self.cache, self.mask, self.positions, self.logits = admitted, cache, mask, positions, logits
            return
        from agentrl.algos.policy._kv_cache import stack_caches

        keep = torch.tensor(running)
        old_mask = self.mask.index_select(0, keep)
        width = max(old_mask.shape[1], mask.shape[1])
        both = torch.zeros(len(running) + len(admitted), width, dtype=mask.dtype)
        both[: len(running), width - old_mask.shape[1]:] = old_mask
        both[len(running):, width - mask.shape[1]:] = mask
        first = int(both.any(0).nonzero()[0, 0])  # columns before it are padding in every row
        rows = [self.rows[line] for line in running] + admitted
        reserve = max(r.request.max_new_tokens - len(r.out_ids) for r in rows) + 1
        self.cache = stack_caches([(self.cache, keep.to(p.device)), (cache, None)], width - first, reserve)
        self.mask = both[:, first:]
        self.positions = torch.cat([self.positions.index_select(0, keep), positions])
        self.logits = torch.cat([self.logits.index_select(0, keep.to(p.device)), logits])
        self.rows = rows
