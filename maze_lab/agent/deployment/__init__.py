"""A trained policy with its wrapper stack, served to an environment outside maze-lab (see AgentDeployment)."""

from maze_lab.agent.deployment.agent_deployment import AgentDeployment, DeploymentError
from maze_lab.agent.deployment.external_core_env import ExternalCoreEnv

__all__ = ["AgentDeployment", "DeploymentError", "ExternalCoreEnv"]
