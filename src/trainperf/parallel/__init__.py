"""Data parallelism, all of it: how a job of several processes starts, joins and measures.

From the parent to the ranks and back to the numbers:
- ``torchrun``: the command line of a torchrun job and ``python -m
  trainperf.parallel.torchrun``, which ties torchrun to the trainperf parent;
- ``lifeline``: every child process dies with its parent (``PR_SET_PDEATHSIG``);
- ``group``: a rank joins the process group (nccl or gloo), agrees with rank 0 on the step
  policy's decisions, and leaves at a barrier;
- ``wrap``: DataParallel / DistributedDataParallel with the case's DDP options;
- ``rank_case``: a ddp case measured on every rank, rank 0 deriving the global result;
- ``peers``: the collectives of time-to-accuracy training under DDP;
- ``equivalence``: K parallel steps against K sequential ones;
- ``slurm``: an sbatch script that runs a suite across nodes;
- ``scaling``: speed-up and efficiency against the one-device result, with intervals.

Which process runs where is the runner's business (trainperf.launch.runner: one worker process,
or torchrun over them); what one training step is, trainperf.step.training_step's.
"""
