"""From a command to tracked jobs: Hydra configuration, pre-flight, one job's run, its summary.

- :mod:`~mcsa_bench.jobs.config` and :mod:`~mcsa_bench.jobs.composition`: the job's settings and the run
  schema, overrides checked, every job of a sweep composed (composition.py alone touches Hydra's private modules);
- :mod:`~mcsa_bench.jobs.launch`: the driver of ``mcsa-bench run``: pre-flight, a sweep's parent run, Hydra's launch;
- :mod:`~mcsa_bench.jobs.localray`: a sweep's own Ray instance, kept on 127.0.0.1;
- :mod:`~mcsa_bench.jobs.slurm`: Hydra's Slurm launcher on a real cluster (arrays that fit, Ctrl-C cancels);
- :mod:`~mcsa_bench.jobs.job`: one Hydra job: settings -> components -> a tracked run -> saved results;
- :mod:`~mcsa_bench.jobs.tracked`: a job's run record, whichever engine computes it;
- :mod:`~mcsa_bench.jobs.cell` and :mod:`~mcsa_bench.jobs.cellcompute`: a sweep's seeds of one configuration as
  one launcher job (a cell; numpy's in parts), a jax cell computed at once (cellcompute.py: without Hydra or
  MLflow), each replicate a tracked run;
- :mod:`~mcsa_bench.jobs.health`, :mod:`~mcsa_bench.jobs.summary`, :mod:`~mcsa_bench.jobs.threads`:
  a run's verdict, what a command prints, BLAS threads per job;
- :mod:`~mcsa_bench.jobs.reconstruction`: what a report of a store written by an older version
  rebuilds from today's configs (the CLI hands it to the report).

Uses the public layer (:mod:`mcsa_bench.api`, :mod:`mcsa_bench.engine`, :mod:`mcsa_bench.plugins`,
:mod:`mcsa_bench.assembly`) and :mod:`mcsa_bench.tracking`; used by the CLI (the report reads only the
store, as :mod:`mcsa_bench.tracking.record` describes it).
"""
