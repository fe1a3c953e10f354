"""Many devices: a layer's work split over a mesh of devices.

The stage between the counts (:mod:`symflops.count`) and the reports that
use them (:mod:`symflops.planner`, :mod:`symflops.sheets`, the ``shard``
command).  It takes a derived layer and a :class:`~symflops.core.sharding.Parallel`
(a declaration's ``parallel:``, or the command line's strategies), and gives:

* the placement of every tensor on the mesh (:mod:`.presets`: DP, ZeRO,
  Megatron tensor and sequence parallelism, context and expert parallelism,
  from the dims' roles (:mod:`.roles`); or the placements written out);
* for every forward op and backward rule, what it needs when its letters are
  split so (:meth:`symflops.ops.base.Op.split`), the collectives gathered by
  pass and axis (:mod:`.analysis`);
* one device's FLOPs and memory as polynomials in the dims and the mesh's
  sizes (:mod:`.memory`), pipeline stages and bubbles (:mod:`.pipeline`);
* bytes and times of each collective on an accelerator's links, the step
  time with and without overlap (:mod:`.timing`), and the conditions under
  which the collectives hide behind the compute, solved (:mod:`.thresholds`).
"""
