"""Deterministic text: same prefix -> same next token, on either server, from any prefix."""

from __future__ import annotations

from specswitch.loadtest.emulator.tokenizer import decode, encode


async def _gen(http, url: str, **body) -> dict:
    async with http.post(url + "/generate", json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_same_request_same_text_on_both_servers(group, http) -> None:
    sp = {"max_new_tokens": 40, "temperature": 0}
    a = await _gen(http, group.spec_url, text="Explain KV caches.", sampling_params=sp)
    b = await _gen(http, group.baseline_url, text="Explain KV caches.", sampling_params=sp)
    assert a["text"] == b["text"] and a["output_ids"] == b["output_ids"]
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 20,
        "temperature": 0,
    }
    texts = []
    for url in (group.spec_url, group.baseline_url):
        async with http.post(url + "/v1/chat/completions", json=chat) as r:
            texts.append((await r.json())["choices"][0]["message"]["content"])
    assert texts[0] == texts[1]


async def test_continuation_from_prompt_plus_k_output_ids(group, http) -> None:
    prompt = encode("A story about two servers sharing one GPU.")
    sp = {"max_new_tokens": 50, "temperature": 0}
    full = await _gen(http, group.spec_url, input_ids=prompt, sampling_params=sp)
    out = full["output_ids"]
    assert decode(out) == full["text"] and encode(full["text"]) == out
    for k in (1, 17, 49):
        rest = await _gen(
            http,
            group.baseline_url,
            input_ids=prompt + out[:k],
            sampling_params={"max_new_tokens": 50 - k, "temperature": 0},
        )
        assert rest["output_ids"] == out[k:]
    # text prompts continue the same way: prompt text + first k output text
    full_t = await _gen(http, group.baseline_url, text="Hello there", sampling_params=sp)
    k_text = decode(full_t["output_ids"][:10])
    rest_t = await _gen(
        http,
        group.spec_url,
        text="Hello there" + k_text,
        sampling_params={"max_new_tokens": 40, "temperature": 0},
    )
    assert full_t["text"] == k_text + rest_t["text"]


async def test_seeded_sampling_is_reproducible(group, http) -> None:
    def sp(seed: int) -> dict:
        return {"max_new_tokens": 30, "temperature": 0.8, "seed": seed}

    a = await _gen(http, group.spec_url, text="x", sampling_params=sp(7))
    b = await _gen(http, group.baseline_url, text="x", sampling_params=sp(7))
    c = await _gen(http, group.baseline_url, text="x", sampling_params=sp(8))
    greedy = await _gen(
        http, group.baseline_url, text="x", sampling_params={"max_new_tokens": 30, "temperature": 0}
    )
    assert a["output_ids"] == b["output_ids"]
    assert c["output_ids"] != a["output_ids"] and greedy["output_ids"] != a["output_ids"]
