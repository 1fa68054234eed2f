"""Conversation identity: which conversation a request continues and which prefixes it carries.

A request is described once, on arrival, by a :class:`Conversation`:

- ``session``: an explicit identity when the client gives one: a session header
  (``X-Session-Id``, ``X-Conversation-Id``, ``X-SMG-Routing-Key`` by default), SGLang's native
  ``session_params.id``, or the OpenAI ``user`` field (weakest: one user may hold many
  conversations). Explicit identity is a label and a fallback; the prefix keys decide.
- ``keys``: cumulative hashes of the request's prefix at natural boundaries, shortest first.
  Chat: one key per message (hash over role, content, tool calls... of messages 0..i, seeded
  with the model and the tool definitions). Raw text: one key per ``text_chunk_chars``
  characters. Token ids: one key per ``ids_chunk`` ids. A follow-up turn resends the earlier
  messages, so its keys start with the previous turn's keys: the longest key an index holds
  tells how many prompt tokens a pool has cached for it. This works without client changes.
- each key carries the estimated number of prompt tokens up to its boundary: text length /
  ``CHARS_PER_TOKEN`` plus ``MESSAGE_OVERHEAD_TOKENS`` per chat message (chat-template role
  markers); exact for token ids. The estimate is corrected downstream by the prompt_tokens the
  servers report (see prefix_index.TokenScale).

Cost: one pass over the request's text, done once per request. The digests are Python's own
64-bit string/tuple hash (SipHash, salted per process): fast, and the index lives in one
router process, so keys never need to be stable across processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

CHARS_PER_TOKEN = 4.0
"""Typical BPE tokenizers average 3.5-4.5 characters per token on English prose and code."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Chat-template tokens around each message (role header, separators)."""
TEXT_CHUNK_CHARS = 1024
IDS_CHUNK = 256
DEFAULT_OUTPUT_TOKENS = 256
"""KV estimate for the output of a request that sets no max_tokens."""
OUTPUT_RESERVE_RATIO = 0.7
"""Share of a request's output cap counted as KV it will need: SGLang's scheduler admits
requests reserving this share (its initial new_token_ratio, 0.7) of their remaining output,
not the whole cap; most requests stop before their cap. Counting the whole cap would keep
work off the spec pool that the server itself would have admitted."""
DEFAULT_SESSION_HEADERS: tuple[str, ...] = (
    "x-session-id",
    "x-conversation-id",
    "x-smg-routing-key",
)


@dataclass(frozen=True, slots=True)
class PrefixKey:
    digest: int
    tokens: int
    """Estimated prompt tokens from the start of the prompt up to this boundary."""


@dataclass(frozen=True, slots=True)
class Conversation:
    session: str | None
    keys: tuple[PrefixKey, ...]
    prompt_tokens: int
    """Estimated prompt tokens of the whole request."""
    max_new_tokens: int
    """Requested output cap (or DEFAULT_OUTPUT_TOKENS): the KV the request may grow by."""
    exact: bool = False
    """True when token counts are exact (the request carried input_ids)."""
    own_from: int = 0
    """Index of the first key that belongs to this conversation rather than to a prefix many
    conversations share (chat: the first user message; the system prompt and tools before it
    do not make two conversations one). A pool holding keys[own_from:] holds this
    conversation; one holding only earlier keys holds a shared preamble."""

    @property
    def output_reserve(self) -> int:
        """Output tokens to count as KV: the reserved share of the output cap, as SGLang's
        admission counts it (OUTPUT_RESERVE_RATIO). Exact units (tokens), unlike an estimated
        prompt."""
        return int(self.max_new_tokens * OUTPUT_RESERVE_RATIO + 0.5)

    @property
    def kv_need(self) -> int:
        """KV tokens to count for this request, before the token scale: prompt plus
        output_reserve (kv_tracker.KvTracker.kv_tokens scales the estimated prompt only)."""
        return self.prompt_tokens + self.output_reserve

    @property
    def hashable(self) -> bool:
        return bool(self.keys)


EMPTY = Conversation(session=None, keys=(), prompt_tokens=0, max_new_tokens=0)


