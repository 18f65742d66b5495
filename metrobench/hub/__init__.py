"""Models by name: the config's downloads, locked on first resolve, fetched and verified.

:mod:`~metrobench.hub.lock` holds the lock file and its comparison with the
config; :mod:`~metrobench.hub.resolve` asks the hub's metadata (``metrobench
lock``); :mod:`~metrobench.hub.fetch` downloads what the lock says and checks
it (the workflow's fetch jobs).
"""
