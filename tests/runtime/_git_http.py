"""The git smart-HTTP test server moved to ``tests/testkit/git_http.py`` (benchmarks use it too);
this name stays for tests that import it from here."""

from testkit.git_http import GitHttpServer, log, make_bare_repo

__all__ = ["GitHttpServer", "log", "make_bare_repo"]
