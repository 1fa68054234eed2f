"""The request id spliced into a body as SGLang's rid: only the rid is added."""

from __future__ import annotations

import orjson
import pytest
from specswitch.router.proxy import with_rid


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","messages":[]}',
        b'  {"text": "hi", "sampling_params": {"max_new_tokens": 4}}',
        b"{}",
        b"{ }",
        b'{"prompt": [1, 2, 3]}',
        b'{"n": 1, "prompt": "x"}',
    ],
)
def test_rid_is_added_and_nothing_else_changes(raw: bytes) -> None:
    out = with_rid(raw, orjson.loads(raw), "abc")
    assert orjson.loads(out) == {"rid": "abc", **orjson.loads(raw)}
    assert out.replace(b'"rid":"abc",', b"").replace(b'"rid":"abc"', b"") == raw


@pytest.mark.parametrize(
    "raw",
    [
        b'{"text": ["a", "b"]}',  # a batch wants a list of ids
        b'{"prompt": ["a", "b"]}',
        b'{"input_ids": [[1, 2], [3]]}',
        b'{"n": 2, "messages": []}',
    ],
)
def test_batches_and_parallel_sampling_are_left_alone(raw: bytes) -> None:
    assert with_rid(raw, orjson.loads(raw), "abc") == raw


def test_id_is_json_escaped() -> None:
    out = with_rid(b'{"a":1}', {"a": 1}, 'we"ird\\id')
    assert orjson.loads(out)["rid"] == 'we"ird\\id'
