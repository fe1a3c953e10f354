"""The IR and the mathematics every stage shares: errors with positions, frozen dims, tensors
and ops, polynomial helpers, size proofs, domain counts, pairwise contraction steps, and the
whitelisting expression parser.  Imports nothing from the stages above it."""
