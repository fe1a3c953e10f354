"""``python -m symflops`` and the ``symflops`` command (``symflops.__main__:main``).

The command is :func:`symflops.cli.main`, imported inside :func:`main`, so
that Ctrl-C during start-up is "symflops: interrupted" and exit 130 like
Ctrl-C at any other time, not a traceback.  :mod:`symflops.cli` imports
nothing heavy (SymPy takes about a second); it imports the module of a
command when the command runs, inside its own handlers.  (The package's
``__init__`` imports nothing heavy for the same reason.)
"""

import sys


def main(argv=None) -> int:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        print("symflops: interrupted", file=sys.stderr)
        return 130
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
