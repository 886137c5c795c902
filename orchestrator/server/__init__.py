"""`toolfleet serve`: agents as a horizontally scalable HTTP service in OpenAI's shape."""

from orchestrator.server.agents import load_agent, load_agents
from orchestrator.server.app import create_app
from orchestrator.server.settings import AgentSpec, ServeSettings, parse_agents

__all__ = ["AgentSpec", "ServeSettings", "create_app", "load_agent", "load_agents", "parse_agents"]
