"""Shipped Jinja templates for derivation sheets (installed as symflops.templates)."""
