"""`specswitch emulate` as a real process: prints where it listens, serves, stops on SIGTERM."""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import aiohttp

URL = re.compile(r"emulate: (spec|baseline)\s+server listening on (http://\S+)")


async def test_emulate_process_serves_and_stops_on_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specswitch",
        "emulate",
        "--profile",
        "paper-h100-llama31-8b",
        "--spec-port",
        "0",
        "--baseline-port",
        "0",
        "--speedup",
        "20",
        "--enable-metrics",
        "--spec-max-running-requests",
        "7",
        "--baseline-kv-tokens",
        "5000",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        urls: dict[str, str] = {}
        async with asyncio.timeout(30):
            while len(urls) < 2:
                line = (await proc.stdout.readline()).decode()
                assert line, (await proc.stderr.read()).decode()
                m = URL.search(line)
                if m:
                    urls[m.group(1)] = m.group(2)
        async with aiohttp.ClientSession() as s:
            async with s.get(urls["spec"] + "/get_server_info") as r:
                info = await r.json()
            assert info["max_running_requests"] == 7
            assert info["speculative_algorithm"] == "EAGLE3"
            async with s.get(urls["baseline"] + "/get_server_info") as r:
                assert (await r.json())["max_total_num_tokens"] == 5000
            body = {"text": "hi", "sampling_params": {"max_new_tokens": 5, "temperature": 0}}
            async with s.post(urls["baseline"] + "/generate", json=body) as r:
                assert (await r.json())["meta_info"]["completion_tokens"] == 5
            async with s.get(urls["spec"] + "/metrics") as r:
                assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            rc = await proc.wait()
        assert rc == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_emulate_bad_profile_is_one_line_error() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specswitch",
        "emulate",
        "--profile",
        "no-such-profile",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await proc.communicate()
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specswitch: error: unknown profile")


async def test_fit_csv_writes_a_profile_that_emulate_accepts(tmp_path) -> None:
    csv_path = tmp_path / "measured.csv"
    csv_path.write_text(
        "pool,concurrency,output_tok_s,p99_ttft_s\n"
        "baseline,1,50,0.1\nbaseline,16,600,0.2\nbaseline,64,1200,0.4\n"
        "spec,1,120,0.1\nspec,16,500,0.2\n"
    )
    out = tmp_path / "mine.toml"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specswitch",
        "emulate",
        "--fit-csv",
        str(csv_path),
        "--write-profile",
        str(out),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    assert "baseline: step = " in stdout.decode() and out.exists()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specswitch",
        "emulate",
        "--profile-file",
        str(out),
        "--spec-port",
        "0",
        "--baseline-port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(30):
            line = (await proc.stdout.readline()).decode()
        assert "profile fitted-measured" in line
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
