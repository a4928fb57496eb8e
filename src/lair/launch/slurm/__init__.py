"""``lair launch`` on a Slurm cluster: Slurm allocates, lair turns its plan into the job's steps.

    launch_slurm(req, cluster, detach=, progress=, on_ready=) -> LaunchResult     (run)
    stop_slurm(journal) / slurm_status(journal) / slurm_logs(journal, ...)         (control)
    SlurmJob, job_states, finish ...    sbatch/squeue/scancel/scontrol, the jobs' record  (jobs)

1. The plan is built once on placeholder nodes (recipe, rig, trust are checked before anything is
   submitted), then the main job is submitted (:func:`lair.plan.sbatch.main_script`): it writes the
   nodes Slurm gave it to ``JOB/status/nodes`` and waits for ``JOB/go``.
2. Those nodes (their ``NodeAddr``) become the plan's nodes; the per-node scripts, env-files (0600)
   and hook files are written into the job folder, the after_stop job is submitted
   (``--dependency=afterany``, same nodes), and ``JOB/go`` lets the main job go on.
3. Readiness is polled at the head's address while the job must keep running; then serve in the
   foreground (Ctrl-C stops), detach, or run ``on_ready`` (a benchmark) and stop.
4. Stop: ``scancel`` of the main job, the after_stop job runs, and lair waits until neither job nor
   any of their steps is left in ``squeue``. Slurm's allocation replaces lair's leases.

The job folder (``[clusters.X.slurm] job_dir``, default the run's journal folder) must be shared by
this machine and the nodes, as Slurm clusters' home or scratch file systems are.
"""

from lair.launch.slurm.job import launch_slurm, prepare_placeholders, slurm_cluster, slurm_plan
from lair.launch.slurm.job_control import is_slurm, slurm_logs, slurm_status, stop_slurm

__all__ = [
    "is_slurm",
    "launch_slurm",
    "prepare_placeholders",
    "slurm_cluster",
    "slurm_logs",
    "slurm_plan",
    "slurm_status",
    "stop_slurm",
]
