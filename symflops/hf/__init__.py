"""Hugging Face configs: a config.json read safely and written out as a
whole-model declaration (``symflops import-hf``)."""
