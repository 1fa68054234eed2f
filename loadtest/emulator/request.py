"""One generation request inside an emulated server: its parameters, state and output."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

from .textmodel import initial_state, seed_salt
from .tokenizer import VOCAB

# SGLang's default when the native API gets no max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 128


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False


QUEUED, PREFILL, DECODE, FINISHED = "queued", "prefill", "decode", "finished"


class Request:
    """State of one request; the HTTP handler waits on ``event`` and reads new output."""

    __slots__ = (
        "accepted_tokens",
        "admitted_len",
        "cached_tokens",
        "created_wall",
        "event",
        "finish_reason",
        "first_token_wall",
        "held",
        "input_ids",
        "last_token_wall",
        "locked",
        "out_ids",
        "params",
        "prefill_left",
        "reserve",
        "rid",
        "salt",
        "spec_verify_ct",
        "state",
        "status",
        "stop_tail",
        "text_cache",
        "text_cache_n",
    )

    def __init__(self, rid: str, input_ids: list[int], params: SamplingParams) -> None:
        self.rid = rid
        self.input_ids = input_ids
        self.params = params
        self.status = QUEUED
        self.out_ids: list[int] = []
        self.state = initial_state(input_ids)
        if params.temperature > 0:
            seed = params.seed
            if seed is None:
                seed = int.from_bytes(os.urandom(8), "little")
            self.salt = seed_salt(seed)
        else:
            self.salt = 0
        self.event = asyncio.Event()
        self.finish_reason: dict[str, Any] | None = None
        self.cached_tokens = 0
        self.prefill_left = 0
        self.locked: list[int] = []
        self.reserve = 0
        self.held = 0  # KV tokens this request holds outside the shared prefix cache
        self.admitted_len = 0
        self.spec_verify_ct = 0
        self.accepted_tokens = 0
        self.created_wall = time.perf_counter()
        self.first_token_wall = 0.0
        self.last_token_wall = 0.0
        self.stop_tail = max((len(s) for s in params.stop), default=0)
        self.text_cache = ""
        self.text_cache_n = 0

    def plain_text(self, n: int) -> str:
        """Text of the first ``n`` output tokens (no stop trimming), built incrementally."""
        if n < self.text_cache_n:
            return "".join([VOCAB[t] for t in self.out_ids[:n]])
        if n > self.text_cache_n:
            self.text_cache += "".join([VOCAB[t] for t in self.out_ids[self.text_cache_n : n]])
            self.text_cache_n = n
        return self.text_cache

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    @property
    def prompt_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.out_ids)

    def text(self) -> str:
        """The whole output text (a matched stop string is trimmed, as SGLang does)."""
        text = self.plain_text(len(self.out_ids))
        reason = self.finish_reason
        if reason is not None and reason.get("type") == "stop":
            matched = reason.get("matched")
            if isinstance(matched, str) and matched:
                cut = text.rfind(matched)
                if cut >= 0:
                    text = text[:cut]
        return text

    def meta_info(self, draft_tokens: int = 0) -> dict[str, Any]:
        """SGLang's meta_info; ``draft_tokens`` > 0 on a spec server (adds spec_* fields)."""
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "e2e_latency": time.perf_counter() - self.created_wall,
        }
        if self.finish_reason is not None and self.finish_reason.get("message") == (
            "Abort before prefill"
        ):
            meta["prompt_tokens"] = 0
        if draft_tokens and self.finish_reason is not None:
            verify = self.spec_verify_ct
            meta["spec_verify_ct"] = verify
            if verify:
                meta["spec_accept_length"] = self.completion_tokens / verify
                meta["spec_accept_rate"] = self.accepted_tokens / (verify * (draft_tokens - 1))
            else:
                meta["spec_accept_length"] = 0.0
                meta["spec_accept_rate"] = 0.0
        return meta
