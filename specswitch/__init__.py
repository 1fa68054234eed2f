"""specswitch: speculative decoding at low load, baseline under load, one endpoint."""

__version__ = "0.1.0"
