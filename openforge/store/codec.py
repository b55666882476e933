"""How calls and trajectories are laid out in the store's rows, so that a rollout's bytes grow
linearly with its length. Pure functions, no I/O.

Owns: encoding a call against the previous call of its rollout (:func:`encode_call`) and decoding
a rollout's call rows back (:class:`CallDecoder`); encoding a finished trajectory as a row that
references its logged calls (:func:`encode_trajectory`) and reassembling it (:func:`decode_trajectory`).

- A call's prompt is stored as (base call, shared prefix length, new tail) against the previous
  call's prompt + output, and its request body as a delta against the previous call's request:
  a list field (``messages``, ``input``) that extends the base's keeps only its new items, a large
  field equal to the base's (``tools``, ``system``) is marked ``"="``. Decoded requests share the
  unchanged items with their base's (read-only JSON values).
- A trajectory row (layout 2) lists each call as its index when the call is the very object the
  store logged for that rollout (checked by identity, so nothing unlogged is ever assumed), inline
  otherwise; a segment that is exactly what its calls imply (validated, ending at its last call's
  output) is kept as its call list, break reason and reward. Layout 1 rows (the whole trajectory
  JSON) are read as before.
"""

from __future__ import annotations

import json
import weakref
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..core.errors import StoreError
from ..core.finite import nonfinite_in_trajectory
from ..core.trajectory import Trajectory, _common_prefix
from ..core.trajectory_io import _parse_traj
from ..core.types import ModelCall, Segment

__all__ = ["CallDecoder", "CallRow", "Tail", "decode_trajectory", "encode_call", "encode_trajectory"]

LAYOUT = 2
ID_FIELDS = frozenset({"prompt_ids", "output_ids", "output_logprobs"})
_SAME = "="
_BIG_STR = 64  # a string field shorter than this is stored as is, not referenced


def ints(b: bytes) -> list[int]:
    a = array("i")
    a.frombytes(b)
    return a.tolist()


def floats(b: bytes) -> list[float]:
    a = array("d")
    a.frombytes(b)
    return a.tolist()


# ------------------------------------------------------------------------------------ calls

@dataclass(frozen=True)
class Tail:
    """What the next call of a rollout is encoded against: the last logged call's index, its
    prompt + output tokens and its request body."""

    idx: int
    tokens: list[int]
    request: dict[str, Any]


# (meta, prompt_base, prompt_prefix, prompt_tail, output, logprobs, req_base, req_delta)
CallRow = tuple[str, int, int, bytes, bytes, bytes, int, "str | None"]


