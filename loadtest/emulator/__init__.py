"""The SGLang emulator: a faithful, calibrated stand-in for SGLang servers without a GPU.

``group = await start_group("seed-glm5-rtxpro6000", speedup=10)`` starts a spec and a
baseline server that share one simulated GPU; see docs/emulator.md.
"""

from .group import EmulatorGroup, start_group
from .profile import (
    OVERRIDE_NAMES,
    PoolProfile,
    Profile,
    ProfileError,
    builtin_profile_names,
    load_profile,
)

__all__ = [
    "OVERRIDE_NAMES",
    "EmulatorGroup",
    "PoolProfile",
    "Profile",
    "ProfileError",
    "builtin_profile_names",
    "load_profile",
    "start_group",
]
