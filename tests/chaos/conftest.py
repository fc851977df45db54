import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))

from fixtures import client, no_leftover_servers, own_tmp, server  # noqa: E402,F401