def request_delta(request: dict[str, Any], base: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``request`` as (reduced body, delta) against ``base``: see the module docstring."""
    reduced: dict[str, Any] = {}
    delta: dict[str, Any] = {}
    for k, v in request.items():
        b = base.get(k)
        if isinstance(v, list) and isinstance(b, list) and b:
            n = _shared_items(v, b)
            if n == len(v) == len(b):
                reduced[k], delta[k] = None, _SAME
                continue
            if n > 0:
                reduced[k], delta[k] = v[n:], n
                continue
        elif isinstance(v, (dict, str)) and (not isinstance(v, str) or len(v) >= _BIG_STR) and v == b:
            reduced[k], delta[k] = None, _SAME
            continue
        reduced[k] = v
    return reduced, delta


def _shared_items(a: list[Any], b: list[Any]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def apply_request_delta(reduced: dict[str, Any], delta: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in reduced.items():
        d = delta.get(k)
        if d is None:
            out[k] = v
        elif d == _SAME:
            out[k] = base[k]
        else:
            out[k] = base[k][:d] + v
    return out


def encode_call(call: ModelCall, prev: Tail | None) -> tuple[CallRow, Tail]:
    """The row of ``call`` (deltas against ``prev``, an earlier call of the same rollout, if any) and
    the tail the next call is encoded against."""
    prompt = call.prompt_ids
    base, prefix = -1, 0
    req_base, reduced, delta = -1, call.request, None
    if prev is not None and prev.idx < call.index:
        k = _common_prefix(prev.tokens, prompt)
        if k > 0:
            base, prefix = prev.idx, k
        reduced, d = request_delta(call.request, prev.request)
        if d:
            req_base, delta = prev.idx, json.dumps(d)
    head = call.model_dump_json(exclude=set(ID_FIELDS | {"request"}))  # pydantic-core: a third of dump + json.dumps
    meta = f'{head[:-1]},"request":{json.dumps(reduced)}}}'
    row: CallRow = (meta, base, prefix, array("i", prompt[prefix:]).tobytes(), array("i", call.output_ids).tobytes(),
                    array("d", call.output_logprobs).tobytes(), req_base, delta)
    return row, Tail(call.index, prompt + call.output_ids, call.request)


class CallDecoder:
    """Decodes one rollout's call rows, fed in index order (each row's bases come before it)."""

    def __init__(self, where: str):
        self.where = where
        self._tokens: dict[int, list[int]] = {}
        self._requests: dict[int, dict[str, Any]] = {}

    def decode(self, idx: int, meta: str, base: int, prefix: int, tail: bytes, output: bytes, logprobs: bytes,
               req_base: int, req_delta: str | None) -> ModelCall:
        try:
            fields = json.loads(meta)
            prompt = (self._tokens[base][:prefix] if base >= 0 else []) + ints(tail)
            if req_delta is not None:
                fields["request"] = apply_request_delta(fields["request"], json.loads(req_delta),
                                                        self._requests[req_base])
            out_ids = ints(output)
            call = ModelCall.model_validate({**fields, "prompt_ids": prompt, "output_ids": out_ids,
                                             "output_logprobs": floats(logprobs)})
        except (ValidationError, KeyError, ValueError, TypeError) as e:
            raise StoreError(f"{self.where}: call {idx} is corrupt: {e}") from None
        self._tokens[idx] = prompt + out_ids
        self._requests[idx] = call.request
        return call


# ------------------------------------------------------------------------------------ trajectories

def encode_trajectory(traj: Trajectory, logged: Mapping[int, weakref.ref[ModelCall]]) -> str:
    """The layout-2 JSON of ``traj`` (its segments already validated against its calls); ``logged``
    maps call indices to the call objects the store logged for this rollout."""
    head = traj.model_dump(mode="json", exclude={"calls", "segments"})
    calls: list[Any] = []
    by_index: dict[int, ModelCall] = {}
    for c in traj.calls:
        ref = logged.get(c.index)
        calls.append(c.index if ref is not None and ref() is c else c.model_dump(mode="json"))
        by_index[c.index] = c
    segments = [_encode_segment(s, by_index) for s in traj.segments]
    return json.dumps({**head, "calls": calls, "segments": segments}, allow_nan=False, separators=(",", ":"))


def _encode_segment(seg: Segment, by_index: Mapping[int, ModelCall]) -> dict[str, Any]:
    last = by_index.get(seg.call_indices[-1]) if seg.call_indices else None
    if last is not None and len(seg.input_ids) == len(last.prompt_ids) + len(last.output_ids):
        return {"call_indices": seg.call_indices, "break_reason": str(seg.break_reason), "reward": seg.reward}
    return seg.model_dump(mode="json")


def _derive_segment(d: dict[str, Any], by_index: Mapping[int, ModelCall]) -> Segment:
    """A validated segment ending at its last call's output, rebuilt from its calls."""
    last = by_index[d["call_indices"][-1]]
    ids = last.prompt_ids + last.output_ids
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    for ci in d["call_indices"]:
        c = by_index[ci]
        p, o = len(c.prompt_ids), len(c.output_ids)
        mask[p:p + o] = [1] * o
        logprobs[p:p + o] = c.output_logprobs
    return Segment(input_ids=ids, loss_mask=mask, logprobs=logprobs, call_indices=d["call_indices"],
                   break_reason=d["break_reason"], reward=d["reward"])


def decode_trajectory(data: str, layout: int, logged: Callable[[], Sequence[ModelCall]], where: str) -> Trajectory:
    """A stored trajectory row back as the :class:`Trajectory` that was put (``logged``: the rollout's
    call log, read only when the row references it)."""
    if layout < LAYOUT:
        return _parse_traj(data, where)
    try:
        doc = json.loads(data)
        refs = [c for c in doc["calls"] if isinstance(c, int)]
        log = {c.index: c for c in logged()} if refs else {}
        missing = [i for i in refs if i not in log]
        if missing:
            raise StoreError(f"{where}: call(s) {missing[:5]} are referenced but not in the store's call log")
        calls = [log[c] if isinstance(c, int) else ModelCall.model_validate(c) for c in doc["calls"]]
        by_index = {c.index: c for c in calls}
        doc["calls"] = calls
        doc["segments"] = [Segment.model_validate(s) if "input_ids" in s else _derive_segment(s, by_index)
                           for s in doc["segments"]]
        traj = Trajectory.model_validate(doc)
    except ValidationError as e:
        raise StoreError(f"{where}: not a valid trajectory (version 1): {e.error_count()} problem(s), first: "
                         f"{e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from None
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise StoreError(f"{where}: not a valid stored trajectory (layout {layout}): {e!r}") from None
    bad = nonfinite_in_trajectory(traj)
    if bad is not None:
        raise StoreError(f"{where}: not a valid trajectory (version 1): {bad}")
    return traj
