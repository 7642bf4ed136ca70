"""The target's KV cache layer that grows in place, and the row-append it shares with the DFlash drafter's cache."""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """DynamicLayer whose keys/values are views of a buffer with spare room, so appending n tokens copies n rows.

    Why: DynamicLayer concatenates, i.e. copies the whole cache of every layer at every forward; for SmolLM2 at a
    300-token context that was ~10 ms of a ~60 ms decoding step, growing with the context. `crop` and
    `compact_cache` keep working on the views (they shorten `keys`/`values`; the buffer is reused)."""

    buf_k = buf_v = None  # the buffers, made at the first update or reserve

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.buf_k = self.buf_v = None
        old_k, old_v = (self.keys, self.values) if self.keys.dim() == 4 else (None, None)
        self.buf_k, self.keys = append_rows(self.buf_k, old_k, key_states)
        self.buf_v, self.values = append_rows(self.buf_v, old_v, value_states)
        return self.keys, self.values

    def reserve(self, n: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Room for n more positions, for a caller that writes them itself (caddtree/lean_layers.cpp) -> the key and
        value buffers [1, g, capacity >= m + n, d], the cache's m rows first; the caller then sets `keys`/`values` to
        their first m + n rows (lean_layers.cpp returns those views).
        like: a [1, g, *, d] tensor of the cache's dtype and device."""
        if not self.is_initialized:
            self.lazy_initialization(like, like)
            self.buf_k = self.buf_v = None
        old_k, old_v = (self.keys, self.values) if self.keys.dim() == 4 else (None, None)
        self.buf_k, self.buf_v = room_for(self.buf_k, old_k, n, like), room_for(self.buf_v, old_v, n, like)
        if old_k is None:  # a fresh buffer: the cache is its first 0 rows
            self.keys, self.values = self.buf_k[..., :0, :], self.buf_v[..., :0, :]
        return self.buf_k, self.buf_v


def room_for(buf: torch.Tensor | None, old: torch.Tensor | None, n: int, like: torch.Tensor) -> torch.Tensor:
    """A buffer [..., capacity >= m + n, d] whose first m rows are old [..., m, d]: `buf` itself when `old` is still a
    prefix view of it with room for n more rows, else a new one of twice the rows (at least 256) with `old` copied in
    (shape, dtype and device of `like` [..., *, d])."""
    m = 0 if old is None else old.shape[-2]
    if buf is not None and m + n <= buf.shape[-2] and (old is None or (
            old.data_ptr() == buf.data_ptr() and old.stride() == buf.stride())):
        return buf
    grown = like.new_empty((*like.shape[:-2], max(2 * (m + n), 256), like.shape[-1]))
    if m:
        grown[..., :m, :] = old
    return grown


def append_rows(buf: torch.Tensor | None, old: torch.Tensor | None, new: torch.Tensor):
    """Append new [..., n, d] after old [..., m, d] along dim -2 -> (buffer [..., capacity, d], view of its first
    m + n rows): only the n new rows are copied while the buffer has room (`room_for`). Shared by the target's KV
    cache (`GrowingLayer`) and the DFlash drafter's context cache."""
    m, n = (0 if old is None else old.shape[-2]), new.shape[-2]
    buf = room_for(buf, old, n, new)
    buf[..., m:m + n, :] = new
    return buf, buf[..., :m + n, :]
