"""Vector-env support for :class:`~agentrl.envs.core.AnyText` spaces.

``gymnasium.make_vec(..., vectorization_mode="async")`` passes observations between processes through shared
memory. Gymnasium's ``Text`` handlers store characters as indices into the space's charset, so text outside the
charset comes back as strings of ``'0'`` — and the async env reads the buffer once, at construction, into a
tuple of strings that never changes. These handlers store any string exactly (each env's slot is one int32
length followed by the string's UTF-32 code points) and return a live view, :class:`SharedTexts`, which the
vector env deep-copies into a plain tuple of the current texts on every ``reset``/``step``. Imported by
:mod:`agentrl.envs`, so both vector modes return the real text with no extra arguments.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence

import numpy as np
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

from agentrl.envs.core import AnyText


@create_shared_memory.register(AnyText)
def _create(space: AnyText, n: int = 1, ctx=mp):
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTexts(Sequence):
    """A live, read-only view of the texts in shared memory; ``copy.deepcopy`` gives a plain tuple."""

    def __init__(self, data: np.ndarray):
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        row = self._data[i]
        return row[1:1 + row[0]].tobytes().decode("utf-32-le")

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(AnyText)
def _read(space: AnyText, shared_memory, n: int = 1) -> SharedTexts:
    return SharedTexts(np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length + 1))


@write_to_shared_memory.register(AnyText)
def _write(space: AnyText, index: int, value: str, shared_memory) -> None:
    codes = np.frombuffer(value.encode("utf-32-le"), dtype=np.int32)
    if len(codes) > space.max_length:
        raise ValueError(f"observation of {len(codes)} characters exceeds the space's max_length {space.max_length}")
    size = space.max_length + 1
    dest = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size:(index + 1) * size]
    dest[0] = len(codes)
    dest[1:1 + len(codes)] = codes
