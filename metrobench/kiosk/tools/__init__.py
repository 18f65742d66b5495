"""The kiosk's tools: per-case sessions, the tool functions, and name-based dispatch."""

from metrobench.kiosk.tools.dispatch import TOOL_NAMES, ToolResponse, call_tool
from metrobench.kiosk.tools.session import ToolSession

__all__ = ["TOOL_NAMES", "ToolResponse", "ToolSession", "call_tool"]
