"""The Blueque protocol on Redis: the key layout (`keys`), the atomic steps as Lua scripts
(`scripts` and `lua/`), what they return, the statuses, options and values a task holds,
the statistics the scripts keep, and the liveness of listeners.

The bottom layer above the connection: it knows Redis keys and scripts, never models,
processes or the command line.
"""
