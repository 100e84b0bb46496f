"""Chapter 05, "Hogwild! and parameter-server SGD".

- :mod:`hpclab.sgd.problems`: the dense (MLP on digits) and sparse (logistic regression on
  sparse features, convex) problems, serial SGD, the optimum.
- :mod:`hpclab.sgd.hogwild`: lock-free shared-memory SGD by several processes, and the locked
  variant; :mod:`hpclab.sgd.hogwild_experiment`: the ``hogwild`` experiment.
- :mod:`hpclab.sgd.staleness`: versions, staleness and the stale-synchronous rule, pure.
- :mod:`hpclab.sgd.paramserver`: servers and trainers on ``torch.distributed`` send/recv, in
  sync, async and SSP modes, and synchronous all-reduce.
- :mod:`hpclab.sgd.ps_experiment`: the ``paramserver`` experiment and its plots.
"""
