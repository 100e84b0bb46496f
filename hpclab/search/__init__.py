"""Chapter 08, "Search and autotuning": many independent trials, run in parallel.

- :mod:`hpclab.trial` (shared with chapter 07): one trial (train with given settings, report
  validation loss);
- :mod:`~hpclab.search.strategies`: grid, random and model-based (Optuna TPE) search;
  :mod:`~hpclab.search.early_stopping`: ASHA and Hyperband (Optuna's pruners; synchronous rungs
  on job arrays), compared with random search in :mod:`~hpclab.search.asha_compare`;
- :mod:`~hpclab.trial_record`: one trial's record and its fate (:mod:`~hpclab.search.fates`),
  the same on every backend; :mod:`~hpclab.search.search_config`: the config and the one
  signature of a backend;
- :mod:`~hpclab.search.broker`, :mod:`~hpclab.search.celery_app` and :mod:`~hpclab.search.tasks`:
  a private Redis and Celery workers, one task per trial;
- :mod:`~hpclab.search.search_experiment`: the ``search`` experiment, its table and plot; its
  backends :mod:`~hpclab.search.job_backends` (a job array, submitit),
  :mod:`~hpclab.search.celery_backend` and :mod:`~hpclab.search.allocation` (Celery workers
  inside one Slurm job);
- :mod:`~hpclab.search.serve`: the ``serve`` experiment: a trained model behind Celery workers.
- :mod:`~hpclab.search.autotune` and :mod:`~hpclab.search.screen`: the ``autotune`` experiment
  (a pruned configuration space, screened in parallel on disjoint cores, finalists alone).
"""
