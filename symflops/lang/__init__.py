"""The front end's grammar: YAML with positions, the op statement grammar, whitelisted expressions."""
