"""The deployment tests: compose file, compose-local, Dockerfile, ferry-launch,
ferry-ssh-launch, Kubernetes manifests, several nodes on one host.

Run: /usr/bin/python3 -m pytest tests/deploy      (FERRY_BIN: default build/bin)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
