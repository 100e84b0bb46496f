"""Chapter 07: chapter 06's DDP worker on two Slurm nodes via srun + torchrun (needs root)."""

from __future__ import annotations

from listening import Watch

from hpclab.cluster.multinode import MultinodeConfig, run_multinode
from hpclab.cluster.runner import jobs_dir
from hpclab.progress import Progress


def test_two_nodes_by_two_ranks_end_with_the_weights_of_one_process(cluster):
    config = MultinodeConfig(nodes=2, ranks_per_node=2, per_rank_batch=8, steps=4, one_node=False)
    # every process of the job (torchrun launchers and ranks) names the job's directory
    with Watch(str(jobs_dir())) as watch:
        result = run_multinode(config, Progress())
    # on the local cluster nothing listens for the meeting (file stores): only gloo, on loopback
    watch.assert_loopback_only("the multi-node run")
    assert {name for _, name in watch.procs} and watch.seen, "the watch saw no rank listen"
    multi, serial = result.records
    assert multi["layout"] == "2x2" and multi["world"] == 4
    assert multi["replica_max_diff"] == 0.0  # every rank holds the same weights
    # world 4 x batch 8 == one process with batch 32, up to float rounding
    assert multi["params_max_diff"] < 1e-5
    assert multi["samples_per_s"] > 0 and serial["layout"] == "1 process"
