"""Example environments shipped with maze-lab; installed as ``maze_lab.examples``."""
