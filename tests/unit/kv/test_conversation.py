"""Conversation identity: explicit ids, implicit prefix keys, token estimates."""

from __future__ import annotations

from specswitch.router.conversation import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    identify,
)

SYSTEM = {"role": "system", "content": "You are a coding agent. " * 40}


def chat(*messages: dict, **extra: object) -> dict:
    return {"model": "m", "messages": list(messages), **extra}


def test_follow_up_turn_extends_the_previous_turns_keys() -> None:
    turn1 = identify(
        "/v1/chat/completions", chat(SYSTEM, {"role": "user", "content": "fix the bug"})
    )
    turn2 = identify(
        "/v1/chat/completions",
        chat(
            SYSTEM,
            {"role": "user", "content": "fix the bug"},
            {"role": "assistant", "content": "done: patched foo.py"},
            {"role": "user", "content": "now run the tests"},
        ),
    )
    assert len(turn1.keys) == 2 and len(turn2.keys) == 4
    assert turn2.keys[:2] == turn1.keys
    assert turn2.prompt_tokens == turn2.keys[-1].tokens > turn1.prompt_tokens
    # tokens are cumulative and increasing
    assert all(a.tokens < b.tokens for a, b in zip(turn2.keys, turn2.keys[1:], strict=False))


def test_token_estimate_follows_text_length() -> None:
    conv = identify("/v1/chat/completions", chat({"role": "user", "content": "x" * 4000}))
    assert conv.prompt_tokens == int(4000 / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS


def test_different_content_model_or_tools_give_different_keys() -> None:
    base = identify("/v1/chat/completions", chat({"role": "user", "content": "a"}))
    other = identify("/v1/chat/completions", chat({"role": "user", "content": "b"}))
    other_model = identify(
        "/v1/chat/completions", {**chat({"role": "user", "content": "a"}), "model": "n"}
    )
    tools = identify(
        "/v1/chat/completions", chat({"role": "user", "content": "a"}, tools=[{"type": "function"}])
    )
    digests = {c.keys[0].digest for c in (base, other, other_model, tools)}
    assert len(digests) == 4


def test_content_parts_and_tool_calls_are_hashed() -> None:
    parts = chat({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "1", "function": {"name": "ls"}}],
    }
    a = identify("/v1/chat/completions", chat({"role": "user", "content": "hi"}, call))
    b = identify(
        "/v1/chat/completions", chat({"role": "user", "content": "hi"}, {**call, "tool_calls": []})
    )
    assert identify("/v1/chat/completions", parts).keys
    assert a.keys[0] == b.keys[0] and a.keys[1] != b.keys[1]


def test_raw_text_is_keyed_per_chunk_and_shares_the_prefix() -> None:
    base = "lorem ipsum " * 1000
    a = identify("/v1/completions", {"prompt": base, "max_tokens": 50})
    b = identify("/v1/completions", {"prompt": base + " and more text " * 200})
    assert a.max_new_tokens == 50 and b.max_new_tokens == 16
    assert len(a.keys) == len(base) // 1024
    assert b.keys[: len(a.keys)] == a.keys


def test_generate_text_and_input_ids() -> None:
    g = identify("/generate", {"text": "y" * 3000, "sampling_params": {"max_new_tokens": 7}})
    assert g.max_new_tokens == 7 and len(g.keys) == 2 and not g.exact
    ids = list(range(600))
    a = identify("/generate", {"input_ids": ids})
    b = identify("/generate", {"input_ids": [*ids, 1, 2, 3]})
    assert a.exact and a.prompt_tokens == 600 and a.max_new_tokens == 128
    assert [k.tokens for k in a.keys] == [256, 512]
    assert b.keys == a.keys


def test_explicit_session_sources_in_order() -> None:
    body = chat({"role": "user", "content": "hi"}, user="alice", session_params={"id": "s1"})
    assert identify("/v1/chat/completions", body, {"x-session-id": "abc"}).session == "h:abc"
    assert identify("/v1/chat/completions", body, {}).session == "s:s1"
    assert (
        identify(
            "/v1/chat/completions", chat({"role": "user", "content": "x"}, user="alice")
        ).session
        == "u:alice"
    )
    assert identify("/v1/chat/completions", chat({"role": "user", "content": "x"})).session is None


def test_odd_bodies_never_raise() -> None:
    for path, body in [
        ("/v1/chat/completions", None),
        ("/v1/chat/completions", {"messages": "nope"}),
        ("/v1/chat/completions", {"messages": [1, 2]}),
        ("/v1/completions", {"prompt": ["a", "b"]}),
        ("/v1/completions", {"prompt": [[1, 2], [3]]}),
        ("/generate", {"input_ids": [1, "x"]}),
        ("/generate", {"text": None, "sampling_params": {"max_new_tokens": "x"}}),
        ("/v1/completions", {"prompt": 5, "max_tokens": True}),
    ]:
        conv = identify(path, body)
        assert conv.prompt_tokens >= 0
