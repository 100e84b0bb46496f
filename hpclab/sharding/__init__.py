"""Chapter 09, part 2, "Sharded data parallelism": ZeRO-1/2/3 and FSDP2 beside DDP.

Modules: :mod:`~hpclab.sharding.zero1` (ZeRO-1 by hand), :mod:`~hpclab.sharding.wrappers`
(the strategies: DDP, ZeRO-1, torch's ZeroRedundancyOptimizer, FSDP2 as ZeRO-2 and -3),
:mod:`~hpclab.sharding.probe` (bytes held, peak and sent, measured inside a step),
:mod:`~hpclab.sharding.fsdp_experiment` (experiment ``fsdp``; its figures in
:mod:`~hpclab.sharding.fsdp_plots`), :mod:`~hpclab.sharding.floor` (how far two orders of the
gradients' sum end apart), :mod:`~hpclab.sharding.meta_init` (building from the meta device),
:mod:`~hpclab.sharding.offload` (FSDP2's CPU offload on GPU ranks),
:mod:`~hpclab.sharding.planner` (experiment ``zero-plan``: what fits on which device),
:mod:`~hpclab.sharding.checkpoint` (experiment ``sharded-checkpoint``: save on N, load on M).
"""
