"""``python tests/torture/run.py [--seed N] [--seeds K] [--steps N] [--seconds S]``: run the
fault campaign (``make torture``) and print, per seed, its violations (with the command that
replays a failing seed), then the steps per action and the checks per invariant."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tether.process import become_subreaper
from torture.campaign import main

if __name__ == "__main__":
    become_subreaper()  # what the nemesis orphans comes here, where the checks see it
    sys.exit(main(sys.argv[1:]))
