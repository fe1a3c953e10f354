"""The declaration assembled: dims, tensors, ops and includes into a layer (the IR)."""
