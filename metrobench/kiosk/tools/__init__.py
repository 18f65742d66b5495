"""The kiosk's tools: per-case sessions (:mod:`.session`), the tool functions (:mod:`.functions`) and
their request models (:mod:`.schemas`), and name-based dispatch (:mod:`.dispatch`, :func:`~.dispatch.call_tool`).

Import from the module that defines a name; this package re-exports nothing.
"""
