"""``python -m symflops`` and the ``symflops`` command (``symflops.__main__:main``).

The command's modules (SymPy among them) take about a second to import;
they are imported inside :func:`main`, so that Ctrl-C during start-up is
"symflops: interrupted" and exit 130 like Ctrl-C at any other time, not a
traceback.  (The package's ``__init__`` imports nothing heavy for the same
reason.)
"""

import sys


def main(argv=None) -> int:
    try:
        from .commands.cli import main as run
    except KeyboardInterrupt:
        print("symflops: interrupted", file=sys.stderr)
        return 130
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
