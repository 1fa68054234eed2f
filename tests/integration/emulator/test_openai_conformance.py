"""The emulator speaks the OpenAI API as SGLang does, driven by the official `openai` SDK."""

from __future__ import annotations

import openai
import pytest

MSG = [{"role": "user", "content": "Write a haiku about batching."}]


@pytest.fixture
async def client(group):
    async with openai.AsyncOpenAI(base_url=group.spec_url + "/v1", api_key="none") as c:
        yield c


async def test_models_lists_the_served_model(client, group) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == [group.profile.model_name]
    assert models.data[0].owned_by == "sglang"


async def test_chat_non_stream_has_message_and_usage(client) -> None:
    r = await client.chat.completions.create(model="m", messages=MSG, max_tokens=12, temperature=0)
    assert r.object == "chat.completion"
    assert r.model == "m"
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12


async def test_chat_stream_chunk_sequence_with_usage(client) -> None:
    stream = await client.chat.completions.create(
        model="m",
        messages=MSG,
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    first, *content, finish, usage = chunks
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert content and all(c.choices[0].delta.content for c in content)
    assert all(c.choices[0].finish_reason is None for c in content)
    assert finish.choices[0].finish_reason == "length" and not finish.choices[0].delta.content
    assert usage.choices == [] and usage.usage.completion_tokens == 10
    assert usage.usage.total_tokens == usage.usage.prompt_tokens + 10
    text = "".join(c.choices[0].delta.content for c in content)
    whole = await client.chat.completions.create(
        model="m", messages=MSG, max_tokens=10, temperature=0
    )
    assert text == whole.choices[0].message.content


async def test_chat_stream_without_usage_has_no_usage_chunk(client) -> None:
    stream = await client.chat.completions.create(
        model="m", messages=MSG, max_tokens=5, temperature=0, stream=True
    )
    chunks = [c async for c in stream]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)


async def test_completions_non_stream_and_stream(client) -> None:
    r = await client.completions.create(
        model="m", prompt="Once upon a time", max_tokens=8, temperature=0
    )
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
    stream = await client.completions.create(
        model="m",
        prompt="Once upon a time",
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    *content, usage = chunks
    assert "".join(c.choices[0].text for c in content) == r.choices[0].text
    assert content[-1].choices[0].finish_reason == "length"
    assert usage.choices == [] and usage.usage.completion_tokens == 8


async def test_stop_string_finishes_with_stop_and_trims(client) -> None:
    full = await client.completions.create(model="m", prompt="abc", max_tokens=30, temperature=0)
    words = full.choices[0].text.split(" ")
    stop = " " + words[5]
    r = await client.completions.create(
        model="m", prompt="abc", max_tokens=30, temperature=0, stop=[stop]
    )
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text
    assert full.choices[0].text.startswith(r.choices[0].text)


async def test_cached_tokens_reported_on_repeat(client) -> None:
    long = [{"role": "user", "content": "context " * 200}]
    await client.chat.completions.create(model="m", messages=long, max_tokens=2, temperature=0)
    r = await client.chat.completions.create(model="m", messages=long, max_tokens=2, temperature=0)
    assert r.usage.prompt_tokens_details.cached_tokens >= 160


async def test_bad_requests_get_400_from_sdk(client) -> None:
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="m", messages=[], max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="m", messages=MSG, max_tokens=-1)
    with pytest.raises(openai.BadRequestError):
        await client.completions.create(model="m", prompt="x " * 200_000, max_tokens=1)