def estimate_tokens(text: str) -> int:
    """Estimated token count of a text (ceil of len / CHARS_PER_TOKEN)."""
    return -int(-len(text) // CHARS_PER_TOKEN)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # OpenAI content parts, tool payloads...: a canonical serialisation.
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()


def chat_keys(
    messages: list[Any], seed: str, preamble: str = ""
) -> tuple[tuple[PrefixKey, ...], int]:
    """Cumulative keys at every message boundary and the estimated prompt tokens."""
    h = hash((seed, preamble))
    tokens = estimate_tokens(preamble) if preamble else 0
    keys: list[PrefixKey] = []
    for msg in messages:
        if not isinstance(msg, Mapping):
            break
        text = _content_text(msg.get("content"))
        extra = ""
        for field in ("name", "tool_call_id", "tool_calls"):
            value = msg.get(field)
            if value is not None:
                extra += field + "=" + _content_text(value) + "\x1f"
        h = hash((h, msg.get("role"), text, extra))
        tokens += estimate_tokens(text) + estimate_tokens(extra) + MESSAGE_OVERHEAD_TOKENS
        keys.append(PrefixKey(h, tokens))
    return tuple(keys), tokens


def text_keys(
    text: str, seed: str, chunk_chars: int = TEXT_CHUNK_CHARS
) -> tuple[tuple[PrefixKey, ...], int]:
    """Cumulative keys every chunk_chars characters (only whole chunks; the tail adds tokens)."""
    h = hash(seed)
    keys: list[PrefixKey] = []
    whole = len(text) - len(text) % chunk_chars
    for start in range(0, whole, chunk_chars):
        h = hash((h, text[start : start + chunk_chars]))
        keys.append(PrefixKey(h, -int(-(start + chunk_chars) // CHARS_PER_TOKEN)))
    return tuple(keys), estimate_tokens(text)


def ids_keys(
    ids: list[Any], seed: str, chunk: int = IDS_CHUNK
) -> tuple[tuple[PrefixKey, ...], int]:
    """Cumulative keys every `chunk` token ids (exact counts)."""
    h = hash(seed)
    keys: list[PrefixKey] = []
    whole = len(ids) - len(ids) % chunk
    try:
        for n in range(chunk, whole + 1, chunk):
            h = hash((h, tuple(ids[n - chunk : n])))
            keys.append(PrefixKey(h, n))
    except TypeError:  # unhashable items: not token ids
        return (), len(ids)
    return tuple(keys), len(ids)


def _int_or(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return default
    return int(value)


def _explicit_session(
    body: Mapping[str, Any], headers: Mapping[str, str], names: tuple[str, ...]
) -> str | None:
    for name in names:
        value = headers.get(name)
        if value:
            return f"h:{value.strip()}"
    params = body.get("session_params")
    if isinstance(params, Mapping) and params.get("id"):
        return f"s:{params['id']}"
    user = body.get("user")
    if isinstance(user, str) and user:
        return f"u:{user}"
    return None


def identify(
    path: str,
    body: Mapping[str, Any] | None,
    headers: Mapping[str, str] | None = None,
    *,
    session_headers: tuple[str, ...] = DEFAULT_SESSION_HEADERS,
    text_chunk_chars: int = TEXT_CHUNK_CHARS,
    ids_chunk: int = IDS_CHUNK,
) -> Conversation:
    """Describe a request (parsed JSON body) by its conversation identity and prefix keys.

    `headers` lookups must be case-insensitive (aiohttp's CIMultiDict is) or lower-case keyed.
    Never raises on odd bodies: an unrecognised shape gives a Conversation without keys.
    """
    if not isinstance(body, Mapping):
        return EMPTY
    session = _explicit_session(body, headers or {}, session_headers)
    model = body.get("model") if isinstance(body.get("model"), str) else ""
    keys: tuple[PrefixKey, ...] = ()
    tokens = 0
    exact = False
    own_from = 0
    if path.endswith("/chat/completions"):
        out = _int_or(
            body.get("max_completion_tokens", body.get("max_tokens")), DEFAULT_OUTPUT_TOKENS
        )
        messages = body.get("messages")
        if isinstance(messages, list):
            tools = body.get("tools")
            preamble = _content_text(tools) if tools else ""
            keys, tokens = chat_keys(messages, f"chat:{model}", preamble)
            own_from = next(
                (i for i, m in enumerate(messages[: len(keys)]) if m.get("role") == "user"), 0
            )
    else:
        if path.endswith("/generate"):
            params = body.get("sampling_params")
            raw_out = params.get("max_new_tokens") if isinstance(params, Mapping) else None
            out = _int_or(raw_out, 128)
            prompt: Any = (
                body.get("input_ids") if body.get("input_ids") is not None else body.get("text")
            )
        else:
            out = _int_or(body.get("max_tokens"), 16)
            prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            keys, tokens = text_keys(prompt, f"text:{model}", text_chunk_chars)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt[:8]):
            keys, tokens = ids_keys(prompt, f"ids:{model}", ids_chunk)
            exact = True
        elif isinstance(prompt, list):  # a batch: count it, no affinity
            tokens = sum(
                estimate_tokens(p) if isinstance(p, str) else len(p)
                for p in prompt
                if isinstance(p, str | list)
            )
    return Conversation(
        session=session,
        keys=keys,
        prompt_tokens=tokens,
        max_new_tokens=out,
        exact=exact,
        own_from=own_from,
    )
