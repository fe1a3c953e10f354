"""Op kinds that are not plain einsums (pointwise functions, normalisations, the loss) and
the SymPy derivation of reductions' backward rules."""
