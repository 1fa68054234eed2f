"""The specswitch router: one OpenAI-compatible endpoint in front of spec/baseline pools."""
