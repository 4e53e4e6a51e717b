"""What a turn costs: harness-run against the bare harness CLI, whole and phase by phase.

The scripted turn: one shell tool call, then the answer (two model requests). Every variant
alternates its sides round by round, after one warm-up round, and prints medians:

  overview       (default) for each harness (``--harness``, default all three): a turn in a running
                 Python process (``await session.run``) vs the bare CLI run with harness-run's own
                 flags, environment and config files; for Claude Code also the in-process turn vs a
                 plain ``claude -p``, a whole fresh process (``harness-run run SPEC PROMPT --json``)
                 vs the bare CLI, a two-turn session (run + send vs ``-p`` + ``--resume``), and the
                 client's peak RSS
  fresh-process  only the fresh ``harness-run run`` line (and its peak RSS)
  two-turn       only the two-turn session, with the security defaults switched off one by one
                 (credential guards off; guards and the model proxy off)
  phases         each turn cut into start / tool / tail by a relay that stamps the model requests
  fresh-phases   a fresh ``harness-run run``'s own time: start -> the ``claude`` exec, and the
                 ``claude`` exit -> the process exit (``--baseline DIR``: an older harness_run too)
  attribution    bare CLI -> its flags and files -> the guards -> the engine -> the model proxy:
                 what each adds, wall and CPU, with the engine's own steps timed inside
  hook-kinds     what a ``PreToolUse`` hook costs Claude Code, by kind (none, HTTP, a matcher that
                 never matches, command ``true``, harness-run's command client)

    python -m benchmarks turn_cost [--variant NAME] [--rounds N] [--smoke] [--harness NAME ...]
                                   [--opencode-rounds N] [--baseline DIR]

(Before, these were ``turn_overhead.py`` (``--fresh-only``, ``--two-turn``), ``turn_phases.py``,
``fresh_run_phases.py``, ``turn_attribution.py`` and ``guard_hook_kinds.py``.)
"""
