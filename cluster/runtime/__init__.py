"""The Ray runtime: connecting to or starting Ray (``ray_session``), job submission and what a job ships
(``job_submission``, ``job_launch``, ``job_env``, ``package_upload``), the inference-log tap on Ray Serve (``tap``), the
statistics' Ray drivers (``stats_drivers``) and a run's provenance (``provenance``).

Imports ``cluster.home``, ``cluster.store``, ``cluster.catalog``, ``cluster.models``, ``grid``, ``analysis`` and
``actors``."""
