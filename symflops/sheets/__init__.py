"""Derivation sheets: the context the templates place, LaTeX printing, Jinja rendering."""
