"""The front end: a declaration (YAML or Python data) in, the IR out, with source positions."""
