"""Workload datasets: built-in coding prompts and agentic sessions, and a user's own files.

Every item is a :class:`Conversation`: an optional system prompt, optional fixed history, and
one or more user turns. A single-turn item is one request; a multi-turn item (an agentic
session) is sent turn by turn, each turn resending the whole conversation so far (system,
every earlier user turn and the server's actual replies), so prefixes repeat and grow.

The built-in sets are generated deterministically: item ``i`` of ``coding`` or ``agentic``
depends only on ``(seed, i)``, so the small files shipped in ``datasets/*.jsonl`` are exactly
the first items of the seed-0 sets, and a run that needs more items extends them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specswitch.errors import UserError

BUILTIN = ("coding", "agentic", "mixed")
SHIPPED_DIR = Path(__file__).resolve().parent / "datasets"
SHIPPED_COUNTS = {"coding": 48, "agentic": 16}


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Conversation:
    """One workload item: ``turns`` are the user messages sent one request at a time."""

    id: str
    turns: tuple[str, ...]
    system: str | None = None
    history: tuple[Message, ...] = ()
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError(f"conversation {self.id!r} has no user turn")

    def to_json(self) -> dict:
        out: dict = {"id": self.id}
        if self.system is not None:
            out["system"] = self.system
        if self.history:
            out["history"] = [{"role": m.role, "content": m.content} for m in self.history]
        out["turns"] = list(self.turns)
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        return out


@dataclass
class Dataset:
    name: str
    items: list[Conversation] = field(default_factory=list)

    @property
    def requests_per_pass(self) -> int:
        return sum(len(c.turns) for c in self.items)

    def cycle(self) -> Iterator[Conversation]:
        """Items in order, forever (a run draws as many as it needs)."""
        while True:
            yield from self.items


# --------------------------------------------------------------------------- generation

_LANGS = ("python", "typescript", "go", "rust")
_NOUNS = (
    "user",
    "order",
    "invoice",
    "session",
    "token",
    "cache",
    "record",
    "payload",
    "event",
    "job",
    "queue",
    "buffer",
    "config",
    "metric",
    "account",
    "route",
    "tensor",
    "batch",
    "request",
    "response",
    "shard",
    "replica",
    "lease",
    "snapshot",
    "cursor",
    "schema",
)
_VERBS = (
    "load",
    "parse",
    "merge",
    "validate",
    "flush",
    "render",
    "compute",
    "resolve",
    "fetch",
    "encode",
    "decode",
    "retry",
    "schedule",
    "evict",
    "apply",
    "collect",
    "split",
    "index",
)
_TASKS = (
    "Refactor the following {lang} code so that {verb}_{noun} no longer mutates its input, "
    "keep the public behaviour, and explain each change.",
    "There is a bug in this {lang} code: {verb}_{noun} sometimes returns stale data under "
    "concurrent use. Find it, fix it, and add a regression test.",
    "Write thorough unit tests for the {lang} function {verb}_{noun} below, covering edge "
    "cases, error paths and the empty input.",
    "Add type annotations and docstrings to this {lang} module, then make {verb}_{noun} "
    "stream its results instead of building a list in memory.",
    "Review this {lang} code as a senior engineer would: point out correctness problems, "
    "performance traps and naming issues in {verb}_{noun}, then propose a patch.",
    "Port the following {lang} code to idiomatic {other}, preserving semantics of "
    "{verb}_{noun} including its error handling.",
)
_SYSTEM_CODING = (
    "You are an expert software engineer. Answer with working code first, then a short "
    "explanation. Prefer small functions, clear names and tests."
)
_TOOLS = (
    ("read_file", "Read a file of the repository. Arguments: path (string), start_line, end_line."),
    ("write_file", "Overwrite a file with new content. Arguments: path, content."),
    ("apply_patch", "Apply a unified diff to the working tree. Arguments: patch (string)."),
    ("run_tests", "Run the test suite or one test file. Arguments: target (optional string)."),
    ("search_code", "Search the repository for a regular expression. Arguments: pattern, glob."),
    ("list_dir", "List a directory of the repository. Arguments: path, depth."),
    ("run_shell", "Run a shell command in the sandbox and return stdout and stderr."),
)


def _ident(rng: random.Random) -> str:
    return f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"


def _code(rng: random.Random, lang: str, lines: int) -> str:
    out: list[str] = []
    while len(out) < lines:
        fn, arg, other = _ident(rng), rng.choice(_NOUNS), rng.choice(_NOUNS)
        n = rng.randint(2, 40)
        if lang == "python":
            out += [
                f"def {fn}({arg}s, limit={n}):",
                f'    """{fn.replace("_", " ").capitalize()} for each {arg}."""',
                "    result = []",
                f"    for i, {arg} in enumerate({arg}s):",
                f"        if i >= limit or {arg} is None:",
                "            break",
                f"        result.append({_ident(rng)}({arg}, {other}_map.get(i)))",
                "    return result",
                "",
            ]
        elif lang == "typescript":
            out += [
                f"export function {fn}({arg}s: {arg.capitalize()}[], limit = {n}): Result[] {{",
                "  const result: Result[] = [];",
                f"  for (const [i, {arg}] of {arg}s.entries()) {{",
                f"    if (i >= limit || !{arg}) break;",
                f"    result.push({_ident(rng)}({arg}, {other}Map.get(i)));",
                "  }",
                "  return result;",
                "}",
                "",
            ]
        elif lang == "go":
            out += [
                f"func {fn}({arg}s []{arg.capitalize()}, limit int) ([]Result, error) {{",
                "\tresult := make([]Result, 0, limit)",
                f"\tfor i, {arg} := range {arg}s {{",
                "\t\tif i >= limit {",
                "\t\t\tbreak",
                "\t\t}",
                f"\t\tr, err := {_ident(rng)}({arg}, {other}Map[i])",
                "\t\tif err != nil {",
                f'\t\t\treturn nil, fmt.Errorf("{fn}: %w", err)',
                "\t\t}",
                "\t\tresult = append(result, r)",
                "\t}",
                "\treturn result, nil",
                "}",
                "",
            ]
        else:
            out += [
                f"pub fn {fn}({arg}s: &[{arg.capitalize()}], limit: usize) -> Vec<Output> {{",
                f"    {arg}s.iter().take(limit).filter_map(|{arg}| {{",
                f"        {_ident(rng)}({arg}, {other}_map.get(&{n}))",
                "    }).collect()",
                "}",
                "",
            ]
    return "\n".join(out[:lines])


def coding_item(seed: int, index: int) -> Conversation:
    rng = random.Random(f"coding:{seed}:{index}")
    lang = rng.choice(_LANGS)
    other = rng.choice([x for x in _LANGS if x != lang])
    task = rng.choice(_TASKS).format(
        lang=lang, other=other, verb=rng.choice(_VERBS), noun=rng.choice(_NOUNS)
    )
    code = _code(rng, lang, rng.randint(20, 120))
    return Conversation(
        id=f"coding-{seed}-{index}",
        system=_SYSTEM_CODING,
        turns=(f"{task}\n\n```{lang}\n{code}\n```",),
    )


def _agent_system() -> str:
    lines = [
        "You are a coding agent working in a sandboxed repository. Work step by step: "
        "inspect the code, make the smallest correct change, run the tests, and report.",
        "You can call these tools by answering with a JSON object "
        '{"tool": NAME, "arguments": {...}}; the result comes back in the next message.',
        "",
    ]
    for name, desc in _TOOLS:
        lines.append(f"- {name}: {desc}")
    lines += [
        "",
        "Rules: never delete tests; keep the public API; explain risky changes; when the "
        "tests pass, answer with a summary of the change and the files touched.",
    ]
    return "\n".join(lines)


def agentic_item(seed: int, index: int) -> Conversation:
    rng = random.Random(f"agentic:{seed}:{index}")
    lang = rng.choice(_LANGS)
    ext = {"python": "py", "typescript": "ts", "go": "go", "rust": "rs"}[lang]
    files = [f"src/{rng.choice(_NOUNS)}_{rng.choice(_NOUNS)}.{ext}" for _ in range(6)]
    target = _ident(rng)
    turns = [
        f"Task: {target} fails when the input is empty and is slow on large inputs. Fix "
        f"both and make the test suite pass.\nRepository files:\n" + "\n".join(files)
    ]
    for step in range(rng.randint(3, 6)):
        kind = rng.choice(("read_file", "run_tests", "search_code"))
        path = rng.choice(files)
        if kind == "read_file":
            body = _code(rng, lang, rng.randint(30, 90))
            turns.append(f"Tool result (read_file {path}):\n```{lang}\n{body}\n```")
        elif kind == "run_tests":
            fails = rng.randint(0, 3) if step < 3 else 0
            log = [
                f"{'FAILED' if k < fails else 'passed'} tests/test_{rng.choice(_NOUNS)}."
                f"{ext}::{_ident(rng)} ({rng.randint(1, 900)} ms)"
                for k in range(rng.randint(8, 24))
            ]
            turns.append("Tool result (run_tests):\n" + "\n".join(log) + f"\n{fails} failed")
        else:
            hits = [
                f"{rng.choice(files)}:{rng.randint(1, 400)}: {_ident(rng)}({rng.choice(_NOUNS)})"
                for _ in range(rng.randint(5, 15))
            ]
            turns.append("Tool result (search_code):\n" + "\n".join(hits))
    return Conversation(id=f"agentic-{seed}-{index}", system=_agent_system(), turns=tuple(turns))


def generate(name: str, count: int, seed: int = 0) -> list[Conversation]:
    """The first ``count`` items of a built-in set (deterministic in ``seed``)."""
    if name == "coding":
        return [coding_item(seed, i) for i in range(count)]
    if name == "agentic":
        return [agentic_item(seed, i) for i in range(count)]
    if name == "mixed":  # alternate: a coding prompt, then an agentic session
        return [
            coding_item(seed, i // 2) if i % 2 == 0 else agentic_item(seed, i // 2)
            for i in range(count)
        ]
    raise UserError(f"unknown dataset {name!r}; use one of {', '.join(BUILTIN)} or a file path")


# --------------------------------------------------------------------------- files


def _from_record(rec: object, where: str) -> Conversation:
    if not isinstance(rec, dict):
        raise UserError(f"{where}: expected a JSON object per line, got {type(rec).__name__}")
    ident = str(rec.get("id", where))
    max_tokens = rec.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise UserError(f"{where}: max_tokens must be a positive integer")
    if "turns" in rec:
        turns = rec["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            raise UserError(f"{where}: 'turns' must be a non-empty list of strings")
        history = tuple(Message(str(m["role"]), str(m["content"])) for m in rec.get("history", []))
        return Conversation(ident, tuple(turns), rec.get("system"), history, max_tokens)
    if "prompt" in rec:
        if not isinstance(rec["prompt"], str) or not rec["prompt"]:
            raise UserError(f"{where}: 'prompt' must be a non-empty string")
        return Conversation(ident, (rec["prompt"],), rec.get("system"), (), max_tokens)
    if "messages" in rec:
        msgs = rec["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise UserError(f"{where}: 'messages' must be a non-empty list")
        try:
            parsed = [Message(str(m["role"]), str(m["content"])) for m in msgs]
        except (KeyError, TypeError) as exc:
            raise UserError(f"{where}: each message needs 'role' and 'content'") from exc
        system = parsed[0].content if parsed[0].role == "system" else None
        body = parsed[1:] if system is not None else parsed
        if not body or body[-1].role != "user":
            raise UserError(f"{where}: the last message must have role 'user'")
        return Conversation(ident, (body[-1].content,), system, tuple(body[:-1]), max_tokens)
    if "conversations" in rec:  # ShareGPT: human turns are sent, gpt replies come from the server
        conv = rec["conversations"]
        if not isinstance(conv, list):
            raise UserError(f"{where}: 'conversations' must be a list")
        system = None
        turns: list[str] = []
        for m in conv:
            if not isinstance(m, dict) or "value" not in m:
                raise UserError(f"{where}: ShareGPT turns need 'from' and 'value'")
            who = m.get("from")
            if who in ("human", "user"):
                turns.append(str(m["value"]))
            elif who == "system":
                system = str(m["value"])
        if not turns:
            raise UserError(f"{where}: ShareGPT conversation has no human turn")
        return Conversation(ident, tuple(turns), system, (), max_tokens)
    raise UserError(
        f"{where}: unknown record; expected one of 'prompt', 'messages', 'turns', "
        "'conversations' (ShareGPT)"
    )


def load_file(path: Path) -> list[Conversation]:
    """Read a JSONL file (one record per line) or a JSON array (ShareGPT dumps)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(
            f"dataset file {path} does not exist; pass a JSONL file or one of {', '.join(BUILTIN)}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read dataset file {path}: {exc}") from None
    items: list[Conversation] = []
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        for i, rec in enumerate(records):
            items.append(_from_record(rec, f"{path}[{i}]"))
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            items.append(_from_record(rec, f"{path}:{lineno}"))
    if not items:
        raise UserError(f"dataset file {path} holds no records")
    return items


def load(spec: str, *, min_items: int = 0, seed: int = 0) -> Dataset:
    """A built-in set by name (at least ``min_items`` items) or a user's file by path."""
    if spec in BUILTIN:
        count = max(min_items, SHIPPED_COUNTS.get(spec, 32))
        return Dataset(spec, generate(spec, count, seed))
    path = Path(spec)
    if not path.suffix and not path.exists():
        raise UserError(f"unknown dataset {spec!r}; use one of {', '.join(BUILTIN)} or a file path")
    return Dataset(path.name, load_file(path))


def write_shipped(directory: Path = SHIPPED_DIR) -> list[Path]:
    """Regenerate the shipped seed-0 sample files (``python -m specswitch.loadtest.datasets``)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, count in SHIPPED_COUNTS.items():
        target = directory / f"{name}.jsonl"
        tmp = target.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for item in generate(name, count, 0):
                fh.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
        tmp.replace(target)
        written.append(target)
    return written


if __name__ == "__main__":
    for p in write_shipped():
        print(p)
