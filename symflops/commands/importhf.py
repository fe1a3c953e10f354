"""``symflops import-hf``: a Hugging Face config.json -> its whole-model declaration.

Wiring only: :func:`symflops.hf.importer.import_config` writes the text; it
is read back here by the ordinary declaration reader before it is written
(a declaration symflops cannot read is never handed to the user), then
printed or written atomically (:func:`symflops.commands.output.write_file`).
"""

from __future__ import annotations

import argparse
import sys

from ..core.errors import printable
from .output import STDOUT, write_file

DESCRIPTION = """\
Write the whole-model declaration of a Hugging Face config.json: every dim
with its value from the config (under 'examples:', named after the config's
directory), a comment naming the config key behind each choice, the blocks
inline. Edit it and run it as any declaration (derive, eval, render, plan).
`plan --hf-config` and `render --hf-config` go through the same declaration.

A key the importer does not know is refused by name, unless it is on the
list of keys that change no count (token ids, generation defaults, norm
epsilons, rotary frequencies: see docs/huggingface.md); a value
the declaration cannot express is refused naming the key; a config without
model_type is refused, never guessed.
"""


def families_text() -> str:
    from ..hf.families import FAMILIES

    return "families (model_type): " + ", ".join(sorted(FAMILIES))


EPILOG_HEAD = """\
examples:
  symflops import-hf Llama-2-7b-hf/config.json -o llama2.yaml
  symflops import-hf config.json --attention full-square    # as FLOP counters count
  symflops import-hf Llama-4-Scout/config.json --experts executed   # as transformers runs it
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="a Hugging Face config.json")
    p.add_argument("-o", "--output", metavar="MODEL.yaml",
                   help="write the declaration here (atomically) instead of standard output")
    p.add_argument("--attention", choices=("exact", "full-square"), default="exact",
                   help="write the causal attention products over the S(S+1)/2 pairs a query "
                        "sees (exact, the default) or over the full S x S square, masked "
                        "after, as eager PyTorch runs them (full-square)")
    p.add_argument("--experts", choices=("model", "executed"), default="model",
                   help="routed experts as the model defines them (each token's k experts, "
                        "the default) or as transformers 5.24 runs them in eager mode where "
                        "that differs (executed: Llama 4 runs every expert on every token)")


def run(args: argparse.Namespace) -> int:
    from ..hf.importer import import_config
    from ..planner.model import imported_layer

    imported = import_config(args.config, args.attention, args.experts)
    imported_layer(imported)  # it reads, or it is a bug (exit 70)
    if args.output is None or args.output == STDOUT:
        sys.stdout.write(imported.text)
    else:
        write_file(args.output, imported.text, "-o")
        print(f"wrote {printable(args.output)} ({imported.model_type}, configuration "
              f"{imported.example!r})")
    return 0
