"""The SGLang emulator: a faithful, calibrated stand-in for SGLang servers without a GPU."""
