"""Values the command line's help text names, kept apart from the modules that
use them, so that building the parser (:mod:`symflops.commands.cli`) imports
neither NumPy nor SymPy: the columns and the grid limit of ``symflops sweep``
(:mod:`symflops.commands.sweep`)."""

#: The quantities in the CSV, as paths of fields of :func:`symflops.count.summary.summary`.
QUANTITIES = ("flops.forward", "flops.backward", "flops.total", "flops_elementwise.total",
              "params", "memory.activation_bytes", "memory.total_bytes")

#: The largest grid a sweep accepts (its CSV would be tens of gigabytes).
MAX_POINTS = 10**8
