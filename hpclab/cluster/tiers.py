"""Live where a Slurm answers; otherwise the job script and a recorded run (chapter 07).

The chapter's notebook calls :func:`live_or_recorded` for each experiment: with a Slurm it runs
the experiment (the same ``run`` as the CLI and the tests); without one it prints the job script
the experiment would submit and returns a run recorded on the local cluster, bundled in
``hpclab/references/cluster_<name>.json`` with its source, so every plot still draws (the
staging job instead runs chapter 04's staging here, outside a job).
"""

from __future__ import annotations

from typing import Any

from hpclab import experiments
from hpclab.cluster import profiles
from hpclab.cluster.arrays import ArrayConfig, array_option, task_command
from hpclab.cluster.hello import REPORT, HelloConfig, hello_spec
from hpclab.cluster.multinode import job_spec, torchrun_commands
from hpclab.cluster.requeue import RequeueConfig, requeue_commands, requeue_spec
from hpclab.cluster.runner import python
from hpclab.cluster.script import render
from hpclab.cluster.slurm import Cluster
from hpclab.cluster.spec import JobSpec
from hpclab.cluster.staging_job import StagingJobConfig, staging_commands
from hpclab.results import Result, load_reference


def job_script(name: str, site: str = "local") -> str:
    """The script experiment ``name`` submits, with its defaults, for ``site``."""
    prof = profiles.load(site)
    if name == "slurm-hello":
        text = render(hello_spec(HelloConfig(nodes=2)), prof, [REPORT])
    elif name == "ddp-multinode":
        cores = prof.partition(None).cpus_per_node
        cmds = torchrun_commands(2, "$WORK/task.pkl $WORK")
        text = render(job_spec(2, 2, cores), prof, cmds)
    elif name == "requeue":
        cfg = RequeueConfig()
        text = render(requeue_spec(cfg), prof, requeue_commands(cfg, "$WORK"))
    elif name == "job-array":
        cfg = ArrayConfig()
        spec = JobSpec(name="search", array=array_option(cfg.trials, cfg.throttle))
        text = render(spec, prof, [task_command("$WORK")])
    elif name == "staging-job":
        cmds = staging_commands(StagingJobConfig().files, "$WORK/staging.json")
        text = render(JobSpec(name="stage", mem="1G"), prof, cmds)
    else:
        raise KeyError(f"no job script for {name!r}")
    return text.replace(python(), "python")


def recorded(name: str) -> Result:
    return load_reference("cluster_" + name.replace("-", "_"))


def live_or_recorded(name: str, cluster: Cluster | None, **params: Any) -> Result:
    """Run ``name`` on ``cluster``; with none, show its job script and return the recorded run."""
    if cluster is not None:
        return experiments.run(name, **params)
    print(job_script(name))
    if name == "staging-job":  # no job needed to show the lesson: chapter 04's run, here
        print("No Slurm here: the same staging runs in this process instead of a job step.")
        return experiments.run("staging", files=StagingJobConfig.create().files)
    ref = recorded(name)
    print(f"No Slurm here: the figure shows a recorded run ({ref.env['source']}).")
    return ref
