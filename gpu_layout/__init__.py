"""gpu_layout: plan two SGLang servers on the same GPUs."""
