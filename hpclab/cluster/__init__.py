"""Chapter 07, "On the cluster": Slurm jobs from the notebook, the same training on several
nodes, checkpoint and restart under a time limit, job arrays, site profiles.

One concept per module: :mod:`~hpclab.cluster.spec` (what a job asks for),
:mod:`~hpclab.cluster.profiles` (what a site offers), :mod:`~hpclab.cluster.script` (the job
script), :mod:`~hpclab.cluster.slurm` (sbatch/squeue/scontrol/sacct/scancel), :mod:`~hpclab.cluster.local`
(finding a Slurm; the project's local one), :mod:`~hpclab.cluster.runner` (job directories),
then one module per experiment (``hello``, ``multinode``, ``requeue`` with ``resumable`` and
``checkpoint``, ``arrays``), ``plots``, ``tiers`` (live or recorded) and ``allocation``;
:mod:`~hpclab.cluster.submitit_exec` gives chapter 08 submitit's executor for the same JobSpec.
Cluster practice: :mod:`~hpclab.cluster.binding` (which cores each rank runs on, the lines every
job script carries), :mod:`~hpclab.cluster.efficiency` (seff-style usage, one's own jobs),
:mod:`~hpclab.cluster.storage_tiers`, :mod:`~hpclab.cluster.gpu_sharing` (MIG, MPS) and
:mod:`~hpclab.cluster.costs` (time to train and the bill).
"""
