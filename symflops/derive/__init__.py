"""Backward rules: derived from each op, chained in reverse order."""
