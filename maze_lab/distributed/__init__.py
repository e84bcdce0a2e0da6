"""Worker processes and Ray: the layer between the trainers (``maze_lab.train``) and the agent; it imports
nothing above it."""
