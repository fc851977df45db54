import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from fixtures import client, no_leftover_servers, own_tmp, server  # noqa: E402,F401


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "heavy: long load tests (of a server group, or a minute of random sets); the "
        "sanitizer stages and make check leave them out (-m 'not heavy'), the plain build "
        "runs them one at a time")
    config.addinivalue_line(
        "markers", "examples: the example workers and client programs, run and faulted as a "
        "user would; the plain build runs them, the sanitizer stages leave them out "
        "(-m 'not examples'): the server paths they take are run there by the other tests")
