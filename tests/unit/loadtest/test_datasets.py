from __future__ import annotations

import json
from pathlib import Path

import pytest
from specswitch.loadtest import datasets
from specswitch.loadtest.client import build_messages, render_prompt

from specswitch.errors import UserError


def test_builtin_sets_are_deterministic_and_prefix_stable() -> None:
    a = datasets.generate("coding", 5, seed=3)
    b = datasets.generate("coding", 8, seed=3)
    assert a == b[:5]
    assert datasets.generate("coding", 5, seed=4) != a
    assert len({c.turns[0] for c in datasets.generate("coding", 200)}) == 200  # all distinct


def test_shipped_files_are_the_seed0_sets() -> None:
    for name, count in datasets.SHIPPED_COUNTS.items():
        shipped = datasets.load_file(datasets.SHIPPED_DIR / f"{name}.jsonl")
        assert shipped == datasets.generate(name, count, 0), f"regenerate {name}.jsonl"


def test_agentic_sessions_resend_a_growing_conversation() -> None:
    conv = datasets.generate("agentic", 1)[0]
    assert len(conv.turns) >= 4 and conv.system
    replies = ["reply one", "reply two"]
    m2 = build_messages(conv, 2, replies)
    assert [m.role for m in m2] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert m2[2].content == "reply one" and m2[-1].content == conv.turns[2]
    assert render_prompt(m2).startswith("<|system|>\n" + conv.system)


def test_load_builtin_extends_to_min_items() -> None:
    ds = datasets.load("coding", min_items=100)
    assert len(ds.items) == 100
    assert len(datasets.load("mixed").items) == 32


def test_user_jsonl_formats(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    lines = [
        {"prompt": "write a haiku", "max_tokens": 16},
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "again"},
            ]
        },
        {"turns": ["first", "second"], "system": "sys", "id": "s1"},
        {
            "conversations": [
                {"from": "human", "value": "q1"},
                {"from": "gpt", "value": "a1"},
                {"from": "human", "value": "q2"},
            ]
        },
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    ds = datasets.load(str(path))
    assert ds.name == "mine.jsonl" and len(ds.items) == 4
    assert ds.items[0].turns == ("write a haiku",) and ds.items[0].max_tokens == 16
    assert ds.items[1].system == "be brief" and ds.items[1].turns == ("again",)
    assert [m.role for m in ds.items[1].history] == ["user", "assistant"]
    assert ds.items[2].id == "s1" and ds.items[2].turns == ("first", "second")
    assert ds.items[3].turns == ("q1", "q2")
    assert ds.requests_per_pass == 6


def test_sharegpt_json_array(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"id": "x", "conversations": [{"from": "human", "value": "q"}]}]))
    assert datasets.load(str(path)).items[0].turns == ("q",)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n", "not valid JSON"),
        ('{"foo": 1}\n', "unknown record"),
        ('{"prompt": ""}\n', "non-empty string"),
        ('{"messages": [{"role": "user"}]}\n', "'role' and 'content'"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}\n', "last message"),
        ('{"prompt": "x", "max_tokens": 0}\n', "max_tokens"),
        ("\n", "no records"),
    ],
)
def test_bad_files_give_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        datasets.load(str(path))


def test_missing_file_and_unknown_name() -> None:
    with pytest.raises(UserError, match="does not exist"):
        datasets.load("/nonexistent/file.jsonl")
    with pytest.raises(UserError, match="unknown dataset"):
        datasets.load("codingg")


def test_output_spread_is_deterministic_and_bounded() -> None:
    from specswitch.loadtest.client import ClientConfig

    cfg = ClientConfig(target="http://x", max_tokens=200, output_spread=0.5)
    picks = [cfg.max_tokens_for(f"c{i}", 0) for i in range(200)]
    assert min(picks) >= 100 and max(picks) <= 200 and len(set(picks)) > 50
    assert picks == [cfg.max_tokens_for(f"c{i}", 0) for i in range(200)]
    assert ClientConfig(target="http://x", max_tokens=7).max_tokens_for("a", 3) == 7
    assert cfg.max_tokens_for("a", 0, override=10) <= 10
    with pytest.raises(ValueError, match="output_spread"):
        ClientConfig(target="http://x", output_spread=1.0)
