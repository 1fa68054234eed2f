"""Which /generate requests may migrate, and how a stream is stitched (pure functions)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from specswitch.router.config import ConfigError, PolicyConfig
from specswitch.router.migration import Stitch, plan


def _body(**sp: Any) -> dict[str, Any]:
    params = {"max_new_tokens": 100, "temperature": 0, **sp}
    return {"input_ids": [5, 6, 7], "sampling_params": params, "stream": True}


def test_greedy_input_ids_stream_is_eligible() -> None:
    p = plan(_body())
    assert p is not None and p.prompt_ids == [5, 6, 7] and p.max_new_tokens == 100
    assert plan(_body(temperature=0.7, top_k=1)) is not None  # top_k 1 is greedy too


@pytest.mark.parametrize(
    "change",
    [
        {"stream": False},
        {"text": "hello"},  # a text prompt cannot be re-tokenised exactly
        {"input_ids": [[1, 2], [3]]},  # a batch
        {"return_logprob": True},
        {"lora_path": "x"},  # unknown keys: not provably safe
        {"sampling_params": {"max_new_tokens": 100}},  # SGLang's default temperature is 1.0
        {"sampling_params": {"temperature": 0}},  # no explicit max_new_tokens
        {"sampling_params": {"max_new_tokens": 100, "temperature": 0, "stop": ["x"]}},
        {"sampling_params": {"max_new_tokens": 100, "temperature": 0, "n": 2}},
        {"sampling_params": {"max_new_tokens": 100, "temperature": 0, "regex": "a+"}},
        {"sampling_params": {"max_new_tokens": 100, "temperature": 0, "frequency_penalty": 1}},
    ],
)
def test_ineligible(change: dict[str, Any]) -> None:
    body = _body()
    if "text" in change:
        del body["input_ids"]
    body.update(change)
    assert plan(body) is None
    assert plan(None) is None


def _ev(ids: list[int], text: str, ct: int, finish: Any = None) -> bytes:
    meta = {"id": "r", "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": ct,
            "cached_tokens": 2}  # fmt: skip
    return b"data: " + orjson.dumps({"text": text, "output_ids": ids, "meta_info": meta})


def test_cumulative_stream_stitched_after_a_move_to_a_delta_server() -> None:
    p = plan(_body(max_new_tokens=5))
    assert p is not None
    st = Stitch(p, 0.0, 0.0)
    for raw in (_ev([1], " a", 1), _ev([1, 2], " a b", 2)):  # relayed unchanged
        assert st.on_event(raw) == raw + b"\n\n"
    assert st.client_mode == "cum" and st.sent_count == 2
    body = orjson.loads(st.continuation("r-m1"))
    assert body["input_ids"] == [5, 6, 7, 1, 2] and body["rid"] == "r-m1"
    assert body["sampling_params"]["max_new_tokens"] == 3
    st.rebase(1.0)
    # The new server streams deltas and reports only its own tokens.
    out = st.on_event(_ev([3], " c", 1))
    obj = orjson.loads(out[6:])
    assert obj["output_ids"] == [1, 2, 3] and obj["text"] == " a b c"
    last = st.on_event(_ev([4, 9], " d e", 3, {"type": "length", "length": 3}))
    obj = orjson.loads(last[6:])
    assert obj["output_ids"] == [1, 2, 3, 4, 9] and obj["text"] == " a b c d e"
    meta = obj["meta_info"]
    assert meta["completion_tokens"] == 5 and meta["finish_reason"]["length"] == 5
    assert meta["id"] == "r" and meta["prompt_tokens"] == 3
    assert st.final_usage is not None and st.final_usage.completion_tokens == 5


def test_error_event_stops_tracking() -> None:
    p = plan(_body())
    assert p is not None
    st = Stitch(p, 0.0, 0.0)
    raw = b'data: {"error": {"message": "x"}}'
    assert st.on_event(raw) == raw + b"\n\n" and st.opaque


def test_policy_keys_validated() -> None:
    assert PolicyConfig().migrate is False
    with pytest.raises(ConfigError, match="migrate_min_remaining_tokens"):
        PolicyConfig(migrate_min_remaining_tokens=0).validate()


def test_cumulative_events_are_parsed_lazily_but_fully_accounted() -> None:
    p = plan(_body(max_new_tokens=10))
    assert p is not None
    st = Stitch(p, 0.0, 0.0)
    for ids in ([1], [1, 2], [1, 2, 3], [1, 2, 3, 4]):
        st.on_event(_ev(ids, "".join(f" w{i}" for i in ids), len(ids)))
    assert st.pending is not None  # the latest one waits for a decision
    body = orjson.loads(st.continuation("r-m1"))
    assert body["input_ids"][3:] == [1, 2, 3, 4] and body["sampling_params"]["max_new_tokens"] == 6
    st.on_event(_ev([1, 2, 3, 4, 5], " w1 w2 w3 w4 w5", 5, {"type": "length", "length": 10}))
    st.sync()
    assert st.finished and st.final_usage is not None and st.final_usage.completion_tokens == 5
