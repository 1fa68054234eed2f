"""The two servers of a group share one simulated GPU: each runs slower while both are busy."""

from __future__ import annotations

from specswitch.loadtest.emulator.calibrate import closed_loop, measure_window


async def test_baseline_slows_down_while_spec_is_busy(make_group) -> None:
    group = await make_group("seed-glm5-rtxpro6000", speedup=100)
    window = 6.0  # simulated seconds
    async with closed_loop(group, "baseline", 8, max_new_tokens=4096):
        alone = await measure_window(group, "baseline", window, "gpu")
        async with closed_loop(group, "spec", 8, max_new_tokens=4096):
            shared = await measure_window(group, "baseline", window, "gpu")
            spec_shared = await measure_window(group, "spec", window, "gpu")
        again = await measure_window(group, "baseline", window, "gpu")
    # model: alone one 33 ms step per 33 ms; shared one 33 ms step per 33 + 72 ms (~0.31x)
    assert shared < 0.8 * alone
    assert again > 0.8 * alone  # back to full speed once the spec server is idle
    assert spec_shared > 0
