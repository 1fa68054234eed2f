"""Load generator, workloads, reports and the demo."""
