"""The kiosk's tools as the reference serves them: network and fares, the submission contract,
the six tools with their schemas, per-case sessions, replay and the HTTP server (spec §3–§5)."""
