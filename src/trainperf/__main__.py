"""``python -m trainperf``: the command line (see trainperf.cli)."""

from trainperf.cli import main

main()
