"""FLOP and memory polynomials of a derivation, parameter classes, recomputation, the
key/value cache, the reported summary, and its evaluation at numbers."""
