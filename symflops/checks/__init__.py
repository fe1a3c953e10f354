"""Checking a derivation: claims (check), finite differences and PyTorch (verify), and
gradients of given arrays (grads), with one NumPy runner."""
