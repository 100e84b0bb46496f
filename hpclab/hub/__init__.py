"""The workbook where its students use it: a JupyterHub that starts each student's JupyterLab as a
Slurm job (chapter 07; ``deploy/jupyterhub/``).

:mod:`~hpclab.hub.request` is the spawn form (cores, memory, GPUs, time, partition) validated
into one frozen request; :mod:`~hpclab.hub.spawner` is batchspawner's ``SlurmSpawner`` with that
form, the workbook's environment, loopback binding where the site allows it, and failures that
say why (Slurm's own reason, the job log's tail). Needs ``pip install 'hpclab[hub]'`` in the
hub's environment (jupyterhub, batchspawner); nothing in the rest of the library imports it.
"""
