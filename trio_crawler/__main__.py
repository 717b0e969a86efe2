"""``python -m trio_crawler``: the same command as ``trio-crawler``."""

from trio_crawler._cli import run

raise SystemExit(run())
