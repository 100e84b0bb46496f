"""Chapter 09, part 2, "Sharded data parallelism": ZeRO-1/2/3 and FSDP2 beside DDP.

Modules: :mod:`~hpclab.sharding.zero1` (ZeRO-1 by hand), :mod:`~hpclab.sharding.wrappers`
(the strategies: DDP, ZeRO-1, torch's ZeroRedundancyOptimizer, FSDP2 as ZeRO-2 and -3),
:mod:`~hpclab.sharding.probe` (bytes held, peak and sent, measured inside a step),
:mod:`~hpclab.sharding.fsdp_experiment` (experiment ``fsdp``),
:mod:`~hpclab.sharding.planner` (experiment ``zero-plan``: what fits on which device),
:mod:`~hpclab.sharding.checkpoint` (experiment ``sharded-checkpoint``: save on N, load on M).
"""
