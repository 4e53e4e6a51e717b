"""The HarnessBox tests share the runtime tests' git remote fixture."""

from runtime._hbox import remote as remote
