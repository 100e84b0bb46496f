"""Chapter 06, "Multi-GPU data parallel": DDP runs, all-reduce, ring, buckets, scaling model.

What each rank does and how a run is launched are the core's (:mod:`hpclab.train`); here:
:mod:`~hpclab.ddp.ddp_experiment` (experiment ``ddp``), :mod:`~hpclab.ddp.allreduce` (``allreduce``: algbw/busbw + alpha-beta fit),
:mod:`~hpclab.ddp.ring` (``ring-allreduce``: send/recv ring vs ``dist.all_reduce``),
:mod:`~hpclab.ddp.buckets` (``ddp-buckets``: tensor fusion), :mod:`~hpclab.ddp.cost_model` and
:mod:`~hpclab.ddp.scaling` (``scaling-model``), :mod:`~hpclab.ddp.plots`;
:mod:`~hpclab.ddp.collectives` (tree and recursive doubling beside the ring, ``allreduce
--algorithm``) with :mod:`~hpclab.ddp.collective_model` (their alpha-beta costs), and
:mod:`~hpclab.ddp.hang` (``hang``: a planted collective fault and the tool that names the rank);
:mod:`~hpclab.ddp.fabric` (the node: NVSwitch, NICs, rails, hierarchical and in-network all-reduce)
with :mod:`~hpclab.ddp.fabric_reference` (beside published nccl-tests figures).
"""
