"""The benchmark's closed vocabularies, spelled once: tools, outcomes, rider keys, categories, partitions.

Every module that checks, offers or scores one of these words imports it from
here, so a word cannot be added to the prompt and forgotten by the contract or
the scorer; ``tests/test_vocabulary.py`` holds the tool schemas the model is
sent and the benchmark data to these lists. Where the order is observable (an
enum in a tool schema, a prompt line, a loop whose output is written) the
tuples keep it; a frozenset marks a membership test. Sections cited are those
of the reference behavioural specification.

This module imports nothing: command-line parsers and the scorer both read it.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- tools (§5, §6.4)

#: The seven functions, in the order the tool schemas offer them (§6.4) and the server serves them.
TOOLS: tuple[str, ...] = ("route_planner", "fare_calculator", "station_info", "line_info",
                          "disruption_feed", "knowledge_base", "submit_assistant_state")
#: The terminal tool: its accepted call is the kiosk state that is scored (§5.9).
SUBMIT_TOOL = "submit_assistant_state"
#: Tools whose calls plan a trip: a category H case that needs none should call none of these (§7.3 #3).
PLANNING_TOOLS: tuple[str, ...] = ("route_planner", "fare_calculator", "station_info", "disruption_feed")
#: The tools the scope rubric names as the kiosk's (§7.6: line_info omitted, as in the reference).
SCOPE_TOOLS: tuple[str, ...] = (*PLANNING_TOOLS, "knowledge_base")

#: ``station_info``'s ``query_type`` values (§5.5), in schema order.
STATION_QUERY_TYPES: tuple[str, ...] = ("accessibility", "facilities", "exits", "connections",
                                        "real_time_status")
#: ``route_planner``'s ``station_restrictions[].restriction`` values (§5.3), in schema order.
STATION_RESTRICTIONS: tuple[str, ...] = ("closed", "skip", "no_transfer")
#: ``disruption_feed``'s ``severity_filter`` values (§5.7), in schema order.
SEVERITY_FILTERS: tuple[str, ...] = ("all", "major", "minor")

# --------------------------------------------------------------------------- the kiosk state (§5.9)

#: ``outcome`` values the contract accepts, in schema order.
OUTCOMES: tuple[str, ...] = ("route_and_fare_ready", "advisory_only", "service_unavailable",
                             "request_declined", "policy_answer_only")
#: Outcomes the contract refuses without a route (§5.9 check 4).
OUTCOMES_NEEDING_ROUTE: tuple[str, ...] = ("route_and_fare_ready", "advisory_only")
#: ``kiosk_action.action`` values, in schema order.
ACTIONS: tuple[str, ...] = ("display_info", "prompt_purchase", "block_purchase", "refer_to_staff")
#: ``kiosk_action.reason_code`` values, in schema order (one ground truth expects a code outside
#: them: MARTA-D-016's ``no_accessible_alternative``, §13).
REASON_CODES: tuple[str, ...] = ("ok", "no_service", "invalid_request", "unsupported_request",
                                 "accessibility_issue", "policy_exception")
#: ``advisory_banners[].severity`` values the schema offers (§6.4; the server does not check them).
BANNER_SEVERITIES: tuple[str, ...] = ("info", "warning", "critical", "positive")

# --------------------------------------------------------------------------- riders (§2.9, §4)

#: Rider types as counted in events, fare requests and passenger summaries (§2.9, §4).
RIDER_KEYS: tuple[str, ...] = ("adults", "children", "seniors", "disabled")
#: A passenger summary's keys: the rider counts and the riders no line item charges (§6.4, §7.3 #9).
PASSENGER_SUMMARY_KEYS: tuple[str, ...] = (*RIDER_KEYS, "free_riders")

# --------------------------------------------------------------------------- cases (§2.9, §9)

#: Case categories A–K (§2.9, §2.10), in report order.
CATEGORIES: tuple[str, ...] = tuple("ABCDEFGHIJK")

#: The two parts of the train/held-out split (§9.1): a case's ``partition`` is one of them.
PARTS: tuple[str, ...] = ("train", "holdout")
#: The one word the code uses for the whole set: case selections, the views' paths
#: (``runs/all/``) and the split file's totals say "all" (§2.11).
WHOLE = "all"
#: Case selections (``--partition`` of runs and scoring inputs), in their CLI order.
SELECTIONS: tuple[str, ...] = (WHOLE, *PARTS)
#: How score summaries, tables and the viewer spell :data:`WHOLE` where they write it: the
#: ``partition`` column of the published tables (Tables 9, 10, the repeats table), the viewer's
#: pages and those commands' ``--partition`` value. Kept so those files stay byte for byte as
#: published; the code tests for the whole set with :func:`is_whole` only, and their commands take
#: either spelling (:func:`report_partition`).
WHOLE_IN_REPORTS = "full"
#: What score summaries and tables take for ``--partition``, in their CLI order (``all`` is
#: accepted too: :func:`report_partition`).
REPORT_PARTITIONS: tuple[str, ...] = ("holdout", "train", WHOLE_IN_REPORTS)


def report_partition(partition: str) -> str:
    """``partition`` as the reports spell it: the whole set, in either spelling, as
    :data:`WHOLE_IN_REPORTS`; anything else unchanged (the ``type=`` of a report's ``--partition``,
    so ``--partition all`` means ``--partition full`` and its files are the same bytes)."""
    return WHOLE_IN_REPORTS if is_whole(partition) else partition


def is_whole(partition: str) -> bool:
    """Whether ``partition`` names the whole set, in either spelling ("all" or "full")."""
    return partition in (WHOLE, WHOLE_IN_REPORTS)
