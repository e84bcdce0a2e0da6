"""Worker processes and Ray: one worker protocol (``protocol``) with two transports, local processes (``processes``)
and Ray actors (``ray_workers``), and starting or joining Ray (``ray_runtime``). The layer between the trainers
(``maze_lab.train``) and the agent; it imports nothing above it."""
