import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from fixtures import client, no_leftover_servers, server  # noqa: E402,F401
