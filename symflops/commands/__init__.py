"""The command line: argument parsing, the commands, and the one atomic file writer."""
